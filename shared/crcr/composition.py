"""Composition root: builds each function's dependencies once per cold start from Settings."""

from __future__ import annotations

import functools
import gc
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import SecretStr

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics, logger
from crcr.settings import ConfigError, Settings

if TYPE_CHECKING:
    from crcr.adapters.allowlist_source import CachedAllowlist, CachedProviders
    from crcr.adapters.github import GitHubApp
    from crcr.adapters.rate_limits import DynamoRateLimiter
    from crcr.adapters.results import DynamoResults
    from crcr.adapters.s3 import S3HudDocs
    from crcr.adapters.sqs import SqsChecksQueue
    from crcr.adapters.tickets import Ed25519Tickets
    from crcr.app.callback import CallbackDeps
    from crcr.app.checks import CheckDeps
    from crcr.app.checks_booking import HeadAsk
    from crcr.app.disable_authors import DisableAuthors
    from crcr.app.dispatch import BuildkiteDeps, DispatchDeps
    from crcr.app.health import HealthDeps
    from crcr.app.ingest import IngestDeps
    from crcr.app.levels import LevelDeps
    from crcr.app.onboard import RepoLookup
    from crcr.app.outbound import Outbound
    from crcr.app.plan import PlannerDeps
    from crcr.app.ports.jobs import JobRecord
    from crcr.app.ports.regressions import RegressionStore
    from crcr.app.ports.shadow import ShadowLog
    from crcr.app.reconcile import ReconcileDeps
    from crcr.app.regressions import RegressionDeps
    from crcr.app.report import ReportDeps
    from crcr.app.rerun import RerunDeps
    from crcr.app.runs import RunsDeps
    from crcr.app.scheduled_export import ExportDeps
    from crcr.app.summaries import SummaryDeps
    from crcr.app.sweep import BuildkiteRecord, SweepDeps
    from crcr.app.verdicts import VerdictDeps
    from crcr.domain.allowlist import Allowlist
    from crcr.domain.known import KnownFailures
    from crcr.domain.pacing import Rate

# Adapters are imported inside each builder: a function pays at cold start only for the libraries it
# uses (the webhook needs no JWT, YAML or HTTP client; see bench/README.md for the import times).

# API Gateway accepts 10 MB; GitHub caps webhook payloads at 25 MB. SQS messages stop at 256 KiB.
MAX_WEBHOOK_BYTES = 10 * 1024 * 1024
INLINE_BODY_BYTES = 200 * 1024


def aws_client(service: str) -> Any:
    """One boto3 client per service and endpoint, built once per cold start and kept (AWS_ENDPOINT_URL points boto3
    at the local stack). botocore brings what the relay relies on: the credential chain, SigV4, standard-mode
    retries (throttling and transient errors, its retry quota, `x-amz-retry-after`), the body checksums, and the
    `X-Amzn-Trace-Id` header that links a traced invocation's calls in X-Ray."""
    return _client(service, os.environ.get("AWS_ENDPOINT_URL", ""))


# The most threads of one batch calling at once (functions/dispatch/handler.py runs a batch's 10 records side by
# side): each gets a kept-alive connection of its own instead of waiting for one or opening one to throw away.
POOL_CONNECTIONS = 10


@functools.cache
def _client(service: str, endpoint: str) -> Any:
    import boto3  # noqa: PLC0415 - boto3 costs ~150 ms; only functions that talk to AWS pay it
    from botocore.config import Config  # noqa: PLC0415

    config = Config(
        retries={"mode": "standard", "total_max_attempts": 3},  # botocore's standard mode as it comes
        connect_timeout=2,
        read_timeout=10,
        tcp_keepalive=True,
        max_pool_connections=POOL_CONNECTIONS,
    )
    return boto3.client(service, config=config)


@functools.cache
def _secrets_provider(endpoint: str) -> Any:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider  # noqa: PLC0415

    return SecretsProvider(boto3_client=aws_client("secretsmanager"))


def _secret_doc(settings: Settings, *, force: bool = False) -> dict[str, Any]:
    """The CRCR_SECRETS_ARN document, through Powertools' cache: read again once it is older than
    CRCR_SECRETS_MAX_AGE_S, or now when `force`d. Parsed once per value read (each dispatch asks for its ticket
    key, and the document holds the App's private key: parsing it every time was a few percent of a dispatch)."""
    arn = str(settings.secrets_arn)
    provider = _secrets_provider(os.environ.get("AWS_ENDPOINT_URL", ""))
    raw = provider.get(arn, max_age=settings.secrets_max_age_s, force_fetch=force)
    last = _parsed_secret_docs.get(arn)
    if last is not None and last[0] is raw:
        return last[1]
    doc = json.loads(raw if isinstance(raw, str) else raw.decode())
    if not isinstance(doc, dict):
        raise ConfigError("CRCR_SECRETS_ARN must hold a JSON object")
    _parsed_secret_docs[arn] = (raw, doc)
    return doc


# The last value read of each secret document and its parse: the cache hands back the same object until it reads
# the secret again.
_parsed_secret_docs: dict[str, tuple[Any, dict[str, Any]]] = {}


_Built = TypeVar("_Built")


def kept(built: _Built) -> _Built:
    """What a cold start built (modules, clients, dependencies), moved out of the garbage collector's generations:
    it lives as long as the execution environment, and warm invocations' collections then traverse only their own
    objects. Without it the collector was about a tenth of a warm dispatch's CPU (bench section 10). Once per
    process: a Lambda execution environment builds once, and a process that runs several functions (`crcr local`,
    the tests) would otherwise keep whatever garbage each later build found."""
    _freeze_once()
    return built


@functools.cache
def _freeze_once() -> None:
    gc.freeze()


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Settings with secrets resolved: environment first, then the Secrets Manager JSON document."""
    settings = Settings.from_env(env)
    if settings.secrets_arn:
        settings = settings.with_secrets(_secret_doc(settings))
    return settings


def _ticket_key_source(settings: Settings) -> Callable[[bool], tuple[str, str | None]]:
    """The ticket keys. Keys set in the environment are fixed for the life of the instance; keys from the
    CRCR_SECRETS_ARN document are read again through the cache, so a rotated secret is picked up by warm
    functions (within CRCR_SECRETS_MAX_AGE_S, or at once by a verifier shown a key id it does not know)."""
    current = settings.secret("ticket_signing_key")  # fails the cold start, naming the variable, when missing
    previous = settings.ticket_previous_key.get_secret_value() if settings.ticket_previous_key else None
    live = {name for name in ("ticket_signing_key", "ticket_previous_key") if settings.from_secret(name)}
    if not (settings.secrets_arn and live):
        return lambda force: (current, previous)

    def read(force: bool) -> tuple[str, str | None]:
        doc = _secret_doc(settings, force=force)
        now_current = str(doc.get("ticket_signing_key") or "") if "ticket_signing_key" in live else current
        if not now_current:
            raise ConfigError("missing secret: key 'ticket_signing_key' in CRCR_SECRETS_ARN")
        now_previous = (
            (str(doc.get("ticket_previous_key") or "") or None) if "ticket_previous_key" in live else previous
        )
        return now_current, now_previous

    return read


def _webhook_secret_source(settings: Settings) -> Callable[[bool], tuple[bytes, ...]] | None:
    """The webhook secrets (current, then previous) read again through the CRCR_SECRETS_ARN cache, so rotating the
    secret needs no redeploy; None when both are fixed in the environment. A forced read (a signature that did not
    match) happens at most once per 10 s; a failed read keeps the secrets last read."""
    live = {name for name in ("webhook_secret", "webhook_previous_secret") if settings.from_secret(name)}
    if not (settings.secrets_arn and live):
        return None
    fixed = {name: getattr(settings, name) for name in ("webhook_secret", "webhook_previous_secret")}
    last: list[tuple[bytes, ...]] = [_webhook_secrets(fixed)]
    quiet_until = [float("-inf")]

    def read(force: bool) -> tuple[bytes, ...]:
        now = time.monotonic()
        if force and now < quiet_until[0]:
            return last[0]
        if force:
            quiet_until[0] = now + 10.0
        try:
            doc = _secret_doc(settings, force=force)
        except Exception:
            logger.exception("reading the webhook secret failed; keeping the last one read")
            return last[0]
        values = {name: (doc.get(name) if name in live else fixed[name]) for name in fixed}
        last[0] = _webhook_secrets(values) or last[0]
        return last[0]

    return read


def _webhook_secrets(values: Mapping[str, Any]) -> tuple[bytes, ...]:
    found = (values.get("webhook_secret"), values.get("webhook_previous_secret"))
    texts = [v.get_secret_value() if isinstance(v, SecretStr) else v for v in found]
    return tuple(str(text).encode() for text in texts if text)


def _tickets(settings: Settings) -> Ed25519Tickets:
    from crcr.adapters.tickets import Ed25519Tickets  # noqa: PLC0415

    return Ed25519Tickets(_ticket_key_source(settings), on_error=logger.error)


@functools.cache  # one App client (key, JWT and token caches) per function, however many adapters use it
def _github(settings: Settings) -> GitHubApp:
    from crcr.adapters.github import GitHubApp  # noqa: PLC0415

    settings.require("github_app_id")
    return GitHubApp(
        settings.github_api_url,
        str(settings.github_app_id),
        settings.secret("github_app_private_key"),
        SystemClock().now,
        read_timeout_s=settings.github_timeout_s,
        pool_size=POOL_CONNECTIONS,
    )


def _write_rates(settings: Settings) -> tuple[Rate, ...]:
    """Each installation's budget of content-creating calls: GitHub.com's, unless configured otherwise."""
    from crcr.domain.pacing import CONTENT_RATES, parse_rates  # noqa: PLC0415

    return parse_rates(settings.github_write_rates) if settings.github_write_rates else CONTENT_RATES


def build_ingest_deps(settings: Settings) -> IngestDeps:
    from crcr.adapters.deliveries import DynamoDeliveries  # noqa: PLC0415
    from crcr.adapters.runs import DynamoRuns  # noqa: PLC0415
    from crcr.adapters.s3 import S3Blobs  # noqa: PLC0415
    from crcr.adapters.sqs import SqsEventQueue, SqsRunQueue  # noqa: PLC0415
    from crcr.app.ingest import IngestDeps  # noqa: PLC0415

    settings.require("state_table", "events_queue_url", "bodies_bucket")
    return IngestDeps(
        secrets=_webhook_secrets(
            {
                "webhook_secret": settings.secret("webhook_secret"),
                "webhook_previous_secret": settings.webhook_previous_secret,
            }
        ),
        secret_source=_webhook_secret_source(settings),
        upstream=settings.upstream_repo,
        deliveries=DynamoDeliveries(aws_client("dynamodb"), str(settings.state_table)),
        events=SqsEventQueue(aws_client("sqs"), str(settings.events_queue_url)),
        blobs=S3Blobs(aws_client("s3"), str(settings.bodies_bucket)),
        metrics=PowertoolsMetrics(),
        clock=SystemClock(),
        max_body_bytes=MAX_WEBHOOK_BYTES,
        inline_body_bytes=INLINE_BODY_BYTES,
        runs=SqsRunQueue(aws_client("sqs"), settings.runs_queue_url) if settings.runs_queue_url else None,
        run_settle_s=settings.run_report_settle_s,
        bound_runs=DynamoRuns(aws_client("dynamodb"), str(settings.state_table)) if settings.runs_queue_url else None,
        allowlist=_AllowlistOnFirstUse(settings) if settings.allowlist else None,
    )


class _AllowlistOnFirstUse:
    """The allowlist loaded when first asked for: the webhook reads it for a downstream's run event only, so its cold
    start for upstream events does not pay for YAML and the allowlist's source."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._loaded: CachedAllowlist | None = None

    def current(self) -> Allowlist:
        if self._loaded is None:
            from crcr.adapters.allowlist_source import CachedAllowlist, fetcher_for  # noqa: PLC0415

            source = str(self._settings.allowlist)
            fetch = fetcher_for(source, lambda: aws_client("s3"), lambda: _github(self._settings))
            self._loaded = CachedAllowlist(
                fetch, PowertoolsMetrics(), SystemClock().now, self._settings.allowlist_refresh_s, on_error=logger.error
            )
        return self._loaded.current()


def _allowlist(settings: Settings, metrics: PowertoolsMetrics, clock: SystemClock) -> CachedAllowlist:
    from crcr.adapters import preflight  # noqa: PLC0415
    from crcr.adapters.allowlist_source import CachedAllowlist, fetcher_for  # noqa: PLC0415

    # A misspelt path, invalid YAML, an empty list or an unmapped Buildkite downstream fails the cold start, naming
    # the variable and the line, instead of every message after it (the keys are checked where they are loaded).
    preflight.check(settings, with_keys=False)
    fetch = fetcher_for(str(settings.allowlist), lambda: aws_client("s3"), lambda: _github(settings))
    return CachedAllowlist(fetch, metrics, clock.now, settings.allowlist_refresh_s, on_error=logger.error)


def _door(
    settings: Settings, metrics: PowertoolsMetrics, clock: SystemClock, allowlist: CachedAllowlist | None
) -> Outbound:
    """The outbound door (crcr.app.outbound): every function that writes outside the relay gets its writes' permits
    here, with each downstream's mode read from the allowlist and the withheld writes kept in the state table."""
    from crcr.app.outbound import Outbound  # noqa: PLC0415

    log = None
    if settings.state_table:
        from crcr.adapters.shadow import DynamoShadow  # noqa: PLC0415

        log = DynamoShadow(aws_client("dynamodb"), str(settings.state_table))
    return Outbound(settings.mode, allowlist, log, metrics, clock, settings.upstream_repo)


def _providers(settings: Settings, metrics: PowertoolsMetrics, clock: SystemClock) -> CachedProviders | None:
    """PyTorch's ci_providers.yml (Buildkite pipelines -> repositories), reloaded like the allowlist."""
    if not settings.ci_providers:
        return None
    from crcr.adapters.allowlist_source import CachedProviders, fetcher_for  # noqa: PLC0415

    fetch = fetcher_for(str(settings.ci_providers), lambda: aws_client("s3"), lambda: _github(settings))
    return CachedProviders(fetch, metrics, clock.now, settings.allowlist_refresh_s, on_error=logger.error)


def build_planner_deps(settings: Settings) -> PlannerDeps:
    from crcr.adapters.branch import DynamoBranch  # noqa: PLC0415
    from crcr.adapters.pulls import DynamoPullRequests  # noqa: PLC0415
    from crcr.adapters.s3 import S3Blobs  # noqa: PLC0415
    from crcr.adapters.sqs import SqsDispatchQueue  # noqa: PLC0415
    from crcr.app.plan import PlannerDeps  # noqa: PLC0415

    settings.require("state_table", "dispatch_queue_url", "dispatch_dlq_url", "bodies_bucket", "allowlist")
    metrics = PowertoolsMetrics()
    clock = SystemClock()
    allowlist = _allowlist(settings, metrics, clock)
    door = _door(settings, metrics, clock, allowlist)
    files = commands = None
    pulls = DynamoPullRequests(aws_client("dynamodb"), str(settings.state_table))
    if settings.github_app_id:
        from crcr.adapters.changes import GitHubCompareFiles  # noqa: PLC0415
        from crcr.adapters.check_runs import DynamoCheckRuns  # noqa: PLC0415
        from crcr.adapters.commands import GitHubCommands  # noqa: PLC0415
        from crcr.adapters.rate_limits import DynamoRateLimiter  # noqa: PLC0415
        from crcr.app.commands import COMMANDS_PER_AUTHOR_HOUR, COMMANDS_PER_PR_HOUR, CommandDeps  # noqa: PLC0415

        ddb, table = aws_client("dynamodb"), str(settings.state_table)
        files = GitHubCompareFiles(_github(settings))  # path filters: a PR head's files, compared once per head
        commands = CommandDeps(
            slug=settings.github_app_slug,
            collaborators=GitHubCommands(_github(settings)),
            check_runs=DynamoCheckRuns(ddb, table),
            releases=pulls,
            per_author=DynamoRateLimiter(ddb, table, COMMANDS_PER_AUTHOR_HOUR, window_s=3600, budget="cmd-author"),
            per_pr=DynamoRateLimiter(ddb, table, COMMANDS_PER_PR_HOUR, window_s=3600, budget="cmd-pr"),
        )
    return PlannerDeps(
        checks=_checks_queue(settings),
        jobs=_results(settings) if settings.results_table else None,
        reruns=_rerun_deps(settings, allowlist, metrics, door),
        files=files,
        commands=commands,
        pages=_pages(settings, metrics),
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


def build_dispatch_deps(settings: Settings) -> DispatchDeps:
    from crcr.adapters.dispatch_runs import GitHubDispatchRuns, GitHubWorkflows  # noqa: PLC0415
    from crcr.adapters.ledger import DynamoLedger  # noqa: PLC0415
    from crcr.adapters.pacer import DynamoPacer  # noqa: PLC0415
    from crcr.adapters.pulls import DynamoPullRequests  # noqa: PLC0415
    from crcr.adapters.runs import DynamoRuns  # noqa: PLC0415
    from crcr.adapters.sqs import SqsDispatchQueue  # noqa: PLC0415
    from crcr.adapters.table import LEDGER_TTL_S  # noqa: PLC0415
    from crcr.app.dispatch import DispatchDeps  # noqa: PLC0415
    from crcr.domain.retry import RetryPolicy  # noqa: PLC0415

    settings.require("state_table", "dispatch_queue_url", "dispatch_dlq_url", "callback_url", "allowlist")
    table = str(settings.state_table)
    github = _github(settings)
    metrics, clock = PowertoolsMetrics(), SystemClock()
    return DispatchDeps(
        github=github,
        door=_door(settings, metrics, clock, _allowlist(settings, metrics, clock)),
        runs=GitHubDispatchRuns(github),
        run_settle_s=settings.run_settle_s,
        workflows=GitHubWorkflows(github),
        bound_runs=DynamoRuns(aws_client("dynamodb"), table) if settings.runs_queue_url else None,
        run_timeout_s=settings.run_timeout_s,
        ledger=DynamoLedger(
            aws_client("dynamodb"),
            table,
            start_timeout_s=settings.start_timeout_s,
            run_create_timeout_s=settings.run_create_timeout_s if settings.runs_queue_url else None,
        ),
        prs=DynamoPullRequests(aws_client("dynamodb"), table),
        queue=SqsDispatchQueue(aws_client("sqs"), str(settings.dispatch_queue_url), str(settings.dispatch_dlq_url)),
        pacer=DynamoPacer(aws_client("dynamodb"), table, rates=_write_rates(settings)),
        signer=_tickets(settings),
        metrics=metrics,
        clock=clock,
        callback_url=str(settings.callback_url),
        # A ticket lives as long as its ledger row, so re-runs days later still report (the OIDC token,
        # not the ticket's age, proves which run is calling).
        ticket_ttl_s=LEDGER_TTL_S,
        policy=RetryPolicy(base_s=settings.retry_base_s),
        # A claim must outlast one GitHub call (connect + read timeout) so a live worker is never doubled.
        lease_s=settings.github_timeout_s + 15.0,
        send_s=settings.github_timeout_s + 3.05,
        buildkite=_buildkite_dispatch(settings),
    )


def _buildkite_dispatch(settings: Settings) -> BuildkiteDeps | None:
    """Buildkite builds, when an API token is configured; without one Buildkite repositories dead-letter
    with a reason naming CRCR_BUILDKITE_API_TOKEN (GitHub dispatches are unaffected)."""
    if settings.buildkite_api_token is None:
        return None
    from crcr.adapters.buildkite import BuildkiteClient  # noqa: PLC0415
    from crcr.adapters.pacer import DynamoPacer  # noqa: PLC0415
    from crcr.app.dispatch import BuildkiteDeps  # noqa: PLC0415
    from crcr.domain.pacing import BUILDKITE_RATES  # noqa: PLC0415

    timeout = settings.buildkite_timeout_s
    return BuildkiteDeps(
        builds=BuildkiteClient(
            settings.buildkite_api_url, settings.secret("buildkite_api_token"), read_timeout_s=timeout
        ),
        # Buildkite's limits are per organization (and per token user within it): one cell per organization.
        pacer=DynamoPacer(aws_client("dynamodb"), str(settings.state_table), rates=BUILDKITE_RATES, cell="BUILDKITE"),
        # The claim covers a lookup and a create, each up to connect (3.05 s) + read timeout.
        lease_s=2 * (timeout + 3.05) + 15.0,
        call_s=timeout + 3.05,
        # A request the relay gave up on gets three more timeouts to finish before the relay looks for its build.
        settle_s=3 * timeout,
    )


def build_callback_deps(settings: Settings) -> CallbackDeps:
    from crcr.adapters.branch import DynamoBranch  # noqa: PLC0415
    from crcr.adapters.github import UpstreamCommitLookup  # noqa: PLC0415
    from crcr.adapters.hud_keys import DynamoHudKeys  # noqa: PLC0415
    from crcr.adapters.ledger import DynamoLedger  # noqa: PLC0415
    from crcr.adapters.oidc import IssuerRouter, OidcVerifier  # noqa: PLC0415
    from crcr.adapters.rate_limits import DynamoRateLimiter  # noqa: PLC0415
    from crcr.adapters.refusals import DynamoRefusals  # noqa: PLC0415
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415
    from crcr.app.callback import CallbackDeps  # noqa: PLC0415

    settings.require("state_table", "results_table", "allowlist")
    metrics = PowertoolsMetrics()
    clock = SystemClock()
    return CallbackDeps(
        # Issuers are fixed: GitHub Actions' and Buildkite's agents'; each token is judged by its issuer's rules.
        tokens=IssuerRouter(
            {
                "github": OidcVerifier(settings.oidc_issuer, settings.oidc_audiences, clock.now),
                "buildkite": OidcVerifier(settings.buildkite_oidc_issuer, settings.oidc_audiences, clock.now),
            }
        ),
        providers=_providers(settings, metrics, clock),
        tickets=_tickets(settings),
        ledger=DynamoLedger(aws_client("dynamodb"), str(settings.state_table)),
        allowlist=_allowlist(settings, metrics, clock),
        results=DynamoResults(aws_client("dynamodb"), str(settings.results_table), settings.run_timeout_s),
        hud_keys=DynamoHudKeys(aws_client("dynamodb"), str(settings.state_table)),
        limiter=DynamoRateLimiter(aws_client("dynamodb"), str(settings.state_table), settings.callback_rate_per_min),
        metrics=metrics,
        clock=clock,
        upstream=settings.upstream_repo,
        commits=UpstreamCommitLookup(_github(settings), settings.upstream_repo) if settings.github_app_id else None,
        max_jobs_per_dispatch=settings.max_jobs_per_dispatch,
        known_commits=DynamoBranch(aws_client("dynamodb"), str(settings.state_table)),
        lookups=DynamoRateLimiter(
            aws_client("dynamodb"),
            str(settings.state_table),
            settings.commit_lookups_per_hour,
            window_s=3600,
            budget="LOOKUP",
        ),
        refusals=DynamoRefusals(aws_client("dynamodb"), str(settings.state_table)),
        pages=_refusal_pages(settings, metrics, clock),
    )


class _OnFirstUse:
    """An AWS client made when first called: the callback writes a HUD page only for a refused downstream, so its
    cold start does not pay for an S3 client."""

    def __init__(self, service: str) -> None:
        self._service = service

    def __getattr__(self, name: str) -> Any:
        return getattr(aws_client(self._service), name)


def _refusal_pages(settings: Settings, metrics: PowertoolsMetrics, clock: SystemClock) -> SummaryDeps | None:
    if not settings.hud_bucket:
        return None
    from crcr.adapters.s3 import S3HudDocs  # noqa: PLC0415
    from crcr.app.summaries import SummaryDeps  # noqa: PLC0415

    return SummaryDeps(docs=S3HudDocs(_OnFirstUse("s3"), settings.hud_bucket), metrics=metrics, clock=clock)


def _checks_queue(settings: Settings) -> SqsChecksQueue | None:
    """Check runs need the App (a checks:write token for the upstream) and the queue; without them they are off."""
    if not (settings.github_app_id and settings.checks_queue_url and settings.checks_dlq_url):
        return None
    from crcr.adapters.sqs import SqsChecksQueue  # noqa: PLC0415

    return SqsChecksQueue(aws_client("sqs"), str(settings.checks_queue_url), str(settings.checks_dlq_url))


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
    queue = _checks_queue(settings)
    assert queue is not None
    metrics = PowertoolsMetrics()
    clock = SystemClock()
    table = str(settings.state_table)
    checks = DynamoCheckRuns(aws_client("dynamodb"), table)
    prs = DynamoPullRequests(aws_client("dynamodb"), table)
    reruns = DynamoReruns(aws_client("dynamodb"), table)
    # One pacer for every content-creating call: check runs and the PR comment spend the upstream
    # installation's budget, re-runs the downstream's (shared with its dispatches).
    pacer = DynamoPacer(aws_client("dynamodb"), str(settings.state_table), rates=_write_rates(settings))
    from crcr.domain.pacing import share_of  # noqa: PLC0415

    # Each downstream's part of that budget, for the check runs its jobs cause (a cell per upstream and repository).
    share = (
        DynamoPacer(
            aws_client("dynamodb"),
            str(settings.state_table),
            rates=share_of(_write_rates(settings), settings.downstream_write_share),
            cell="SHARE",
        )
        if settings.downstream_write_share < 1
        else None
    )
    allowlist = _allowlist(settings, metrics, clock)
    door = _door(settings, metrics, clock, allowlist)
    results = _results(settings)
    comment, notices = None, None
    if settings.pr_comment == "on":
        from crcr.app.regression_notices import NoticeDeps  # noqa: PLC0415

        conversation = GitHubIssueComments(_github(settings))
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
        api=GitHubCheckRuns(_github(settings)),
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
            github=GitHubReruns(_github(settings)), store=checks, allowlist=allowlist, metrics=metrics, door=door
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
        reactions=GitHubCommands(_github(settings)),
    )
    return built if writers else replace(built, reruns=None, retries=None, reactions=None)


def _rerun_deps(
    settings: Settings, allowlist: CachedAllowlist, metrics: PowertoolsMetrics, door: Outbound
) -> RerunDeps | None:
    if not (settings.github_app_id and settings.state_table):
        return None
    from crcr.adapters.check_runs import DynamoCheckRuns  # noqa: PLC0415
    from crcr.adapters.github import GitHubReruns  # noqa: PLC0415
    from crcr.app.rerun import RerunDeps  # noqa: PLC0415

    return RerunDeps(
        github=GitHubReruns(_github(settings)),
        store=DynamoCheckRuns(aws_client("dynamodb"), str(settings.state_table)),
        allowlist=allowlist,
        metrics=metrics,
        door=door,
    )


def _results(settings: Settings) -> DynamoResults:
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415

    return DynamoResults(aws_client("dynamodb"), str(settings.results_table), settings.run_timeout_s)


def build_report_deps(settings: Settings) -> ReportDeps:
    from crcr.adapters.hud import HudClient  # noqa: PLC0415
    from crcr.adapters.stream import SqsDeadLetters  # noqa: PLC0415
    from crcr.app.report import ReportDeps  # noqa: PLC0415

    settings.require("reporter_dlq_url")
    hud = HudClient(settings.hud_url, settings.secret("hud_token")) if settings.hud_url else None
    metrics = PowertoolsMetrics()
    checks = _checks_queue(settings)
    known = _known_failures(settings, metrics)
    summaries = _summaries(settings, metrics)
    clock = SystemClock()
    allowlist = _allowlist(settings, metrics, clock) if settings.allowlist else None
    return ReportDeps(
        hud=hud,
        dead_letters=SqsDeadLetters(aws_client("sqs"), str(settings.reporter_dlq_url)),
        metrics=metrics,
        door=_door(settings, metrics, clock, allowlist),
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
                _github(settings), source.removeprefix(SEARCHED), metrics, SystemClock().now,
                _disable_authors(settings, metrics), _search_budget(settings),
            )  # fmt: skip
            sources.append(kind(fetch, metrics, SystemClock().now, 1800.0, on_error=logger.warning).current)
        elif source:
            fetch = fetcher_for(source, lambda: aws_client("s3"), lambda: _github(settings))
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
    return DisableAuthors(GitHubAuthorPermissions(_github(settings)), kept, metrics, SystemClock().now, bots)


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
    results = _results(settings)
    return RegressionDeps(
        results=results,
        branch=DynamoBranch(ddb, str(settings.state_table)),
        store=DynamoRegressions(ddb, str(settings.state_table)),
        metrics=metrics,
        clock=clock,
        docs=summaries,
        notices=checks if settings.pr_comment == "on" else None,
        history=GitHubBranchHistory(_github(settings)) if settings.github_app_id else None,
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

    results = _results(settings)
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
    from crcr.adapters.s3 import S3HudDocs  # noqa: PLC0415
    from crcr.app.summaries import SummaryDeps  # noqa: PLC0415

    return SummaryDeps(
        docs=S3HudDocs(aws_client("s3"), settings.hud_bucket),
        metrics=metrics,
        clock=SystemClock(),
        health=_page_health(settings),
        health_refresh_s=settings.health_refresh_s,
    )


def _pages(settings: Settings, metrics: PowertoolsMetrics) -> SummaryDeps | None:
    """The HUD pages' documents as the planner notes its decisions in them (no health section)."""
    if not settings.hud_bucket:
        return None
    from crcr.adapters.s3 import S3HudDocs  # noqa: PLC0415
    from crcr.app.summaries import SummaryDeps  # noqa: PLC0415

    return SummaryDeps(docs=S3HudDocs(aws_client("s3"), settings.hud_bucket), metrics=metrics, clock=SystemClock())


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
    results, clock = _results(settings), SystemClock()

    def health(job: JobRecord) -> dict[str, Any] | None:
        if job.level not in (2, 3, 4):
            return None
        return page_health(results, policy, clock, job.repo, Level(job.level))

    return health


def build_hud_reader(settings: Settings) -> S3HudDocs | None:
    """The HUD pages' documents, read-only; None (every page empty) when the stack has no HUD bucket."""
    if not settings.hud_bucket:
        return None
    from crcr.adapters.s3 import S3HudDocs  # noqa: PLC0415

    return S3HudDocs(aws_client("s3"), settings.hud_bucket)


def build_hud_pages(
    settings: Settings,
) -> tuple[S3HudDocs | None, Callable[[str], dict[str, Any] | None] | None, Callable[[], dict[str, Any]] | None]:
    """The HUD pages' documents, what composes the PR and repository pages when read (their commits' documents, the
    results table's newest rows of the repository), and what reads a shadow relay's newest decisions."""
    shadow = None
    if settings.state_table:
        from crcr.adapters.shadow import DynamoShadow  # noqa: PLC0415
        from crcr.app.shadow import shadow_page  # noqa: PLC0415

        log = DynamoShadow(aws_client("dynamodb"), str(settings.state_table))
        shadow = functools.partial(shadow_page, log, settings.upstream_repo, settings.mode)
    docs = build_hud_reader(settings)
    if docs is None:
        return None, None, shadow
    from crcr.app.page_compose import composer  # noqa: PLC0415

    return docs, composer(docs, _results(settings) if settings.results_table else None), shadow


def build_runs_deps(settings: Settings) -> RunsDeps:
    """The runs worker: the ledger's index by dispatch id, the bound runs, the results table and the HUD keys, and
    GitHub's Actions API with each downstream's own installation (actions: read)."""
    from crcr.adapters.dispatch_runs import GitHubDispatchRuns  # noqa: PLC0415
    from crcr.adapters.hud_keys import DynamoHudKeys  # noqa: PLC0415
    from crcr.adapters.ledger import DynamoLedger  # noqa: PLC0415
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415
    from crcr.adapters.runs import DynamoRuns  # noqa: PLC0415
    from crcr.app.runs import RunsDeps  # noqa: PLC0415

    settings.require("state_table", "results_table", "github_app_id", "allowlist")
    ddb = aws_client("dynamodb")
    metrics, clock = PowertoolsMetrics(), SystemClock()
    return RunsDeps(
        ledger=DynamoLedger(ddb, str(settings.state_table)),
        runs=DynamoRuns(ddb, str(settings.state_table)),
        github=GitHubDispatchRuns(_github(settings)),
        results=DynamoResults(ddb, str(settings.results_table), settings.run_timeout_s),
        hud_keys=DynamoHudKeys(ddb, str(settings.state_table)),
        metrics=metrics,
        clock=clock,
        allowlist=_allowlist(settings, metrics, clock),
        run_timeout_s=settings.run_timeout_s,
        max_jobs_per_dispatch=settings.max_jobs_per_dispatch,
    )


def build_sweep_deps(settings: Settings) -> SweepDeps:
    from crcr.adapters.ledger import DynamoLedger  # noqa: PLC0415
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415
    from crcr.app.sweep import GitHubRecord, SweepDeps  # noqa: PLC0415

    settings.require("state_table", "results_table")
    record = None
    if settings.github_app_id and settings.runs_queue_url:
        runs = build_runs_deps(settings)
        record = GitHubRecord(
            runs=runs,
            finder=runs.github,  # type: ignore[arg-type]
            start_timeout_s=settings.start_timeout_s,
            run_create_timeout_s=settings.run_create_timeout_s,
            recheck_s=min(3600.0, float(settings.run_timeout_s)),
            retry_s=min(300.0, float(settings.run_create_timeout_s)),
        )
    return SweepDeps(
        starts=DynamoLedger(aws_client("dynamodb"), str(settings.state_table)),
        runs=DynamoResults(aws_client("dynamodb"), str(settings.results_table), settings.run_timeout_s),
        metrics=PowertoolsMetrics(),
        clock=SystemClock(),
        github=record,
        buildkite=_buildkite_record(settings, record.runs if record is not None else None),
    )


def _buildkite_record(settings: Settings, runs: RunsDeps | None) -> BuildkiteRecord | None:
    """Buildkite's record of the builds the relay created, when an API token is configured (read_builds)."""
    if settings.buildkite_api_token is None:
        return None
    from crcr.adapters.buildkite import BuildkiteClient  # noqa: PLC0415
    from crcr.adapters.hud_keys import DynamoHudKeys  # noqa: PLC0415
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415
    from crcr.app.runs import Recording  # noqa: PLC0415
    from crcr.app.sweep import BuildkiteRecord  # noqa: PLC0415

    ddb = aws_client("dynamodb")
    recording = runs or Recording(
        results=DynamoResults(ddb, str(settings.results_table), settings.run_timeout_s),
        hud_keys=DynamoHudKeys(ddb, str(settings.state_table)),
        metrics=PowertoolsMetrics(),
        clock=SystemClock(),
        max_jobs_per_dispatch=settings.max_jobs_per_dispatch,
    )
    return BuildkiteRecord(
        builds=BuildkiteClient(
            settings.buildkite_api_url,
            settings.secret("buildkite_api_token"),
            read_timeout_s=settings.buildkite_timeout_s,
        ),
        recording=recording,
        start_timeout_s=settings.start_timeout_s,
        run_timeout_s=settings.run_timeout_s,
        allowlist=runs.allowlist if runs is not None else _allowlist(settings, PowertoolsMetrics(), SystemClock()),
        recheck_s=min(3600.0, float(settings.run_timeout_s)),
        retry_s=min(300.0, float(settings.start_timeout_s)),
    )


def build_reconcile_deps(settings: Settings) -> ReconcileDeps:
    """The missed-webhook reconciler: the App's delivery list and redeliveries (its JWT), the webhook's records and
    the reconciler's rows in the state table, and a pacing cell of its own for the App's writes."""
    import time  # noqa: PLC0415

    from crcr.adapters.github import GitHubHookDeliveries  # noqa: PLC0415
    from crcr.adapters.pacer import DynamoPacer  # noqa: PLC0415
    from crcr.adapters.redeliveries import DynamoRedeliveries  # noqa: PLC0415
    from crcr.app.outbound import Outbound  # noqa: PLC0415
    from crcr.app.reconcile import ReconcileDeps  # noqa: PLC0415
    from crcr.domain.pacing import REDELIVERY_RATES  # noqa: PLC0415

    settings.require("state_table", "github_app_id")
    table = str(settings.state_table)
    return ReconcileDeps(
        hooks=GitHubHookDeliveries(_github(settings), settings.upstream_repo),
        store=DynamoRedeliveries(aws_client("dynamodb"), table),
        pacer=DynamoPacer(aws_client("dynamodb"), table, rates=REDELIVERY_RATES, cell="REDELIVER"),
        metrics=PowertoolsMetrics(),
        clock=SystemClock(),
        sleep=time.sleep,
        # Redeliveries are the relay's own writes (let through in shadow too): no allowlist, no shadow log needed.
        door=Outbound(settings.mode, None, None, PowertoolsMetrics(), SystemClock(), settings.upstream_repo),
        lookback_s=float(settings.reconcile_lookback_s),
        # One POST: connect + read timeout, and room to spare.
        lease_s=settings.github_timeout_s + 15.0,
    )


def build_level_deps(settings: Settings) -> LevelDeps:
    """LevelFunction: level status from the results' by_repo index, published in the HUD bucket; demotion PRs in
    the allowlist's repository when the allowlist is read from GitHub (`github:owner/repo/path@base`)."""
    from crcr.adapters.allowlist_pulls import GitHubAllowlistPulls  # noqa: PLC0415
    from crcr.adapters.allowlist_source import parse_allowlist  # noqa: PLC0415
    from crcr.adapters.dispatch_runs import GitHubDispatchRuns  # noqa: PLC0415
    from crcr.adapters.levels import DynamoLevels  # noqa: PLC0415
    from crcr.adapters.s3 import S3HudDocs  # noqa: PLC0415
    from crcr.app.levels import LevelDeps  # noqa: PLC0415

    settings.require("state_table", "results_table", "allowlist", "hud_bucket")
    metrics = PowertoolsMetrics()
    clock = SystemClock()
    results = _results(settings)
    source = str(settings.allowlist)
    pulls = None
    if source.startswith("github:") and settings.github_app_id:
        spec, _, base = source.removeprefix("github:").rpartition("@")
        owner, name, path = spec.split("/", 2)
        pulls = GitHubAllowlistPulls(_github(settings), f"{owner}/{name}", path, base)
    allowlist = _allowlist(settings, metrics, clock)
    return LevelDeps(
        allowlist=allowlist,
        jobs=results,
        history=DynamoLevels(aws_client("dynamodb"), str(settings.state_table), results.first_l2_job),
        demotions=DynamoLevels(aws_client("dynamodb"), str(settings.state_table)),
        docs=S3HudDocs(aws_client("s3"), str(settings.hud_bucket)),
        metrics=metrics,
        clock=clock,
        parse=parse_allowlist,
        door=_door(settings, metrics, clock, allowlist),
        pulls=pulls,
        runs=GitHubDispatchRuns(_github(settings)) if settings.github_app_id else None,
        hud_url=f"{settings.callback_url.rsplit('/callback', 1)[0]}/hud" if settings.callback_url else None,
    )


def build_health_deps(settings: Settings) -> HealthDeps:
    """`crcr health`: the allowlist read once (its errors surface), jobs from the results table's by_repo index."""
    from crcr.adapters.allowlist_source import OneShotAllowlist, fetcher_for  # noqa: PLC0415
    from crcr.app.health import HealthDeps  # noqa: PLC0415
    from crcr.domain.health import HealthConfigError, parse_policy  # noqa: PLC0415

    settings.require("results_table", "allowlist")
    try:
        policy = parse_policy(settings.health_thresholds)
    except HealthConfigError as exc:
        raise ConfigError(f"invalid configuration: CRCR_HEALTH_THRESHOLDS: {exc}") from exc
    fetch = fetcher_for(str(settings.allowlist), lambda: aws_client("s3"), lambda: _github(settings))
    from crcr.adapters.levels import DynamoLevels  # noqa: PLC0415

    history = DynamoLevels(aws_client("dynamodb"), str(settings.state_table)) if settings.state_table else None
    return HealthDeps(
        allowlist=OneShotAllowlist(fetch), jobs=_results(settings), clock=SystemClock(), policy=policy, history=history
    )


def build_onboard_github(settings: Settings) -> RepoLookup:
    """`crcr onboard`: the App's client, for the installation and a down-scoped token that lists the repository."""
    settings.require("github_app_id")
    settings.secret("github_app_private_key")
    try:
        return _github(settings)
    except ValueError as exc:  # the key does not parse, or is not an RSA key
        raise ConfigError(f"CRCR_GITHUB_APP_PRIVATE_KEY is not the App's private key: {exc}") from None


def build_jwks(settings: Settings) -> Ed25519Tickets:
    """The ticket keys whose public halves the JWKS serves (the current key, then the previous one)."""
    return _tickets(settings)


def build_export_deps(settings: Settings) -> ExportDeps:
    """The results table's scheduled export: DynamoDB's exports into the exports bucket, the last one's end kept in
    the state table."""
    from crcr.adapters.scheduled_export import DynamoExportMarks, DynamoTableExports  # noqa: PLC0415
    from crcr.app.scheduled_export import ExportDeps  # noqa: PLC0415

    settings.require("results_table", "state_table", "exports_bucket")
    ddb = aws_client("dynamodb")
    return ExportDeps(
        exports=DynamoTableExports(ddb, str(settings.results_table), str(settings.exports_bucket)),
        marks=DynamoExportMarks(ddb, str(settings.state_table), str(settings.results_table)),
        metrics=PowertoolsMetrics(),
        clock=SystemClock(),
    )


def build_shadow_reader(settings: Settings) -> tuple[str, ShadowLog, S3HudDocs | None]:
    """`crcr shadow compare`: the upstream, the state table's shadow decisions, and the HUD bucket it may publish to."""
    from crcr.adapters.shadow import DynamoShadow  # noqa: PLC0415

    settings.require("state_table")
    log = DynamoShadow(aws_client("dynamodb"), str(settings.state_table))
    return settings.upstream_repo, log, build_hud_reader(settings)


def build_regression_store(settings: Settings) -> tuple[str, RegressionStore]:
    """`crcr regressions`: the upstream and the state table's regressions."""
    from crcr.adapters.regressions import DynamoRegressions  # noqa: PLC0415

    settings.require("state_table")
    return settings.upstream_repo, DynamoRegressions(aws_client("dynamodb"), str(settings.state_table))
