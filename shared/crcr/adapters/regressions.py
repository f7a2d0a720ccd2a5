"""Regressions of downstream jobs in the state table: one item per job that has any (`REGS#<upstream>`,
`J#<repo>#<workflow>#<job>`), its regressions as JSON with a version for conditional writes."""

from __future__ import annotations

import json
from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import DAY, applied, key, query_all
from crcr.domain.ids import repo_key
from crcr.domain.regressions import CLOSED_KEPT_S, Tracked

OPEN_TTL_S = 90 * DAY  # a job with an open regression and no new result for this long is forgotten


def _key(upstream: str, repo: str, workflow_name: str, job_name: str) -> dict[str, dict[str, Any]]:
    return key(f"REGS#{repo_key(upstream)}", f"J#{repo_key(repo)}#{workflow_name}#{job_name}")


class DynamoRegressions:
    """The RegressionStore port."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def job_regressions(self, upstream: str, repo: str, workflow_name: str, job_name: str) -> tuple[list[Tracked], int]:
        item = self._ddb.get_item(
            TableName=self._table, Key=_key(upstream, repo, workflow_name, job_name), ConsistentRead=True
        ).get("Item")
        if not item:
            return [], 0
        return _tracked(item), int(from_dynamo(item)["v"])

    def save_job_regressions(
        self, upstream: str, repo: str, workflow_name: str, job_name: str, kept: list[Tracked], version: int
    ) -> bool:
        job = _key(upstream, repo, workflow_name, job_name)
        condition: dict[str, Any] = (
            {"ConditionExpression": "v = :v", "ExpressionAttributeValues": to_dynamo({":v": version})}
            if version
            else {"ConditionExpression": "attribute_not_exists(pk)"}
        )
        if not kept:
            return applied(self._ddb.delete_item, TableName=self._table, Key=job, **condition)
        newest = max(max(t.opened_at, t.closed_at or 0.0) for t in kept)
        expires = newest + (OPEN_TTL_S if any(t.open for t in kept) else CLOSED_KEPT_S)
        regs = json.dumps([t.stored() for t in kept], separators=(",", ":"))
        item = job | to_dynamo({"regs": regs, "v": version + 1, "expires_at": int(expires)})
        return applied(self._ddb.put_item, TableName=self._table, Item=item, **condition)

    def regressions_of(self, upstream: str) -> list[Tracked]:
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues=to_dynamo({":p": f"REGS#{repo_key(upstream)}"}),
        )
        return sorted((t for item in items for t in _tracked(item)), key=lambda t: t.opened_at)


def _tracked(item: dict[str, Any]) -> list[Tracked]:
    return [Tracked.from_json(doc) for doc in json.loads(from_dynamo(item)["regs"])]
