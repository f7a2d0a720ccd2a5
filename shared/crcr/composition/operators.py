"""The operator commands' dependencies (`crcr health`, `crcr onboard`, `crcr shadow compare`, `crcr regressions`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crcr.adapters.clock import SystemClock
from crcr.composition.base import aws_client, github_app, results_store
from crcr.composition.pages import build_page_reader
from crcr.settings import ConfigError, Settings

if TYPE_CHECKING:
    from crcr.adapters.s3 import S3PageDocs
    from crcr.app.health import HealthDeps
    from crcr.app.onboard import RepoLookup
    from crcr.app.ports.regressions import RegressionStore
    from crcr.app.ports.shadow import ShadowLog


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
    fetch = fetcher_for(str(settings.allowlist), lambda: aws_client("s3"), lambda: github_app(settings))
    from crcr.adapters.levels import DynamoLevels  # noqa: PLC0415

    history = DynamoLevels(aws_client("dynamodb"), str(settings.state_table)) if settings.state_table else None
    return HealthDeps(
        allowlist=OneShotAllowlist(fetch),
        jobs=results_store(settings),
        clock=SystemClock(),
        policy=policy,
        history=history,
    )


def build_onboard_github(settings: Settings) -> RepoLookup:
    """`crcr onboard`: the App's client, for the installation and a down-scoped token that lists the repository."""
    settings.require("github_app_id")
    settings.secret("github_app_private_key")
    try:
        return github_app(settings)
    except ValueError as exc:  # the key does not parse, or is not an RSA key
        raise ConfigError(f"CRCR_GITHUB_APP_PRIVATE_KEY is not the App's private key: {exc}") from None


def build_shadow_reader(settings: Settings) -> tuple[str, ShadowLog, S3PageDocs | None]:
    """`crcr shadow compare`: the upstream, the state table's shadow decisions, and the HUD bucket it may publish to."""
    from crcr.adapters.shadow import DynamoShadow  # noqa: PLC0415

    settings.require("state_table")
    log = DynamoShadow(aws_client("dynamodb"), str(settings.state_table))
    return settings.upstream_repo, log, build_page_reader(settings)


def build_regression_store(settings: Settings) -> tuple[str, RegressionStore]:
    """`crcr regressions`: the upstream and the state table's regressions."""
    from crcr.adapters.regressions import DynamoRegressions  # noqa: PLC0415

    settings.require("state_table")
    return settings.upstream_repo, DynamoRegressions(aws_client("dynamodb"), str(settings.state_table))
