"""The upstream default branch in the state table: the order of the commits pushed to it (for baselines), and what
GitHub said of commits a scheduled report named."""

from __future__ import annotations

from typing import Any

from crcr.adapters.table import BRANCH_TTL_S, MISSING_COMMIT_TTL_S, branch_pk, lookup_key, num


class DynamoBranch:
    """The BranchLog, BranchOrder and CommitMemory ports."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def record_commits(self, upstream: str, commits: list[tuple[str, float]]) -> None:
        expires = {"N": str(int(max((t for _, t in commits), default=0)) + BRANCH_TTL_S)}
        requests = [
            {"PutRequest": {"Item": {"pk": branch_pk(upstream), "sk": {"S": f"C#{sha}"}, "t": {"N": str(num(t))}}
             | {"expires_at": expires}}}
            for sha, t in commits
        ]  # fmt: skip
        for start in range(0, len(requests), 25):  # BatchWriteItem takes 25 at a time
            pending: dict[str, Any] = {self._table: requests[start : start + 25]}
            for _ in range(5):
                left = self._ddb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
                if not left:
                    break
                pending = left

    def commit_times(self, upstream: str, shas: list[str]) -> dict[str, float]:
        found: dict[str, float] = {}
        wanted = list(dict.fromkeys(shas))
        for start in range(0, len(wanted), 100):  # BatchGetItem takes 100 keys
            keys = [{"pk": branch_pk(upstream), "sk": {"S": f"C#{sha}"}} for sha in wanted[start : start + 100]]
            pending: dict[str, Any] = {self._table: {"Keys": keys, "ProjectionExpression": "sk, t"}}
            for _ in range(5):
                got = self._ddb.batch_get_item(RequestItems=pending)
                for item in got.get("Responses", {}).get(self._table, []):
                    found[item["sk"]["S"].removeprefix("C#")] = float(item["t"]["N"])
                pending = got.get("UnprocessedKeys") or {}
                if not pending:
                    break
        return found

    def commit_seen(self, upstream: str, sha: str, now: float) -> bool | None:
        keys = [{"pk": branch_pk(upstream), "sk": {"S": f"C#{sha}"}}, lookup_key(upstream, sha)]
        got = self._ddb.batch_get_item(RequestItems={self._table: {"Keys": keys, "ConsistentRead": True}})
        items = got.get("Responses", {}).get(self._table, [])
        if got.get("UnprocessedKeys"):
            return None  # throttled: look it up as if never seen (the lookup's own budget still holds)
        if any(item["pk"]["S"].startswith("BRANCH#") for item in items):
            return True
        # An answer past its time is no answer (DynamoDB deletes expired items only within a day or two).
        lookups = [
            item
            for item in items
            if item["pk"]["S"].startswith("SHA#") and float(item.get("expires_at", {}).get("N", "inf")) > now
        ]
        return bool(lookups[0]["found"]["BOOL"]) if lookups else None

    def remember_commit(self, upstream: str, sha: str, found: bool, now: float) -> None:
        ttl = BRANCH_TTL_S if found else MISSING_COMMIT_TTL_S
        self._ddb.put_item(
            TableName=self._table,
            Item=lookup_key(upstream, sha) | {"found": {"BOOL": found}, "expires_at": {"N": str(int(now) + ttl)}},
        )
