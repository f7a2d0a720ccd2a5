"""Upstream check runs in the state table, one partition per commit (head): what was last written to each check run
(`NAME#<name>`), and the head's pass row (`SYNC`): the pass booked, its lock, and the dispatches it must read."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import LEDGER_TTL_S, applied, book, check_key, check_pk, conditional_failed, key, query_all
from crcr.app.ports.checkruns import HeadSync
from crcr.domain.checks import Known

SYNC = "SYNC"


def _number(item: dict[str, Any], name: str) -> float | None:
    value = item.get(name)
    return float(value) if value is not None else None


def _head_sync(stored: dict[str, Any] | None) -> HeadSync:
    if not stored:
        return HeadSync()
    item = from_dynamo(stored)
    return HeadSync(
        pending=item.get("pending"),
        pending_since=_number(item, "pending_since"),
        due_at=_number(item, "due_at"),
        lock_until=_number(item, "lock_until") or 0.0,
        version=int(item.get("version", 0)),
        rows=frozenset(item.get("booked_rows", ())),
        timer_at=_number(item, "timer_at"),
    )


class DynamoCheckRuns:
    """The CheckRunStore port."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def _sync_key(self, upstream: str, head_sha: str) -> dict[str, Any]:
        return key(check_pk(upstream, head_sha), SYNC)

    @staticmethod
    def _known(item: dict[str, Any]) -> Known | None:
        if "check_run_id" not in item:
            return None  # a row a writer of an earlier release locked before creating: nothing written yet
        return Known(
            check_run_id=int(item["check_run_id"]),
            status=item["status"],
            conclusion=item.get("conclusion"),
            run_attempt=int(item.get("run_attempt", 0)),
        )

    def get_check(self, upstream: str, head_sha: str, name: str) -> tuple[Known | None, int]:
        item = self._ddb.get_item(
            TableName=self._table, Key=check_key(upstream, head_sha, name), ConsistentRead=True
        ).get("Item")
        if not item:
            return None, 0
        row = from_dynamo(item)
        return self._known(row), int(row["version"])

    def checks_of_head(self, upstream: str, head_sha: str) -> dict[str, tuple[Known | None, int]]:
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p AND begins_with(sk, :n)",
            ExpressionAttributeValues=to_dynamo({":p": check_pk(upstream, head_sha), ":n": "NAME#"}),
            ConsistentRead=True,
        )
        rows = map(from_dynamo, items)
        return {row["sk"].removeprefix("NAME#"): (self._known(row), int(row["version"])) for row in rows}

    def record_check(self, upstream: str, head_sha: str, name: str, known: Known, version: int, now: float) -> bool:
        fields: dict[str, Any] = {
            "check_run_id": known.check_run_id,
            "status": known.status,
            "run_attempt": known.run_attempt,
        }
        if known.conclusion:
            fields["conclusion"] = known.conclusion
        check = check_key(upstream, head_sha, name)
        if version == 0:
            return applied(
                self._ddb.put_item,
                TableName=self._table,
                Item=check | to_dynamo(fields | {"version": 1, "expires_at": int(now) + LEDGER_TTL_S}),
                ConditionExpression="attribute_not_exists(pk)",
            )
        names = {f"#f{i}": name_ for i, name_ in enumerate(fields)}
        values = {f":f{i}": value for i, value in enumerate(fields.values())}
        sets = ", ".join(f"#f{i} = :f{i}" for i in range(len(fields)))
        removes = "" if known.conclusion else ", conclusion"
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=check,
            UpdateExpression=f"SET {sets}, version = :n REMOVE lock_until{removes}",
            ConditionExpression="version = :v",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=to_dynamo(values | {":n": version + 1, ":v": version}),
        )

    def book_head(
        self, upstream: str, head_sha: str, ticket: str, now: float, due_at: float, stale_before: float, rows: set[str]
    ) -> str:
        add = {"booked_rows": rows} if rows else None
        sync = self._sync_key(upstream, head_sha)
        return book(self._ddb, self._table, sync, ticket, now, due_at, stale_before, LEDGER_TTL_S, add, sooner=True)

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
            ":one": 1,
            ":zero": 0,
            ":l": now + lease_s,
            ":now": now,
            ":exp": int(now) + LEDGER_TTL_S,
        }
        condition = "(attribute_not_exists(lock_until) OR lock_until < :now)"
        update = "SET lock_until = :l, expires_at = :exp, version = if_not_exists(version, :zero) + :one"
        if ticket is not None:
            condition += " AND pending = :t AND (attribute_not_exists(due_at) OR due_at <= :due OR pending_since < :b)"
            update += ", pending_since = :now REMOVE due_at, timer_at"
            values |= {":t": ticket, ":due": due_by, ":b": booked_before}
        try:
            old = self._ddb.update_item(
                TableName=self._table,
                Key=self._sync_key(upstream, head_sha),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=to_dynamo(values),
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
        sync = self._sync_key(upstream, head_sha)
        values: dict[str, Any] = {":v": locked}
        forget = ""
        if done:
            forget = " DELETE booked_rows :done"
            values[":done"] = done
        if ticket is not None and not keep:
            ended = applied(
                self._ddb.update_item,
                TableName=self._table,
                Key=sync,
                UpdateExpression="REMOVE lock_until, pending, pending_since" + forget,
                ConditionExpression="version = :v AND pending = :t AND attribute_not_exists(due_at)",
                ExpressionAttributeValues=to_dynamo(values | {":t": ticket}),
            )
            if ended:
                return None
        if ticket is not None and timer_at is not None:  # the booked pass waits for a timer of its own (`sooner`)
            forget += " SET timer_at = :w"
            values[":w"] = timer_at
        try:
            row = _head_sync(
                self._ddb.update_item(
                    TableName=self._table,
                    Key=sync,
                    UpdateExpression="REMOVE lock_until" + forget,
                    ConditionExpression="version = :v",
                    ExpressionAttributeValues=to_dynamo(values),
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
            ExpressionAttributeValues=to_dynamo({":t": ticket}),
        )
