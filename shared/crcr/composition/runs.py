"""RunsFunction's and SweeperFunction's dependencies: GitHub's and Buildkite's record of the runs the relay started."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics
from crcr.composition.base import aws_client, github_app, load_allowlist
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.app.runs import RunsDeps
    from crcr.app.sweep import BuildkiteRecord, SweepDeps


def build_runs_deps(settings: Settings) -> RunsDeps:
    """The runs worker: the ledger's index by dispatch id, the bound runs, the results table and the HUD keys, and
    GitHub's Actions API with each downstream's own installation (actions: read)."""
    from crcr.adapters.dispatch_runs import GitHubDispatchRuns  # noqa: PLC0415
    from crcr.adapters.ledger import DynamoLedger  # noqa: PLC0415
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415
    from crcr.adapters.runs import DynamoRuns  # noqa: PLC0415
    from crcr.adapters.torchci_keys import DynamoTorchciKeys  # noqa: PLC0415
    from crcr.app.runs import RunsDeps  # noqa: PLC0415

    settings.require("state_table", "results_table", "github_app_id", "allowlist")
    ddb = aws_client("dynamodb")
    metrics, clock = PowertoolsMetrics(), SystemClock()
    return RunsDeps(
        ledger=DynamoLedger(ddb, str(settings.state_table)),
        runs=DynamoRuns(ddb, str(settings.state_table)),
        github=GitHubDispatchRuns(github_app(settings)),
        results=DynamoResults(ddb, str(settings.results_table), settings.run_timeout_s),
        torchci_keys=DynamoTorchciKeys(ddb, str(settings.state_table)),
        metrics=metrics,
        clock=clock,
        allowlist=load_allowlist(settings, metrics, clock),
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
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415
    from crcr.adapters.torchci_keys import DynamoTorchciKeys  # noqa: PLC0415
    from crcr.app.runs import Recording  # noqa: PLC0415
    from crcr.app.sweep import BuildkiteRecord  # noqa: PLC0415

    ddb = aws_client("dynamodb")
    recording = runs or Recording(
        results=DynamoResults(ddb, str(settings.results_table), settings.run_timeout_s),
        torchci_keys=DynamoTorchciKeys(ddb, str(settings.state_table)),
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
        allowlist=runs.allowlist if runs is not None else load_allowlist(settings, PowertoolsMetrics(), SystemClock()),
        recheck_s=min(3600.0, float(settings.run_timeout_s)),
        retry_s=min(300.0, float(settings.start_timeout_s)),
    )
