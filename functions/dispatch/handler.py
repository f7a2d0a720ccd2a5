"""DispatchFunction: DispatchQueue (SQS) -> repository_dispatch (or a Buildkite build) to one downstream per message."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.app.dispatch import DispatchBatch, DispatchDeps
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.dispatch import build_dispatch_deps
from crcr.contracts.messages import DispatchMessage
from crcr.sqs_batch import process_batch

_deps: DispatchDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: DispatchDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_dispatch_deps(load_settings())))
    batch = DispatchBatch(ready)  # the records share each PR's head read and their metrics documents

    def handle(record: dict[str, Any]) -> None:
        message = DispatchMessage.model_validate_json(record["body"])
        outcome = batch.dispatch(message)
        logger.info(
            "dispatch handled",
            extra={
                "delivery_id": message.delivery_id,
                "target_repo": message.target_repo,
                "outcome": outcome.result.value,
                "detail": outcome.reason,
                "delay_s": outcome.delay_s,
                **(
                    {"run_id": outcome.build.id, "build_number": outcome.build.number}
                    if outcome.build is not None
                    else {}
                ),
            },
        )

    def failed(record: dict[str, Any], exc: BaseException) -> None:
        ready.metrics.count("DispatchFailed")
        logger.exception("dispatch failed; SQS will redeliver", extra={"message_id": record.get("messageId")})

    # Records go to different repositories: run them side by side so a slow one holds up no other.
    try:
        return process_batch(event, handle, failed, parallel=10)
    finally:
        batch.flush_metrics()
