"""Configuration from the environment (docs/configuration.md), validated at cold start naming the variable."""

from __future__ import annotations

import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, ValidationError, field_validator

from crcr.domain.ids import is_repo_name
from crcr.domain.known import LOGIN
from crcr.domain.limits import MAX_JOBS_PER_DISPATCH
from crcr.domain.pacing import parse_rates

_SECRET_FIELDS = (
    "webhook_secret",
    "webhook_previous_secret",
    "github_app_private_key",
    "ticket_signing_key",
    "ticket_previous_key",
    "hud_token",
    "buildkite_api_token",
)


class ConfigError(RuntimeError):
    """What stops the relay from starting: one line per problem, each naming the variable (or file and line)."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


# URLs the relay calls or hands out: http(s) with a host. OIDC issuers are stricter (https; http on loopback only).
_URL_FIELDS = ("github_api_url", "buildkite_api_url", "hud_url", "callback_url")
_ISSUER_FIELDS = ("oidc_issuer", "buildkite_oidc_issuer")


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    upstream_repo: str = "pytorch/pytorch"
    github_api_url: str = "https://api.github.com"
    github_app_id: str | None = None
    github_app_private_key: SecretStr | None = None
    webhook_secret: SecretStr | None = None
    # Rotating the webhook secret: the one being replaced, still accepted until GitHub signs with the new one.
    webhook_previous_secret: SecretStr | None = None
    ticket_signing_key: SecretStr | None = None
    # Verify-only: tickets signed with the key before the last rotation still verify until they expire. An
    # Ed25519 public key (SPKI PEM, what `crcr keys rotate` keeps) or the old private key (PKCS#8).
    ticket_previous_key: SecretStr | None = None
    hud_token: SecretStr | None = None
    buildkite_api_token: SecretStr | None = None  # REST API access token with write_builds (and read_builds)
    secrets_arn: str | None = None
    # How long a function keeps what it read from CRCR_SECRETS_ARN (Powertools' cache) before reading it again:
    # a rotated ticket key is signed with, and served in the JWKS, within this many seconds.
    secrets_max_age_s: int = 300
    allowlist: str | None = None
    # An allowlist that lists no repository dispatches nothing: refused at start-up unless this says it is meant.
    allow_empty_allowlist: bool = False
    oidc_issuer: str = "https://token.actions.githubusercontent.com"
    # One audience, or several separated by commas (crcr's and PyTorch's action's `pytorch-cross-repo-ci-relay`):
    # a token carrying any one of them is for this relay.
    oidc_audience: str = "crcr"
    # Buildkite downstreams (docs/contracts.md): the agents' OIDC issuer, the pipeline -> repository map (PyTorch's
    # ci_providers.yml: a path, s3:// or github:), and the REST API that creates builds.
    buildkite_oidc_issuer: str = "https://agent.buildkite.com"
    ci_providers: str | None = None
    # The tests upstream disables (test-infra's disabled-tests-condensed.json: a path, s3:// or github:; or
    # github-issues:<owner>/<repo>, its open DISABLED issues from GitHub's issue search), for `known`.
    disabled_tests: str | None = None
    # Whose searched DISABLED issues count without asking GitHub (besides anyone with write access upstream): logins
    # separated by commas, or `none`; test-infra's verifyDisableTestIssueBot accepts PyTorch's bot.
    disabled_tests_bots: str = "pytorch-bot[bot]"
    # Known issues kept beside the allowlist (YAML: repo, job, test or log pattern, issue, expires), for `known` too.
    known_issues: str | None = None
    buildkite_api_url: str = "https://api.buildkite.com"
    hud_url: str | None = None
    start_timeout_s: int = 3600
    # GitHub's record of the runs the relay started (docs/contracts.md): a dispatch GitHub made no run for in this
    # long is not_started; a completed run's jobs are read after waiting this long for late reports.
    run_create_timeout_s: int = 300
    run_report_settle_s: int = Field(default=30, ge=0, le=900)
    runs_queue_url: str | None = None
    run_timeout_s: int = 43200
    # `crcr local` runs the scheduled functions at these periods (EventBridge schedules in AWS, template.yaml): the
    # sweeper (and any scheduled function not named here), the missed-webhook reconciler, the level check and the
    # results table's export.
    sweep_interval_s: float = Field(default=60.0, gt=0)
    reconcile_interval_s: float = Field(default=300.0, gt=0)
    level_interval_s: float = Field(default=3600.0, gt=0)
    export_interval_s: float = Field(default=3 * 3600.0, gt=0)
    reconcile_lookback_s: int = 3600  # how far back the reconciler's first run looks
    # `crcr local` only: its queues' visibility timeout instead of the template's (a crash test's redelivery in
    # seconds), and repositories its sandbox GitHub has the App installed on besides the upstream and the allowlist's.
    local_visibility_timeout_s: int | None = Field(default=None, ge=0)
    sandbox_installed: str = ""
    github_app_slug: str = "crcr"  # PR comment commands are addressed to @<slug>
    # After a dispatch whose outcome is unknown: how long GitHub gets to create its run before the next attempt
    # looks for it (by the dispatch id in its run-name) instead of sending again.
    run_settle_s: float = 15.0
    # Operational tuning (beyond the variables PyTorch's relay shares): GitHub read timeout and the retry backoff base.
    github_timeout_s: float = 10.0
    buildkite_timeout_s: float = 10.0  # Buildkite REST read timeout (creating a build, looking one up)
    retry_base_s: float = 2.0
    # Each installation's budget of content-creating calls (dispatches, check runs, comments, re-runs) as
    # `<count>/<period_s>+<burst>,...`; unset: GitHub.com's secondary limits (crcr.domain.pacing.CONTENT_RATES).
    # GitHub Enterprise Server's limits are its administrator's; `make soak` raises it to fit a day in minutes.
    github_write_rates: str | None = None
    allowlist_refresh_s: float = 60.0
    # Resource names: set by template.yaml in Lambda and by `crcr local` from the same declarations.
    state_table: str | None = None
    events_queue_url: str | None = None
    dispatch_queue_url: str | None = None
    dispatch_dlq_url: str | None = None
    bodies_bucket: str | None = None
    callback_url: str | None = None
    results_table: str | None = None
    reporter_dlq_url: str | None = None
    checks_queue_url: str | None = None
    checks_dlq_url: str | None = None
    hud_bucket: str | None = None  # the HUD pages' documents (written by the reporter, served under /hud/)
    exports_bucket: str | None = None  # the results table's scheduled exports (crcr.app.scheduled_export)
    # A repository's check run completes once all its jobs finished and nothing changed for this long
    # (jobs of a workflow can run one after another; the next one reports only when it starts).
    check_settle_s: int = 60
    # The PR comment (docs/contracts.md), whatever the allowlist says: `off` writes none (requests are skipped).
    pr_comment: Literal["on", "off"] = "on"
    # shadow: every downstream without its own allowlist `mode` is planned and recorded, never dispatched to, and the
    # relay writes nothing upstream for it (a deployment beside the relay in service); live: dispatched.
    mode: Literal["live", "shadow"] = "live"
    # A request for the comment waits this long for the rest of its burst of callbacks before it renders.
    comment_settle_s: float = 5.0
    callback_rate_per_min: int = 600
    max_jobs_per_dispatch: int = Field(default=MAX_JOBS_PER_DISPATCH, ge=1)  # distinct jobs recorded for one dispatch
    # GitHub lookups of upstream commits the relay has not seen, per downstream repository and hour (its scheduled
    # reports spend the upstream installation's requests; answers are remembered).
    commit_lookups_per_hour: int = Field(default=30, ge=0)
    # GitHub comparisons per hour for regression ranges with commits the relay never saw pushed (upstream installation)
    compare_calls_per_hour: int = Field(default=60, ge=0)
    # The part of the upstream installation's write budget the check runs of one downstream may take (1: all of it).
    downstream_write_share: float = Field(default=0.5, gt=0, le=1)
    # A repository page's health figures are recomputed from the results table at most this often.
    health_refresh_s: float = 300.0
    # `crcr health`: JSON thresholds (crcr.domain.health.HealthPolicy), parsed where health is built so a
    # bad document fails that command with the key it names, never an unrelated function's cold start.
    health_thresholds: str | None = None
    # The secret fields filled from the CRCR_SECRETS_ARN document (not the environment): those may change there.
    _from_secret: frozenset[str] = PrivateAttr(default=frozenset())

    @field_validator("upstream_repo")
    @classmethod
    def _upstream_is_a_name(cls, value: str) -> str:
        if not is_repo_name(value):
            raise ValueError("must be owner/name in ASCII letters, digits and . _ -")
        return value

    @field_validator(*_URL_FIELDS)
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urllib.parse.urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"must be an http(s) URL with a host, got {value!r}")
        return value

    @field_validator(*_ISSUER_FIELDS)
    @classmethod
    def _issuer(cls, value: str) -> str:
        parts = urllib.parse.urlsplit(value)
        if not parts.hostname or not (parts.scheme == "https" or (parts.scheme == "http" and loopback(parts.hostname))):
            raise ValueError(f"must be an https URL (plain http only on loopback), got {value!r}")
        return value

    @field_validator("oidc_audience")
    @classmethod
    def _audiences(cls, value: str) -> str:
        names = [name.strip() for name in value.split(",")]
        if not all(names):
            raise ValueError(f"must be one audience or several separated by commas, none blank, got {value!r}")
        return ",".join(names)

    @property
    def oidc_audiences(self) -> tuple[str, ...]:
        return tuple(self.oidc_audience.split(","))

    @field_validator("disabled_tests_bots")
    @classmethod
    def _bots(cls, value: str) -> str:
        names = [] if value.strip().lower() == "none" else [name.strip() for name in value.split(",") if name.strip()]
        if not all(LOGIN.fullmatch(name) for name in names):
            raise ValueError(f"must be GitHub logins separated by commas (e.g. pytorch-bot[bot]), got {value!r}")
        return ",".join(names)

    @field_validator("github_write_rates")
    @classmethod
    def _rates(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rates(value)  # fails the cold start naming CRCR_GITHUB_WRITE_RATES
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values = {}
        for name in cls.model_fields:
            raw = env.get(f"CRCR_{name.upper()}")
            if raw not in (None, ""):
                values[name] = raw
        try:
            return cls(**values)
        except ValidationError as exc:
            raise ConfigError(*_problems(exc)) from None

    def require(self, *names: str) -> None:
        missing = [f"CRCR_{n.upper()}" for n in names if getattr(self, n) in (None, "")]
        if missing:
            raise ConfigError(f"missing configuration: {', '.join(missing)}")

    def secret(self, name: str) -> str:
        value = getattr(self, name)
        if value is None:
            raise ConfigError(f"missing secret: CRCR_{name.upper()} (or key {name!r} in CRCR_SECRETS_ARN)")
        return str(value.get_secret_value())

    def with_secrets(self, secret_values: Mapping[str, str]) -> Settings:
        """Fill secrets not given in the environment from the Secrets Manager JSON document."""
        update = {
            k: SecretStr(str(secret_values[k]))
            for k in _SECRET_FIELDS
            if getattr(self, k) is None and secret_values.get(k)
        }
        resolved = self.model_copy(update=update)
        # Fields the environment left unset come from the document now, and would come from its next version.
        resolved._from_secret = frozenset(k for k in _SECRET_FIELDS if k not in self.model_fields_set)
        return resolved

    def from_secret(self, name: str) -> bool:
        """True when `name` is read from the CRCR_SECRETS_ARN document rather than fixed by the environment."""
        return name in self._from_secret


def _problems(exc: ValidationError) -> list[str]:
    """One line per invalid variable: its name, what is wrong and (secrets aside) the value given."""
    lines = []
    for error in exc.errors(include_url=False):
        name = str(error["loc"][0]) if error["loc"] else ""
        variable = f"CRCR_{name.upper()}" if name else "configuration"
        message = str(error["msg"]).removeprefix("Value error, ")
        given = error.get("input")
        shown = name not in _SECRET_FIELDS and isinstance(given, str) and repr(given) not in message
        lines.append(f"{variable}: {message}" + (f" (got {given!r})" if shown else ""))
    return lines
