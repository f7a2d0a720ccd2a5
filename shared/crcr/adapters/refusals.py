"""Refused reports in the state table, counted per repository, reason and hour."""

from __future__ import annotations

from typing import Any

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
            Key={"pk": {"S": f"REFUSED#{repo_key(repo)}"}, "sk": {"S": f"{hour}#{reason}"}},
            UpdateExpression="ADD refused :one SET expires_at = :exp",
            ExpressionAttributeValues={":one": {"N": "1"}, ":exp": {"N": str((hour + 2) * 3600)}},
            ReturnValues="UPDATED_NEW",
        )
        return int(got["Attributes"]["refused"]["N"])
