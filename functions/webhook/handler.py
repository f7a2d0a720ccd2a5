"""WebhookFunction: POST /webhook from GitHub (API Gateway HTTP API) -> verified, deduplicated, queued."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import PowertoolsMetrics, logger, metrics
from crcr.api import error_response, internal_error, json_response, lower_headers, raw_body
from crcr.app.ingest import IngestDeps, Outcome, ingest
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.webhook import build_ingest_deps
from crcr.domain.errors import CrcrError

_deps: IngestDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(correlation_id_path='headers."x-github-delivery"', clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: IngestDeps | None = None) -> dict[str, Any]:
    global _deps
    try:
        deps = deps or _deps or (_deps := freeze_gc(build_ingest_deps(load_settings())))
        result = ingest(raw_body(event), lower_headers(event), deps)
    except CrcrError as exc:
        logger.warning("webhook rejected", extra={"reason": exc.reason, "detail": exc.message})
        return error_response(exc)
    except Exception:
        PowertoolsMetrics().count("WebhookFailed")  # answered 500, so Lambda's Errors metric never sees it
        logger.exception("webhook failed; GitHub will show the delivery as failed so it can be redelivered")
        return internal_error()
    logger.info("webhook handled", extra={"outcome": result.outcome.value, "detail": result.reason})
    status = 202 if result.outcome is Outcome.ACCEPTED else 200
    return json_response(status, {"status": result.outcome.value, "delivery_id": result.delivery_id})
