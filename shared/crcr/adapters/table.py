"""What every data-access class shares of the relay's two DynamoDB tables (keys `pk`/`sk`, TTL on `expires_at`):
conditional writes, paging, numbers, times to live, and the keys of the items more than one class reads or writes.
A key only one class uses lives with that class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.domain.ids import repo_key

DAY = 86_400
DELIVERY_TTL_S = 14 * DAY  # GitHub lets a delivery be redelivered for a few days
LEDGER_TTL_S = 30 * DAY
BRANCH_TTL_S = 90 * DAY  # a commit's place on the branch, for baselines, as long as results are kept
# A commit GitHub did not have is remembered this long: every downstream shares the answer, and a commit pushed a
# moment later (a report faster than GitHub's push) must not be refused for all of them for days. Lookups of random
# SHAs stay bounded by each downstream's hourly budget (CRCR_COMMIT_LOOKUPS_PER_HOUR).
MISSING_COMMIT_TTL_S = 10 * 60
COMMENT_TTL_S = 90 * DAY  # a PR's comment row, as long as results are kept (a lost row finds the comment again)
RESULTS_TTL_S = 90 * DAY
SWEEP_INDEX = "sweep"  # sparse GSI (sweep_pk, sweep_at): only rows the sweeper must look at carry it


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


def key(pk: str, sk: str) -> dict[str, dict[str, Any]]:
    """An item's key as DynamoDB takes it."""
    return to_dynamo({"pk": pk, "sk": sk})


def delivery_key(delivery_id: str) -> dict[str, dict[str, Any]]:
    """The webhook's record of a delivery."""
    return key(f"DLV#{delivery_id}", "META")


def body_key(body_sha256: str) -> dict[str, dict[str, Any]]:
    """A webhook body's digest, claimed by the first delivery id that brought it."""
    return key(f"BODY#{body_sha256}", "META")


def ledger_key(delivery_id: str, repo: str) -> dict[str, dict[str, Any]]:
    """A dispatch: one per delivery and downstream repository, beside the delivery's record."""
    return key(f"DLV#{delivery_id}", f"DSP#{repo_key(repo)}")


def pr_pk(upstream: str, pr: int) -> str:
    """An upstream PR's items: its head (`HEAD`), releases (`RELEASED#…`), comment (`COMMENT`) and the commit that
    landed it (`MERGED`)."""
    return f"PR#{repo_key(upstream)}#{pr}"


def branch_pk(upstream: str) -> str:
    """The upstream default branch's commits (`C#<sha>`), in the order they were pushed."""
    return f"BRANCH#{repo_key(upstream)}"


def lookup_pk(upstream: str, sha: str) -> str:
    """What GitHub answered about an upstream commit a scheduled report named: found (`LOOKUP`), or not found for
    one downstream (`MISSING#<repo>`)."""
    return f"SHA#{repo_key(upstream)}#{sha}"


def lookup_key(upstream: str, sha: str) -> dict[str, dict[str, Any]]:
    """GitHub's answer that an upstream commit exists, for every downstream."""
    return key(lookup_pk(upstream, sha), "LOOKUP")


def check_pk(upstream: str, head_sha: str) -> str:
    """An upstream commit's check runs (`NAME#<name>`) and their pass (`SYNC`)."""
    return f"CHECK#{repo_key(upstream)}#{head_sha}"


def check_key(upstream: str, head_sha: str, name: str) -> dict[str, dict[str, Any]]:
    return key(check_pk(upstream, head_sha), f"NAME#{name}")


def comment_key(upstream: str, pr: int) -> dict[str, dict[str, Any]]:
    return key(pr_pk(upstream, pr), "COMMENT")


def rerun_pk(dispatch_id: str) -> str:
    """A dispatch's automatic re-runs: the marker (`RUN#<run>`) and the claim that decides it (`CLAIM#<run>`)."""
    return f"RERUN#{dispatch_id}"


def pace_key(pace: int | str, cell: str) -> dict[str, dict[str, Any]]:
    """A pacing cell: one budget (`cell`) of one key (an installation, an organization)."""
    return key(f"PACE#{pace}", cell)


def job_pk(dispatch_id: str) -> str:
    """A dispatch's jobs in the results table."""
    return f"DSP#{dispatch_id}"


def job_key(dispatch_id: str, run_id: str, run_attempt: int, job_name: str) -> dict[str, dict[str, Any]]:
    """A job attempt in the results table."""
    return key(job_pk(dispatch_id), f"JOB#{run_id}#{run_attempt}#{job_name}")


def book(
    client: Any,
    table: str,
    key: dict[str, Any],
    ticket: str,
    now: float,
    due_at: float,
    stale_before: float,
    ttl_s: int,
    add: dict[str, Any] | None = None,
    sooner: bool = False,
) -> str:
    """A debounced booking on one row (a PR's comment render, a head's check-run pass): one write whether or not one
    is pending. The first request's ticket stays, every request moves the due time on; `add` is ADDed to the row
    (names -> values). Returns the ticket of the booking that will do the work: `ticket` when none was pending, or
    the pending one was booked before `stale_before` (its message was lost) and no live lock holds the row, or (with
    `sooner`) the pending one waits for a timer of its own (`timer_at`) later than `due_at`: its message then finds
    itself superseded, and this booking's, sent at `due_at`, does the work."""
    values = to_dynamo({":due": due_at, ":t": ticket, ":now": now, ":zero": 0, ":exp": int(now) + ttl_s})
    expression = (
        "SET due_at = :due, pending = if_not_exists(pending, :t), pending_since = if_not_exists(pending_since, :now), "
        "version = if_not_exists(version, :zero), expires_at = :exp"
    )
    if add:
        expression += " ADD " + ", ".join(f"{name} :add_{name}" for name in add)
        values |= to_dynamo({f":add_{name}": value for name, value in add.items()})
    got = from_dynamo(
        client.update_item(
            TableName=table,
            Key=key,
            UpdateExpression=expression,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )["Attributes"]
    )
    pending: str = got["pending"]
    live = got.get("lock_until") is not None and float(got["lock_until"]) >= now
    timer = got.get("timer_at") if sooner else None
    waiting = timer is not None and float(timer) > due_at
    if pending == ticket or (float(got["pending_since"]) >= stale_before and not waiting) or live:
        return pending
    took = applied(
        client.update_item,
        TableName=table,
        Key=key,
        UpdateExpression="SET pending = :t, pending_since = :now REMOVE timer_at",
        # Still that booking, and (waiting) still waiting for that timer: a pass that began meanwhile removed it.
        ConditionExpression="pending = :old AND " + ("timer_at = :timer" if waiting else "pending_since < :stale"),
        ExpressionAttributeValues=to_dynamo(
            {":t": ticket, ":now": now, ":old": pending} | ({":timer": timer} if waiting else {":stale": stale_before})
        ),
    )
    if took:
        return ticket
    item = from_dynamo(client.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item") or {})
    return str(item.get("pending") or ticket)
