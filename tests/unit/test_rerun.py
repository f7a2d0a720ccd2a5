"""Re-runs of downstream runs through the check-run writer: the relay's one retry of an infrastructure failure
(once per run, attempt 1 only, GitHub runs only, paced on the downstream's installation, its outcome marked)
and re-runs asked for from the Checks tab (planned into ChecksQueue, then paced the same way)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.checks import CheckDeps, sync
from crcr.app.outbound import Permit
from crcr.app.plan import PlannerDeps, plan_event
from crcr.app.ports.github import GitHubError, GitHubRateLimited, GitHubRejected, GitHubUnavailable
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.reruns import RerunClaim, WorkflowRun
from crcr.app.rerun import RerunDeps, RetryDeps
from crcr.contracts.check_messages import CheckSync, RerunRequest
from crcr.contracts.messages import EventMessage
from crcr.domain.checks import Known
from crcr.domain.ids import NO_RUN
from tests.unit.fakes import (
    FakeBlobs,
    FakeClock,
    FakeDispatchQueue,
    FakePacer,
    FakeState,
    RecordingMetrics,
    StaticAllowlist,
    door,
)

UPSTREAM, HEAD = "pytorch/pytorch", "a" * 40
L4, L3, L2 = "org/l4", "org/l3", "org/l2"
ALLOWLIST = parse_allowlist(f"L2:\n  - {L2}\nL3:\n  gpu:\n    {L3}: []\nL4:\n  - {L4}\n")
UPSTREAM_INSTALLATION, DOWNSTREAM_INSTALLATION = 1, 7
BUILD_UUID = "0190b2a4-1111-4222-8333-444455556666"


def job(name: str = "test", run_id: str = "777", attempt: int = 1, repo: str = L4, **changes: Any) -> JobRecord:
    record = JobRecord(
        dispatch_id="disp-1", run_id=run_id, run_attempt=attempt, job_name=name, workflow_name="CI",
        state="completed", conclusion="failure", fingerprint="f", url=f"https://github.com/{repo}/actions/runs/1",
        repo=repo, repo_id=5, level=4 if repo == L4 else 3 if repo == L3 else 2, delivery_id="dlv", upstream=UPSTREAM,
        head_sha=HEAD, pr=12, device=None, dispatched_at=1000.0, started_at=1100.0, completed_at=1500.0,
        callback_payload="{}", failure_kind="infra",
    )  # fmt: skip
    return replace(record, **changes)


def message(record: JobRecord, **changes: Any) -> RerunRequest:
    """What the reporter sends for an infrastructure failure of an L3/L4 PR job."""
    return RerunRequest(
        upstream=record.upstream, head_sha=record.head_sha, delivery_id=record.delivery_id,
        repo=record.repo, dispatch_id=record.dispatch_id, run_id=record.run_id, run_attempt=record.run_attempt,
        job_name=record.job_name,
    ).model_copy(update=changes)  # fmt: skip


@dataclass
class FakeReruns:
    """The Reruns port: runs by (repo, run_id); every call recorded; scripted errors per call kind."""

    runs: dict[tuple[str, str], WorkflowRun] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    errors: dict[str, list[GitHubError]] = field(default_factory=dict)
    already_running: bool = False

    def _call(self, kind: str, repo: str, run_id: str) -> None:
        self.calls.append((kind, repo, run_id))
        queue = self.errors.get(kind) or []
        if queue:
            raise queue.pop(0)

    def installation_for(self, repo: str) -> int:
        return DOWNSTREAM_INSTALLATION

    def workflow_run(self, repo: str, run_id: str) -> WorkflowRun:
        self._call("get", repo, run_id)
        return self.runs.get((repo, run_id), WorkflowRun("completed", 1))

    def rerun_failed_jobs(self, repo: str, run_id: str, *, permit: Permit) -> bool:
        self._call("rerun", repo, run_id)
        if self.already_running:
            return False
        self.runs[(repo, run_id)] = WorkflowRun(
            "queued", self.runs.get((repo, run_id), WorkflowRun("", 1)).run_attempt + 1
        )
        return True

    def suite_check_runs(self, upstream: str, suite_id: int) -> list[tuple[int, str, str | None]]:
        return [
            (501, f"crcr/{L4}/CI/build", f"{L4}:777:12"),
            (502, f"crcr/{L4}/CI/test", f"{L4}:777:12"),  # the same run: re-run once
            (503, f"crcr/{L3}/CI/build", f"{L3}:888:12"),
            (504, "crcr/evil/repo/CI/x", "evil/repo:999:12"),  # not written by the relay
        ]

    @property
    def reruns(self) -> list[tuple[str, str]]:
        return [(repo, run_id) for kind, repo, run_id in self.calls if kind == "rerun"]


@dataclass
class FakeMarks:
    """RerunMarker like the state table: a claim row with a lease, and a marker put only once."""

    markers: dict[tuple[str, str], str] = field(default_factory=dict)
    claims: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    released: int = 0

    def claim_rerun(self, dispatch_id: str, run_id: str, owner: str, now: float, lease_s: float) -> RerunClaim:
        held = self.claims.get((dispatch_id, run_id))
        if held is not None and held[1] >= now:
            return RerunClaim.BUSY
        if (dispatch_id, run_id) in self.markers:
            return RerunClaim.DONE
        self.claims[(dispatch_id, run_id)] = (owner, now + lease_s)
        return RerunClaim.CLAIMED

    def release_rerun(self, dispatch_id: str, run_id: str, owner: str) -> None:
        if self.claims.get((dispatch_id, run_id), ("", 0.0))[0] == owner:
            del self.claims[(dispatch_id, run_id)]
            self.released += 1

    def mark_rerun(self, dispatch_id: str, run_id: str, status: str, now: float) -> bool:
        if (dispatch_id, run_id) in self.markers:
            return False
        self.markers[(dispatch_id, run_id)] = status
        return True


@dataclass
class FakeResults:
    jobs: dict[tuple[str, str, int, str], JobRecord] = field(default_factory=dict)

    def add(self, *records: JobRecord) -> FakeResults:
        for r in records:
            self.jobs[(r.dispatch_id, r.run_id, r.run_attempt, r.job_name)] = r
        return self

    def get_job(self, dispatch_id: str, run_id: str, run_attempt: int, job_name: str) -> JobRecord | None:
        return self.jobs.get((dispatch_id, run_id, run_attempt, job_name))

    def jobs_of_dispatch(self, dispatch_id: str) -> list[JobRecord]:
        return [j for j in self.jobs.values() if j.dispatch_id == dispatch_id]

    def put_job(self, record: JobRecord, expected_version: int | None) -> bool:
        raise AssertionError("re-runs never write results")


@dataclass
class FakeChecksQueue:
    sent: list[tuple[CheckSync, float]] = field(default_factory=list)
    dead: list[tuple[CheckSync, str]] = field(default_factory=list)

    def send_checks(self, messages: list[CheckSync], delay_s: float = 0.0) -> None:
        self.sent += [(m, delay_s) for m in messages]

    def dead_letter(self, message: CheckSync, reason: str) -> None:
        self.dead.append((message, reason))


class NoCheckRuns:
    """The upstream check-run API: a re-run must never write a check run (nor spend the upstream's budget)."""

    def installation_for(self, upstream: str) -> int:
        return UPSTREAM_INSTALLATION

    def create_check_run(self, upstream: str, fields: dict[str, Any], *, permit: Permit) -> int:
        raise AssertionError("a re-run writes no check run")

    def update_check_run(self, upstream: str, check_run_id: int, fields: dict[str, Any], *, permit: Permit) -> None:
        raise AssertionError("a re-run writes no check run")


@dataclass
class FakeCheckStore:
    """What the relay wrote: (head, name) -> check run id."""

    known: dict[str, int] = field(default_factory=dict)

    def get_check(self, upstream: str, head_sha: str, name: str) -> tuple[Known | None, int]:
        if name in self.known:
            return Known(self.known[name], "completed", "failure", 1), 3
        return None, 0

    def record_check(self, *args: Any) -> bool:
        raise AssertionError("no check-run writes")

    def checks_of_head(self, upstream: str, head_sha: str) -> dict[str, tuple[Known | None, int]]:
        return {}


@dataclass
class World:
    github: FakeReruns = field(default_factory=FakeReruns)
    marks: FakeMarks = field(default_factory=FakeMarks)
    results: FakeResults = field(default_factory=FakeResults)
    queue: FakeChecksQueue = field(default_factory=FakeChecksQueue)
    pacer: FakePacer = field(default_factory=FakePacer)
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)
    clock: FakeClock = field(default_factory=lambda: FakeClock(2000.0))
    store: FakeCheckStore = field(default_factory=FakeCheckStore)

    @property
    def reruns(self) -> RerunDeps:
        return RerunDeps(github=self.github, store=self.store, allowlist=StaticAllowlist(ALLOWLIST),
                         metrics=self.metrics, door=door())  # fmt: skip

    @property
    def deps(self) -> CheckDeps:
        return CheckDeps(
            api=NoCheckRuns(), store=self.store, results=self.results, ledger=FakeState(), prs=FakeState(),
            queue=self.queue,
            pacer=self.pacer, allowlist=StaticAllowlist(ALLOWLIST), metrics=self.metrics, clock=self.clock,
            reruns=self.reruns,
            retries=RetryDeps(results=self.results, marks=self.marks, clock=self.clock, lease_s=30.0, give_up_s=3600.0),
            rand=lambda: 0.5, door=door()
        )  # fmt: skip

    def sync(self, msg: CheckSync) -> str:
        return sync(msg, self.deps).detail

    def resent(self) -> CheckSync:
        """The one message re-sent to the queue since the last look, with the clock moved to when it is due."""
        [(msg, _)] = self.queue.sent
        self.queue.sent.clear()
        self.clock.t = max(self.clock.t, msg.not_before or 0.0)
        return msg


def test_an_infrastructure_failure_is_rerun_once_per_run_however_many_jobs_ask() -> None:
    w = World()
    build, test = job("build"), job("test")
    w.results.add(build, test)
    assert w.sync(message(build)) == "requested"
    assert w.sync(message(test)) == "already_decided"  # the run's other failed job: the same re-run covered it
    assert w.sync(message(build)) == "already_decided"  # the reporter's message again (stream retry)
    assert w.github.reruns == [(L4, "777")]
    assert w.marks.markers == {("disp-1", "777"): "requested"}
    assert w.metrics.counts["InfraRetryRequested"] == 1
    assert w.metrics.counts["RerunIgnored.reason=already_decided"] == 2
    assert w.marks.claims == {}  # every claim released


def test_only_attempt_1_is_retried_and_never_a_run_someone_already_reran() -> None:
    w = World()
    second = job(attempt=2)
    w.results.add(second)
    assert w.sync(message(second)) == "not_first_attempt"
    assert w.github.calls == []
    assert w.marks.markers == {("disp-1", "777"): "not_retryable"}

    # Attempt 1 reported late, but a developer re-ran the run from the Checks tab meanwhile.
    w = World()
    first = job()
    w.results.add(first)
    w.github.runs[(L4, "777")] = WorkflowRun("completed", 2)
    assert w.sync(message(first)) == "rerun_already"
    assert w.github.reruns == []
    assert w.marks.markers == {("disp-1", "777"): "not_retryable"}


def test_after_the_relays_retry_the_second_attempts_infra_failure_is_reported_not_retried() -> None:
    w = World()
    first, second = job(), job(attempt=2)
    w.results.add(first, second)
    assert w.sync(message(first)) == "requested"
    assert w.sync(message(second)) == "not_first_attempt"
    assert w.github.reruns == [(L4, "777")]
    assert w.marks.markers == {("disp-1", "777"): "requested"}  # the marker keeps what happened


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (job(run_id=BUILD_UUID), "not_github"),  # a Buildkite build
        (job(name="", run_id=NO_RUN, attempt=0, state="timed_out", conclusion="timed_out", started_at=None,
             failure_kind=None), "never_started"),  # the sweeper's record of a dispatch no job started on
        (job(repo=L2), "not_l3"),
    ],
)  # fmt: skip
def test_what_github_actions_cannot_rerun_is_skipped_without_asking_github(record: JobRecord, reason: str) -> None:
    w = World()
    w.results.add(record)
    assert w.sync(message(record)) == reason
    assert w.github.calls == [] and w.pacer.keys == []
    assert w.marks.markers == {("disp-1", record.run_id): "not_retryable"}
    assert w.metrics.counts[f"RerunIgnored.reason={reason}"] == 1


def test_a_failure_the_downstream_did_not_call_infrastructure_is_not_retried() -> None:
    w = World()
    record = job(failure_kind="test")
    w.results.add(record)
    assert w.sync(message(record)) == "not_infra"
    assert w.github.calls == [] and w.marks.markers == {}  # this job's word only: the run is not decided


def test_a_job_the_sweeper_timed_out_counts_as_infrastructure() -> None:
    w = World()
    record = job(state="timed_out", conclusion="timed_out", failure_kind=None)
    w.results.add(record)
    assert w.sync(message(record)) == "requested"


def test_the_rerun_is_paced_on_the_downstream_installation_with_a_booked_slot() -> None:
    w = World(pacer=FakePacer(waits=[4.0]))
    record = job()
    w.results.add(record)
    assert w.sync(message(record)) == "paced"
    assert w.github.reruns == []
    assert w.pacer.keys == [DOWNSTREAM_INSTALLATION]  # the downstream's budget (its dispatches'), not the upstream's
    later = w.resent()
    assert (later.slot_at, later.attempt, w.clock.t) == (2004.0, 0, 2004.0)  # the slot is booked for this message
    assert w.metrics.counts["RerunPaced"] == 1 and w.marks.claims == {} and w.marks.markers == {}
    assert w.sync(later) == "requested"
    assert w.pacer.keys == [DOWNSTREAM_INSTALLATION]  # the booked slot was spent: the pacer not asked again
    assert w.github.reruns == [(L4, "777")]


def test_github_refusing_the_rerun_is_marked_refused_and_counted_not_dead_lettered() -> None:
    w = World()
    record = job()
    w.results.add(record)
    w.github.errors["rerun"] = [GitHubRejected(403, "This workflow run cannot be retried")]
    assert w.sync(message(record)) == "refused"
    assert w.marks.markers == {("disp-1", "777"): "refused"}
    assert w.metrics.counts["RerunIgnored.reason=refused"] == 1
    assert w.queue.dead == [] and w.queue.sent == []
    assert w.sync(message(record)) == "already_decided"  # never asked again


def test_already_running_means_someone_else_reran_it() -> None:
    w = World()
    record = job()
    w.results.add(record)
    w.github.already_running = True
    assert w.sync(message(record)) == "rerun_already"
    assert w.marks.markers == {("disp-1", "777"): "not_retryable"}


def test_5xx_backs_off_and_rate_limits_wait_without_deciding() -> None:
    w = World()
    record = job()
    w.results.add(record)
    w.github.errors["rerun"] = [GitHubUnavailable("POST: HTTP 502")]
    w.github.errors["get"] = [GitHubRateLimited(42.0, "secondary rate limit")]
    assert w.sync(message(record)).startswith("rate_limited")
    assert w.queue.sent[0][1] == 42.0
    again = w.resent()
    assert again.attempt == 0  # waiting as told spends no attempt
    assert w.sync(again).startswith("unavailable")
    again = w.resent()
    assert again.attempt == 1
    assert w.marks.markers == {} and w.marks.claims == {}
    assert w.metrics.counts["RerunRetried.reason=rate_limited"] == 1
    assert w.metrics.counts["RerunRetried.reason=unavailable"] == 1
    assert w.sync(again) == "requested"
    assert w.github.reruns == [(L4, "777"), (L4, "777")]  # the 502, then the one that went through


def test_5xx_to_the_end_dead_letters_the_rerun() -> None:
    w = World()
    record = job()
    w.results.add(record)
    w.github.errors["get"] = [GitHubUnavailable("GET: HTTP 503")]
    assert w.sync(message(record, attempt=7)).startswith("unavailable")
    assert [reason for _, reason in w.queue.dead] and w.metrics.counts["RerunDeadLettered"] == 1


def test_a_run_still_running_is_left_alone_and_looked_at_again_until_it_completes() -> None:
    w = World()
    record = job()
    w.results.add(record)
    w.github.runs[(L4, "777")] = WorkflowRun("in_progress", 1)  # other jobs of the run go on
    assert w.sync(message(record)) == "running"
    assert w.github.reruns == [] and w.marks.markers == {} and w.marks.claims == {}
    [(_, delay)] = w.queue.sent
    assert 30.0 <= delay <= 900.0 and w.metrics.counts["RerunRetried.reason=running"] == 1
    later = w.resent()

    w.github.runs[(L4, "777")] = WorkflowRun("completed", 1)
    assert w.sync(later) == "requested"
    assert w.github.reruns == [(L4, "777")]


def test_a_run_running_past_the_run_timeout_is_given_up() -> None:
    w = World(clock=FakeClock(1500.0 + 3600.0))
    record = job()
    w.results.add(record)
    w.github.runs[(L4, "777")] = WorkflowRun("in_progress", 1)
    assert w.sync(message(record)) == "still_running"
    assert w.marks.markers == {("disp-1", "777"): "not_retryable"} and w.queue.sent == []


def test_two_jobs_of_one_run_deciding_at_once_wait_for_each_other() -> None:
    w = World()
    record = job()
    w.results.add(record)
    w.marks.claims[("disp-1", "777")] = ("another-message", 2010.0)
    assert w.sync(message(record)) == "busy"
    assert w.github.calls == [] and w.queue.sent[0][1] == 1.0
    assert w.metrics.counts["RerunRetried.reason=busy"] == 1


# -- the Checks tab -------------------------------------------------------------------------------------------


def checks_tab(repo: str = L4, run_id: str = "777") -> RerunRequest:
    return RerunRequest(requested_by="checks_tab", upstream=UPSTREAM, head_sha=HEAD, repo=repo, run_id=run_id)


def test_a_checks_tab_rerun_is_paced_on_the_downstream_installation_too_and_marks_nothing() -> None:
    w = World(pacer=FakePacer(waits=[3.0]))
    assert w.sync(checks_tab()) == "paced"
    assert w.github.reruns == [] and w.pacer.keys == [DOWNSTREAM_INSTALLATION]
    assert w.sync(w.resent()) == "requested"
    assert w.github.reruns == [(L4, "777")] and w.marks.markers == {}
    assert w.metrics.counts["RerunRequested"] == 1
    # Asked again while the re-run is queued: left alone. Once it completed: re-run again, as often as asked.
    assert w.sync(checks_tab()) == "running"
    w.github.runs[(L4, "777")] = WorkflowRun("completed", 2)
    assert w.sync(checks_tab()) == "requested"
    assert w.github.reruns == [(L4, "777"), (L4, "777")]


@pytest.mark.parametrize(
    ("msg", "reason"),
    [(checks_tab(run_id=BUILD_UUID), "not_github"), (checks_tab(run_id=NO_RUN), "never_started"),
     (checks_tab(repo=L2), "not_l3")],
)  # fmt: skip
def test_a_checks_tab_rerun_of_what_cannot_be_rerun_asks_nothing(msg: CheckSync, reason: str) -> None:
    w = World()
    assert w.sync(msg) == reason
    assert w.github.calls == [] and w.marks.markers == {}


def test_a_checks_tab_rerun_github_refuses_is_counted_and_dropped() -> None:
    w = World()
    w.github.errors["rerun"] = [GitHubRejected(403, "This workflow run cannot be retried")]
    assert w.sync(checks_tab()) == "refused"
    assert w.queue.dead == [] and w.metrics.counts["RerunIgnored.reason=refused"] == 1


def rerequested(event: str, doc: dict[str, Any]) -> EventMessage:
    text = json.dumps(doc)
    return EventMessage(delivery_id="dlv-rr", event=event, received_at=0, body=text,
                        body_sha256=hashlib.sha256(text.encode()).hexdigest())  # fmt: skip


def planner(w: World) -> PlannerDeps:
    return PlannerDeps(
        upstream=UPSTREAM, allowlist=StaticAllowlist(ALLOWLIST), blobs=FakeBlobs(), prs=FakeState(), branch=FakeState(),
        dispatches=FakeDispatchQueue(), metrics=w.metrics, clock=w.clock, checks=w.queue, reruns=w.reruns, door=door()
    )  # fmt: skip


def test_the_planner_hands_checks_tab_reruns_to_the_check_run_writer_and_calls_no_rerun_itself() -> None:
    w = World()
    w.store.known = {f"crcr/{L4}/CI/build": 501, f"crcr/{L4}/CI/test": 502, f"crcr/{L3}/CI/build": 503}
    suite = {"action": "rerequested", "check_suite": {"id": 9, "head_sha": HEAD}, "repository": {"full_name": UPSTREAM}}
    summary = plan_event(rerequested("check_suite", suite), planner(w))
    assert summary.skipped == {f"{L4}:777": "rerun_queued", f"{L3}:888": "rerun_queued"}
    assert w.github.reruns == []  # the planner only reads the suite; the writer paces the writes
    sent = [(m.kind, m.requested_by, m.repo, m.run_id, d) for m, d in w.queue.sent]
    assert sent == [("rerun", "checks_tab", L4, "777", 0.0), ("rerun", "checks_tab", L3, "888", 0.0)]

    w.queue.sent.clear()
    run = {"id": 666, "name": f"crcr/{L4}/CI/build", "head_sha": HEAD, "external_id": f"{L4}:777:12"}
    doc = {"action": "rerequested", "check_run": run, "repository": {"full_name": UPSTREAM}}
    assert plan_event(rerequested("check_run", doc), planner(w)).skipped == {run["name"]: "not_ours"}
    assert w.queue.sent == [] and w.metrics.counts["RerunIgnored.reason=not_ours"] == 1
    run["id"] = 501
    plan_event(rerequested("check_run", doc), planner(w))
    assert [(m.repo, m.run_id) for m, _ in w.queue.sent] == [(L4, "777")]
