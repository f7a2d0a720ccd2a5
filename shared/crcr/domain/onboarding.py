"""Onboarding rules behind `crcr onboard`: the allowlist entry, the relay's ci_providers.yml entry and the files a
new downstream commits, rendered as text from what GitHub says about the repository."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from crcr.domain.allowlist import BuildkitePipeline, build_allowlist
from crcr.domain.errors import AllowlistError, CrcrError
from crcr.domain.ids import is_repo_name
from crcr.domain.levels import Level

# Where the files go in the downstream repository (`--out` mirrors its layout).
WORKFLOW_PATH = ".github/workflows/crcr.yml"
PIPELINE_PATH = ".buildkite/crcr.yml"
HELPER_PATH = ".buildkite/crcr/report.py"
# The example workflow uses crcr's own action (`$/action`); a downstream names it at a full commit. The all-zero
# commit lints as pinned and fails at once if left in place: GitHub finds no such commit.
ACTION_PLACEHOLDER = "YOUR-ORG/crcr/action@0000000000000000000000000000000000000000"
_ACTION_REF = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}(?:/[A-Za-z0-9._/-]+)?@[0-9a-f]{40}$"
)
EXAMPLE_UPSTREAM = "pytorch/pytorch"
EXAMPLE_RELAY_URL = "https://crcr.example.com"
# The example pipeline's reporting steps: only tokens minted by these steps may report (required_claims).
REPORT_STEP_KEYS = ("crcr-report-start", "crcr-report-result")
# Literal YAML words that would not read back as the string they spell.
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"})


class OnboardError(CrcrError):
    """The operator asked for something that cannot be onboarded as given."""

    reason = "bad_request"


@dataclass(frozen=True)
class OnboardRequest:
    repo: str
    level: Level
    device: str | None = None  # L3 only: the label ciflow/crcr/<device>
    buildkite: BuildkitePipeline | None = None  # None: GitHub Actions through repository_dispatch


def parse_request(repo: str, level: str, device: str | None = None, buildkite: str | None = None) -> OnboardRequest:
    """Validate `crcr onboard`'s arguments with the allowlist's own rules; raise OnboardError naming the problem."""
    if not is_repo_name(repo):
        raise OnboardError(f"{repo!r} is not an owner/repo name")
    if level.upper() not in Level.__members__:
        raise OnboardError(f"--level must be one of {', '.join(Level.__members__)}, got {level!r}")
    parsed = Level.parse(level)
    if parsed is Level.L3 and not device:
        raise OnboardError("--level L3 needs --device (its PRs are labelled ciflow/crcr/<device>)")
    if parsed is not Level.L3 and device:
        raise OnboardError(f"--device is for L3 only (the level is {parsed.name})")
    pipeline = None
    if buildkite is not None:
        organization, sep, slug = buildkite.partition("/")
        if not sep or "/" in slug:
            raise OnboardError(f"--buildkite must be organization/pipeline (slugs), got {buildkite!r}")
        pipeline = BuildkitePipeline(organization, slug)
    request = OnboardRequest(repo, parsed, device, pipeline)
    _check(request, None)  # the device and the slugs, by the allowlist's rules
    return request


def entry_document(request: OnboardRequest, repository_id: int | None) -> dict[str, Any]:
    """The entry as the allowlist document it adds (what `crcr allowlist check` reads)."""
    level = {request.device: [request.repo]} if request.level is Level.L3 else [request.repo]
    settings: dict[str, Any] = {}
    if repository_id is not None:
        settings["repository_id"] = repository_id
    if request.buildkite is not None:
        settings["buildkite"] = {"organization": request.buildkite.organization, "pipeline": request.buildkite.pipeline}
    doc: dict[str, Any] = {request.level.name: level}
    if settings:
        doc["repos"] = {request.repo: settings}
    return doc


def allowlist_entry(request: OnboardRequest, repository_id: int | None) -> str:
    """The lines to add to an allowlist: the level's section with the repository, and its `repos:` settings."""
    _check(request, repository_id)
    lines = [f"{request.level.name}:"]
    if request.level is Level.L3:
        lines += [f"  {_scalar(str(request.device))}:", f"    - {request.repo}"]
    else:
        lines.append(f"  - {request.repo}")
    settings = []
    if repository_id is not None:
        settings.append(f"    repository_id: {repository_id}")
    if request.buildkite is not None:
        bk = request.buildkite
        # A slug such as `0`, `off` or `2026-01-01` is a number, a boolean or a date to YAML, unquoted.
        org, pipeline = _scalar(bk.organization), _scalar(bk.pipeline)
        settings.append(f"    buildkite: {{organization: {org}, pipeline: {pipeline}}}")
    if settings:
        lines += ["repos:", f"  {request.repo}:", *settings]
    return "\n".join(lines) + "\n"


def ci_providers_entry(repo: str) -> str:
    """The relay's ci_providers.yml entry for a Buildkite downstream (PyTorch's constrained form), with
    placeholders for the two UUIDs. Only the reporting steps of builds the relay created may report."""
    return (
        "providers:\n"
        "  buildkite:\n"
        "    repo_map:\n"
        '      "<organization_id>/<pipeline_id>":\n'
        f"        repo: {repo}\n"
        "        required_claims:\n"
        "          build_source: [api]  # builds the relay created; add schedule for nightly builds that report\n"
        f"          step_key: [{', '.join(REPORT_STEP_KEYS)}]\n"
    )


def check_action_ref(ref: str) -> str:
    if not _ACTION_REF.fullmatch(ref):
        raise OnboardError(f"--action-ref must be owner/repo/path@<40-hex commit>, got {ref!r}")
    return ref


def downstream_workflow(example: str, repo: str, action_ref: str, upstream: str) -> str:
    """examples/workflows/downstream.yml for one repository: crcr's action by a pinned reference instead of `$/`."""
    head, sep, rest = example.partition("# Copy it to .github/workflows/")
    body_at = rest.find("\nname: ")
    if not sep or body_at < 0:
        raise OnboardError("examples/workflows/downstream.yml does not have the shape crcr onboard expects")
    header = (
        f"# Written for {repo} by `crcr onboard` from crcr's examples/workflows/downstream.yml. Commit it as\n"
        f"# {WORKFLOW_PATH} on the default branch (repository_dispatch runs workflows from there).\n"
        "# Both reporting jobs must name crcr's report action at the full commit of the crcr your relay runs:\n"
        f"#     uses: <org>/crcr/action@<40-hex commit sha>  # v1\n"
        f"# ({ACTION_PLACEHOLDER} is a placeholder: GitHub finds no such commit.)\n"
    )
    text = head + header + rest[body_at + 1 :]
    text = _replace(text, "      - uses: $/action\n", f"      - uses: {check_action_ref(action_ref)}\n", 2)
    text = _replace(text, "contents: read # `$/action` is read from this repository\n", "contents: read\n", 2)
    return _upstream(text, f"repository: {EXAMPLE_UPSTREAM}\n", f"repository: {upstream}\n", upstream)


def minimal_workflow(example: str, repo: str, upstream: str) -> str:
    """examples/workflows/downstream-minimal.yml for one repository: no report step, its upstream."""
    head, sep, rest = example.partition("# Copy it to .github/workflows/")
    body_at = rest.find("\nname: ")
    if not sep or body_at < 0:
        raise OnboardError("examples/workflows/downstream-minimal.yml does not have the shape crcr onboard expects")
    header = (
        f"# Written for {repo} by `crcr onboard --no-report` from crcr's examples/workflows/downstream-minimal.yml.\n"
        f"# Commit it as {WORKFLOW_PATH} on the default branch (repository_dispatch runs workflows from there).\n"
    )
    text = head + header + rest[body_at + 1 :]
    return _upstream(text, f"repository: {EXAMPLE_UPSTREAM}\n", f"repository: {upstream}\n", upstream)


def buildkite_pipeline(example: str, upstream: str, relay_url: str | None) -> str:
    """examples/buildkite/pipeline.yml for one repository: its upstream and, when known, the relay's URL."""
    text = _upstream(
        example, f"https://github.com/{EXAMPLE_UPSTREAM}.git", f"https://github.com/{upstream}.git", upstream
    )
    if relay_url:
        text = _replace(text, f"CRCR_RELAY_URL={EXAMPLE_RELAY_URL} ", f"CRCR_RELAY_URL={relay_url} ", 2)
    return text


def _check(request: OnboardRequest, repository_id: int | None) -> None:
    try:
        build_allowlist(entry_document(request, repository_id))
    except AllowlistError as exc:
        raise OnboardError(exc.message) from None


def _scalar(text: str) -> str:
    """A YAML key that reads back as this string (a device called `on` or `1` would not, unquoted)."""
    if text.lower() in _YAML_WORDS or not re.fullmatch(r"[A-Za-z][A-Za-z0-9._-]*", text):
        return '"' + text + '"'
    return text


def _replace(text: str, old: str, new: str, count: int) -> str:
    if text.count(old) != count:
        raise OnboardError(f"the example does not have the shape crcr onboard expects ({old.strip()!r})")
    return text.replace(old, new)


def _upstream(text: str, old: str, new: str, upstream: str) -> str:
    if not is_repo_name(upstream):
        raise OnboardError(f"CRCR_UPSTREAM_REPO {upstream!r} is not an owner/repo name")
    return _replace(text, old, new, 1)
