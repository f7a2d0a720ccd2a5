"""ReporterFunction: ResultsTable stream -> one HUD push per recorded job change, in order per shard."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.adapters.stream import images
from crcr.app.report import ReportDeps, report_change
from crcr.composition import build_report_deps, load_settings

_deps: ReportDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: ReportDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := build_report_deps(load_settings()))
    for record in event.get("Records") or []:
        old, new = images(record)
        if new is None:
            continue  # TTL expiry or a delete: nothing to report
        logger.set_correlation_id(new.delivery_id)
        try:
            report_change(old, new, ready)
        except Exception:
            # Stream order matters: report this record and everything after it for a retry.
            logger.exception("HUD push failed; the stream retries from this record", extra={"target_repo": new.repo})
            return {"batchItemFailures": [{"itemIdentifier": record["dynamodb"]["SequenceNumber"]}]}
    return {"batchItemFailures": []}
