"""Buildkite dispatches with recording fakes: one build per (delivery, repository), whatever Buildkite does."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.dispatch import BuildkiteDeps, DispatchDeps, Result, dispatch, dispatch_id, new_build
from crcr.app.outbound import BUILDKITE
from crcr.app.plan import PlannerDeps, plan_event
from crcr.app.ports.buildkite import BuildkiteRateLimited, BuildkiteRejected, BuildkiteUnavailable
from crcr.app.ports.ledger import LedgerState
from crcr.contracts.messages import BuildkiteTarget, DispatchMessage, EventMessage
from crcr.domain.levels import Level
from crcr.domain.pacing import BUILDKITE_RATES, pace
from crcr.domain.retry import RetryPolicy, buildkite_rate_limit_wait
from tests.unit.fakes import (
    FakeBlobs,
    FakeBuilds,
    FakeClock,
    FakeDispatchQueue,
    FakeGitHub,
    FakePacer,
    FakeSigner,
    FakeState,
    RecordingMetrics,
    StaticAllowlist,
    door,
    permit,
)

REPO = "vllm-project/vllm"
DID = dispatch_id("d-1", REPO)
TARGET = BuildkiteTarget(organization="vllm", pipeline="ci", branch="main")
SETTLE_S = 30.0


def message(**changes: object) -> DispatchMessage:
    base = DispatchMessage(
        delivery_id="d-1",
        event_type="pull_request",
        action="synchronize",
        target_repo=REPO,
        level=Level.L2,
        upstream="pytorch/pytorch",
        pr_number=5,
        head_sha="a" * 40,
        payload={"action": "synchronize"},
        planned_at=0.0,
        buildkite=TARGET,
        repository_id=42,
    )
    return base.model_copy(update=changes)


@pytest.fixture
def builds() -> FakeBuilds:
    return FakeBuilds()


@pytest.fixture
def deps(builds: FakeBuilds) -> DispatchDeps:
    state = FakeState()  # the ledger and the PR heads, as one table holds both
    return DispatchDeps(
        github=FakeGitHub(),  # installed nowhere: a Buildkite dispatch must not need GitHub
        ledger=state,
        prs=state,
        queue=FakeDispatchQueue(),
        pacer=FakePacer(),
        signer=FakeSigner(),
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        callback_url="https://relay.example/callback",
        ticket_ttl_s=3600,
        policy=RetryPolicy(base_s=2, cap_s=900, max_attempts=4),
        rand=lambda: 0.5,
        buildkite=BuildkiteDeps(builds=builds, pacer=FakePacer(), lease_s=50.0, settle_s=SETTLE_S),
        door=door(),
    )


def queue(deps: DispatchDeps) -> FakeDispatchQueue:
    assert isinstance(deps.queue, FakeDispatchQueue)
    return deps.queue


def ledger(deps: DispatchDeps) -> FakeState:
    assert isinstance(deps.ledger, FakeState)
    return deps.ledger


def counts(deps: DispatchDeps) -> RecordingMetrics:
    assert isinstance(deps.metrics, RecordingMetrics)
    return deps.metrics


def next_attempt(deps: DispatchDeps) -> DispatchMessage:
    """The re-sent message, delivered once its delay has passed."""
    current, delay = queue(deps).rescheduled[-1]
    deps.clock.t += delay  # type: ignore[attr-defined]
    return current


def test_a_build_is_created_with_the_relay_word_in_env_and_recorded(deps: DispatchDeps, builds: FakeBuilds) -> None:
    outcome = dispatch(message(), deps)
    assert outcome.result is Result.DISPATCHED and outcome.build is not None
    [(org, pipeline, build, ref)] = builds.builds
    assert (org, pipeline, build.branch, build.commit) == ("vllm", "ci", "main", "HEAD")
    assert build.env == {
        "CRCR_TICKET": f"ticket-for-{REPO}-{DID}",
        "CRCR_CALLBACK_URL": "https://relay.example/callback",
        "CRCR_DELIVERY_ID": "d-1",
        "CRCR_EVENT_TYPE": "pull_request",
        "CRCR_UPSTREAM_REPO": "pytorch/pytorch",
        "CRCR_UPSTREAM_SHA": "a" * 40,
        "CRCR_UPSTREAM_PR": "5",
    }
    assert build.meta_data == {"crcr_dispatch_id": DID, "crcr_delivery_id": "d-1"}
    assert "pytorch/pytorch#5" in build.message and "a" * 40 in build.message
    [claims] = ledger(deps).dispatched_claims
    assert (claims.ci, claims.sub, claims.repo_id, claims.jti) == ("buildkite", REPO, 42, DID)
    row = deps.ledger.get("d-1", REPO)
    assert row is not None and row.state is LedgerState.DISPATCHED and row.ci == "buildkite"
    assert (row.build_id, row.build_number, row.build_url) == (ref.id, ref.number, ref.url)
    assert counts(deps).counts["DispatchSent.level=L2"] == 1 and counts(deps).counts["BuildkiteBuildCreated"] == 1
    assert deps.buildkite is not None and deps.buildkite.pacer.keys == ["vllm"]  # type: ignore[attr-defined]
    assert deps.github.sent == [] and deps.pacer.keys == []  # type: ignore[attr-defined]


def test_a_push_names_the_branch_and_leaves_the_pr_empty_and_without_a_pin_repo_id_is_0(
    deps: DispatchDeps, builds: FakeBuilds
) -> None:
    push = message(event_type="push", action=None, pr_number=None, ref="refs/heads/main", repository_id=None)
    assert dispatch(push, deps).result is Result.DISPATCHED
    build = builds.builds[0][2]
    assert build.env["CRCR_UPSTREAM_PR"] == "" and build.env["CRCR_EVENT_TYPE"] == "push"
    assert "push to refs/heads/main" in build.message
    assert ledger(deps).dispatched_claims[0].repo_id == 0


def test_a_bisection_build_carries_its_marker_in_env_and_says_what_it_bisects(
    deps: DispatchDeps, builds: FakeBuilds
) -> None:
    marker = {"workflow": "CI", "job": "test", "last_pass": "b" * 40, "first_fail": "c" * 40, "testing": "a" * 40}
    run = message(event_type="bisect", action=None, pr_number=None, delivery_id="bisect-1", bisect=marker)
    assert dispatch(run, deps).result is Result.DISPATCHED
    build = builds.builds[0][2]
    assert build.env["CRCR_EVENT_TYPE"] == "bisect" and json.loads(build.env["CRCR_BISECT"]) == marker
    assert build.message == f"crcr: pytorch/pytorch bisecting CI/test at {'a' * 40}"


def test_without_a_token_a_buildkite_repository_is_dead_lettered_naming_the_variable(deps: DispatchDeps) -> None:
    bare = dataclasses.replace(deps, buildkite=None)
    assert dispatch(message(), bare).result is Result.DEAD_LETTERED
    [(_, reason)] = queue(deps).dead
    assert "CRCR_BUILDKITE_API_TOKEN" in reason and reason.startswith("not_configured")
    assert deps.ledger.get("d-1", REPO).state is LedgerState.FAILED  # type: ignore[union-attr]


def test_a_repeated_message_creates_one_build(deps: DispatchDeps, builds: FakeBuilds) -> None:
    dispatch(message(), deps)
    assert dispatch(message(), deps).result is Result.DUPLICATE
    assert len(builds.builds) == 1 and [c[0] for c in builds.calls] == ["create"]


def test_a_5xx_backs_off_past_the_settle_time_then_looks_before_creating(
    deps: DispatchDeps, builds: FakeBuilds
) -> None:
    builds.errors["create"] = [BuildkiteUnavailable("POST ...: HTTP 502")]
    outcome = dispatch(message(), deps)
    assert outcome.result is Result.RESCHEDULED and outcome.delay_s >= SETTLE_S
    assert counts(deps).counts["DispatchRetried.reason=unavailable"] == 1
    assert dispatch(next_attempt(deps), deps).result is Result.DISPATCHED
    assert [c[0] for c in builds.calls] == ["create", "find", "create"] and len(builds.builds) == 1
    assert counts(deps).counts["BuildkiteBuildFound"] == 0


@pytest.mark.parametrize("error", [BuildkiteUnavailable("POST ...: ReadTimeoutError"), BuildkiteUnavailable("502")])
def test_a_send_that_created_the_build_without_saying_so_is_found_not_repeated(
    deps: DispatchDeps, builds: FakeBuilds, error: BuildkiteUnavailable
) -> None:
    builds.errors["create"], builds.created_anyway = [error], 1
    assert dispatch(message(), deps).result is Result.RESCHEDULED
    outcome = dispatch(next_attempt(deps), deps)
    assert outcome.result is Result.DISPATCHED and outcome.reason == "build 1 found"
    assert [c[0] for c in builds.calls] == ["create", "find"] and len(builds.builds) == 1
    row = deps.ledger.get("d-1", REPO)
    assert row is not None and row.build_id == builds.builds[0][3].id and row.build_number == 1
    assert counts(deps).counts["BuildkiteBuildFound"] == 1 and counts(deps).counts["DispatchSent.level=L2"] == 1


def test_a_worker_that_died_after_its_claim_leaves_the_next_attempt_looking(
    deps: DispatchDeps, builds: FakeBuilds
) -> None:
    # The dead worker claimed, sent (Buildkite created build 1) and never recorded anything.
    assert deps.ledger.claim(message(), DID, FakeClock().t - 100, 50.0, "dead-worker", 42, REPO)
    builds.create("vllm", "ci", new_build(message(), "t", "u", DID), permit=permit(BUILDKITE))
    builds.calls.clear()
    assert dispatch(message(), deps).result is Result.DISPATCHED
    assert [c[0] for c in builds.calls] == ["find"] and len(builds.builds) == 1


def test_a_connection_never_made_is_retried_without_a_lookup(deps: DispatchDeps, builds: FakeBuilds) -> None:
    builds.errors["create"] = [BuildkiteUnavailable("POST ...: NewConnectionError", maybe_sent=False)]
    outcome = dispatch(message(), deps)
    assert outcome.result is Result.RESCHEDULED and outcome.delay_s < SETTLE_S  # plain backoff
    assert dispatch(next_attempt(deps), deps).result is Result.DISPATCHED
    assert [c[0] for c in builds.calls] == ["create", "create"]


def test_a_429_waits_as_buildkite_says_spends_no_attempt_and_needs_no_lookup(
    deps: DispatchDeps, builds: FakeBuilds
) -> None:
    builds.errors["create"] = [BuildkiteRateLimited(42.0, "HTTP 429")] * 3
    current = message()
    for _ in range(3):
        outcome = dispatch(current, deps)
        assert outcome.result is Result.RESCHEDULED and outcome.delay_s == 42.0
        current = next_attempt(deps)
        assert current.attempt == 0
    assert dispatch(current, deps).result is Result.DISPATCHED
    assert [c[0] for c in builds.calls] == ["create"] * 4
    assert counts(deps).counts["DispatchRetried.reason=rate_limited"] == 3


@pytest.mark.parametrize("status", [401, 403, 404, 422])
def test_refusals_are_dead_lettered_at_once_with_buildkite_message_then_redriven(
    deps: DispatchDeps, builds: FakeBuilds, status: int
) -> None:
    builds.errors["create"] = [BuildkiteRejected(status, "POST /v2/...: No pipeline found")]
    assert dispatch(message(attempt=2), deps).result is Result.DEAD_LETTERED
    [(dead, reason)] = queue(deps).dead
    assert reason == f"rejected: vllm/ci: {status}: POST /v2/...: No pipeline found"
    assert deps.ledger.get("d-1", REPO).state is LedgerState.FAILED  # type: ignore[union-attr]
    # `crcr dlq redrive` sends it again with a fresh attempt count; the refusal sent nothing, so no lookup.
    assert dispatch(dead.model_copy(update={"attempt": 0}), deps).result is Result.DISPATCHED
    assert [c[0] for c in builds.calls] == ["create", "create"]


def test_attempts_spent_on_unknown_outcomes_dead_letter_and_a_redrive_finds_the_build(
    deps: DispatchDeps, builds: FakeBuilds
) -> None:
    builds.errors["create"] = [BuildkiteUnavailable("HTTP 504")]
    builds.errors["find"] = [BuildkiteUnavailable("HTTP 503")] * 3
    builds.created_anyway = 1
    current = message()
    for _ in range(3):
        assert dispatch(current, deps).result is Result.RESCHEDULED
        current = next_attempt(deps)
    assert dispatch(current, deps).result is Result.DEAD_LETTERED
    [(dead, reason)] = queue(deps).dead
    assert "looking for an earlier build" in reason and "gave up after 4 attempts" in reason
    assert dispatch(dead.model_copy(update={"attempt": 0}), deps).result is Result.DISPATCHED
    assert len(builds.builds) == 1 and counts(deps).counts["BuildkiteBuildFound"] == 1


def test_a_lookup_the_token_may_not_make_is_dead_lettered_naming_the_scope(
    deps: DispatchDeps, builds: FakeBuilds
) -> None:
    builds.errors["create"] = [BuildkiteUnavailable("ReadTimeoutError")]
    builds.errors["find"] = [BuildkiteRejected(403, "GET ...: Forbidden")]
    dispatch(message(), deps)
    assert dispatch(next_attempt(deps), deps).result is Result.DEAD_LETTERED
    assert "read_builds" in queue(deps).dead[0][1]
    assert builds.builds == []  # never created blind


def test_the_lookup_is_paced_too_and_a_paced_lookup_is_asked_again(deps: DispatchDeps, builds: FakeBuilds) -> None:
    assert deps.buildkite is not None
    bk_pacer = deps.buildkite.pacer
    builds.errors["create"] = [BuildkiteUnavailable("ReadTimeoutError")]
    dispatch(message(), deps)
    bk_pacer.waits = [0.0, 5.0]  # type: ignore[attr-defined]
    outcome = dispatch(next_attempt(deps), deps)
    assert outcome.result is Result.RESCHEDULED and outcome.reason == "paced" and outcome.delay_s == 5.0
    assert dispatch(next_attempt(deps), deps).result is Result.DISPATCHED
    assert [c[0] for c in builds.calls] == ["create", "find", "create"]
    # Unsettled: the timed-out create and the one that succeeded; not the paced attempt, which sent nothing.
    assert len(deps.ledger.get("d-1", REPO).unsettled) == 2  # type: ignore[union-attr]


def test_pacing_per_organization_delays_before_any_claim(deps: DispatchDeps, builds: FakeBuilds) -> None:
    assert deps.buildkite is not None
    deps.buildkite.pacer.waits = [3.0]  # type: ignore[attr-defined]
    outcome = dispatch(message(), deps)
    assert outcome.result is Result.RESCHEDULED and outcome.reason == "paced"
    assert builds.calls == [] and deps.ledger.get("d-1", REPO).unsettled == frozenset()  # type: ignore[union-attr]


def test_a_live_claim_by_another_worker_is_not_doubled(deps: DispatchDeps, builds: FakeBuilds) -> None:
    assert deps.ledger.claim(message(), DID, FakeClock().t, 50, "other-worker", 42, REPO)
    outcome = dispatch(message(), deps)
    assert outcome.result is Result.RESCHEDULED and outcome.reason == "in_flight"
    assert builds.calls == []


def test_an_older_commit_is_superseded(deps: DispatchDeps, builds: FakeBuilds) -> None:
    ledger(deps).heads[("pytorch/pytorch", 5)] = "b" * 40
    assert dispatch(message(), deps).result is Result.SUPERSEDED and builds.calls == []


def test_two_builds_found_record_the_oldest_and_count_the_duplicate(deps: DispatchDeps, builds: FakeBuilds) -> None:
    for _ in range(2):  # two earlier attempts both created, neither heard back
        builds.create("vllm", "ci", new_build(message(), "t", "u", DID), permit=permit(BUILDKITE))
    assert deps.ledger.claim(message(), DID, FakeClock().t - 100, 50.0, "dead-worker", 42, REPO)
    assert dispatch(message(), deps).result is Result.DISPATCHED
    assert deps.ledger.get("d-1", REPO).build_number == 1  # type: ignore[union-attr]
    assert counts(deps).counts["BuildkiteBuildDuplicated"] == 1


# -- the planner names the pipeline -------------------------------------------------------------

EVENT = json.loads(
    (Path(__file__).resolve().parents[2] / "examples" / "events" / "pull_request.opened.json").read_text()
)
ALLOWLIST = parse_allowlist(
    "L2:\n  - vllm-project/vllm\n  - org/gha\n"
    "repos:\n  vllm-project/vllm:\n    repository_id: 42\n"
    "    buildkite: {organization: vllm, pipeline: ci, branch: dev}\n"
)


def planned(action: str) -> tuple[list[DispatchMessage], dict[str, str]]:
    doc = json.loads(json.dumps(EVENT))
    doc["action"] = action
    text = json.dumps(doc)
    event = EventMessage(
        delivery_id="d-9", event="pull_request", received_at=0, body=text,
        body_sha256=hashlib.sha256(text.encode()).hexdigest(),
    )  # fmt: skip
    out = FakeDispatchQueue()
    deps = PlannerDeps(
        upstream="pytorch/pytorch",
        allowlist=StaticAllowlist(ALLOWLIST),
        blobs=FakeBlobs(),
        prs=FakeState(),
        branch=FakeState(),
        dispatches=out,
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        door=door(),
    )
    return out.sent, plan_event(event, deps).skipped


def test_the_planner_names_the_pipeline_and_the_pin_of_a_buildkite_downstream() -> None:
    sent, _ = planned("opened")
    by_repo = {m.target_repo: m for m in sent}
    assert by_repo["vllm-project/vllm"].buildkite == BuildkiteTarget(organization="vllm", pipeline="ci", branch="dev")
    assert by_repo["vllm-project/vllm"].repository_id == 42
    assert by_repo["org/gha"].buildkite is None and by_repo["org/gha"].repository_id is None


def test_a_closed_pr_starts_no_build_but_is_still_dispatched_to_github_downstreams() -> None:
    sent, skipped = planned("closed")
    assert [m.target_repo for m in sent] == ["org/gha"]
    assert skipped == {"vllm-project/vllm": "closed_on_buildkite"}


# -- domain rules --------------------------------------------------------------------------------


def test_a_429_waits_for_the_later_reset_of_those_present() -> None:
    assert buildkite_rate_limit_wait({"RateLimit-Reset": "3", "RateLimit-User-Reset": "42"}) == 43.0
    assert buildkite_rate_limit_wait({"ratelimit-reset": "7"}, body_reset=40) == 8.0  # headers first
    assert buildkite_rate_limit_wait({}, body_reset=12) == 13.0
    assert buildkite_rate_limit_wait({"ratelimit-reset": "soon"}) == 60.0  # nothing to go by: a window


def test_buildkite_pacing_stays_under_50_a_minute_with_a_small_burst() -> None:
    state: tuple[float, ...] | None = None
    times: list[float] = []
    for tick in range(720):  # three minutes of callers asking every 0.25 s, as many as will pass
        now = tick * 0.25
        while True:
            new, wait = pace(state, now, BUILDKITE_RATES)
            if wait > 0:
                break
            state = new
            times.append(now)
    assert 2 <= sum(1 for t in times if t == 0) <= 10  # a small burst
    assert max(sum(1 for t in times if start <= t < start + 60) for start in times) < 50
