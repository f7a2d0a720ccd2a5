"""Onboarding use case behind `crcr onboard`: what GitHub says about a new downstream, and the allowlist and
ci_providers.yml entries that admit it (rules in crcr.domain.onboarding)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from crcr.app.ports.github import RepoToken
from crcr.domain.onboarding import OnboardRequest, allowlist_entry, ci_providers_entry


class RepoLookup(Protocol):
    """What the App can learn about a repository: its installation, and (through a token down-scoped to it)
    its numeric id and name as GitHub spells them."""

    def installation_for(self, repo: str) -> int: ...
    def repo_token(self, installation_id: int, repo: str, permissions: dict[str, str] | None = None) -> RepoToken: ...


# The token that reads the repository's id needs no permission beyond what every installation has.
LOOKUP_PERMISSIONS = {"metadata": "read"}


@dataclass(frozen=True)
class Check:
    name: str
    result: str  # "ok" or "skipped"
    detail: str


@dataclass(frozen=True)
class Onboarding:
    request: OnboardRequest
    repo: str  # as GitHub spells it when GitHub was asked, else as given
    installation_id: int | None
    repository_id: int | None
    checks: tuple[Check, ...]
    allowlist_entry: str
    ci_providers_entry: str | None  # Buildkite downstreams: the relay's pipeline -> repository map


def onboard(request: OnboardRequest, github: RepoLookup | None) -> Onboarding:
    """GitHub downstreams: the App must be installed on the repository, whose id the entry then pins.
    Raises the GitHub port's errors (NotInstalled, GitHubRejected, ...) for the caller to report.

    Buildkite downstreams are dispatched through Buildkite's REST API and report with their agent's token,
    so the App need not be installed on them and GitHub is not asked."""
    if request.buildkite is not None:
        bk = request.buildkite
        skipped = Check(
            "installation",
            "skipped",
            f"{request.repo} builds on Buildkite ({bk.organization}/{bk.pipeline}): the relay creates builds through "
            "Buildkite's API and maps the agents' tokens through ci_providers.yml, so the App need not be installed "
            "on it",
        )
        return Onboarding(
            request,
            request.repo,
            None,
            None,
            (skipped,),
            allowlist_entry(request, None),
            ci_providers_entry(request.repo),
        )
    if github is None:
        raise ValueError("a GitHub Actions downstream needs the App's GitHub client")
    installation_id = github.installation_for(request.repo)
    token = github.repo_token(installation_id, request.repo, LOOKUP_PERMISSIONS)
    found = OnboardRequest(token.full_name, request.level, request.device, request.buildkite)
    checks = (
        Check("installation", "ok", f"the App is installed on {token.full_name} (installation {installation_id})"),
        Check(
            "repository_id",
            "ok",
            f"repository id {token.repo_id} (listed by an installation token down-scoped to {token.full_name})",
        ),
    )
    return Onboarding(
        found, token.full_name, installation_id, token.repo_id, checks, allowlist_entry(found, token.repo_id), None
    )
