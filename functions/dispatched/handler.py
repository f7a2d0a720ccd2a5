"""DispatchedFunction: StateTable's stream -> the check-run pass of each commit an L3/L4 dispatch the ledger marks sent
was for (its filter passes only those), run at once with the rows in hand."""

from __future__ import annotations

from typing import Any

from crcr.adapters.ledger import dispatched_row
from crcr.adapters.observability import logger, metrics
from crcr.app.checks import CheckDeps
from crcr.app.checks_booking import ask_head, head_message, row_key
from crcr.app.checks_pass import sync_head
from crcr.app.ports.ledger import LedgerRow
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.checks import build_dispatched_deps
from crcr.contracts.check_messages import HeadPass

_deps: CheckDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: CheckDeps | None = None) -> dict[str, Any]:
    """Each commit's pass, booked and run here with the rows in hand (one per commit in the batch, however many of its
    dispatches went out); a pass already booked or running takes them on instead. One that fails here goes to
    ChecksQueue, which retries it as any pass; only a record whose booking failed is reported, and the stream retries
    from it (a booking twice is harmless)."""
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_dispatched_deps(load_settings())))
    records = event.get("Records") or []
    heads: dict[tuple[str, str], dict[str, LedgerRow]] = {}
    for record in records:
        row = dispatched_row(record)
        if row is None:  # the filter lets only a sent L3/L4 dispatch through
            ready.metrics.count("CheckRequestIgnored")
            continue
        heads.setdefault((row.upstream or "", row.head_sha or ""), {})[row_key(row.delivery_id, row.repo)] = row
    failures: list[dict[str, str]] = []
    for (upstream, head_sha), rows in heads.items():
        try:
            ticket = ask_head(ready.ask, upstream, head_sha, rows, due_in=0.0)
        except Exception:
            ready.metrics.count("CheckRequestFailed")
            logger.exception("check-run pass not booked; the stream retries", extra={"head_sha": head_sha})
            failures += [{"itemIdentifier": _sequence(r)} for r in records if _head_of(r) == (upstream, head_sha)]
            continue
        if ticket is None:
            continue  # a pass already booked (or running) takes these rows on
        message = head_message(upstream, head_sha, ticket, 0.0, ready.clock.now())
        try:
            _pass(message, ready, rows)
        except Exception:
            logger.exception("check-run pass failed; handed to ChecksQueue", extra={"head_sha": head_sha})
            try:
                ready.queue.send_checks([message])
            except Exception:
                # Nothing will run the booked pass: end the booking, so the stream's retry books one of its own.
                ready.metrics.count("CheckRequestFailed")
                logger.exception("check-run pass not queued either; the stream retries", extra={"head_sha": head_sha})
                ready.store.drop_head(upstream, head_sha, ticket)
                failures += [{"itemIdentifier": _sequence(r)} for r in records if _head_of(r) == (upstream, head_sha)]
                continue
            ready.metrics.count("CheckRequestQueued")
    return {"batchItemFailures": failures}


def _sequence(record: dict[str, Any]) -> str:
    return str((record.get("dynamodb") or {}).get("SequenceNumber", ""))


def _head_of(record: dict[str, Any]) -> tuple[str, str] | None:
    row = dispatched_row(record)
    return (row.upstream or "", row.head_sha or "") if row is not None else None


def _pass(message: HeadPass, ready: CheckDeps, rows: dict[str, LedgerRow]) -> None:
    outcome = sync_head(message, ready, rows)
    # A pass writes for every dispatch of its commit: one line per delivery, so each delivery's story has its own.
    by_delivery: dict[str, list[str]] = {}
    for name in outcome.written:
        by_delivery.setdefault(outcome.delivery_of.get(name) or "", []).append(name)
    for delivery_id, written in by_delivery.items() or [("", [])]:
        logger.info(
            "check runs synced",
            extra={
                "kind": message.kind, "delivery_id": delivery_id, "target_repo": "", "head_sha": message.head_sha,
                "pr": None, "run_id": "0", "written": written, "outcome": outcome.detail, "delay_s": outcome.delay_s,
            },
        )  # fmt: skip
