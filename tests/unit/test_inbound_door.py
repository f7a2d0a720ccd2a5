"""The inbound door (crcr.domain.identity): each mismatch through every channel that speaks of a downstream's run,
refused and counted with its reason, the genuine run, callback and scheduled report of each case recorded, and no
channel that goes around the door."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from crcr.domain.allowlist import Entry, RepoSettings
from crcr.domain.identity import FIELDS, STATES, Channel, Evidence, Known, Refused, admit, workflow_ref
from crcr.domain.levels import Level
from tests.doubles.buildkite_oidc import BuildkiteOidc
from tests.doubles.oidc_issuer import OidcIssuer
from tests.unit import inbound_world as w
from tests.unit.inbound_world import GENUINE, MISMATCHES, World

ROOT = Path(__file__).resolve().parents[2]
CHANNELS: dict[str, Callable[[World, w.Run], str | None]] = {
    "callback": w.callback,
    "scheduled": w.scheduled,
    "run_event": w.run_event,
    "run_read": w.run_read,
    "buildkite_callback": w.buildkite_callback,
    "buildkite_scheduled": w.buildkite_scheduled,
    "build_read": w.build_read,
}
# (channel, mismatch) -> what the channel answered (the refusal's field, or where the run was dropped) and the metric
# that counted it with the reason.
REFUSED = {
    ("callback", "other_repository_id"): ("repository_id", "IdentityRefused.reason=repository_id"),
    ("callback", "other_owner"): ("repository_owner_id", "IdentityRefused.reason=repository_owner_id"),
    ("callback", "workflow_outside_pin"): ("job_workflow_ref", "IdentityRefused.reason=workflow"),
    ("callback", "other_repository_title"): ("ticket", "CallbackRejected.reason=forbidden"),
    ("scheduled", "other_repository_id"): ("repository_id", "IdentityRefused.reason=repository_id"),
    ("scheduled", "other_owner"): ("repository_owner_id", "IdentityRefused.reason=repository_owner_id"),
    ("scheduled", "workflow_outside_pin"): ("job_workflow_ref", "IdentityRefused.reason=workflow"),
    # Without a repository_id pin the webhook cannot tell the new repository from the old: the runs worker can, by
    # GitHub's id of the name when it was dispatched to.
    ("run_event", "other_repository_id"): ("not bound", "RunUnbound.reason=repository_id"),
    ("run_event", "other_owner"): ("dropped at the webhook", "RunEventDropped.reason=repository_owner_id"),
    ("run_event", "workflow_outside_pin"): ("dropped at the webhook", "RunEventDropped.reason=workflow"),
    ("run_event", "fork"): ("dropped at the webhook", "RunEventDropped.reason=head_repository"),
    ("run_event", "other_installation"): ("not bound", "RunUnbound.reason=installation"),
    ("run_event", "other_repository_title"): ("not bound", "RunUnbound.reason=repository"),
    ("run_read", "other_repository_id"): ("not bound", "IdentityRefused.reason=repository_id"),
    ("run_read", "other_owner"): ("not bound", "IdentityRefused.reason=repository_owner_id"),
    ("run_read", "workflow_outside_pin"): ("not bound", "IdentityRefused.reason=workflow"),
    ("run_read", "fork"): ("not bound", "IdentityRefused.reason=head_repository"),
    ("run_read", "other_repository_title"): ("not bound", "IdentityRefused.reason=repository"),
    ("buildkite_callback", "fork"): ("build_number", "IdentityRefused.reason=build_number"),
    ("buildkite_callback", "other_repository_title"): ("ticket", "CallbackRejected.reason=forbidden"),
    ("buildkite_scheduled", "fork"): ("build_source", "CallbackRejected.reason=forbidden"),
    ("build_read", "fork"): ("not read", "IdentityRefused.reason=build_number"),
}
_PIPELINE = "a Buildkite token or build names its pipeline by UUID (ci_providers.yml), not a GitHub repository id,"
# Why each other pair is no case: what the channel is never told cannot fool it.
NOT_TOLD = {
    ("callback", "fork"): "a token is its run's repository's: a fork's job is the fork's (another repository's)",
    ("callback", "other_installation"): "a token names no installation; GitHub's repository id binds it",
    ("scheduled", "fork"): "a token is its run's repository's: a fork's job is the fork's (another repository's)",
    ("scheduled", "other_installation"): "a token names no installation; GitHub's repository id binds it",
    ("scheduled", "other_repository_title"): "a scheduled report names an upstream commit, never a dispatch",
    ("run_read", "other_installation"): "the relay reads a run through the installation it looks up for its name",
    **{
        (channel, mismatch): f"{_PIPELINE} owner, workflow file or installation"
        for channel in ("buildkite_callback", "buildkite_scheduled", "build_read")
        for mismatch in ("other_repository_id", "other_owner", "workflow_outside_pin", "other_installation")
    },
    ("buildkite_scheduled", "other_repository_title"): "a scheduled report names an upstream commit, never a dispatch",
    ("build_read", "other_repository_title"): "the relay reads the build it created, by its pipeline and number",
}


@pytest.fixture(scope="module")
def issuers() -> Iterator[tuple[OidcIssuer, BuildkiteOidc]]:
    with OidcIssuer() as github, BuildkiteOidc(audience="crcr", organization_id=w.ORG, pipeline_id=w.PIPELINE) as bk:
        yield github, bk


@pytest.fixture
def world(issuers: tuple[OidcIssuer, BuildkiteOidc]) -> World:
    return World(*issuers, tickets=w.ticket_keys())


def test_every_channel_meets_every_mismatch() -> None:
    every = {(channel, mismatch) for channel in CHANNELS for mismatch in MISMATCHES}
    assert set(REFUSED) | set(NOT_TOLD) == every and not set(REFUSED) & set(NOT_TOLD)


@pytest.mark.parametrize("channel", CHANNELS)
def test_the_genuine_run_of_every_channel_is_recorded(world: World, channel: str) -> None:
    assert CHANNELS[channel](world, GENUINE) is None
    assert world.recorded() == (["test"] if "build" in channel else ["build"])
    assert not [k for k in world.metrics.counts if k.startswith(("IdentityRefused", "RunUnbound", "RunEventDropped"))]


@pytest.mark.parametrize(("channel", "mismatch"), sorted(REFUSED))
def test_each_mismatch_is_refused_by_every_channel_and_counted_with_its_reason(
    world: World, channel: str, mismatch: str
) -> None:
    answer, metric = REFUSED[(channel, mismatch)]
    assert CHANNELS[channel](world, MISMATCHES[mismatch]) == answer
    assert world.recorded() == [] and world.metrics.counts[metric] == 1, dict(world.metrics.counts)
    if not metric.startswith("CallbackRejected"):  # the door's own refusal, by whichever channel
        check = metric.split("=", 1)[1]
        assert world.metrics.counts[f"IdentityRefused.reason={check}"] == 1
        assert world.metrics.counts[f"IdentityRefused.channel={_channel_of(channel).value}"] == 1
    if channel == "run_event":  # refused: nothing bound, no jobs listing read from GitHub
        assert world.runs.bound_runs == {} and not [a for a in world.github.asked if a.startswith("jobs")]
    if channel == "build_read":
        return  # the sweeper timed the dispatch out: what Buildkite cannot tell of it (crcr.app.sweep)
    # The genuine run of the same case, after the refusal, is recorded.
    world.queued.clear()
    assert CHANNELS[channel](world, GENUINE) is None and world.recorded()


def _channel_of(driver: str) -> Channel:
    return {
        "callback": Channel.GITHUB_OIDC,
        "scheduled": Channel.GITHUB_OIDC,
        "run_event": Channel.RUN_EVENT,
        "run_read": Channel.RUN_READ,
        "buildkite_callback": Channel.BUILDKITE_OIDC,
        "buildkite_scheduled": Channel.BUILDKITE_OIDC,
        "build_read": Channel.BUILD_READ,
    }[driver]


def test_an_outsiders_run_events_are_dropped_at_the_webhook_never_queued(world: World) -> None:
    outsider = replace(GENUINE, repo="mallory/backend", head_repo="mallory/backend", repo_id=9001, head_repo_id=9001)
    for _ in range(300):
        assert w.run_event(world, outsider) == "dropped at the webhook"
    assert world.queued == [] and world.metrics.counts["RunEventDropped.reason=not_allowlisted"] == 300
    assert w.run_event(world, GENUINE) is None and world.recorded() == ["build"]


# -- the door itself: every fact each channel states, each pin ----------------------------------------------------
ENTRY = Entry(w.BACKEND, Level.L2, settings=RepoSettings(repository_owner_id=77, workflows=(w.PINNED_WORKFLOW,)))
KNOWN = Known(repository_id=5001, installation_id=101, build_number=1514, build_id=w.BUILD)
GITHUB = {"repository": w.BACKEND, "repository_id": "5001", "repository_owner_id": "77", "workflow": w.PINNED_WORKFLOW}
SAID = {
    Channel.GITHUB_OIDC: Evidence(Channel.GITHUB_OIDC, **GITHUB),
    Channel.RUN_EVENT: Evidence(Channel.RUN_EVENT, **GITHUB, head_repository_id="5001", installation_id="101"),
    Channel.RUN_READ: Evidence(Channel.RUN_READ, **GITHUB, head_repository_id="5001"),
    Channel.BUILDKITE_OIDC: Evidence(
        Channel.BUILDKITE_OIDC, repository=w.BACKEND, build_number="1514", build_id=w.BUILD
    ),
    Channel.BUILD_READ: Evidence(Channel.BUILD_READ, build_number="1514", build_id=w.BUILD),
}
WRONG = {
    "repository": {"repository": "org/Backend2"},
    "repository_id": {"repository_id": "6001", "head_repository_id": "6001"},
    "repository_owner_id": {"repository_owner_id": "78"},
    "workflow": {"workflow": f"{w.BACKEND}/.github/workflows/release.yml@refs/heads/main"},
    "head_repository": {"head_repository_id": "7001"},
    "installation": {"installation_id": "202"},
    "build_number": {"build_number": "1515"},
    "build_id": {"build_id": w.OTHER_BUILD},
}


@pytest.mark.parametrize(("channel", "fact"), [(c, f) for c in Channel for f in sorted(STATES[c])])
def test_the_door_refuses_each_fact_a_channel_states_naming_where_it_was_said(channel: Channel, fact: str) -> None:
    said = SAID[channel]
    assert admit(ENTRY, said, KNOWN) is ENTRY
    with pytest.raises(Refused) as caught:
        admit(ENTRY, replace(said, **WRONG[fact]), KNOWN)  # type: ignore[arg-type]
    assert (caught.value.check, caught.value.field) == (fact, FIELDS[channel].get(fact, fact))
    assert caught.value.channel == channel.value and len(caught.value.message) < 400
    with pytest.raises(Refused) as caught:
        admit(None, said, KNOWN)
    assert caught.value.check == "not_allowlisted"


def test_a_pin_holds_where_nothing_else_is_known_and_names_compare_as_ascii_only() -> None:
    pinned = replace(ENTRY, settings=replace(ENTRY.settings, repository_id=5001))
    event = SAID[Channel.RUN_EVENT]
    admit(pinned, replace(event, repository="ORG/BACKEND"))  # the webhook: no dispatch known yet, only the pins
    for wrong in ({"repository_id": "6001", "head_repository_id": "6001"}, {"repository": "org/bac\u212aend"}):
        with pytest.raises(Refused):
            admit(pinned, replace(event, **wrong))  # type: ignore[arg-type]
    with pytest.raises(Refused) as caught:  # a pinned fact the channel did not say is not that fact
        admit(pinned, replace(event, repository_owner_id=None))
    assert caught.value.check == "repository_owner_id"


@pytest.mark.parametrize(
    ("path", "branch", "ref"),
    [
        (".github/workflows/ci.yml", "main", f"{w.BACKEND}/.github/workflows/ci.yml@refs/heads/main"),
        ("org/backend/.github/workflows/ci.yml@main", None, "org/backend/.github/workflows/ci.yml@refs/heads/main"),
        ("o/r/.github/workflows/ci.yml@refs/tags/v1", "v1", "o/r/.github/workflows/ci.yml@refs/tags/v1"),
        (".github/workflows/ci.yml", None, None),
        ("", "main", None),
    ],
)
def test_a_runs_workflow_file_is_named_as_a_tokens_job_workflow_ref(path: str, branch: str | None, ref: str) -> None:
    assert workflow_ref(w.BACKEND, path, branch) == ref


# -- no channel goes around the door -----------------------------------------------------------------------------
APP = ROOT / "shared" / "crcr" / "app"
# What tells the relay about a downstream's run, in the use cases: a token, a run event (as GitHub sent it or as the
# webhook queued it), GitHub's run or its jobs listing, Buildkite's build. Reads that only decide the relay's own sends
# (a re-run's `workflow_run`, a dispatch's earlier run) record nothing a downstream said: not channels.
SOURCES = {
    "callback._handle": {"a token"},
    "ingest._downstream_run": {"a run event"},
    "runs.observe_run": {"a queued run event"},
    "runs._dispatch_of": {"a queued run event"},
    "runs.reconcile_attempt": {"GitHub's jobs listing"},
    "sweep._bind_and_settle": {"GitHub's run"},
    "sweep._asked_buildkite": {"Buildkite's build"},
}
DOOR = {"admit", "check_identity", "check_buildkite_build"}


def _sources(fn: ast.FunctionDef) -> set[str]:
    found = {"a queued run event" for a in fn.args.args if a.annotation and ast.unparse(a.annotation) == "RunMessage"}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id == "WorkflowRunEvent":
            found.add("a run event")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, attr = ast.unparse(node.func.value), node.func.attr
            if attr == "verify" and owner.endswith("tokens"):
                found.add("a token")
            if attr == "run_jobs" or (attr == "run" and owner.endswith("github")):
                found.add("GitHub's jobs listing" if attr == "run_jobs" else "GitHub's run")
            if attr == "build" and owner.endswith("builds"):
                found.add("Buildkite's build")
    return found


def test_no_channel_goes_around_the_door() -> None:
    """Every use-case function that reads what a channel says of a run passes the door itself (calls it, or a
    function that does), or is called only from functions that do; and the door's wrappers call the door."""
    rules = ast.parse((ROOT / "shared/crcr/domain/callback_rules.py").read_text())
    for fn in (n for n in rules.body if isinstance(n, ast.FunctionDef) and n.name in DOOR):
        assert "admit" in _calls(fn), fn.name
    functions: dict[str, ast.FunctionDef] = {}
    for path in APP.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                functions[f"{path.stem}.{node.name}"] = node
    by_name = {q.split(".", 1)[1]: q for q in functions}

    def callees(q: str) -> set[str]:
        module = q.split(".", 1)[0]
        return {f"{module}.{c}" if f"{module}.{c}" in functions else by_name.get(c, c) for c in _calls(functions[q])}

    def passes(q: str, seen: frozenset[str] = frozenset()) -> bool:
        called = callees(q)
        return bool(called & DOOR) or any(passes(c, seen | {q}) for c in called if c in functions and c not in seen)

    sources = {q: found for q, fn in functions.items() if (found := _sources(fn))}
    assert sources == SOURCES  # a new reading of a run is a new channel: it goes through the door and into CHANNELS
    for q in sources:
        callers = [c for c in functions if q in callees(c)]
        assert passes(q) or (callers and all(passes(c) for c in callers)), f"{q} reads a run around the door"


def _calls(fn: ast.FunctionDef) -> set[str]:
    return {
        node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        for node in ast.walk(fn)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
    }
