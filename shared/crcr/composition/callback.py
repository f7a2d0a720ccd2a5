"""CallbackFunction's and JwksFunction's dependencies: the OIDC issuers, the tickets, the ledger, the results table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics
from crcr.composition.base import OnFirstUse, aws_client, ci_providers_map, github_app, load_allowlist, ticket_keys
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.adapters.tickets import Ed25519Tickets
    from crcr.app.callback import CallbackDeps
    from crcr.app.summaries import SummaryDeps


def build_callback_deps(settings: Settings) -> CallbackDeps:
    from crcr.adapters.branch import DynamoBranch  # noqa: PLC0415
    from crcr.adapters.github import UpstreamCommitLookup  # noqa: PLC0415
    from crcr.adapters.ledger import DynamoLedger  # noqa: PLC0415
    from crcr.adapters.oidc import IssuerRouter, OidcVerifier  # noqa: PLC0415
    from crcr.adapters.rate_limits import DynamoRateLimiter  # noqa: PLC0415
    from crcr.adapters.refusals import DynamoRefusals  # noqa: PLC0415
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415
    from crcr.adapters.torchci_keys import DynamoTorchciKeys  # noqa: PLC0415
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
        providers=ci_providers_map(settings, metrics, clock),
        tickets=ticket_keys(settings),
        ledger=DynamoLedger(aws_client("dynamodb"), str(settings.state_table)),
        allowlist=load_allowlist(settings, metrics, clock),
        results=DynamoResults(aws_client("dynamodb"), str(settings.results_table), settings.run_timeout_s),
        torchci_keys=DynamoTorchciKeys(aws_client("dynamodb"), str(settings.state_table)),
        limiter=DynamoRateLimiter(aws_client("dynamodb"), str(settings.state_table), settings.callback_rate_per_min),
        metrics=metrics,
        clock=clock,
        upstream=settings.upstream_repo,
        commits=UpstreamCommitLookup(github_app(settings), settings.upstream_repo) if settings.github_app_id else None,
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


def _refusal_pages(settings: Settings, metrics: PowertoolsMetrics, clock: SystemClock) -> SummaryDeps | None:
    if not settings.hud_bucket:
        return None
    from crcr.adapters.s3 import S3PageDocs  # noqa: PLC0415
    from crcr.app.summaries import SummaryDeps  # noqa: PLC0415

    return SummaryDeps(docs=S3PageDocs(OnFirstUse("s3"), settings.hud_bucket), metrics=metrics, clock=clock)


def build_jwks(settings: Settings) -> Ed25519Tickets:
    """The ticket keys whose public halves the JWKS serves (the current key, then the previous one)."""
    return ticket_keys(settings)
