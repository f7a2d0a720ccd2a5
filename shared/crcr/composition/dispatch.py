"""DispatchFunction's dependencies: the App, the ledger, the pacer, the ticket signer, Buildkite when configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics
from crcr.composition.base import aws_client, github_app, load_allowlist, outbound_door, ticket_keys, write_rates
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.app.dispatch import BuildkiteDeps, DispatchDeps


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
    github = github_app(settings)
    metrics, clock = PowertoolsMetrics(), SystemClock()
    return DispatchDeps(
        github=github,
        door=outbound_door(settings, metrics, clock, load_allowlist(settings, metrics, clock)),
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
        pacer=DynamoPacer(aws_client("dynamodb"), table, rates=write_rates(settings)),
        signer=ticket_keys(settings),
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
