"""Refused reports in the state table, counted per repository, reason and hour."""

from __future__ import annotations

from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import key
from crcr.domain.ids import repo_key


class DynamoRefusals:
    """The RefusalLog port: refused reports per repository, reason and hour (one atomic ADD each)."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def count(self, repo: str, reason: str, now: float) -> int:
        hour = int(now // 3600)
        got = self._ddb.update_item(
            TableName=self._table,
            Key=key(f"REFUSED#{repo_key(repo)}", f"{hour}#{reason}"),
            UpdateExpression="ADD refused :one SET expires_at = :exp",
            ExpressionAttributeValues=to_dynamo({":one": 1, ":exp": (hour + 2) * 3600}),
            ReturnValues="UPDATED_NEW",
        )
        return int(from_dynamo(got["Attributes"])["refused"])
