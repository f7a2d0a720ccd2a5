"""PlannerFunction: EventsQueue (SQS) -> one DispatchMessage per allowlisted target on DispatchQueue."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.app.plan import PlannerDeps, plan_event
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.planner import build_planner_deps
from crcr.contracts.messages import EventMessage
from crcr.sqs_batch import process_batch

_deps: PlannerDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: PlannerDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_planner_deps(load_settings())))

    def handle(record: dict[str, Any]) -> None:
        message = EventMessage.model_validate_json(record["body"])
        logger.set_correlation_id(message.delivery_id)
        summary = plan_event(message, ready)
        logger.info(
            "planned",
            extra={"dispatched": summary.dispatched, "held": summary.held, "skipped": summary.skipped}
            | {"page_note": summary.page_note},
        )

    def failed(record: dict[str, Any], exc: BaseException) -> None:
        ready.metrics.count("EventRetried")
        logger.exception("planning failed; SQS will redeliver", extra={"message_id": record.get("messageId")})

    return process_batch(event, handle, failed)
