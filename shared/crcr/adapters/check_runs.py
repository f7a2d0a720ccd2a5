"""Upstream check runs in the state table: what was last written to each, and the lock that lets one writer at a time
write it."""

from __future__ import annotations

from typing import Any

from crcr.adapters.table import LEDGER_TTL_S, applied, check_key, num, query_all
from crcr.domain.checks import Known


class DynamoCheckRuns:
    """The CheckRunStore port."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    @staticmethod
    def _known(item: dict[str, Any]) -> Known | None:
        if "check_run_id" not in item:
            return None  # being created: a writer holds the row
        return Known(
            check_run_id=int(item["check_run_id"]["N"]),
            status=item["status"]["S"],
            conclusion=item.get("conclusion", {}).get("S"),
            run_attempt=int(item.get("run_attempt", {}).get("N", "0")),
        )

    def get_check(self, upstream: str, head_sha: str, name: str) -> tuple[Known | None, int]:
        item = self._ddb.get_item(
            TableName=self._table, Key=check_key(upstream, head_sha, name), ConsistentRead=True
        ).get("Item")
        if not item:
            return None, 0
        return self._known(item), int(item["version"]["N"])

    def checks_of_head(self, upstream: str, head_sha: str) -> list[tuple[str, Known, int]]:
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": check_key(upstream, head_sha, "")["pk"]},
            ConsistentRead=True,
        )
        return [
            (item["sk"]["S"].removeprefix("NAME#"), known, int(item["version"]["N"]))
            for item in items
            if (known := self._known(item)) is not None
        ]

    def lock_check(
        self, upstream: str, head_sha: str, name: str, version: int, now: float, lease_s: float
    ) -> int | None:
        key = check_key(upstream, head_sha, name)
        if version == 0:
            ok = applied(
                self._ddb.put_item,
                TableName=self._table,
                Item=key
                | {
                    "version": {"N": "1"},
                    "lock_until": {"N": str(num(now + lease_s))},
                    "expires_at": {"N": str(int(now) + LEDGER_TTL_S)},
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        else:
            ok = applied(
                self._ddb.update_item,
                TableName=self._table,
                Key=key,
                UpdateExpression="SET version = :n, lock_until = :l",
                ConditionExpression="version = :v AND (attribute_not_exists(lock_until) OR lock_until < :now)",
                ExpressionAttributeValues={
                    ":n": {"N": str(version + 1)},
                    ":v": {"N": str(version)},
                    ":l": {"N": str(num(now + lease_s))},
                    ":now": {"N": str(num(now))},
                },
            )
        return version + 1 if ok else None

    def unlock_check(self, upstream: str, head_sha: str, name: str, locked: int) -> None:
        applied(  # a lapsed lock another writer took is theirs now: nothing to release
            self._ddb.update_item,
            TableName=self._table,
            Key=check_key(upstream, head_sha, name),
            UpdateExpression="REMOVE lock_until",
            ConditionExpression="version = :v",
            ExpressionAttributeValues={":v": {"N": str(locked)}},
        )

    def save_check(self, upstream: str, head_sha: str, name: str, known: Known, locked: int) -> bool:
        values: dict[str, Any] = {
            ":id": {"N": str(known.check_run_id)},
            ":s": {"S": known.status},
            ":a": {"N": str(known.run_attempt)},
            ":n": {"N": str(locked + 1)},
            ":v": {"N": str(locked)},
        }
        update = "SET check_run_id = :id, #s = :s, run_attempt = :a, version = :n"
        if known.conclusion:
            update += ", conclusion = :c"
            values[":c"] = {"S": known.conclusion}
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=check_key(upstream, head_sha, name),
            UpdateExpression=update + " REMOVE lock_until",
            ConditionExpression="version = :v",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues=values,
        )
