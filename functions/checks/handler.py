"""ChecksFunction: ChecksQueue (SQS) -> upstream check runs and the PR comment, written from the latest recorded
state and paced per upstream installation, and re-runs of downstream runs, paced per downstream installation.
StateTable's stream -> the check run of each L3/L4 dispatch the ledger marks sent (its filter passes only those)."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.adapters.stream import dispatched_check
from crcr.app.checks import CheckDeps, sync
from crcr.composition import build_checks_deps, kept, load_settings
from crcr.contracts.messages import CheckSyncMessage
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
        _sync(CheckSyncMessage.model_validate_json(record["body"]), ready)

    def failed(record: dict[str, Any], exc: BaseException) -> None:
        ready.metrics.count("CheckRunFailed")
        logger.exception("check-run sync failed; SQS will redeliver", extra={"message_id": record.get("messageId")})

    # Writes to one check run are serialised by a lock on its row, so records can run side by side.
    return process_batch(event, handle, failed, parallel=5)


def _dispatched(event: dict[str, Any], ready: CheckDeps) -> dict[str, Any]:
    """Ledger rows marked sent: each one's check-run request, handled here at once. One that fails here goes
    to ChecksQueue, which retries it as any request; only a record that could not go there either is reported,
    and the stream retries from it (the writer creates a check run once, so a repeat is harmless)."""

    def handle(record: dict[str, Any]) -> None:
        message = dispatched_check(record)
        if message is None:  # the filter lets only a sent L3/L4 dispatch through
            ready.metrics.count("CheckRequestIgnored")
            return
        try:
            _sync(message, ready)
        except Exception:
            logger.exception(
                "check-run request failed; handed to ChecksQueue", extra={"delivery_id": message.delivery_id}
            )
            ready.queue.send_checks([message])
            ready.metrics.count("CheckRequestQueued")

    def failed(record: dict[str, Any], exc: BaseException) -> None:
        ready.metrics.count("CheckRequestFailed")
        logger.exception("check-run request not taken; the stream retries", extra={"record": record.get("eventID")})

    return process_batch(event, handle, failed, parallel=5)


def _sync(message: CheckSyncMessage, ready: CheckDeps) -> None:
    outcome = sync(message, ready)
    logger.info(
        "check runs synced",
        extra={
            "kind": message.kind,
            "delivery_id": message.delivery_id,
            "target_repo": message.repo,
            "head_sha": message.head_sha,
            "pr": message.pr,
            "run_id": message.run_id,
            "written": outcome.written,
            "outcome": outcome.detail,
            "delay_s": outcome.delay_s,
        },
    )
