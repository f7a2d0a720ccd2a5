"""SweeperFunction: on a schedule, dispatches never started and jobs never finished become timed_out."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.app.sweep import SweepDeps, sweep
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.runs import build_sweep_deps

_deps: SweepDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: SweepDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_sweep_deps(load_settings())))
    summary = sweep(ready)
    if summary.never_started or summary.never_finished:
        logger.info("swept", extra={"never_started": summary.never_started, "never_finished": summary.never_finished})
    return {"never_started": len(summary.never_started), "never_finished": len(summary.never_finished)}
