"""ReporterFunction's dependencies: PyTorch's HUD, the page documents, verdicts, known failures, regressions."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics, logger
from crcr.composition.base import (
    aws_client,
    github_app,
    load_allowlist,
    outbound_door,
    results_store,
    sqs_checks_queue,
)
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.adapters.allowlist_source import CachedAllowlist
    from crcr.adapters.rate_limits import DynamoRateLimiter
    from crcr.adapters.sqs import SqsChecksQueue
    from crcr.app.checks_booking import HeadAsk
    from crcr.app.disable_authors import DisableAuthors
    from crcr.app.ports.jobs import JobRecord
    from crcr.app.regressions import RegressionDeps
    from crcr.app.report import ReportDeps
    from crcr.app.summaries import SummaryDeps
    from crcr.app.verdicts import VerdictDeps
    from crcr.domain.known import KnownFailures


def build_report_deps(settings: Settings) -> ReportDeps:
    from crcr.adapters.stream import SqsDeadLetters  # noqa: PLC0415
    from crcr.adapters.torchci import TorchciClient  # noqa: PLC0415
    from crcr.app.report import ReportDeps  # noqa: PLC0415

    settings.require("reporter_dlq_url")
    hud = TorchciClient(settings.hud_url, settings.secret("hud_token")) if settings.hud_url else None
    metrics = PowertoolsMetrics()
    checks = sqs_checks_queue(settings)
    known = _known_failures(settings, metrics)
    summaries = _summaries(settings, metrics)
    clock = SystemClock()
    allowlist = load_allowlist(settings, metrics, clock) if settings.allowlist else None
    return ReportDeps(
        torchci=hud,
        dead_letters=SqsDeadLetters(aws_client("sqs"), str(settings.reporter_dlq_url)),
        metrics=metrics,
        door=outbound_door(settings, metrics, clock, allowlist),
        checks=checks,
        heads=_head_ask(settings, checks),
        summaries=summaries,
        verdicts=_verdicts(settings, known),
        regressions=_regressions(settings, metrics, known, summaries, checks, allowlist),
    )


def _known_failures(settings: Settings, metrics: PowertoolsMetrics) -> Callable[[], KnownFailures] | None:
    """The tests upstream disables (CRCR_DISABLED_TESTS) and the known-issues file (CRCR_KNOWN_ISSUES), each read when
    a failure is first judged, then every 10 minutes (test-infra regenerates its file every 15)."""
    if not (settings.disabled_tests or settings.known_issues):
        return None
    from crcr.adapters.allowlist_source import (  # noqa: PLC0415
        CachedKnownFailures,
        CachedKnownIssues,
        Fetcher,
        fetcher_for,
    )
    from crcr.adapters.disabled_issues import PREFIX as SEARCHED  # noqa: PLC0415
    from crcr.adapters.disabled_issues import GitHubDisabledIssues  # noqa: PLC0415
    from crcr.domain.known import KnownFailures  # noqa: PLC0415

    sources: list[Callable[[], KnownFailures]] = []
    for source, kind in ((settings.disabled_tests, CachedKnownFailures), (settings.known_issues, CachedKnownIssues)):
        if source and source.startswith(SEARCHED):
            # The issues themselves, searched every 30 minutes (pages of 100), within search's own limit of 30 a
            # minute: 20 a minute for every instance together when the state table can count them.
            fetch: Fetcher = GitHubDisabledIssues(
                github_app(settings), source.removeprefix(SEARCHED), metrics, SystemClock().now,
                _disable_authors(settings, metrics), _search_budget(settings),
            )  # fmt: skip
            sources.append(kind(fetch, metrics, SystemClock().now, 1800.0, on_error=logger.warning).current)
        elif source:
            fetch = fetcher_for(source, lambda: aws_client("s3"), lambda: github_app(settings))
            sources.append(kind(fetch, metrics, SystemClock().now, 600.0, on_error=logger.warning).current)

    def known() -> KnownFailures:
        """Both lists; one that cannot be read leaves the other (raises only when neither can be read)."""
        found, errors = [], []
        for current in sources:
            try:
                found.append(current())
            except Exception as exc:
                errors.append(exc)
        if not found:
            raise errors[0]
        by_test = {k: v for f in found for k, v in f.by_test.items()}
        return KnownFailures(by_test, tuple(i for f in found for i in f.issues))

    return known


def _disable_authors(settings: Settings, metrics: PowertoolsMetrics) -> DisableAuthors:
    """Whose searched DISABLED issues count: the bots named, and people with write access (GitHub's answers kept in
    the state table an hour, for every reporter instance)."""
    from crcr.adapters.author_answers import DynamoAuthorAnswers  # noqa: PLC0415
    from crcr.adapters.disabled_issues import GitHubAuthorPermissions  # noqa: PLC0415
    from crcr.app.disable_authors import DisableAuthors  # noqa: PLC0415

    settings.require("state_table")
    kept = DynamoAuthorAnswers(aws_client("dynamodb"), str(settings.state_table))
    bots = frozenset(b.lower() for b in settings.disabled_tests_bots.split(",") if b)
    return DisableAuthors(GitHubAuthorPermissions(github_app(settings)), kept, metrics, SystemClock().now, bots)


def _search_budget(settings: Settings) -> DynamoRateLimiter | None:
    if not settings.state_table:
        return None
    from crcr.adapters.rate_limits import DynamoRateLimiter  # noqa: PLC0415

    return DynamoRateLimiter(aws_client("dynamodb"), str(settings.state_table), 20, window_s=60, budget="SEARCH")


def _regressions(
    settings: Settings,
    metrics: PowertoolsMetrics,
    known: Callable[[], KnownFailures] | None,
    summaries: SummaryDeps | None,
    checks: SqsChecksQueue | None,
    allowlist: CachedAllowlist | None,
) -> RegressionDeps | None:
    """Regression ranges of branch jobs: their results and the branch's order, kept in the state table and listed in
    the HUD's regressions.json (the reporter's own documents); the allowlist's entries narrow blamelists and allow
    bisection; notices go on the reporter's check-run queue."""
    if not (settings.results_table and settings.state_table):
        return None
    from crcr.adapters.branch import DynamoBranch  # noqa: PLC0415
    from crcr.adapters.changes import GitHubBranchHistory  # noqa: PLC0415
    from crcr.adapters.rate_limits import DynamoDailyBudget, DynamoRateLimiter  # noqa: PLC0415
    from crcr.adapters.regressions import DynamoRegressions  # noqa: PLC0415
    from crcr.adapters.sqs import SqsDispatchQueue  # noqa: PLC0415
    from crcr.app.regressions import RegressionDeps  # noqa: PLC0415

    clock = SystemClock()
    ddb = aws_client("dynamodb")
    results = results_store(settings)
    return RegressionDeps(
        results=results,
        branch=DynamoBranch(ddb, str(settings.state_table)),
        store=DynamoRegressions(ddb, str(settings.state_table)),
        metrics=metrics,
        clock=clock,
        docs=summaries,
        notices=checks if settings.pr_comment == "on" else None,
        history=GitHubBranchHistory(github_app(settings)) if settings.github_app_id else None,
        known=known,
        attempts=results,
        allowlist=allowlist,
        dispatches=SqsDispatchQueue(aws_client("sqs"), str(settings.dispatch_queue_url), str(settings.dispatch_dlq_url))
        if settings.dispatch_queue_url
        else None,
        bisect_budget=DynamoDailyBudget(ddb, str(settings.state_table)),
        compare_budget=DynamoRateLimiter(
            ddb, str(settings.state_table), settings.compare_calls_per_hour, window_s=3600, budget="COMPARE"
        ),
    )


def _head_ask(settings: Settings, queue: SqsChecksQueue | None) -> HeadAsk | None:
    """The reporter books each changed commit's check-run pass (one message per burst, not one per change)."""
    if queue is None or not settings.state_table:
        return None
    from crcr.adapters.check_runs import DynamoCheckRuns  # noqa: PLC0415
    from crcr.app.checks_booking import HeadAsk  # noqa: PLC0415

    return HeadAsk(DynamoCheckRuns(aws_client("dynamodb"), str(settings.state_table)), queue, SystemClock())


def _verdicts(settings: Settings, known: Callable[[], KnownFailures] | None = None) -> VerdictDeps | None:
    """Failure verdicts need the results (attempts, baselines) and the state table (PR bases, branch order)."""
    if not (settings.results_table and settings.state_table):
        return None
    from crcr.adapters.branch import DynamoBranch  # noqa: PLC0415
    from crcr.adapters.pulls import DynamoPullRequests  # noqa: PLC0415
    from crcr.adapters.regressions import DynamoRegressions  # noqa: PLC0415
    from crcr.app.verdicts import VerdictDeps  # noqa: PLC0415

    results = results_store(settings)
    metrics, clock = PowertoolsMetrics(), SystemClock()
    return VerdictDeps(
        results=results,
        store=results,
        by_repo=results,
        branch=DynamoBranch(aws_client("dynamodb"), str(settings.state_table)),
        prs=DynamoPullRequests(aws_client("dynamodb"), str(settings.state_table)),
        clock=clock,
        regressions=DynamoRegressions(aws_client("dynamodb"), str(settings.state_table)),
        known=known,
        on_unknown=lambda exc: metrics.count("KnownFailuresUnavailable"),
    )


def _summaries(settings: Settings, metrics: PowertoolsMetrics) -> SummaryDeps | None:
    """The HUD pages' documents, when the stack has a HUD bucket."""
    if not settings.hud_bucket:
        return None
    from crcr.adapters.s3 import S3PageDocs  # noqa: PLC0415
    from crcr.app.summaries import SummaryDeps  # noqa: PLC0415

    return SummaryDeps(
        docs=S3PageDocs(aws_client("s3"), settings.hud_bucket),
        metrics=metrics,
        clock=SystemClock(),
        health=_page_health(settings),
        health_refresh_s=settings.health_refresh_s,
    )


def _page_health(settings: Settings) -> Callable[[JobRecord], dict[str, Any] | None] | None:
    """The repository page's health section, from the results table's by_repo index."""
    from crcr.app.health import page_health  # noqa: PLC0415
    from crcr.domain.health import HealthConfigError, parse_policy  # noqa: PLC0415
    from crcr.domain.levels import Level  # noqa: PLC0415

    if not settings.results_table:
        return None
    try:
        policy = parse_policy(settings.health_thresholds)
    except HealthConfigError as exc:
        # A bad thresholds document must not stop the reporter: the pages go without the verdict.
        logger.error("CRCR_HEALTH_THRESHOLDS is invalid; repository pages show no health", extra={"reason": str(exc)})
        return None
    results, clock = results_store(settings), SystemClock()

    def health(job: JobRecord) -> dict[str, Any] | None:
        if job.level not in (2, 3, 4):
            return None
        return page_health(results, policy, clock, job.repo, Level(job.level))

    return health
