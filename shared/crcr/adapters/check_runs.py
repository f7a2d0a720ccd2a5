"""Upstream check runs in the state table, one partition per commit (head): what was last written to each check run
(`NAME#<name>`), and the head's pass row (`SYNC`): the pass booked, its lock, and the dispatches it must read."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.table import LEDGER_TTL_S, applied, book, check_key, conditional_failed, num, query_all
from crcr.app.ports.checkruns import HeadSync
from crcr.domain.checks import Known

SYNC = "SYNC"


def _number(item: dict[str, Any], name: str) -> float | None:
    return float(item[name]["N"]) if "N" in item.get(name, {}) else None


def _head_sync(item: dict[str, Any] | None) -> HeadSync:
    if not item:
        return HeadSync()
    return HeadSync(
        pending=item.get("pending", {}).get("S"),
        pending_since=_number(item, "pending_since"),
        due_at=_number(item, "due_at"),
        lock_until=_number(item, "lock_until") or 0.0,
        version=int(item.get("version", {}).get("N", "0")),
        rows=frozenset(item.get("booked_rows", {}).get("SS", [])),
        timer_at=_number(item, "timer_at"),
    )


class DynamoCheckRuns:
    """The CheckRunStore port."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def _sync_key(self, upstream: str, head_sha: str) -> dict[str, Any]:
        return {"pk": check_key(upstream, head_sha, "")["pk"], "sk": {"S": SYNC}}

    @staticmethod
    def _known(item: dict[str, Any]) -> Known | None:
        if "check_run_id" not in item:
            return None  # a row a writer of an earlier release locked before creating: nothing written yet
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

    def checks_of_head(self, upstream: str, head_sha: str) -> dict[str, tuple[Known | None, int]]:
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p AND begins_with(sk, :n)",
            ExpressionAttributeValues={":p": check_key(upstream, head_sha, "")["pk"], ":n": {"S": "NAME#"}},
            ConsistentRead=True,
        )
        return {item["sk"]["S"].removeprefix("NAME#"): (self._known(item), int(item["version"]["N"])) for item in items}

    def record_check(self, upstream: str, head_sha: str, name: str, known: Known, version: int, now: float) -> bool:
        fields: dict[str, Any] = {
            "check_run_id": {"N": str(known.check_run_id)},
            "status": {"S": known.status},
            "run_attempt": {"N": str(known.run_attempt)},
        }
        if known.conclusion:
            fields["conclusion"] = {"S": known.conclusion}
        key = check_key(upstream, head_sha, name)
        if version == 0:
            return applied(
                self._ddb.put_item,
                TableName=self._table,
                Item=key | fields | {"version": {"N": "1"}, "expires_at": {"N": str(int(now) + LEDGER_TTL_S)}},
                ConditionExpression="attribute_not_exists(pk)",
            )
        names = {f"#f{i}": name_ for i, name_ in enumerate(fields)}
        values = {f":f{i}": value for i, value in enumerate(fields.values())}
        sets = ", ".join(f"#f{i} = :f{i}" for i in range(len(fields)))
        removes = "" if known.conclusion else ", conclusion"
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=key,
            UpdateExpression=f"SET {sets}, version = :n REMOVE lock_until{removes}",
            ConditionExpression="version = :v",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values | {":n": {"N": str(version + 1)}, ":v": {"N": str(version)}},
        )

    def book_head(
        self, upstream: str, head_sha: str, ticket: str, now: float, due_at: float, stale_before: float, rows: set[str]
    ) -> str:
        add = {"booked_rows": {"SS": sorted(rows)}} if rows else None
        key = self._sync_key(upstream, head_sha)
        return book(self._ddb, self._table, key, ticket, now, due_at, stale_before, LEDGER_TTL_S, add, sooner=True)

    def lock_head(
        self,
        upstream: str,
        head_sha: str,
        ticket: str | None,
        now: float,
        lease_s: float,
        due_by: float,
        booked_before: float,
    ) -> tuple[int | None, HeadSync]:
        values: dict[str, Any] = {
            ":one": {"N": "1"},
            ":zero": {"N": "0"},
            ":l": {"N": str(num(now + lease_s))},
            ":now": {"N": str(num(now))},
            ":exp": {"N": str(int(now) + LEDGER_TTL_S)},
        }
        condition = "(attribute_not_exists(lock_until) OR lock_until < :now)"
        update = "SET lock_until = :l, expires_at = :exp, version = if_not_exists(version, :zero) + :one"
        if ticket is not None:
            condition += " AND pending = :t AND (attribute_not_exists(due_at) OR due_at <= :due OR pending_since < :b)"
            update += ", pending_since = :now REMOVE due_at, timer_at"
            values |= {":t": {"S": ticket}, ":due": {"N": str(num(due_by))}, ":b": {"N": str(num(booked_before))}}
        try:
            old = self._ddb.update_item(
                TableName=self._table,
                Key=self._sync_key(upstream, head_sha),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            ).get("Attributes")
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            return None, _head_sync(exc.response.get("Item"))
        row = _head_sync(old)
        return row.version + 1, row

    def finish_head(
        self,
        upstream: str,
        head_sha: str,
        ticket: str | None,
        locked: int,
        now: float,
        done: set[str],
        keep: bool,
        timer_at: float | None = None,
    ) -> float | None:
        key = self._sync_key(upstream, head_sha)
        values: dict[str, Any] = {":v": {"N": str(locked)}}
        forget = ""
        if done:
            forget = " DELETE booked_rows :done"
            values[":done"] = {"SS": sorted(done)}
        if ticket is not None and not keep:
            ended = applied(
                self._ddb.update_item,
                TableName=self._table,
                Key=key,
                UpdateExpression="REMOVE lock_until, pending, pending_since" + forget,
                ConditionExpression="version = :v AND pending = :t AND attribute_not_exists(due_at)",
                ExpressionAttributeValues=values | {":t": {"S": ticket}},
            )
            if ended:
                return None
        if (
            ticket is not None and timer_at is not None
        ):  # the booked pass waits for a timer of its own (book's `sooner`)
            forget += " SET timer_at = :w"
            values[":w"] = {"N": str(num(timer_at))}
        try:
            row = _head_sync(
                self._ddb.update_item(
                    TableName=self._table,
                    Key=key,
                    UpdateExpression="REMOVE lock_until" + forget,
                    ConditionExpression="version = :v",
                    ExpressionAttributeValues=values,
                    ReturnValues="ALL_NEW",
                ).get("Attributes")
            )
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            return None  # the lock lapsed and another pass took the head: it carries on
        if ticket is None or row.pending != ticket:
            return None
        return row.due_at  # None: nothing asked for since the pass began

    def drop_head(self, upstream: str, head_sha: str, ticket: str) -> None:
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._sync_key(upstream, head_sha),
            UpdateExpression="REMOVE pending, pending_since, due_at, timer_at",
            ConditionExpression="pending = :t",
            ExpressionAttributeValues={":t": {"S": ticket}},
        )
