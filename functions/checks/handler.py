"""ChecksFunction: ChecksQueue (SQS) -> upstream check runs and the PR comment, written from the latest recorded
state and paced per upstream installation, and re-runs of downstream runs, paced per downstream installation."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.app.checks import CheckDeps, sync
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.checks import build_checks_deps
from crcr.contracts.check_messages import read_check_sync
from crcr.sqs_batch import process_batch

_deps: CheckDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: CheckDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_checks_deps(load_settings())))

    def handle(record: dict[str, Any]) -> None:
        message = read_check_sync(record["body"])
        outcome = sync(message, ready)
        wire = message.model_dump()  # every key of the queue body, whichever the kind
        # A pass writes for every dispatch of its commit: one line per delivery, so each delivery's story has its own.
        by_delivery: dict[str, list[str]] = {}
        for name in outcome.written:
            by_delivery.setdefault(outcome.delivery_of.get(name) or wire["delivery_id"], []).append(name)
        for delivery_id, written in by_delivery.items() or [(wire["delivery_id"], [])]:
            logger.info(
                "check runs synced",
                extra={
                    "kind": message.kind, "delivery_id": delivery_id, "target_repo": wire["repo"],
                    "head_sha": message.head_sha, "pr": wire["pr"], "run_id": wire["run_id"], "written": written,
                    "outcome": outcome.detail, "delay_s": outcome.delay_s,
                },
            )  # fmt: skip

    def failed(record: dict[str, Any], exc: BaseException) -> None:
        ready.metrics.count("CheckRunFailed")
        logger.exception("check-run sync failed; SQS will redeliver", extra={"message_id": record.get("messageId")})

    # Writes to one check run are serialised by a lock on its row, so records can run side by side.
    return process_batch(event, handle, failed, parallel=5)
