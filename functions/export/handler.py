"""ExportFunction: EventBridge schedules -> the results table exported to the exports bucket (full or incremental)."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.app.scheduled_export import INCREMENTAL, ExportDeps, run_export
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.export import build_export_deps

_deps: ExportDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: ExportDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_export_deps(load_settings())))
    kind = str((event or {}).get("kind") or INCREMENTAL)  # the schedule's input; a plain tick is incremental
    started = run_export(kind, ready)
    logger.info("export", extra={"kind": started.kind, "prefix": started.prefix, "arn": started.arn})
    return {"kind": started.kind, "prefix": started.prefix, "start": started.start, "end": started.end}
