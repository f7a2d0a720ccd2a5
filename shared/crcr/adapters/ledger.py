"""The dispatch ledger in the state table: one row per delivery and downstream repository, claimed by one attempt at a
time, and the sweeper's watch on dispatches no job has reported on yet."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import LEDGER_TTL_S, SWEEP_INDEX, applied, conditional_failed, key, ledger_key
from crcr.app.ports.ledger import BuildRef, LedgerClaim, LedgerRow, LedgerState
from crcr.contracts.messages import DispatchMessage
from crcr.domain.regressions import BISECT
from crcr.domain.ticket import TicketClaims

BY_DISPATCH_INDEX = "by_dispatch"  # keys only, on `dispatch_id`: a run's title names its dispatch by that id


def ledger_row(delivery_id: str, item: dict[str, Any]) -> LedgerRow:
    return _ledger_row(delivery_id, from_dynamo(item))


def _ledger_row(delivery_id: str, row: dict[str, Any]) -> LedgerRow:
    def number(name: str) -> Decimal | None:
        value = row.get(name)
        return value if isinstance(value, Decimal) else None  # absent, or NULL (a dispatch with no PR)

    def whole(name: str) -> int | None:
        value = number(name)
        return int(value) if value is not None else None

    dispatched_at = number("dispatched_at")
    return LedgerRow(
        delivery_id=delivery_id,
        repo=row.get("repo_full_name", row.get("repo", "")),
        state=LedgerState(row["state"]),
        dispatch_id=row.get("dispatch_id", ""),
        lease_until=float(number("lease_until") or 0),
        dispatched_at=float(dispatched_at) if dispatched_at is not None else None,
        reason=row.get("reason"),
        repo_id=whole("repo_id"),
        upstream=row.get("upstream"),
        head_sha=row.get("head_sha"),
        pr=whole("pr"),
        level=whole("level"),
        device=row.get("device"),
        event_type=row.get("event_type"),
        ciflow=row.get("ciflow"),
        ci=row.get("ci", "github"),
        build_id=row.get("build_id"),
        build_number=whole("build_number"),
        build_url=row.get("build_url"),
        build_pipeline=row.get("build_pipeline") or None,
        unsettled=frozenset(row.get("unsettled", ())),
        start_watched=row.get("sweep_pk") == "START",
        run_id=row.get("run_id"),
    )


def dispatched_row(record: dict[str, Any]) -> LedgerRow | None:
    """The ledger row an L3/L4 dispatch just marked sent (the StateTable stream's filter passes only those; anything
    else here is None), as its new image holds it: its commit's check-run pass reads it from here, not the table."""
    data = record.get("dynamodb") or {}
    new, old = from_dynamo(data.get("NewImage") or {}), from_dynamo(data.get("OldImage") or {})
    pk, sk = str(new.get("pk", "")), str(new.get("sk", ""))
    if not (pk.startswith("DLV#") and sk.startswith("DSP#")):
        return None
    sent = LedgerState.DISPATCHED.value
    if new.get("state") != sent or old.get("state") == sent:
        return None
    if int(new.get("level", 0)) < 3 or "upstream" not in new or "head_sha" not in new:
        return None
    if new.get("event_type") == BISECT:
        return None  # a bisection run has no upstream check runs
    return _ledger_row(pk.removeprefix("DLV#"), new)


class DynamoLedger:
    """The Ledger, LedgerReader, CallbackLedger and StartWatch ports."""

    def __init__(
        self, client: Any, table: str, start_timeout_s: float | None = None, run_create_timeout_s: float | None = None
    ) -> None:
        self._ddb = client
        self._table = table
        self._start_timeout_s = start_timeout_s  # None: dispatches are not watched for a first job
        # A GitHub dispatch is first looked at this soon (did GitHub create its run?); Buildkite's at the start timeout.
        self._run_create_timeout_s = run_create_timeout_s

    def get(self, delivery_id: str, repo: str) -> LedgerRow | None:
        item = self._ddb.get_item(TableName=self._table, Key=ledger_key(delivery_id, repo), ConsistentRead=True).get(
            "Item"
        )
        return ledger_row(delivery_id, item) if item else None

    def _base_values(self, message: DispatchMessage, now: float) -> dict[str, Any]:
        return {
            ":repo": message.target_repo,
            ":level": int(message.level),
            ":upstream": message.upstream,
            ":sha": message.head_sha,
            ":event": message.event_type,
            ":now": now,
            ":exp": int(now) + LEDGER_TTL_S,
            ":pr": message.pr_number,  # None: NULL
            ":ciflow": message.ciflow,
        }

    _BASE_SET = (
        "repo = :repo, #lvl = :level, upstream = :upstream, head_sha = :sha, event_type = :event, "
        "pr = :pr, ciflow = :ciflow, updated_at = :now, expires_at = :exp"
    )

    def claim(
        self,
        message: DispatchMessage,
        dispatch_id: str,
        now: float,
        lease_s: float,
        owner: str,
        repo_id: int,
        full_name: str,
        *,
        row: bool = False,
    ) -> LedgerClaim:
        values = self._base_values(message, now) | {
            ":sending": LedgerState.SENDING.value,
            ":lease": now + lease_s,
            ":owner": owner,
            ":repo_id": repo_id,
            ":full": full_name,
            ":did": dispatch_id,
            ":done": LedgerState.DISPATCHED.value,
            ":superseded": LedgerState.SUPERSEDED.value,
            ":mine": {owner},
        }
        try:
            written = self._ddb.update_item(
                TableName=self._table,
                Key=ledger_key(message.delivery_id, message.target_repo),
                # The attempt counts as unsettled from here until it records what happened to its send.
                UpdateExpression=(
                    "SET #s = :sending, lease_until = :lease, lease_owner = :owner, dispatch_id = :did, "
                    f"repo_id = :repo_id, repo_full_name = :full, {self._BASE_SET} ADD unsettled :mine"
                ),
                ConditionExpression=(
                    "attribute_not_exists(pk) OR (NOT (#s IN (:done, :superseded)) AND lease_until < :now)"
                ),
                ExpressionAttributeNames={"#s": "state", "#lvl": "level"},
                ExpressionAttributeValues=to_dynamo(values),
                # The row that refused the claim comes back with the refusal: no read before the write.
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ReturnValues="ALL_NEW" if row else "NONE",
            )
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            old = exc.response.get("Item")
            return LedgerClaim(False, ledger_row(message.delivery_id, old) if old else None)
        new = written.get("Attributes")
        return LedgerClaim(True, ledger_row(message.delivery_id, new) if new else None)

    def mark_dispatched(
        self,
        message: DispatchMessage,
        claims: TicketClaims,
        now: float,
        build: BuildRef | None = None,
        run_id: str | None = None,
    ) -> None:
        """After this attempt's claim, which wrote the dispatch's identity (repository, commit, PR, level,
        dispatch id): only what the send changed is written here."""
        values: dict[str, Any] = {
            ":s": LedgerState.DISPATCHED.value,
            ":now": now,
            ":device": message.device or None,
            ":ci": claims.ci,
            ":zero": 0,
        }
        built = ""
        if build is not None:
            built = ", build_id = :bid, build_number = :bnum, build_url = :burl, build_pipeline = :bpipe"
            values |= {":bid": build.id, ":bnum": build.number, ":burl": build.url, ":bpipe": build.pipeline}
        if run_id is not None:
            built += ", run_id = :run"
            values[":run"] = run_id
        watch = ""
        if self._start_timeout_s is not None and message.level >= 2 and run_id is None:
            # (A run GitHub named is watched as a bound run instead: crcr.adapters.runs.)
            # Until a job reports, the sweeper watches this dispatch through the sparse index.
            watch = ", sweep_pk = :watch, sweep_at = :due"
            wait = self._start_timeout_s
            if claims.ci == "github" and self._run_create_timeout_s is not None:
                wait = min(wait, self._run_create_timeout_s)
            values |= {":watch": "START", ":due": now + wait}
        self._ddb.update_item(
            TableName=self._table,
            Key=ledger_key(message.delivery_id, message.target_repo),
            UpdateExpression=(
                "SET #s = :s, dispatched_at = :now, updated_at = :now, device = :device, ci = :ci, "
                f"lease_until = :zero{built}{watch} REMOVE reason"
            ),
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues=to_dynamo(values),
        )

    def mark(
        self,
        message: DispatchMessage,
        state: LedgerState,
        reason: str,
        now: float,
        owner: str = "",
        settled: bool = False,
    ) -> None:
        """Record a non-dispatched state and release the claim, never overwriting a sent dispatch or
        another attempt's live claim; `settled` takes this attempt off the unsettled sends."""
        values = self._base_values(message, now) | {
            ":s": state.value,
            ":reason": reason[:1000],
            ":zero": 0,
            ":done": LedgerState.DISPATCHED.value,
            ":owner": owner or "-",
        }
        forget = ""
        if settled and owner:
            forget = " DELETE unsettled :mine"
            values[":mine"] = {owner}
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=ledger_key(message.delivery_id, message.target_repo),
            UpdateExpression=f"SET #s = :s, reason = :reason, lease_until = :zero, {self._BASE_SET}{forget}",
            ConditionExpression=(
                "attribute_not_exists(pk) OR "
                "(#s <> :done AND (attribute_not_exists(lease_until) OR lease_until < :now "
                "OR lease_owner = :owner))"
            ),
            ExpressionAttributeNames={"#s": "state", "#lvl": "level"},
            ExpressionAttributeValues=to_dynamo(values),
        )

    def clear_start_watch(self, delivery_id: str, repo: str) -> None:
        self._ddb.update_item(
            TableName=self._table,
            Key=ledger_key(delivery_id, repo),
            UpdateExpression="REMOVE sweep_pk, sweep_at",
            ConditionExpression="attribute_exists(pk)",
        )

    def by_dispatch(self, dispatch_id: str) -> LedgerRow | None:
        """The DispatchLookup port: the row of a dispatch id (index by_dispatch, keys only), then the row itself."""
        items = self._ddb.query(
            TableName=self._table,
            IndexName=BY_DISPATCH_INDEX,
            KeyConditionExpression="dispatch_id = :d",
            ExpressionAttributeValues=to_dynamo({":d": dispatch_id}),
            Limit=2,
        ).get("Items", [])
        for item in map(from_dynamo, items):
            pk, sk = item["pk"], item["sk"]
            if pk.startswith("DLV#") and sk.startswith("DSP#"):
                row = self._by_key(pk.removeprefix("DLV#"), pk, sk)
                if row is not None and row.dispatch_id == dispatch_id:
                    return row
        return None

    def _by_key(self, delivery_id: str, pk: str, sk: str) -> LedgerRow | None:
        item = self._ddb.get_item(TableName=self._table, Key=key(pk, sk), ConsistentRead=True).get("Item")
        return ledger_row(delivery_id, item) if item else None

    def note_run(self, delivery_id: str, repo: str, run_id: str) -> None:
        """A workflow_dispatch's run, bound by its first event: a repeated attempt finds it here, not by listing."""
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=ledger_key(delivery_id, repo),
            UpdateExpression="SET run_id = :run",
            ConditionExpression="attribute_exists(pk) AND attribute_not_exists(run_id)",
            ExpressionAttributeValues=to_dynamo({":run": run_id}),
        )

    def rewatch_start(self, delivery_id: str, repo: str, until: float) -> None:
        """Look at the dispatch again at `until` (GitHub could not tell yet whether a run was created)."""
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=ledger_key(delivery_id, repo),
            UpdateExpression="SET sweep_pk = :w, sweep_at = :due",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues=to_dynamo({":w": "START", ":due": until}),
        )

    def due_starts(self, now: float, limit: int = 100) -> list[LedgerRow]:
        """Dispatches no job has reported on by their start deadline."""
        items = self._ddb.query(
            TableName=self._table,
            IndexName=SWEEP_INDEX,
            KeyConditionExpression="sweep_pk = :w AND sweep_at <= :now",
            ExpressionAttributeValues=to_dynamo({":w": "START", ":now": now}),
            Limit=limit,
        ).get("Items", [])
        rows = []
        for item in map(from_dynamo, items):
            delivery_id = item["pk"].removeprefix("DLV#")
            row = self.get(delivery_id, item["repo"])
            if row is not None:
                rows.append(row)
        return rows
