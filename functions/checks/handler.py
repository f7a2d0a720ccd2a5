"""ChecksFunction: ChecksQueue (SQS) -> upstream check runs and the PR comment, written from the latest recorded
state and paced per upstream installation, and re-runs of downstream runs, paced per downstream installation.
StateTable's stream -> the check-run pass of each commit an L3/L4 dispatch the ledger marks sent was for (its filter
passes only those)."""

from __future__ import annotations

from typing import Any

from crcr.adapters.ledger import dispatched_row
from crcr.adapters.observability import logger, metrics
from crcr.app.checks import CheckDeps, sync
from crcr.app.checks_booking import ask_head, head_message, row_key
from crcr.app.checks_pass import sync_head
from crcr.app.ports.ledger import LedgerRow
from crcr.composition import build_checks_deps, kept, load_settings
from crcr.contracts.check_messages import CheckSync, HeadPass, read_check_sync
from crcr.sqs_batch import process_batch

_deps: CheckDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: CheckDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := kept(build_checks_deps(load_settings())))

    if any(record.get("eventSource") == "aws:dynamodb" for record in event.get("Records") or []):
        return _dispatched(event, ready)

    def handle(record: dict[str, Any]) -> None:
        _sync(read_check_sync(record["body"]), ready)

    def failed(record: dict[str, Any], exc: BaseException) -> None:
        ready.metrics.count("CheckRunFailed")
        logger.exception("check-run sync failed; SQS will redeliver", extra={"message_id": record.get("messageId")})

    # Writes to one check run are serialised by a lock on its row, so records can run side by side.
    return process_batch(event, handle, failed, parallel=5)


def _dispatched(event: dict[str, Any], ready: CheckDeps) -> dict[str, Any]:
    """Ledger rows marked sent: each commit's check-run pass, booked and run here at once with the rows in hand (one
    pass per commit in the batch, however many of its dispatches went out). A pass already booked or running takes
    them on instead. One that fails here goes to ChecksQueue, which retries it as any pass; only a record whose
    booking failed is reported, and the stream retries from it (a booking twice is harmless)."""
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
            _sync(message, ready, rows)
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


def _sync(message: CheckSync, ready: CheckDeps, rows: dict[str, LedgerRow] | None = None) -> None:
    outcome = (
        sync_head(message, ready, rows) if isinstance(message, HeadPass) and rows is not None else sync(message, ready)
    )
    # A pass writes for every dispatch of its commit: one line per delivery, so each delivery's story has its own.
    wire = message.model_dump()  # every key of the queue body, whichever the kind
    by_delivery: dict[str, list[str]] = {}
    for name in outcome.written:
        by_delivery.setdefault(outcome.delivery_of.get(name) or wire["delivery_id"], []).append(name)
    for delivery_id, written in by_delivery.items() or [(wire["delivery_id"], [])]:
        logger.info(
            "check runs synced",
            extra={
                "kind": message.kind,
                "delivery_id": delivery_id,
                "target_repo": wire["repo"],
                "head_sha": message.head_sha,
                "pr": wire["pr"],
                "run_id": wire["run_id"],
                "written": written,
                "outcome": outcome.detail,
                "delay_s": outcome.delay_s,
            },
        )
