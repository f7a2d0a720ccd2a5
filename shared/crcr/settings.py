"""Configuration from the environment (DESIGN §6), validated at cold start with errors naming the variable."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr

_SECRET_FIELDS = ("webhook_secret", "github_app_private_key", "ticket_signing_key", "hud_token", "buildkite_api_token")


class ConfigError(RuntimeError):
    pass


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    upstream_repo: str = "pytorch/pytorch"
    github_api_url: str = "https://api.github.com"
    github_app_id: str | None = None
    github_app_private_key: SecretStr | None = None
    webhook_secret: SecretStr | None = None
    ticket_signing_key: SecretStr | None = None
    hud_token: SecretStr | None = None
    buildkite_api_token: SecretStr | None = None  # REST API access token with write_builds (and read_builds)
    secrets_arn: str | None = None
    allowlist: str | None = None
    oidc_issuer: str = "https://token.actions.githubusercontent.com"
    oidc_audience: str = "crcr"
    # Buildkite downstreams (DESIGN §4.8): the agents' OIDC issuer, the pipeline -> repository map (PyTorch's
    # ci_providers.yml: a path, s3:// or github:), and the REST API that creates builds.
    buildkite_oidc_issuer: str = "https://agent.buildkite.com"
    ci_providers: str | None = None
    buildkite_api_url: str = "https://api.buildkite.com"
    hud_url: str | None = None
    start_timeout_s: int = 3600
    run_timeout_s: int = 43200
    sweep_interval_s: int = 60
    # Operational tuning (extensions to DESIGN §6): GitHub read timeout and the retry backoff base.
    github_timeout_s: float = 10.0
    buildkite_timeout_s: float = 10.0  # Buildkite REST read timeout (creating a build, looking one up)
    retry_base_s: float = 2.0
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
    # A repository's check run completes once all its jobs finished and nothing changed for this long
    # (jobs of a workflow can run one after another; the next one reports only when it starts).
    check_settle_s: int = 60
    # The PR comment (DESIGN §4.9), whatever the allowlist says: `off` writes none (requests are skipped).
    pr_comment: Literal["on", "off"] = "on"
    # A request for the comment waits this long for the rest of its burst of callbacks before it renders.
    comment_settle_s: float = 5.0
    callback_rate_per_min: int = 600
    # A repository page's health figures are recomputed from the results table at most this often.
    health_refresh_s: float = 300.0
    # `crcr health`: JSON thresholds (crcr.domain.health.HealthPolicy), parsed where health is built so a
    # bad document fails that command with the key it names, never an unrelated function's cold start.
    health_thresholds: str | None = None

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
        except ValueError as exc:
            raise ConfigError(f"invalid configuration: {exc}") from exc

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
        return self.model_copy(update=update)
