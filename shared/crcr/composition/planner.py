"""PlannerFunction's dependencies: the allowlist, the PR and branch logs, the dispatch queue, comment commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics
from crcr.composition.base import (
    aws_client,
    github_app,
    load_allowlist,
    outbound_door,
    page_docs,
    rerun_deps,
    results_store,
    sqs_checks_queue,
)
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.app.plan import PlannerDeps


def build_planner_deps(settings: Settings) -> PlannerDeps:
    from crcr.adapters.branch import DynamoBranch  # noqa: PLC0415
    from crcr.adapters.pulls import DynamoPullRequests  # noqa: PLC0415
    from crcr.adapters.s3 import S3Blobs  # noqa: PLC0415
    from crcr.adapters.sqs import SqsDispatchQueue  # noqa: PLC0415
    from crcr.app.plan import PlannerDeps  # noqa: PLC0415

    settings.require("state_table", "dispatch_queue_url", "dispatch_dlq_url", "bodies_bucket", "allowlist")
    metrics = PowertoolsMetrics()
    clock = SystemClock()
    allowlist = load_allowlist(settings, metrics, clock)
    door = outbound_door(settings, metrics, clock, allowlist)
    files = commands = None
    pulls = DynamoPullRequests(aws_client("dynamodb"), str(settings.state_table))
    if settings.github_app_id:
        from crcr.adapters.changes import GitHubCompareFiles  # noqa: PLC0415
        from crcr.adapters.check_runs import DynamoCheckRuns  # noqa: PLC0415
        from crcr.adapters.commands import GitHubCommands  # noqa: PLC0415
        from crcr.adapters.rate_limits import DynamoRateLimiter  # noqa: PLC0415
        from crcr.app.commands import COMMANDS_PER_AUTHOR_HOUR, COMMANDS_PER_PR_HOUR, CommandDeps  # noqa: PLC0415

        ddb, table = aws_client("dynamodb"), str(settings.state_table)
        files = GitHubCompareFiles(github_app(settings))  # path filters: a PR head's files, compared once per head
        commands = CommandDeps(
            slug=settings.github_app_slug,
            collaborators=GitHubCommands(github_app(settings)),
            check_runs=DynamoCheckRuns(ddb, table),
            releases=pulls,
            per_author=DynamoRateLimiter(ddb, table, COMMANDS_PER_AUTHOR_HOUR, window_s=3600, budget="cmd-author"),
            per_pr=DynamoRateLimiter(ddb, table, COMMANDS_PER_PR_HOUR, window_s=3600, budget="cmd-pr"),
        )
    return PlannerDeps(
        checks=sqs_checks_queue(settings),
        jobs=results_store(settings) if settings.results_table else None,
        reruns=rerun_deps(settings, allowlist, metrics, door),
        files=files,
        commands=commands,
        pages=page_docs(settings, metrics),
        upstream=settings.upstream_repo,
        allowlist=allowlist,
        blobs=S3Blobs(aws_client("s3"), str(settings.bodies_bucket)),
        prs=pulls,
        branch=DynamoBranch(aws_client("dynamodb"), str(settings.state_table)),
        dispatches=SqsDispatchQueue(
            aws_client("sqs"), str(settings.dispatch_queue_url), str(settings.dispatch_dlq_url)
        ),
        metrics=metrics,
        clock=clock,
        door=door,
    )
