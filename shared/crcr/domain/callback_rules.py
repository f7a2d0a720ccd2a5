"""Who may report what: the identity rules a callback must pass (docs/contracts.md, docs/security.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crcr.domain.allowlist import Entry
from crcr.domain.errors import Forbidden, Unavailable
from crcr.domain.identity import Channel, Evidence, Known, admit
from crcr.domain.providers import PipelineRule, Providers

REQUIRED_CLAIMS = ("repository", "repository_id", "event_name", "run_id", "run_attempt")
MAX_CLAIM_CHARS = 1000


def claim_text(claims: Mapping[str, Any], name: str) -> str | None:
    """A claim as text, None when absent. GitHub sends every custom claim as a string (ids and counters as
    digits) and Buildkite some as numbers; a list, an object, a boolean or a float where one is expected is
    no identity (a list in `event_name` was a 500), and neither is a text too long to be one."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Forbidden(f"the token's {name} claim is a {type(value).__name__}, not a string", field=name)
    text = str(value)
    if len(text) > MAX_CLAIM_CHARS:
        raise Forbidden(f"the token's {name} claim is {len(text)} characters long", field=name)
    return text


SCHEDULED_EVENTS = frozenset({"schedule", "workflow_dispatch"})


def check_identity(
    claims: Mapping[str, Any],
    *,
    entry: Entry | None,
    known: Known,
    events: frozenset[str] = frozenset({"repository_dispatch"}),
    run_id: str,
    run_attempt: int,
) -> Entry:
    """The entry a GitHub OIDC token speaks for, through the inbound door (crcr.domain.identity), when it is that
    repository's own run of this report; Forbidden naming the claim otherwise.

    Identity comes from `repository`/`repository_id` (and `repository_owner_id` when the allowlist pins it), never
    from splitting `sub`: GitHub issues the immutable form `repo:<owner>@<owner_id>/<repo>@<repo_id>:…` since
    July 2026, and either form is accepted alike.
    """
    got: dict[str, str] = {}
    for name in REQUIRED_CLAIMS:
        value = claim_text(claims, name)
        if not value:
            raise Forbidden(f"the token has no {name} claim", field=name)
        got[name] = value
    evidence = Evidence(
        Channel.GITHUB_OIDC,
        repository=got["repository"],
        repository_id=got["repository_id"],
        repository_owner_id=claim_text(claims, "repository_owner_id"),
        workflow=claim_text(claims, "job_workflow_ref"),
    )
    admitted = admit(entry, evidence, known)
    if got["event_name"] not in events:
        raise Forbidden(f"runs started by {got['event_name'][:100]!r} cannot report", field="event_name")
    if got["run_id"] != str(run_id):
        raise Forbidden("run_id does not match the token's run", field="run_id")
    if got["run_attempt"] != str(run_attempt):
        raise Forbidden("run_attempt does not match the token's run", field="run_attempt")
    return admitted


# Buildkite (docs/contracts.md). Builds a person or a schedule started, never one a webhook (a push or a pull
# request, forks included) started, may report as a scheduled run.
SCHEDULED_BUILD_SOURCES = frozenset({"schedule", "ui", "api"})
MINT_HINT = "mint it with: buildkite-agent oidc request-token --audience <aud> --claim organization_id,pipeline_id"


def buildkite_pipeline(claims: Mapping[str, Any], providers: Providers) -> PipelineRule:
    """The repository a Buildkite token speaks for: its organization_id/pipeline_id (immutable UUIDs, never
    slugs) in PyTorch's ci_providers.yml, with every `required_claims` entry holding."""
    ids = []
    for name in ("organization_id", "pipeline_id"):
        value = claims.get(name)
        if not isinstance(value, str) or not value or len(value) > MAX_CLAIM_CHARS:
            raise Forbidden(f"the Buildkite token has no {name} claim; {MINT_HINT}", field=name)
        ids.append(value)
    organization_id, pipeline_id = ids
    rule = providers.pipeline(organization_id, pipeline_id)
    if rule is None:
        raise Forbidden(
            f"Buildkite pipeline {organization_id}/{pipeline_id} is not mapped to a repository in the relay's "
            "ci_providers.yml",
            field="pipeline_id",
        )
    unmet = rule.unmet(claims)
    if unmet is not None:
        name, actual, allowed = unmet
        raise Forbidden(
            f"claim {name} is {actual!r}; pipeline {organization_id}/{pipeline_id} reports only with {name} in "
            f"{list(allowed)}",
            field=name,
        )
    return rule


def check_buildkite_build(
    claims: Mapping[str, Any],
    *,
    entry: Entry | None,
    repo: str,
    build_number: int | None,
    build_id: str | None,
    run_id: str,
    check_run_id: str | None,
) -> tuple[Entry, str]:
    """Only the build the relay created for this dispatch may report on it (a fork's build of the same
    pipeline, or any other build, has another number), through the inbound door as the pipeline's repository `repo`:
    the entry admitted and the job's id, its check_run_id."""
    if build_number is None or build_id is None:
        raise Unavailable("the relay has not recorded the build it created yet; retry shortly", retry_after_s=5)
    evidence = Evidence(
        Channel.BUILDKITE_OIDC, repository=repo, build_number=claim_text(claims, "build_number"), build_id=run_id
    )
    admitted = admit(entry, evidence, Known(build_number=build_number, build_id=build_id))
    return admitted, _job_id(claims, check_run_id)


def check_buildkite_scheduled(claims: Mapping[str, Any], *, run_id: str, check_run_id: str | None) -> str:
    """A scheduled (nightly) build: started by a schedule, a person or the API, never by a webhook."""
    source = claim_text(claims, "build_source")
    if source not in SCHEDULED_BUILD_SOURCES:
        raise Forbidden(
            f"builds started by {(source or '')[:100]!r} cannot report as scheduled runs", field="build_source"
        )
    # The build is named by its UUID (crcr's action) or its number (vLLM's nightly reporter sends int(build_number)).
    if "build_id" in claims and run_id not in (claim_text(claims, "build_id"), claim_text(claims, "build_number")):
        raise Forbidden("run_id is not the token's build (its build_id or build_number)", field="run_id")
    return _job_id(claims, check_run_id)


def _job_id(claims: Mapping[str, Any], check_run_id: str | None) -> str:
    job_id = claims.get("job_id")
    if not isinstance(job_id, str) or not job_id or len(job_id) > MAX_CLAIM_CHARS:
        raise Forbidden("the Buildkite token has no job_id claim", field="job_id")
    if check_run_id is not None and check_run_id != job_id:
        raise Forbidden("check_run_id must be the reporting job's id (the token's job_id)", field="check_run_id")
    return job_id
