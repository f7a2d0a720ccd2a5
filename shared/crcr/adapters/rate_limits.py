"""Fixed-window rate limits in the state table (the callbacks per repository, and other budgets by name)."""

from __future__ import annotations

from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import key as table_key
from crcr.domain.ids import repo_key


class DynamoRateLimiter:
    """Fixed windows per key (a minute unless told), counted with an atomic ADD in the state table. `budget` names
    the budget (its rows are `RATE#<key>` for the callbacks, `RATE#<budget>#<key>` for any other)."""

    def __init__(self, client: Any, table: str, per_window: int, window_s: int = 60, budget: str = "") -> None:
        self._ddb = client
        self._table = table
        self._limit = per_window
        self._window_s = window_s
        self._prefix = f"RATE#{budget}#" if budget else "RATE#"

    def hit(self, key: str, now: float) -> float:
        window = int(now // self._window_s)
        got = self._ddb.update_item(
            TableName=self._table,
            Key=table_key(f"{self._prefix}{repo_key(key)}", str(window)),
            UpdateExpression="ADD hits :one SET expires_at = :exp",
            ExpressionAttributeValues=to_dynamo({":one": 1, ":exp": (window + 2) * self._window_s}),
            ReturnValues="UPDATED_NEW",
        )
        if int(from_dynamo(got["Attributes"])["hits"]) > self._limit:
            return (window + 1) * self._window_s - now
        return 0.0


class DynamoDailyBudget:
    """Per repository, a budget of `per_day` a day (UTC days), whose size the caller names each time (the allowlist
    may change it): `RATE#BISECT#<repo>` rows."""

    def __init__(self, client: Any, table: str, budget: str = "BISECT") -> None:
        self._ddb = client
        self._table = table
        self._budget = budget

    def hit(self, repo: str, now: float, per_day: int) -> float:
        return DynamoRateLimiter(self._ddb, self._table, per_day, window_s=86_400, budget=self._budget).hit(repo, now)
