"""A shadow relay's decisions in the state table: one item per event and downstream (`SHADOW#<upstream>`,
`<received ms>#<delivery>#<repo>`), so that an event planned again writes the same items and a Query reads them in
the order the events came."""

from __future__ import annotations

import json
from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import query_all
from crcr.domain.ids import repo_key
from crcr.domain.shadow import SHADOW_KEPT_S, ShadowDecision

BATCH = 25  # BatchWriteItem's most


def _pk(upstream: str) -> str:
    return f"SHADOW#{repo_key(upstream)}"


def _sk(received_at: float) -> str:
    return f"{int(received_at * 1000):015d}"


class DynamoShadow:
    """The ShadowLog port."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def record(self, decisions: list[ShadowDecision]) -> None:
        requests = [
            {
                "PutRequest": {
                    "Item": to_dynamo(
                        {
                            "pk": _pk(d.upstream),
                            "sk": f"{_sk(d.received_at)}#{d.delivery_id}#{repo_key(d.repo)}",
                            "doc": json.dumps(d.to_json(), separators=(",", ":")),
                            "expires_at": int(d.received_at + SHADOW_KEPT_S),
                        }
                    )
                }
            }
            for d in decisions
        ]
        for start in range(0, len(requests), BATCH):
            pending: dict[str, Any] = {self._table: requests[start : start + BATCH]}
            for _ in range(5):
                pending = self._ddb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
                if not pending:
                    break
            if pending:
                raise RuntimeError(f"{len(pending[self._table])} shadow decisions not written")

    def recent(self, upstream: str, limit: int, before: float | None = None) -> list[ShadowDecision]:
        condition, values = "pk = :p", {":p": _pk(upstream)}
        if before is not None:
            condition, values = condition + " AND sk < :b", values | {":b": _sk(before)}
        got = self._ddb.query(
            TableName=self._table,
            KeyConditionExpression=condition,
            ExpressionAttributeValues=to_dynamo(values),
            ScanIndexForward=False,
            Limit=limit,
        )
        return [_decision(i) for i in got.get("Items", [])]

    def between(self, upstream: str, start: float, end: float) -> list[ShadowDecision]:
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p AND sk BETWEEN :a AND :b",
            ExpressionAttributeValues=to_dynamo({":p": _pk(upstream), ":a": _sk(start), ":b": _sk(end) + "~"}),
        )
        return [_decision(i) for i in items]


def _decision(item: dict[str, Any]) -> ShadowDecision:
    return ShadowDecision.from_json(json.loads(from_dynamo(item)["doc"]))
