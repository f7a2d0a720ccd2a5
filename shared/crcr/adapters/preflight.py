"""Configuration checked before the relay runs (by `crcr local` before its ready line, by each function at its cold
start), one line per problem naming the variable, or the file and line; a path's documents are validated whole, an
`s3://` or `github:` source only for its form (fetched, a bad version refused keeping the last good one, when used)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from crcr.adapters.allowlist_source import fetcher_for, parse_allowlist, parse_providers
from crcr.adapters.tickets import load_ed25519, load_ed25519_public
from crcr.domain.allowlist import Allowlist
from crcr.domain.errors import AllowlistError
from crcr.domain.ids import repo_key
from crcr.domain.providers import Providers
from crcr.settings import ConfigError, Settings

T = TypeVar("T")


def check(settings: Settings, *, need_allowlist: bool = True, with_keys: bool = True) -> None:
    """Raise ConfigError with every problem found in the allowlist, the CI providers and (`with_keys`) the keys."""
    problems = documents(settings, need_allowlist=need_allowlist) + (keys(settings) if with_keys else [])
    if problems:
        raise ConfigError(*problems)


def documents(settings: Settings, *, need_allowlist: bool = True) -> list[str]:
    problems: list[str] = []
    allowlist = None
    if settings.allowlist:
        allowlist = _load("CRCR_ALLOWLIST", settings.allowlist, parse_allowlist, problems)
    elif need_allowlist:
        problems.append(
            "CRCR_ALLOWLIST: not set; it names the downstream repositories and their levels "
            "(a path, s3://bucket/key or github:owner/repo/path@ref; examples/allowlist.yaml is one)"
        )
    if allowlist is not None and not len(allowlist) and not settings.allow_empty_allowlist:
        problems.append(
            f"CRCR_ALLOWLIST: {settings.allowlist} lists no repository, so no event would be dispatched "
            "(CRCR_ALLOW_EMPTY_ALLOWLIST=true if that is meant)"
        )
    providers = None
    if settings.ci_providers:
        providers = _load("CRCR_CI_PROVIDERS", settings.ci_providers, parse_providers, problems)
    if allowlist is not None:
        problems += _buildkite_unmapped(allowlist, settings.ci_providers, providers)
    return problems


def _load(variable: str, source: str, parse: Callable[[bytes], T], problems: list[str]) -> T | None:
    if source.startswith(("s3://", "github:")):
        try:
            fetcher_for(source, lambda: None, _no_github)
        except AllowlistError as exc:
            problems.append(f"{variable}: {exc.message}")
        return None
    try:
        return parse(Path(source).read_bytes())
    except OSError as exc:
        problems.append(f"{variable}: {source}: {exc.strerror or exc}")
    except AllowlistError as exc:  # the providers' errors are allowlist errors too (line numbers alike)
        where = f"{source}:{exc.line}" if exc.line else source
        message = exc.message.removeprefix(f"line {exc.line}: ") if exc.line else exc.message
        problems.append(f"{variable}: {where}: {message}")
    return None


def _no_github() -> Any:
    return None  # only the source's form is checked here: nothing is fetched


def _buildkite_unmapped(allowlist: Allowlist, source: str | None, providers: Providers | None) -> list[str]:
    """Buildkite downstreams whose reports would be refused: no CI providers, or none mapping a pipeline to them."""
    built = [e.repo for e in allowlist.entries if e.settings.buildkite is not None]
    if not built:
        return []
    if not source:
        return [
            f"CRCR_CI_PROVIDERS: not set, but the allowlist builds {', '.join(built)} on Buildkite: every report of "
            "theirs would be refused (it maps their pipelines' ids to them; examples/ci_providers.yml is one)"
        ]
    if providers is None:
        return []  # not read here (s3:// or github:), or already reported
    mapped = {repo_key(rule.repo) for rule in providers.buildkite.values()}
    return [
        f"CRCR_CI_PROVIDERS: {source} maps no Buildkite pipeline to {repo}, which the allowlist builds on Buildkite: "
        "every report of its would be refused"
        for repo in built
        if repo_key(repo) not in mapped
    ]


def keys(settings: Settings) -> list[str]:
    """The keys given in the environment parse as what they must be (those from CRCR_SECRETS_ARN are read later)."""
    problems: list[str] = []
    app_key = settings.github_app_private_key
    if app_key is not None:
        try:
            parsed = load_pem_private_key(app_key.get_secret_value().encode(), password=None)
        except (ValueError, TypeError):
            parsed = None
        if not isinstance(parsed, RSAPrivateKey):
            problems.append(
                "CRCR_GITHUB_APP_PRIVATE_KEY: not an RSA private key in PEM (the App's .pem file as GitHub issues it)"
            )
    for name, load in (("ticket_signing_key", load_ed25519), ("ticket_previous_key", load_ed25519_public)):
        value = getattr(settings, name)
        if value is not None:
            try:
                load(value.get_secret_value(), f"CRCR_{name.upper()}")
            except ValueError as exc:
                problems.append(f"CRCR_{name.upper()}: {str(exc).removeprefix(f'CRCR_{name.upper()} ')}")
    return problems
