"""What every function's composition shares: AWS clients, settings and secrets, the App, the allowlist, the door."""

from __future__ import annotations

import functools
import gc
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics, logger
from crcr.settings import ConfigError, Settings

if TYPE_CHECKING:
    from crcr.adapters.allowlist_source import CachedAllowlist, CachedProviders
    from crcr.adapters.github import GitHubApp
    from crcr.adapters.results import DynamoResults
    from crcr.adapters.sqs import SqsChecksQueue
    from crcr.adapters.tickets import Ed25519Tickets
    from crcr.app.outbound import Outbound
    from crcr.app.rerun import RerunDeps
    from crcr.app.summaries import SummaryDeps
    from crcr.domain.pacing import Rate


def aws_client(service: str) -> Any:
    """One boto3 client per service and endpoint, built once per cold start and kept (AWS_ENDPOINT_URL points boto3
    at the local stack). botocore brings what the relay relies on: the credential chain, SigV4, standard-mode
    retries (throttling and transient errors, its retry quota, `x-amz-retry-after`), the body checksums, and the
    `X-Amzn-Trace-Id` header that links a traced invocation's calls in X-Ray."""
    return client_for(service, os.environ.get("AWS_ENDPOINT_URL", ""))


# The most threads of one batch calling at once (functions/dispatch/handler.py runs a batch's 10 records side by
# side): each gets a kept-alive connection of its own instead of waiting for one or opening one to throw away.
POOL_CONNECTIONS = 10


@functools.cache
def client_for(service: str, endpoint: str) -> Any:
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
def secrets_provider(endpoint: str) -> Any:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider  # noqa: PLC0415

    return SecretsProvider(boto3_client=aws_client("secretsmanager"))


def secret_doc(settings: Settings, *, force: bool = False) -> dict[str, Any]:
    """The CRCR_SECRETS_ARN document, through Powertools' cache: read again once it is older than
    CRCR_SECRETS_MAX_AGE_S, or now when `force`d. Parsed once per value read (each dispatch asks for its ticket
    key, and the document holds the App's private key: parsing it every time was a few percent of a dispatch)."""
    arn = str(settings.secrets_arn)
    provider = secrets_provider(os.environ.get("AWS_ENDPOINT_URL", ""))
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


def freeze_gc(built: _Built) -> _Built:
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
        settings = settings.with_secrets(secret_doc(settings))
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
        doc = secret_doc(settings, force=force)
        now_current = str(doc.get("ticket_signing_key") or "") if "ticket_signing_key" in live else current
        if not now_current:
            raise ConfigError("missing secret: key 'ticket_signing_key' in CRCR_SECRETS_ARN")
        now_previous = (
            (str(doc.get("ticket_previous_key") or "") or None) if "ticket_previous_key" in live else previous
        )
        return now_current, now_previous

    return read


def ticket_keys(settings: Settings) -> Ed25519Tickets:
    from crcr.adapters.tickets import Ed25519Tickets  # noqa: PLC0415

    return Ed25519Tickets(_ticket_key_source(settings), on_error=logger.error)


@functools.cache  # one App client (key, JWT and token caches) per function, however many adapters use it
def github_app(settings: Settings) -> GitHubApp:
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


def write_rates(settings: Settings) -> tuple[Rate, ...]:
    """Each installation's budget of content-creating calls: GitHub.com's, unless configured otherwise."""
    from crcr.domain.pacing import CONTENT_RATES, parse_rates  # noqa: PLC0415

    return parse_rates(settings.github_write_rates) if settings.github_write_rates else CONTENT_RATES


def load_allowlist(settings: Settings, metrics: PowertoolsMetrics, clock: SystemClock) -> CachedAllowlist:
    from crcr.adapters import preflight  # noqa: PLC0415
    from crcr.adapters.allowlist_source import CachedAllowlist, fetcher_for  # noqa: PLC0415

    # A misspelt path, invalid YAML, an empty list or an unmapped Buildkite downstream fails the cold start, naming
    # the variable and the line, instead of every message after it (the keys are checked where they are loaded).
    preflight.check(settings, with_keys=False)
    fetch = fetcher_for(str(settings.allowlist), lambda: aws_client("s3"), lambda: github_app(settings))
    return CachedAllowlist(fetch, metrics, clock.now, settings.allowlist_refresh_s, on_error=logger.error)


def outbound_door(
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


def ci_providers_map(settings: Settings, metrics: PowertoolsMetrics, clock: SystemClock) -> CachedProviders | None:
    """PyTorch's ci_providers.yml (Buildkite pipelines -> repositories), reloaded like the allowlist."""
    if not settings.ci_providers:
        return None
    from crcr.adapters.allowlist_source import CachedProviders, fetcher_for  # noqa: PLC0415

    fetch = fetcher_for(str(settings.ci_providers), lambda: aws_client("s3"), lambda: github_app(settings))
    return CachedProviders(fetch, metrics, clock.now, settings.allowlist_refresh_s, on_error=logger.error)


class OnFirstUse:
    """An AWS client made when first called: the callback writes a HUD page only for a refused downstream, so its
    cold start does not pay for an S3 client."""

    def __init__(self, service: str) -> None:
        self._service = service

    def __getattr__(self, name: str) -> Any:
        return getattr(aws_client(self._service), name)


def sqs_checks_queue(settings: Settings) -> SqsChecksQueue | None:
    """Check runs need the App (a checks:write token for the upstream) and the queue; without them they are off."""
    if not (settings.github_app_id and settings.checks_queue_url and settings.checks_dlq_url):
        return None
    from crcr.adapters.sqs import SqsChecksQueue  # noqa: PLC0415

    return SqsChecksQueue(aws_client("sqs"), str(settings.checks_queue_url), str(settings.checks_dlq_url))


def rerun_deps(
    settings: Settings, allowlist: CachedAllowlist, metrics: PowertoolsMetrics, door: Outbound
) -> RerunDeps | None:
    if not (settings.github_app_id and settings.state_table):
        return None
    from crcr.adapters.check_runs import DynamoCheckRuns  # noqa: PLC0415
    from crcr.adapters.github import GitHubReruns  # noqa: PLC0415
    from crcr.app.rerun import RerunDeps  # noqa: PLC0415

    return RerunDeps(
        github=GitHubReruns(github_app(settings)),
        store=DynamoCheckRuns(aws_client("dynamodb"), str(settings.state_table)),
        allowlist=allowlist,
        metrics=metrics,
        door=door,
    )


def results_store(settings: Settings) -> DynamoResults:
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415

    return DynamoResults(aws_client("dynamodb"), str(settings.results_table), settings.run_timeout_s)


def page_docs(settings: Settings, metrics: PowertoolsMetrics) -> SummaryDeps | None:
    """The HUD pages' documents as the planner notes its decisions in them (no health section)."""
    if not settings.hud_bucket:
        return None
    from crcr.adapters.s3 import S3PageDocs  # noqa: PLC0415
    from crcr.app.summaries import SummaryDeps  # noqa: PLC0415

    return SummaryDeps(docs=S3PageDocs(aws_client("s3"), settings.hud_bucket), metrics=metrics, clock=SystemClock())
