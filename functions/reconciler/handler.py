"""ReconcilerFunction: on a schedule, webhook deliveries GitHub failed to hand the relay are asked for again."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import PowertoolsMetrics, logger, metrics
from crcr.app.ports.github import GitHubError
from crcr.app.reconcile import ReconcileDeps, reconcile
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.reconciler import build_reconcile_deps

_deps: ReconcileDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: ReconcileDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_reconcile_deps(load_settings())))
    try:
        summary = reconcile(ready)
    except GitHubError:
        PowertoolsMetrics().count("WebhookReconcileFailed")
        logger.exception("could not list the App's webhook deliveries; the next run tries again")
        raise  # the function's Errors alarm
    if summary.missed or summary.abandoned or summary.truncated:
        logger.warning(
            "missed webhooks",
            extra={
                "requested": summary.requested,
                "deferred": summary.deferred,
                "abandoned": summary.abandoned,
                "truncated": summary.truncated,
            },
        )
    return {
        "listed": summary.listed,
        "missed": len(summary.missed),
        "requested": len(summary.requested),
        "deferred": len(summary.deferred),
        "abandoned": len(summary.abandoned),
        "edge_failing": summary.edge_failing,
        "truncated": summary.truncated,
    }
