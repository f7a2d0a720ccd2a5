"""The inbound door: whether what a channel says about a run may be taken as an allowlisted downstream's own."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from enum import Enum

from crcr.domain.allowlist import Entry
from crcr.domain.errors import Forbidden
from crcr.domain.ids import is_repo_name, repo_key


class Channel(Enum):
    GITHUB_OIDC = "github_oidc"  # a GitHub Actions job's token: callbacks and scheduled reports
    BUILDKITE_OIDC = "buildkite_oidc"  # a Buildkite job's token, its pipeline mapped by ci_providers.yml
    RUN_EVENT = "run_event"  # a signed workflow_run delivery: at ingest, and again in the runs worker
    RUN_READ = "run_read"  # GitHub's answer to GET .../actions/runs/{id} (the sweeper; its jobs listing follows)
    BUILD_READ = "build_read"  # Buildkite's answer to GET .../builds/{number} (the sweeper)


# What each channel can say, so which pins it must prove. A pin a channel cannot speak to is proven by the channel
# that binds the run (docs/contracts.md, "The inbound door").
STATES: dict[Channel, frozenset[str]] = {
    Channel.GITHUB_OIDC: frozenset({"repository", "repository_id", "repository_owner_id", "workflow"}),
    Channel.RUN_EVENT: frozenset(
        {"repository", "repository_id", "repository_owner_id", "workflow", "head_repository", "installation"}
    ),
    Channel.RUN_READ: frozenset({"repository", "repository_id", "repository_owner_id", "workflow", "head_repository"}),
    Channel.BUILDKITE_OIDC: frozenset({"repository", "build_number", "build_id"}),
    Channel.BUILD_READ: frozenset({"build_number", "build_id"}),
}
# Where each fact was said, named in a refusal's `field`.
_RUN = {
    "repository": "repository.full_name",
    "repository_id": "repository.id",
    "repository_owner_id": "repository.owner.id",
    "workflow": "workflow_run.path",
    "head_repository": "workflow_run.head_repository.id",
    "installation": "installation.id",
}
FIELDS: dict[Channel, dict[str, str]] = {
    Channel.GITHUB_OIDC: {"workflow": "job_workflow_ref"},
    Channel.RUN_EVENT: _RUN,
    Channel.RUN_READ: {k: v.removeprefix("workflow_run.") for k, v in _RUN.items()},
    Channel.BUILDKITE_OIDC: {"build_id": "run_id"},
    Channel.BUILD_READ: {"build_id": "id", "build_number": "number"},
}


class Refused(Forbidden):
    """The door's refusal: `check` names the pin or binding that did not hold (the metrics' reason)."""

    def __init__(self, message: str, *, channel: Channel, check: str, field: str) -> None:
        super().__init__(message, field=field)
        self.channel = channel.value
        self.check = check


@dataclass(frozen=True)
class Evidence:
    """What one channel says about who ran, as text as it was said; None where it said nothing."""

    channel: Channel
    repository: str | None = None  # a Buildkite pipeline's: the repository ci_providers.yml maps it to
    repository_id: str | None = None
    repository_owner_id: str | None = None
    workflow: str | None = None  # OIDC's job_workflow_ref, or a run's workflow file as one (`workflow_ref`)
    head_repository_id: str | None = None
    installation_id: str | None = None
    build_number: str | None = None
    build_id: str | None = None


@dataclass(frozen=True)
class Known:
    """What the relay itself knows of the run it expects; None where the door is called without it (ingest has no
    dispatch yet: the runs worker binds the event to one)."""

    repository_id: int | None = None  # GitHub's id of the repository when it was dispatched to (the ledger's)
    installation_id: int | None = None  # the installation the relay dispatches and reads through
    build_number: int | None = None  # the Buildkite build the relay created
    build_id: str | None = None


NOTHING_KNOWN = Known()


def admit(entry: Entry | None, evidence: Evidence, known: Known = NOTHING_KNOWN) -> Entry:
    """The allowlist entry `evidence` speaks for, or Refused naming what did not hold. `entry` is the one the run is
    expected to be of (the dispatched repository's, or the caller's for a run no dispatch started)."""
    name = evidence.repository or ""

    def refuse(check: str, message: str, fact: str | None = None) -> Refused:
        field = FIELDS[evidence.channel].get(fact or check, fact or check)
        return Refused(message, channel=evidence.channel, check=check, field=field)

    if entry is None:
        raise refuse("not_allowlisted", f"{name[:200] or 'the caller'} is not on the allowlist", "repository")
    pins, ref = entry.settings, evidence.workflow or ""
    rid, pin = _shown(evidence.repository_id), f"the allowlist's pin for {entry.repo}"
    # Each fact the channel states must hold. Names are ASCII only, compared folding ASCII letters alone: a look-alike
    # never matches (Kelvin sign, Cyrillic).
    rules: tuple[tuple[str, bool, str], ...] = (
        ("repository", is_repo_name(name) and repo_key(name) == entry.key, f"{name[:200]!r} is not {entry.repo}"),
        (
            "repository_id",
            _agrees(evidence.repository_id, known.repository_id),
            f"repository id {rid} is not that of the {entry.repo} the relay dispatched to",
        ),
        ("repository_id", _agrees(evidence.repository_id, pins.repository_id), f"repository id {rid} is not {pin}"),
        (
            "repository_owner_id",
            _agrees(evidence.repository_owner_id, pins.repository_owner_id),
            f"owner id {_shown(evidence.repository_owner_id)} is not {pin}",
        ),
        (
            "workflow",
            not pins.workflows or any(fnmatch.fnmatchcase(ref, pattern) for pattern in pins.workflows),
            f"workflow {ref[:300] or '(none)'} is not allowed to report for {entry.repo}",
        ),
        (
            "head_repository",
            evidence.head_repository_id is not None and evidence.head_repository_id == evidence.repository_id,
            f"a run of another repository's code (a fork) does not speak for {entry.repo}",
        ),
        (
            "installation",
            _agrees(evidence.installation_id, known.installation_id),
            f"installation {_shown(evidence.installation_id)} is not the one {entry.repo} is dispatched and read "
            "through",
        ),
        (
            "build_number",
            _agrees(evidence.build_number, known.build_number),
            f"build {_shown(evidence.build_number)} is not build {known.build_number}, the one the relay created",
        ),
        (
            "build_id",
            _agrees(evidence.build_id, known.build_id),
            "the build is not the one the relay created for this dispatch",
        ),
    )
    for fact, holds, message in rules:
        if fact in STATES[evidence.channel] and not holds:
            raise refuse(fact, message)
    return entry


def _agrees(stated: str | None, expected: int | str | None) -> bool:
    """Whether what was stated is what is expected; nothing expected (no pin, not known here) always holds."""
    return expected is None or stated == str(expected)


def _shown(value: str | None) -> str:
    return repr(value[:40]) if value is not None else "(none)"


def id_text(value: int | None) -> str | None:
    """A numeric id as the door compares it: as text, as tokens carry their claims."""
    return None if value is None else str(value)


def workflow_ref(repo: str, path: str | None, head_branch: str | None) -> str | None:
    """A run's workflow file named as OIDC's `job_workflow_ref` names it, so one list of `workflows` patterns serves
    tokens and runs: `<owner>/<repo>/<path>@refs/heads/<branch>`. A path GitHub already gives in that full form
    (`owner/repo/.github/workflows/ci.yml@main`) keeps its own repository, and its ref is a branch's."""
    if not path:
        return None
    if "@" in path and not path.startswith(".github/"):
        file, _, ref = path.rpartition("@")
        return f"{file}@{ref if ref.startswith('refs/') else 'refs/heads/' + ref}"
    return f"{repo}/{path}@refs/heads/{head_branch}" if head_branch else None
