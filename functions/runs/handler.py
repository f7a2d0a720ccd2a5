"""RunsFunction: RunsQueue (SQS) -> each downstream run event bound to its dispatch, and each completed attempt's
jobs read once from GitHub and recorded where no report did (crcr.app.runs)."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.app.runs import RunNotYetKnown, RunsDeps, observe_run
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.runs import build_runs_deps
from crcr.contracts.messages import RunMessage
from crcr.sqs_batch import process_batch

_deps: RunsDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: RunsDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_runs_deps(load_settings())))

    def handle(record: dict[str, Any]) -> None:
        message = RunMessage.model_validate_json(record["body"])
        outcome = observe_run(message, ready)
        logger.info(
            "run event handled",
            extra={
                "delivery_id": message.delivery_id,
                "target_repo": message.repo,
                "run_id": message.run_id,
                "run_attempt": message.run_attempt,
                "action": message.action,
                "outcome": outcome,
            },
        )

    def failed(record: dict[str, Any], exc: BaseException) -> None:
        if isinstance(exc, RunNotYetKnown):
            ready.metrics.count("RunEventRetried", reason="unknown_dispatch")
            logger.info("run event names a dispatch not in the index yet; SQS will redeliver")
            return
        ready.metrics.count("RunEventFailed")
        logger.exception("run event failed; SQS will redeliver", extra={"message_id": record.get("messageId")})

    # Each run's item is written conditionally and each attempt's listing is claimed: records can run side by side.
    return process_batch(event, handle, failed, parallel=5)
