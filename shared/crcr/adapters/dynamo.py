"""DynamoDB state table: delivery dedupe, dispatch ledger, PR heads, releases, check runs, PR comments, re-run
markers and pacing cells.

One table, keys `pk`/`sk`, TTL on `expires_at`. Every state change is a conditional write, so
concurrent Lambda instances and redelivered messages cannot both win.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from crcr.app.ports import (
    RERUN_STATUSES,
    BuildRef,
    Claim,
    CommentRow,
    HeadRecord,
    LedgerClaim,
    LedgerRow,
    LedgerState,
    PrInfo,
    RerunClaim,
)
from crcr.contracts.messages import DispatchMessage
from crcr.domain.checks import Known
from crcr.domain.comment import Posted
from crcr.domain.ids import repo_key
from crcr.domain.pacing import CONTENT_RATES, RESERVE_HORIZON_S, Rate, WindowLevel, busy_windows, pace, window_level
from crcr.domain.ticket import TicketClaims

DAY = 86_400
DELIVERY_TTL_S = 14 * DAY  # GitHub lets a delivery be redelivered for a few days
LEDGER_TTL_S = 30 * DAY
BRANCH_TTL_S = 90 * DAY  # a commit's place on the branch, for baselines, as long as results are kept
# A commit GitHub does not have is remembered that long: a downstream naming random SHAs costs one lookup each, once.
MISSING_COMMIT_TTL_S = 7 * DAY
COMMENT_TTL_S = 90 * DAY  # a PR's comment row, as long as results are kept (a lost row finds the comment again)


def conditional_failed(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") in {
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
    }


def applied(write: Callable[..., Any], **request: Any) -> bool:
    """Run one conditional DynamoDB write: False when its condition failed (another writer got there first)."""
    try:
        write(**request)
    except ClientError as exc:
        if conditional_failed(exc):
            return False
        raise
    return True


def query_all(client: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Every item a Query matches, following LastEvaluatedKey across pages."""
    items: list[dict[str, Any]] = []
    while True:
        page = client.query(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def num(value: float) -> Decimal:
    return Decimal(str(round(value, 6)))


SWEEP_INDEX = "sweep"  # sparse GSI (sweep_pk, sweep_at): only rows the sweeper must look at carry it


def _ledger_row(delivery_id: str, item: dict[str, Any]) -> LedgerRow:
    return LedgerRow(
        delivery_id=delivery_id,
        repo=item.get("repo_full_name", item.get("repo", {"S": ""}))["S"],
        state=LedgerState(item["state"]["S"]),
        dispatch_id=item.get("dispatch_id", {}).get("S", ""),
        lease_until=float(item.get("lease_until", {}).get("N", "0")),
        dispatched_at=float(item["dispatched_at"]["N"]) if "dispatched_at" in item else None,
        reason=item.get("reason", {}).get("S"),
        repo_id=int(item["repo_id"]["N"]) if "repo_id" in item else None,
        upstream=item.get("upstream", {}).get("S"),
        head_sha=item.get("head_sha", {}).get("S"),
        pr=int(item["pr"]["N"]) if "N" in item.get("pr", {}) else None,
        level=int(item["level"]["N"]) if "level" in item else None,
        device=item.get("device", {}).get("S"),
        event_type=item.get("event_type", {}).get("S"),
        ciflow=item.get("ciflow", {}).get("S"),
        ci=item.get("ci", {}).get("S", "github"),
        build_id=item.get("build_id", {}).get("S"),
        build_number=int(item["build_number"]["N"]) if "N" in item.get("build_number", {}) else None,
        build_url=item.get("build_url", {}).get("S"),
        unsettled=frozenset(item.get("unsettled", {}).get("SS", [])),
        start_watched=item.get("sweep_pk", {}).get("S") == "START",
    )


class DynamoState:
    def __init__(self, client: Any, table: str, start_timeout_s: float | None = None) -> None:
        self._ddb = client
        self._table = table
        self._start_timeout_s = start_timeout_s

    # -- deliveries ---------------------------------------------------------------------------
    def claim_delivery(self, delivery_id: str, event: str, now: float, body_sha256: str) -> Claim:
        """The delivery id and the body's digest, claimed together in one transaction: GitHub signs the body, not
        X-GitHub-Delivery, so a captured body sent again under a fresh id is a replay; and an id seen before with
        another body takes nothing, so it can neither hide that body when it comes under its own id nor stand in
        for it. The same id with the same body passes (GitHub's redelivery, or a retry after a failure here)."""
        expires = {"N": str(int(now) + DELIVERY_TTL_S)}
        body = {"pk": {"S": f"BODY#{body_sha256}"}, "sk": {"S": "META"}}
        delivery = {"pk": {"S": f"DLV#{delivery_id}"}, "sk": {"S": "META"}}
        try:
            self._ddb.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": body | {"delivery_id": {"S": delivery_id}, "expires_at": expires},
                            "ConditionExpression": "attribute_not_exists(pk) OR delivery_id = :d",
                            "ExpressionAttributeValues": {":d": {"S": delivery_id}},
                        }
                    },
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": delivery
                            | {
                                "event": {"S": event},
                                "state": {"S": "received"},
                                "received_at": {"N": str(num(now))},
                                "body_sha256": {"S": body_sha256},
                                "expires_at": expires,
                            },
                            "ConditionExpression": "attribute_not_exists(pk)",
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        }
                    },
                ]
            )
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            reasons = exc.response.get("CancellationReasons") or []
            failed = [r.get("Code") == "ConditionalCheckFailed" for r in reasons] + [False, False]
            if failed[1]:
                old = reasons[1].get("Item") or self._delivery_item(delivery)
                if old.get("body_sha256", {}).get("S", body_sha256) != body_sha256:
                    return Claim.REUSED
                return Claim.QUEUED if old.get("state", {}).get("S") == "queued" else Claim.PENDING
            if failed[0]:
                return Claim.REPLAYED
            raise
        return Claim.NEW

    def _delivery_item(self, key: dict[str, Any]) -> dict[str, Any]:
        """The delivery as stored, for a cancellation that did not bring it along."""
        item = self._ddb.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        return dict(item or {})

    def mark_queued(self, delivery_id: str, now: float) -> None:
        self._ddb.update_item(
            TableName=self._table,
            Key={"pk": {"S": f"DLV#{delivery_id}"}, "sk": {"S": "META"}},
            UpdateExpression="SET #s = :q, queued_at = :t",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={":q": {"S": "queued"}, ":t": {"N": str(num(now))}},
        )

    # -- PR heads and releases (planner) --------------------------------------------------------------
    @staticmethod
    def _pr_pk(upstream: str, pr: int) -> dict[str, str]:
        return {"S": f"PR#{repo_key(upstream)}#{pr}"}

    def record_pr_head(
        self,
        upstream: str,
        pr: int,
        head_sha: str,
        updated_at: str,
        labels: tuple[str, ...] = (),
        base_sha: str = "",
        closed: bool = False,
    ) -> HeadRecord:
        """Keep the newest head and labels; webhooks can arrive out of order, so compare GitHub's updated_at."""
        try:
            old = self._ddb.put_item(
                TableName=self._table,
                Item={
                    "pk": self._pr_pk(upstream, pr),
                    "sk": {"S": "HEAD"},
                    "head_sha": {"S": head_sha},
                    "updated_at": {"S": updated_at},
                    "labels": {"L": [{"S": label} for label in labels]},
                    "base_sha": {"S": base_sha},
                    "closed": {"BOOL": closed},
                },
                ConditionExpression="attribute_not_exists(pk) OR updated_at <= :u",
                ExpressionAttributeValues={":u": {"S": updated_at}},
                ReturnValues="ALL_OLD",
            ).get("Attributes")
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            return HeadRecord(newest=False)
        previous = old["head_sha"]["S"] if old else None
        return HeadRecord(newest=True, replaced=previous if previous != head_sha else None)

    def pr_head(self, upstream: str, pr: int) -> str | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={"pk": self._pr_pk(upstream, pr), "sk": {"S": "HEAD"}},
            ConsistentRead=True,
        ).get("Item")
        return item["head_sha"]["S"] if item else None

    def pr_info(self, upstream: str, pr: int) -> PrInfo | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={"pk": self._pr_pk(upstream, pr), "sk": {"S": "HEAD"}},
            ConsistentRead=True,
        ).get("Item")
        if not item:
            return None
        return PrInfo(
            head_sha=item["head_sha"]["S"],
            base_sha=item.get("base_sha", {}).get("S", ""),
            labels=tuple(v["S"] for v in item.get("labels", {}).get("L", [])),
            closed=bool(item.get("closed", {}).get("BOOL", False)),
        )

    # -- the default branch's commit order (baselines) ------------------------------------------------
    @staticmethod
    def _branch_pk(upstream: str) -> dict[str, str]:
        return {"S": f"BRANCH#{repo_key(upstream)}"}

    def record_commits(self, upstream: str, commits: list[tuple[str, float]]) -> None:
        expires = {"N": str(int(max((t for _, t in commits), default=0)) + BRANCH_TTL_S)}
        requests = [
            {"PutRequest": {"Item": {"pk": self._branch_pk(upstream), "sk": {"S": f"C#{sha}"}, "t": {"N": str(num(t))}}
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
            keys = [{"pk": self._branch_pk(upstream), "sk": {"S": f"C#{sha}"}} for sha in wanted[start : start + 100]]
            pending: dict[str, Any] = {self._table: {"Keys": keys, "ProjectionExpression": "sk, t"}}
            for _ in range(5):
                got = self._ddb.batch_get_item(RequestItems=pending)
                for item in got.get("Responses", {}).get(self._table, []):
                    found[item["sk"]["S"].removeprefix("C#")] = float(item["t"]["N"])
                pending = got.get("UnprocessedKeys") or {}
                if not pending:
                    break
        return found

    # -- upstream commits a scheduled report may name (the CommitMemory port) ------------------------------------
    @staticmethod
    def _lookup_key(upstream: str, sha: str) -> dict[str, dict[str, str]]:
        return {"pk": {"S": f"SHA#{repo_key(upstream)}#{sha}"}, "sk": {"S": "LOOKUP"}}

    def commit_seen(self, upstream: str, sha: str) -> bool | None:
        keys = [{"pk": self._branch_pk(upstream), "sk": {"S": f"C#{sha}"}}, self._lookup_key(upstream, sha)]
        got = self._ddb.batch_get_item(RequestItems={self._table: {"Keys": keys, "ConsistentRead": True}})
        items = got.get("Responses", {}).get(self._table, [])
        if got.get("UnprocessedKeys"):
            return None  # throttled: look it up as if never seen (the lookup's own budget still holds)
        if any(item["pk"]["S"].startswith("BRANCH#") for item in items):
            return True
        lookups = [item for item in items if item["pk"]["S"].startswith("SHA#")]
        return bool(lookups[0]["found"]["BOOL"]) if lookups else None

    def remember_commit(self, upstream: str, sha: str, found: bool, now: float) -> None:
        ttl = BRANCH_TTL_S if found else MISSING_COMMIT_TTL_S
        self._ddb.put_item(
            TableName=self._table,
            Item=self._lookup_key(upstream, sha) | {"found": {"BOOL": found}, "expires_at": {"N": str(int(now) + ttl)}},
        )

    def pr_labels(self, upstream: str, pr: int) -> tuple[str, ...]:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={"pk": self._pr_pk(upstream, pr), "sk": {"S": "HEAD"}},
            ConsistentRead=True,
        ).get("Item")
        return tuple(v["S"] for v in item.get("labels", {}).get("L", [])) if item else ()

    # -- upstream check runs (reporter) ------------------------------------------------------------------
    @staticmethod
    def _check_key(upstream: str, head_sha: str, name: str) -> dict[str, dict[str, str]]:
        return {"pk": {"S": f"CHECK#{repo_key(upstream)}#{head_sha}"}, "sk": {"S": f"NAME#{name}"}}

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
            TableName=self._table, Key=self._check_key(upstream, head_sha, name), ConsistentRead=True
        ).get("Item")
        if not item:
            return None, 0
        return self._known(item), int(item["version"]["N"])

    def checks_of_head(self, upstream: str, head_sha: str) -> list[tuple[str, Known, int]]:
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": self._check_key(upstream, head_sha, "")["pk"]},
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
        key = self._check_key(upstream, head_sha, name)
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
            Key=self._check_key(upstream, head_sha, name),
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
            Key=self._check_key(upstream, head_sha, name),
            UpdateExpression=update + " REMOVE lock_until",
            ConditionExpression="version = :v",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues=values,
        )

    # -- the PR comment (check-run writer) -----------------------------------------------------------------
    def _comment_key(self, upstream: str, pr: int) -> dict[str, dict[str, str]]:
        return {"pk": self._pr_pk(upstream, pr), "sk": {"S": "COMMENT"}}

    def get_comment(self, upstream: str, pr: int) -> CommentRow:
        item = self._ddb.get_item(TableName=self._table, Key=self._comment_key(upstream, pr), ConsistentRead=True).get(
            "Item"
        )
        if not item:
            return CommentRow()

        def number(name: str) -> float | None:
            return float(item[name]["N"]) if "N" in item.get(name, {}) else None

        comment_id = number("comment_id")
        posted = Posted(
            comment_id=int(comment_id) if comment_id is not None else None,
            body_hash=item.get("body_hash", {}).get("S", ""),
            mentioned=frozenset(item.get("mentioned", {}).get("SS", [])),
            live=frozenset(item.get("live", {}).get("SS", [])),
            history=tuple(v["S"] for v in item.get("history", {}).get("L", [])),
        )
        return CommentRow(
            posted=posted,
            searched=bool(item.get("searched", {}).get("BOOL", False)),
            pending=item.get("pending", {}).get("S"),
            pending_since=number("pending_since"),
            due_at=number("due_at"),
            lock_until=number("lock_until") or 0.0,
            version=int(item.get("version", {}).get("N", "0")),
        )

    def book_render(self, upstream: str, pr: int, ticket: str, now: float, due_at: float, stale_before: float) -> str:
        key = self._comment_key(upstream, pr)
        # One write whether or not a render is pending: the first request's ticket stays, every request moves
        # the due time on (the render debounces on it).
        got = self._ddb.update_item(
            TableName=self._table,
            Key=key,
            UpdateExpression=(
                "SET due_at = :due, pending = if_not_exists(pending, :t), "
                "pending_since = if_not_exists(pending_since, :now), version = if_not_exists(version, :zero), "
                "expires_at = :exp"
            ),
            ExpressionAttributeValues={
                ":due": {"N": str(num(due_at))},
                ":t": {"S": ticket},
                ":now": {"N": str(num(now))},
                ":zero": {"N": "0"},
                ":exp": {"N": str(int(now) + COMMENT_TTL_S)},
            },
            ReturnValues="ALL_NEW",
        )["Attributes"]
        pending: str = got["pending"]["S"]
        live = "N" in got.get("lock_until", {}) and float(got["lock_until"]["N"]) >= now
        if pending == ticket or float(got["pending_since"]["N"]) >= stale_before or live:
            return pending
        # The pending render was booked long ago and never ran: its message was lost. Take over.
        took = applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=key,
            UpdateExpression="SET pending = :t, pending_since = :now",
            ConditionExpression="pending = :old AND pending_since < :stale",
            ExpressionAttributeValues={
                ":t": {"S": ticket},
                ":now": {"N": str(num(now))},
                ":old": {"S": pending},
                ":stale": {"N": str(num(stale_before))},
            },
        )
        return ticket if took else self.get_comment(upstream, pr).pending or ticket

    def lock_comment(self, upstream: str, pr: int, ticket: str, version: int, now: float, lease_s: float) -> int | None:
        ok = applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._comment_key(upstream, pr),
            UpdateExpression="SET version = :n, lock_until = :l, pending_since = :now REMOVE due_at",
            ConditionExpression=(
                "version = :v AND pending = :t AND (attribute_not_exists(lock_until) OR lock_until < :now)"
            ),
            ExpressionAttributeValues={
                ":n": {"N": str(version + 1)},
                ":v": {"N": str(version)},
                ":t": {"S": ticket},
                ":l": {"N": str(num(now + lease_s))},
                ":now": {"N": str(num(now))},
            },
        )
        return version + 1 if ok else None

    def release_comment(self, upstream: str, pr: int, locked: int, now: float, posted: Posted | None = None) -> bool:
        values: dict[str, Any] = {":v": {"N": str(locked)}, ":n": {"N": str(locked + 1)}}
        sets = ["version = :n"]
        removes = ["lock_until"]
        if posted is not None:
            sets += ["searched = :yes", "body_hash = :h", "history = :hist", "expires_at = :exp"]
            values |= {
                ":yes": {"BOOL": True},
                ":h": {"S": posted.body_hash},
                ":hist": {"L": [{"S": h} for h in posted.history]},
                ":exp": {"N": str(int(now) + COMMENT_TTL_S)},
            }
            if posted.comment_id is not None:
                sets.append("comment_id = :id")
                values[":id"] = {"N": str(posted.comment_id)}
            else:
                removes.append("comment_id")
            for name, names in (("mentioned", posted.mentioned), ("live", posted.live)):
                if names:  # a string set cannot be empty
                    sets.append(f"{name} = :{name}")
                    values[f":{name}"] = {"SS": sorted(names)}
                else:
                    removes.append(name)
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._comment_key(upstream, pr),
            UpdateExpression=f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
            ConditionExpression="version = :v",
            ExpressionAttributeValues=values,
        )

    def end_render(self, upstream: str, pr: int, ticket: str, now: float, keep: bool = False) -> float | None:
        key = self._comment_key(upstream, pr)
        for _ in range(3):
            if not keep and applied(
                self._ddb.update_item,
                TableName=self._table,
                Key=key,
                UpdateExpression="REMOVE pending, pending_since",
                ConditionExpression="pending = :t AND attribute_not_exists(due_at)",
                ExpressionAttributeValues={":t": {"S": ticket}},
            ):
                return None
            row = self.get_comment(upstream, pr)
            if row.pending != ticket:
                return None  # another render took the booking over
            if row.due_at is not None:
                return row.due_at  # asked for again meanwhile: the same render runs once more
            if keep:
                return now
        return now  # contended: run again rather than leave a change unshown

    def drop_render(self, upstream: str, pr: int, ticket: str) -> None:
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._comment_key(upstream, pr),
            UpdateExpression="REMOVE pending, pending_since, due_at",
            ConditionExpression="pending = :t",
            ExpressionAttributeValues={":t": {"S": ticket}},
        )

    # -- automatic re-runs (the re-run handler writes the markers) ------------------------------------------
    def rerun_state(self, dispatch_id: str, run_id: str) -> str | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={"pk": {"S": f"RERUN#{dispatch_id}"}, "sk": {"S": f"RUN#{run_id}"}},
            ConsistentRead=True,
        ).get("Item")
        return item.get("status", {}).get("S") if item else None

    def mark_released(self, upstream: str, pr: int, head_sha: str, repo: str, delivery_id: str, now: float) -> bool:
        return applied(
            self._ddb.put_item,
            TableName=self._table,
            Item={
                "pk": self._pr_pk(upstream, pr),
                "sk": {"S": f"RELEASED#{head_sha}#{repo_key(repo)}"},
                "delivery_id": {"S": delivery_id},
                "released_at": {"N": str(num(now))},
                "expires_at": {"N": str(int(now) + LEDGER_TTL_S)},
            },
            # A retried planner run of the same delivery must release again (its send may have failed).
            ConditionExpression="attribute_not_exists(pk) OR delivery_id = :d",
            ExpressionAttributeValues={":d": {"S": delivery_id}},
        )

    # -- dispatch ledger -------------------------------------------------------------------------
    @staticmethod
    def _ledger_key(delivery_id: str, repo: str) -> dict[str, dict[str, str]]:
        return {"pk": {"S": f"DLV#{delivery_id}"}, "sk": {"S": f"DSP#{repo_key(repo)}"}}

    def get(self, delivery_id: str, repo: str) -> LedgerRow | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=self._ledger_key(delivery_id, repo), ConsistentRead=True
        ).get("Item")
        return _ledger_row(delivery_id, item) if item else None

    def _base_values(self, message: DispatchMessage, now: float) -> dict[str, Any]:
        values: dict[str, Any] = {
            ":repo": {"S": message.target_repo},
            ":level": {"N": str(int(message.level))},
            ":upstream": {"S": message.upstream},
            ":sha": {"S": message.head_sha},
            ":event": {"S": message.event_type},
            ":now": {"N": str(num(now))},
            ":exp": {"N": str(int(now) + LEDGER_TTL_S)},
        }
        values[":pr"] = {"N": str(message.pr_number)} if message.pr_number is not None else {"NULL": True}
        values[":ciflow"] = {"S": message.ciflow} if message.ciflow is not None else {"NULL": True}
        return values

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
            ":sending": {"S": LedgerState.SENDING.value},
            ":lease": {"N": str(num(now + lease_s))},
            ":owner": {"S": owner},
            ":repo_id": {"N": str(repo_id)},
            ":full": {"S": full_name},
            ":did": {"S": dispatch_id},
            ":done": {"S": LedgerState.DISPATCHED.value},
            ":superseded": {"S": LedgerState.SUPERSEDED.value},
            ":mine": {"SS": [owner]},
        }
        try:
            written = self._ddb.update_item(
                TableName=self._table,
                Key=self._ledger_key(message.delivery_id, message.target_repo),
                # The attempt counts as unsettled from here until it records what happened to its send.
                UpdateExpression=(
                    "SET #s = :sending, lease_until = :lease, lease_owner = :owner, dispatch_id = :did, "
                    f"repo_id = :repo_id, repo_full_name = :full, {self._BASE_SET} ADD unsettled :mine"
                ),
                ConditionExpression=(
                    "attribute_not_exists(pk) OR (NOT (#s IN (:done, :superseded)) AND lease_until < :now)"
                ),
                ExpressionAttributeNames={"#s": "state", "#lvl": "level"},
                ExpressionAttributeValues=values,
                # The row that refused the claim comes back with the refusal: no read before the write.
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ReturnValues="ALL_NEW" if row else "NONE",
            )
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            old = exc.response.get("Item")
            return LedgerClaim(False, _ledger_row(message.delivery_id, old) if old else None)
        new = written.get("Attributes")
        return LedgerClaim(True, _ledger_row(message.delivery_id, new) if new else None)

    def mark_dispatched(
        self, message: DispatchMessage, claims: TicketClaims, now: float, build: BuildRef | None = None
    ) -> None:
        """After this attempt's claim, which wrote the dispatch's identity (repository, commit, PR, level,
        dispatch id): only what the send changed is written here."""
        values: dict[str, Any] = {
            ":s": {"S": LedgerState.DISPATCHED.value},
            ":now": {"N": str(num(now))},
            ":device": {"S": message.device} if message.device else {"NULL": True},
            ":ci": {"S": claims.ci},
            ":zero": {"N": "0"},
        }
        built = ""
        if build is not None:
            built = ", build_id = :bid, build_number = :bnum, build_url = :burl"
            values |= {":bid": {"S": build.id}, ":bnum": {"N": str(build.number)}, ":burl": {"S": build.url}}
        watch = ""
        if self._start_timeout_s is not None and message.level >= 2:
            # Until a job reports, the sweeper watches this dispatch through the sparse index.
            watch = ", sweep_pk = :watch, sweep_at = :due"
            values |= {":watch": {"S": "START"}, ":due": {"N": str(num(now + self._start_timeout_s))}}
        self._ddb.update_item(
            TableName=self._table,
            Key=self._ledger_key(message.delivery_id, message.target_repo),
            UpdateExpression=(
                "SET #s = :s, dispatched_at = :now, updated_at = :now, device = :device, ci = :ci, "
                f"lease_until = :zero{built}{watch} REMOVE reason"
            ),
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues=values,
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
            ":s": {"S": state.value},
            ":reason": {"S": reason[:1000]},
            ":zero": {"N": "0"},
            ":done": {"S": LedgerState.DISPATCHED.value},
            ":owner": {"S": owner or "-"},
        }
        forget = ""
        if settled and owner:
            forget = " DELETE unsettled :mine"
            values[":mine"] = {"SS": [owner]}
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._ledger_key(message.delivery_id, message.target_repo),
            UpdateExpression=f"SET #s = :s, reason = :reason, lease_until = :zero, {self._BASE_SET}{forget}",
            ConditionExpression=(
                "attribute_not_exists(pk) OR "
                "(#s <> :done AND (attribute_not_exists(lease_until) OR lease_until < :now "
                "OR lease_owner = :owner))"
            ),
            ExpressionAttributeNames={"#s": "state", "#lvl": "level"},
            ExpressionAttributeValues=values,
        )

    def clear_start_watch(self, delivery_id: str, repo: str) -> None:
        self._ddb.update_item(
            TableName=self._table,
            Key=self._ledger_key(delivery_id, repo),
            UpdateExpression="REMOVE sweep_pk, sweep_at",
            ConditionExpression="attribute_exists(pk)",
        )

    def due_starts(self, now: float, limit: int = 100) -> list[LedgerRow]:
        """Dispatches no job has reported on by their start deadline."""
        items = self._ddb.query(
            TableName=self._table,
            IndexName=SWEEP_INDEX,
            KeyConditionExpression="sweep_pk = :w AND sweep_at <= :now",
            ExpressionAttributeValues={":w": {"S": "START"}, ":now": {"N": str(num(now))}},
            Limit=limit,
        ).get("Items", [])
        rows = []
        for item in items:
            delivery_id = item["pk"]["S"].removeprefix("DLV#")
            row = self.get(delivery_id, item["repo"]["S"])
            if row is not None:
                rows.append(row)
        return rows

    # -- automatic re-runs (check-run writer): once per (dispatch, run) ----------------------------------
    @staticmethod
    def _rerun_pk(dispatch_id: str) -> dict[str, str]:
        return {"S": f"RERUN#{dispatch_id}"}

    def claim_rerun(self, dispatch_id: str, run_id: str, owner: str, now: float, lease_s: float) -> RerunClaim:
        claim = {"pk": self._rerun_pk(dispatch_id), "sk": {"S": f"CLAIM#{run_id}"}}
        taken = applied(
            self._ddb.put_item,
            TableName=self._table,
            Item=claim
            | {
                "owner": {"S": owner},
                "lease_until": {"N": str(num(now + lease_s))},
                "expires_at": {"N": str(int(now) + DAY)},
            },
            ConditionExpression="attribute_not_exists(pk) OR lease_until < :now",
            ExpressionAttributeValues={":now": {"N": str(num(now))}},
        )
        if not taken:
            return RerunClaim.BUSY
        # Read the marker only once the claim is held: a holder marks before it releases, so a decision
        # made just before this claim is always seen.
        marker = self._ddb.get_item(
            TableName=self._table,
            Key={"pk": self._rerun_pk(dispatch_id), "sk": {"S": f"RUN#{run_id}"}},
            ConsistentRead=True,
        ).get("Item")
        if marker is not None:
            self.release_rerun(dispatch_id, run_id, owner)
            return RerunClaim.DONE
        return RerunClaim.CLAIMED

    def release_rerun(self, dispatch_id: str, run_id: str, owner: str) -> None:
        applied(  # a lapsed claim another message took is theirs now: leave it
            self._ddb.delete_item,
            TableName=self._table,
            Key={"pk": self._rerun_pk(dispatch_id), "sk": {"S": f"CLAIM#{run_id}"}},
            ConditionExpression="#o = :o",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":o": {"S": owner}},
        )

    def mark_rerun(self, dispatch_id: str, run_id: str, status: str, now: float) -> bool:
        if status not in RERUN_STATUSES:
            raise ValueError(f"unknown re-run status {status!r}")
        return applied(
            self._ddb.put_item,
            TableName=self._table,
            Item={
                "pk": self._rerun_pk(dispatch_id),
                "sk": {"S": f"RUN#{run_id}"},
                "status": {"S": status},
                "marked_at": {"N": str(num(now))},
                "expires_at": {"N": str(int(now) + LEDGER_TTL_S)},
            },
            ConditionExpression="attribute_not_exists(pk)",
        )


# How old a cell this pacer saw at its own last booking may be and still answer `level` without a read. The error is
# other writers' bookings since (at the hourly pace, one every 8 s): it can only make `check_runs: auto` admit a
# few detail writes too many, which the pacer then delays; it never lets a write past the budget.
LEVEL_FRESH_S = 30.0


@dataclass(frozen=True)
class _Cell:
    """A pacing cell as last seen by this instance: its version and theoretical arrival times (None: absent)."""

    version: int
    tats: tuple[float, ...] | None


def _cell(item: dict[str, Any] | None) -> _Cell:
    if not item or "tats" not in item:
        return _Cell(0, None)
    return _Cell(int(item.get("version", {}).get("N", "0")), tuple(float(v["N"]) for v in item["tats"]["L"]))


class DynamoPacer:
    """Pacing cells (GCRA), one per key: by default GitHub's content-creating calls per installation
    (`PACE#<installation>`/`CONTENT`); another budget (Buildkite's per organization) gets its own cell name
    and rates.

    A slot taken now is one conditional UpdateItem with no read before it: each window's time moves on in
    place, under a condition that says the window allows the call (GCRA evaluated by DynamoDB on what the
    table holds, so concurrent callers never exceed the budget, and callers that find the windows busy do
    not conflict). Which form each window takes (busy or idle) is guessed from the cell as this instance last
    saw it; a wrong guess fails the condition and brings the cell back (ALL_OLD), and the write is made again
    from it. A booking (a wait, reserved) writes the cell whole under its version. Every write adds 1 to the
    version, so a version-conditional write never misses a write made in place.
    """

    def __init__(
        self,
        client: Any,
        table: str,
        attempts: int = 50,  # each a single write, told what it lost to
        *,
        rates: tuple[Rate, ...] = CONTENT_RATES,
        cell: str = "CONTENT",
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._ddb = client
        self._table = table
        self._attempts = attempts
        self._rates = rates
        self._cell = cell
        self._sleep = sleep
        self._rand = rand
        self._seen: dict[int | str, _Cell] = {}
        self._seen_at: dict[int | str, float] = {}  # when each cell above was last seen, for `level`
        self._lock = threading.Lock()
        self._keys: dict[int | str, threading.Lock] = {}

    def acquire(self, key: int | str, now: float, reserve: bool = False) -> float:
        # One caller per cell at a time in this instance (a batch's records for one installation): they would
        # only refuse each other's bookings; in turn, each starts from the cell the one before it wrote.
        with self._lock:
            one = self._keys.setdefault(key, threading.Lock())
        with one:
            wait = self._acquire(key, now, reserve)
            self._seen_at[key] = now
            return wait

    def level(self, key: int | str, now: float) -> WindowLevel:
        """Read-only (the BudgetGauge port): how full `key`'s longest window is. From the cell this pacer saw at
        its own last acquire for `key` when that was at most LEVEL_FRESH_S ago, so a busy writer asks no more
        than it did; otherwise one read of the cell."""
        seen, at = self._seen.get(key), self._seen_at.get(key)
        if seen is None or at is None or not 0 <= now - at <= LEVEL_FRESH_S:
            cell_key = {"pk": {"S": f"PACE#{key}"}, "sk": {"S": self._cell}}
            seen = _cell(self._ddb.get_item(TableName=self._table, Key=cell_key, ConsistentRead=True).get("Item"))
            self._seen[key], self._seen_at[key] = seen, now
        return window_level(seen.tats, now, self._rates)

    def _acquire(self, key: int | str, now: float, reserve: bool) -> float:
        cell_key = {"pk": {"S": f"PACE#{key}"}, "sk": {"S": self._cell}}
        now = float(num(now))  # the table's precision, so the conditions and this arithmetic agree
        seen = self._seen.get(key)
        rates = self._rates
        for attempt in range(self._attempts):
            whole = True
            if seen is None:  # never seen here: expect every window idle
                whole, wait = False, 0.0
                found = self._take(key, cell_key, busy_windows(None, now, rates), now)
            elif seen.tats is None:
                new, wait = pace(None, now, rates)
                found = self._write_whole(key, cell_key, new, now, None)
            else:
                new, wait = pace(seen.tats, now, rates, reserve=reserve)
                if wait > 0 and (not reserve or wait > RESERVE_HORIZON_S):
                    # Nothing booked: ask again then. A copy can only be behind the table (times only grow),
                    # so the real wait is at least this long.
                    return wait
                if wait == 0 and len(seen.tats) == len(rates):
                    whole = False
                    found = self._take(key, cell_key, busy_windows(seen.tats, now, rates), now)
                else:
                    found = self._write_whole(key, cell_key, new, now, seen.version)
            if found is None:
                return wait
            if whole:
                # Writers booking on one cell go one at a time (each under the version): a few milliseconds of
                # jitter keeps the losers of a round from meeting again in lockstep.
                self._sleep(self._rand() * 0.002 * min(attempt + 1, 10))
            seen = found  # the cell as the table holds it: decide again from that
        # Every refusal above was another caller's write landing first. Past that many, give up: ask again in a
        # second, or, asked to book, say so with a wait past the horizon (booked nothing), never one that reads
        # as a slot booked.
        return RESERVE_HORIZON_S + 1.0 if reserve else 1.0

    def _values(self, now: float) -> dict[str, Any]:
        return {":one": {"N": "1"}, ":exp": {"N": str(int(now) + 2 * DAY)}}

    def _take(self, key: int | str, cell_key: dict[str, Any], busy: tuple[bool, ...], now: float) -> _Cell | None:
        """One slot now, each window moved on in place under the condition that it allows the call."""
        # Exactly one time per window: each compared below, and none after the last (rates unchanged).
        sets, conditions = [], [f"attribute_not_exists(tats[{len(self._rates)}])"]
        values = self._values(now) | {":now": {"N": str(num(now))}}
        for i, (rate, is_busy) in enumerate(zip(self._rates, busy, strict=True)):
            if is_busy:
                sets.append(f"tats[{i}] = tats[{i}] + :i{i}")
                conditions.append(f"tats[{i}] > :now AND tats[{i}] <= :lim{i}")
                values[f":i{i}"] = {"N": str(num(rate.interval))}
                # A microsecond of slack: the float arithmetic above must never find allowed what DynamoDB's
                # decimals refuse (the same write would be refused again and again).
                values[f":lim{i}"] = {"N": str(num(now + rate.burst * rate.interval + 1e-6))}
            else:
                sets.append(f"tats[{i}] = :t{i}")
                conditions.append(f"tats[{i}] <= :now")
                values[f":t{i}"] = {"N": str(num(now + rate.interval))}
        return self._update(
            key,
            cell_key,
            UpdateExpression=f"SET {', '.join(sets)}, expires_at = :exp ADD version :one",
            ConditionExpression=" AND ".join(conditions),
            ExpressionAttributeValues=values,
        )

    def _write_whole(
        self, key: int | str, cell_key: dict[str, Any], tats: tuple[float, ...], now: float, version: int | None
    ) -> _Cell | None:
        """The cell whole (a booking, a new cell, new rates), if it is still the version decided from (None:
        if there is no cell yet)."""
        values = self._values(now) | {":tats": {"L": [{"N": str(num(t))} for t in tats]}}
        if version is None:
            condition = "attribute_not_exists(pk)"
        else:
            condition = "version = :v"
            values[":v"] = {"N": str(version)}
        return self._update(
            key,
            cell_key,
            UpdateExpression="SET tats = :tats, expires_at = :exp ADD version :one",
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
        )

    def _update(self, key: int | str, cell_key: dict[str, Any], **request: Any) -> _Cell | None:
        """None when written (the new cell is remembered); otherwise the cell as the table holds it."""
        try:
            written = self._ddb.update_item(
                TableName=self._table,
                Key=cell_key,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **request,
            )
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            seen = _cell(exc.response.get("Item"))
            self._seen[key] = seen
            return seen
        self._seen[key] = _cell(written.get("Attributes"))
        return None
