"""CallbackFunction: POST /callback from downstream workflows -> verified, bound to its dispatch, recorded."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import PowertoolsMetrics, logger, metrics
from crcr.api import error_response, internal_error, json_response, lower_headers, raw_body
from crcr.app.callback import CallbackDeps, handle_callback
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.callback import build_callback_deps
from crcr.domain.errors import CrcrError

_deps: CallbackDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: CallbackDeps | None = None) -> dict[str, Any]:
    global _deps
    try:
        deps = deps or _deps or (_deps := freeze_gc(build_callback_deps(load_settings())))
        reply = handle_callback(raw_body(event), lower_headers(event).get("authorization"), deps)
    except CrcrError as exc:
        logger.warning("callback rejected", extra={"reason": exc.reason, "detail": exc.message, "field": exc.field})
        return error_response(exc)
    except Exception:
        PowertoolsMetrics().count("CallbackFailed")  # answered 500, so Lambda's Errors metric never sees it
        logger.exception("callback failed; the downstream action retries 5xx")
        return internal_error()
    logger.info("callback handled", extra={"outcome": reply.value})
    return json_response(200, {"status": reply.value})
