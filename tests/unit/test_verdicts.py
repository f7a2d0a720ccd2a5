"""Failure verdicts: a PR job's failure judged against its baseline on the branch, its retries and its kind."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.pulls import PrInfo
from crcr.app.report import ReportDeps, judge
from crcr.app.verdicts import Judgement, VerdictDeps, baseline, judgement
from crcr.domain.regressions import Tracked
from crcr.domain.verdicts import Attempt, classify
from tests.unit.fakes import FakeClock, FakeRegressions, RecordingMetrics, door

BASE, OLDER, NEWER, HEAD = "b" * 40, "a" * 40, "c" * 40, "d" * 40


def record(
    state: str = "completed",
    conclusion: str | None = "failure",
    *,
    sha: str = HEAD,
    pr: int | None = 7,
    event: str = "pull_request",
    attempt: int = 1,
    job: str = "test",
    level: int = 4,
    dispatch: str = "dsp-pr",
    kind: str | None = None,
    version: int = 2,
) -> JobRecord:
    return JobRecord(
        dispatch_id=dispatch, run_id="900", run_attempt=attempt, job_name=job, workflow_name="CI", state=state,
        conclusion=conclusion if state == "completed" else ("timed_out" if state == "timed_out" else None),
        fingerprint=f"{state}{attempt}", url="", repo="org/backend", repo_id=1, level=level, delivery_id="d",
        upstream="pytorch/pytorch", head_sha=sha, pr=pr, device=None, dispatched_at=100.0, started_at=110.0,
        completed_at=150.0, callback_payload=json.dumps({}), version=version, event_type=event, failure_kind=kind,
    )  # fmt: skip


@dataclass
class World:
    """The relay's records as the verdict reads them: job rows, PRs, and the branch's commit order."""

    rows: list[JobRecord] = field(default_factory=list)
    prs: dict[int, PrInfo] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    verdicts: dict[tuple[str, int, str], str] = field(default_factory=dict)
    reads: list[tuple[str, str, str]] = field(default_factory=list)  # attempts_of_job calls

    def attempts_of_job(self, dispatch_id: str, run_id: str, job_name: str) -> list[JobRecord]:
        self.reads.append((dispatch_id, run_id, job_name))
        return [r for r in self.rows if (r.dispatch_id, r.run_id, r.job_name) == (dispatch_id, run_id, job_name)]

    def baseline_jobs(self, repo: str, workflow_name: str, job_name: str, since: float) -> list[JobRecord]:
        return [
            r
            for r in self.rows
            if r.repo.lower() == repo.lower() and (r.workflow_name, r.job_name) == (workflow_name, job_name)
            if r.event_type in ("push", "nightly") and r.pr is None
        ]

    def commit_times(self, upstream: str, shas: list[str]) -> dict[str, float]:
        return {s: self.times[s] for s in shas if s in self.times}

    def pr_info(self, upstream: str, pr: int) -> PrInfo | None:
        return self.prs.get(pr)

    def set_verdict(self, job: JobRecord, verdict: str, baseline_sha: str | None = None, known: str = "") -> bool:
        self.verdicts[(job.dispatch_id, job.run_attempt, job.job_name)] = verdict
        return True

    def get_job(self, *_: Any) -> JobRecord | None:
        return None

    def put_job(self, *_: Any) -> bool:
        return True

    def deps(self) -> VerdictDeps:
        return VerdictDeps(results=self, store=self, by_repo=self, branch=self, prs=self, clock=FakeClock(1000.0))


@pytest.fixture
def world() -> World:
    w = World(prs={7: PrInfo(HEAD, BASE)}, times={OLDER: 10.0, BASE: 20.0, NEWER: 30.0})
    return w


def on_branch(sha: str, conclusion: str, dispatch: str, event: str = "push") -> JobRecord:
    return record("completed", conclusion, sha=sha, pr=None, event=event, dispatch=dispatch)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([on_branch(BASE, "success", "p1")], "new"),
        ([on_branch(BASE, "failure", "p1")], "pre-existing"),
        ([on_branch(OLDER, "failure", "p1"), on_branch(BASE, "success", "p2")], "new"),  # the latest at or before
        ([on_branch(OLDER, "success", "p1"), on_branch(NEWER, "failure", "p3")], "new"),  # after the base: not it
        ([on_branch(OLDER, "failure", "p1", event="nightly")], "pre-existing"),  # a scheduled run counts
        ([on_branch(NEWER, "failure", "p3")], "no baseline"),
        ([], "no baseline"),
    ],
)
def test_a_failure_is_judged_against_the_latest_result_at_or_before_the_base(
    world: World, history: list[JobRecord], expected: str
) -> None:
    failed = record()
    world.rows = [*history, failed]
    assert judgement(failed, world.deps()).verdict == expected


def test_a_verdict_names_the_commit_of_the_result_it_compared(world: World) -> None:
    failed = record()
    world.rows = [on_branch(OLDER, "failure", "p1"), on_branch(BASE, "success", "p2"), failed]
    assert judgement(failed, world.deps()) == Judgement("new", BASE)
    world.rows = [on_branch(OLDER, "failure", "p1"), failed]  # the base itself has no result: the latest before it
    assert judgement(failed, world.deps()) == Judgement("pre-existing", OLDER)
    world.rows = [failed]
    assert judgement(failed, world.deps()) == Judgement("no baseline", None)


def test_a_base_the_relay_never_saw_pushed_has_no_baseline(world: World) -> None:
    world.rows = [on_branch(OLDER, "success", "p1")]
    world.prs[7] = PrInfo(HEAD, "e" * 40)
    assert baseline(record(), world.deps()) is None


def test_infra_failures_and_timeouts_are_infra_and_retries_decide(world: World) -> None:
    infra = record(kind="infra")
    world.rows = [on_branch(BASE, "success", "p1"), infra]
    assert judgement(infra, world.deps()).verdict == "infra"
    swept = record("timed_out")
    assert judgement(swept, world.deps()).verdict == "infra"
    # The retry passes: the job was flaky.
    passed = record("completed", "success", attempt=2)
    world.rows.append(passed)
    assert judgement(passed, world.deps()).verdict == "flaky"
    # A retry that fails for real is judged against the baseline.
    failed_again = record("completed", "failure", attempt=2)
    world.rows[-1] = failed_again
    assert judgement(failed_again, world.deps()).verdict == "new"


def test_classify_needs_a_finished_latest_attempt() -> None:
    assert classify([Attempt(1, "completed", "failure"), Attempt(2, "in_progress", None)], None) is None
    assert classify([Attempt(1, "completed", "success")], None) is None
    assert Attempt(1, "completed", "failure", "infra").retryable_infra
    assert not Attempt(2, "completed", "failure", "infra").retryable_infra  # retried once, never twice
    assert not Attempt(0, "timed_out", "timed_out").retryable_infra  # a dispatch no job started on: no run


def test_the_reporter_puts_the_verdict_first_and_reports_the_row_that_carries_it(world: World) -> None:
    failed = record()
    world.rows = [on_branch(BASE, "success", "p1"), failed]
    deps = ReportDeps(torchci=None, dead_letters=None, metrics=RecordingMetrics(), verdicts=world.deps(), door=door())  # type: ignore[arg-type]
    assert judge(None, failed, deps) is False  # not reported yet: its next image carries the verdict
    assert world.verdicts == {("dsp-pr", 1, "test"): "new"}
    assert judge(failed, replace(failed, verdict="new"), deps) is True
    # Jobs that get no verdict are reported at once: L2, pushes, running jobs.
    assert judge(None, record(level=2), deps) is True
    assert judge(None, on_branch(BASE, "failure", "p9"), deps) is True
    assert judge(None, record("in_progress", None), deps) is True


def test_a_passing_retry_marks_the_failed_attempt_flaky(world: World) -> None:
    failed = replace(record(), verdict="new")
    passed = record("completed", "success", attempt=2)
    world.rows = [failed, passed]
    deps = ReportDeps(torchci=None, dead_letters=None, metrics=RecordingMetrics(), verdicts=world.deps(), door=door())  # type: ignore[arg-type]
    judge(failed, passed, deps)
    assert world.verdicts == {("dsp-pr", 1, "test"): "flaky", ("dsp-pr", 2, "test"): "flaky"}


def test_judging_a_job_reads_its_own_attempts_and_nothing_else(world: World) -> None:
    """Other jobs of the dispatch, however many, are never read: the work per report is the report's own."""
    others = [record("completed", "failure", job=f"shard-{i}") for i in range(300)]
    first, second = record("completed", "failure"), record("completed", "success", attempt=2)
    world.rows = [on_branch(BASE, "success", "p1"), *others, first, second]
    assert judgement(second, world.deps()).verdict == "flaky"
    assert world.reads == [("dsp-pr", "900", "test")]
    world.reads.clear()
    # The first attempt's image, judged again once the retry passed, stays flaky: it sees its run's later attempts.
    assert judgement(first, world.deps()).verdict == "flaky"
    assert world.reads == [("dsp-pr", "900", "test")]


@pytest.mark.parametrize(
    ("last_pass", "fixed_by", "expected"),
    [
        (OLDER, None, "broken trunk"),  # open since after OLDER: broken at the base too
        (BASE, None, "new"),  # it passed on the base itself: this change broke it
        (NEWER, None, "no baseline"),  # the branch broke after the base (and nothing before it to compare with)
        (OLDER, BASE, "new"),  # fixed by the base: the branch was green again there
        (OLDER, NEWER, "broken trunk"),  # fixed only after the base
        (OLDER, "e" * 40, "new"),  # fixed by a commit the relay cannot place: not known to cover the base
    ],
)
def test_a_failure_the_branchs_open_regression_explains_is_broken_trunk(
    world: World, last_pass: str, fixed_by: str | None, expected: str
) -> None:
    failed = record()
    world.rows = [on_branch(last_pass, "success", "p1"), failed]
    regressions = FakeRegressions()
    tracked = Tracked("org/backend", "CI", "test", last_pass, NEWER, NEWER, (), 0.0, fixed_by=fixed_by)
    regressions.save_job_regressions("pytorch/pytorch", "org/backend", "CI", "test", [tracked], 0)
    other_job = replace(tracked, job_name="build")
    regressions.save_job_regressions("pytorch/pytorch", "org/backend", "CI", "build", [other_job], 0)
    deps = replace(world.deps(), regressions=regressions)
    assert judgement(failed, deps).verdict == expected
    assert judgement(record(job="lint"), deps).verdict != "broken trunk"  # another job's regression says nothing of it
    assert judgement(record(kind="infra"), deps).verdict == "infra"  # infra and flaky say more than the branch
