"""LevelFunction: on a schedule, each downstream's level status for the HUD, and the demotion PRs it calls for. Hourly,
and every 5 minutes with `{"if_missing": true}` (computed only while none is stored: a new stack), so PyTorch's
level-status route has an answer minutes after a deploy, not an hour."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.app.levels import LevelDeps, check_levels, level_status_missing
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.levels import build_level_deps

_deps: LevelDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: LevelDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_level_deps(load_settings())))
    if event.get("if_missing") and not level_status_missing(ready):
        return {"skipped": "the level status is stored; the hourly run refreshes it"}
    outcome = check_levels(ready)
    changes = {s.repo: s.change for s in outcome.statuses if s.change}
    if changes or outcome.actions or outcome.failed:
        logger.info("levels", extra={"changes": changes, "actions": outcome.actions, "failed": outcome.failed})
    return {
        "repos": len(outcome.statuses),
        "changes": changes,
        "actions": len(outcome.actions),
        "failed": outcome.failed,
    }
