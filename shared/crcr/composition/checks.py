"""ChecksFunction's and DispatchedFunction's dependencies: the check runs, the PR comment, re-runs, notices."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics
from crcr.composition.base import (
    aws_client,
    github_app,
    load_allowlist,
    outbound_door,
    results_store,
    sqs_checks_queue,
    write_rates,
)
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.app.checks import CheckDeps


def build_dispatched_deps(settings: Settings) -> CheckDeps:
    """DispatchedFunction: the pass alone (re-runs, reactions and regression notices are ChecksFunction's)."""
    return build_checks_deps(settings, writers=False)


def build_checks_deps(settings: Settings, *, writers: bool = True) -> CheckDeps:
    from crcr.adapters.check_runs import DynamoCheckRuns  # noqa: PLC0415
    from crcr.adapters.commands import GitHubCommands  # noqa: PLC0415
    from crcr.adapters.github import GitHubCheckRuns, GitHubIssueComments, GitHubReruns  # noqa: PLC0415
    from crcr.adapters.ledger import DynamoLedger  # noqa: PLC0415
    from crcr.adapters.levels import CachedDemotions, DynamoLevels  # noqa: PLC0415
    from crcr.adapters.pacer import DynamoPacer  # noqa: PLC0415
    from crcr.adapters.pr_comment import DynamoPrComment  # noqa: PLC0415
    from crcr.adapters.pulls import DynamoPullRequests  # noqa: PLC0415
    from crcr.adapters.reruns import DynamoReruns  # noqa: PLC0415
    from crcr.app.checks import CheckDeps  # noqa: PLC0415
    from crcr.app.comment import CommentDeps  # noqa: PLC0415
    from crcr.app.rerun import RerunDeps, RetryDeps  # noqa: PLC0415

    settings.require("state_table", "results_table", "checks_queue_url", "checks_dlq_url", "allowlist", "github_app_id")
    queue = sqs_checks_queue(settings)
    assert queue is not None
    metrics = PowertoolsMetrics()
    clock = SystemClock()
    table = str(settings.state_table)
    checks = DynamoCheckRuns(aws_client("dynamodb"), table)
    prs = DynamoPullRequests(aws_client("dynamodb"), table)
    reruns = DynamoReruns(aws_client("dynamodb"), table)
    # One pacer for every content-creating call: check runs and the PR comment spend the upstream
    # installation's budget, re-runs the downstream's (shared with its dispatches).
    pacer = DynamoPacer(aws_client("dynamodb"), str(settings.state_table), rates=write_rates(settings))
    from crcr.domain.pacing import share_of  # noqa: PLC0415

    # Each downstream's part of that budget, for the check runs its jobs cause (a cell per upstream and repository).
    share = (
        DynamoPacer(
            aws_client("dynamodb"),
            str(settings.state_table),
            rates=share_of(write_rates(settings), settings.downstream_write_share),
            cell="SHARE",
        )
        if settings.downstream_write_share < 1
        else None
    )
    allowlist = load_allowlist(settings, metrics, clock)
    door = outbound_door(settings, metrics, clock, allowlist)
    results = results_store(settings)
    comment, notices = None, None
    if settings.pr_comment == "on":
        from crcr.app.regression_notices import NoticeDeps  # noqa: PLC0415

        conversation = GitHubIssueComments(github_app(settings))
        if writers:  # a regression's one notice: a comment on the PR of its first failing commit, on the same budget
            from crcr.adapters.regressions import DynamoRegressions  # noqa: PLC0415

            notices = NoticeDeps(conversation, DynamoRegressions(aws_client("dynamodb"), table), allowlist, pacer,
                                 metrics, clock, door)  # fmt: skip
        # The same queue, pacer (one budget per installation), allowlist and metrics as the check runs.
        comment = CommentDeps(
            api=conversation,
            store=DynamoPrComment(aws_client("dynamodb"), table),
            prs=prs,
            jobs=results,
            reruns=reruns,
            queue=queue,
            pacer=pacer,
            allowlist=allowlist,
            metrics=metrics,
            clock=clock,
            door=door,
            settle_s=settings.comment_settle_s,
            lease_s=2 * settings.github_timeout_s + 15.0,  # a render may list the conversation, then write
            # The relay's re-run of an infrastructure failure waits for its run (up to the run timeout), then
            # must start: that failure is shown after this at the latest.
            retry_hold_s=float(settings.run_timeout_s + settings.start_timeout_s),
        )
    built = CheckDeps(
        api=GitHubCheckRuns(github_app(settings)),
        store=checks,
        results=results,
        ledger=DynamoLedger(aws_client("dynamodb"), table),
        prs=prs,
        queue=queue,
        pacer=pacer,
        allowlist=allowlist,
        metrics=metrics,
        clock=clock,
        door=door,
        settle_s=settings.check_settle_s,
        gauge=pacer,  # check_runs: auto reads the hourly window the writes above book in
        share=share,
        reruns=RerunDeps(
            github=GitHubReruns(github_app(settings)), store=checks, allowlist=allowlist, metrics=metrics, door=door
        ),
        retries=RetryDeps(
            results=results,
            marks=reruns,
            clock=clock,
            # A claim covers a token, the run's GET and the POST, each up to connect + read timeout.
            lease_s=3 * (settings.github_timeout_s + 3.05) + 15.0,
            # As long as the sweeper lets a job run: a run whose other jobs go on longer is not waited for.
            give_up_s=settings.run_timeout_s,
        ),
        comment=comment,
        notices=notices,
        demotions=CachedDemotions(DynamoLevels(aws_client("dynamodb"), str(settings.state_table)), clock.now),
        reactions=GitHubCommands(github_app(settings)),
    )
    return built if writers else replace(built, reruns=None, retries=None, reactions=None)
