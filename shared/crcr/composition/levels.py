"""LevelFunction's dependencies: level status from the results, demotion PRs in the allowlist's repository."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics
from crcr.composition.base import aws_client, github_app, load_allowlist, outbound_door, results_store
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.app.levels import LevelDeps


def build_level_deps(settings: Settings) -> LevelDeps:
    """LevelFunction: level status from the results' by_repo index, published in the HUD bucket; demotion PRs in
    the allowlist's repository when the allowlist is read from GitHub (`github:owner/repo/path@base`)."""
    from crcr.adapters.allowlist_pulls import GitHubAllowlistPulls  # noqa: PLC0415
    from crcr.adapters.allowlist_source import parse_allowlist  # noqa: PLC0415
    from crcr.adapters.dispatch_runs import GitHubDispatchRuns  # noqa: PLC0415
    from crcr.adapters.levels import DynamoLevels  # noqa: PLC0415
    from crcr.adapters.s3 import S3PageDocs  # noqa: PLC0415
    from crcr.app.levels import LevelDeps  # noqa: PLC0415

    settings.require("state_table", "results_table", "allowlist", "hud_bucket")
    metrics = PowertoolsMetrics()
    clock = SystemClock()
    results = results_store(settings)
    source = str(settings.allowlist)
    pulls = None
    if source.startswith("github:") and settings.github_app_id:
        spec, _, base = source.removeprefix("github:").rpartition("@")
        owner, name, path = spec.split("/", 2)
        pulls = GitHubAllowlistPulls(github_app(settings), f"{owner}/{name}", path, base)
    allowlist = load_allowlist(settings, metrics, clock)
    return LevelDeps(
        allowlist=allowlist,
        jobs=results,
        history=DynamoLevels(aws_client("dynamodb"), str(settings.state_table), results.first_l2_job),
        demotions=DynamoLevels(aws_client("dynamodb"), str(settings.state_table)),
        docs=S3PageDocs(aws_client("s3"), str(settings.hud_bucket)),
        metrics=metrics,
        clock=clock,
        parse=parse_allowlist,
        door=outbound_door(settings, metrics, clock, allowlist),
        pulls=pulls,
        runs=GitHubDispatchRuns(github_app(settings)) if settings.github_app_id else None,
        hud_url=f"{settings.callback_url.rsplit('/callback', 1)[0]}/hud" if settings.callback_url else None,
    )
