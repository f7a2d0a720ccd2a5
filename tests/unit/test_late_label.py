"""A request for a commit's pass while its booked pass waits for a repository to settle: the late `ciflow/` label's
check runs come within the pass's settle period, not when the other repository's run completes (issue 42)."""

from __future__ import annotations

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.checks import CheckDeps, sync
from crcr.app.checks_booking import backfill, job_message
from crcr.app.ports.jobs import JobRecord
from crcr.contracts.check_messages import CheckSync
from tests.unit.fakes import (
    FakeCheckRunApi,
    FakeChecksQueue,
    FakeCheckStore,
    FakeClock,
    FakeJobs,
    FakePacer,
    FakeState,
    RecordingMetrics,
    StaticAllowlist,
    door,
)

UPSTREAM, SHA, PR = "pytorch/pytorch", "a" * 40, 5
L3, L4 = "o/gpu", "o/four"
ALLOWLIST = f"L3:\n  gpu:\n    {L3}: [oncall]\nL4:\n  - {L4}\n"


def _job(repo: str, level: int, completed_at: float) -> JobRecord:
    return JobRecord(
        dispatch_id=f"d-{repo}", run_id="7", run_attempt=1, job_name="build", workflow_name="CI", state="completed",
        conclusion="success", fingerprint="f", url="", repo=repo, repo_id=1, level=level, delivery_id="x",
        upstream=UPSTREAM, head_sha=SHA, pr=PR, device="gpu" if level == 3 else None, dispatched_at=900.0,
        started_at=910.0, completed_at=completed_at, callback_payload="{}", version=2,
    )  # fmt: skip


def _world() -> tuple[CheckDeps, FakeChecksQueue, FakeCheckRunApi, FakeState, FakeJobs]:
    queue, api, state, jobs = FakeChecksQueue(), FakeCheckRunApi(), FakeState(), FakeJobs()
    state.record_pr_head(UPSTREAM, PR, SHA, "2026-12-07T00:00:00Z")  # no label yet: the L3 job shows nowhere
    deps = CheckDeps(
        api=api, store=FakeCheckStore(), results=jobs, ledger=state, prs=state, queue=queue, pacer=FakePacer(),
        allowlist=StaticAllowlist(parse_allowlist(ALLOWLIST)), metrics=RecordingMetrics(), clock=FakeClock(1000.0),
        settle_s=60.0, door=door(),
    )  # fmt: skip
    return deps, queue, api, state, jobs


def _due(queue: FakeChecksQueue, deps: CheckDeps) -> list[tuple[CheckSync, float]]:
    """The messages sent, each with the time it is due."""
    return [(m, deps.clock.now() + delay) for m, delay in queue.sent]


def test_a_late_labels_check_runs_come_within_the_pass_settle_while_another_repository_settles() -> None:
    deps, queue, api, state, jobs = _world()
    clock = deps.clock
    jobs.record(_job(L4, 4, completed_at=995.0))
    jobs.record(_job(L3, 3, completed_at=998.0))
    # The L4 job's change books the commit's pass; it writes the L4 runs and waits for the L4 run to settle.
    message = job_message(_job(L4, 4, completed_at=995.0))
    assert message is not None and sync(message, deps).detail == "booked"
    [(booked, delay)] = queue.sent
    queue.sent.clear()
    clock.t += delay  # type: ignore[attr-defined]
    assert sync(booked.model_copy(update={"not_before": None}), deps).detail == "again"
    [(timer, settle)] = _due(queue, deps)
    queue.sent.clear()
    assert settle == 1055.0 and {r["name"] for r in api.runs.values()} == {f"crcr/{L4}", f"crcr/{L4}/CI/build"}

    # Ten seconds later the PR is labelled: the planner mirrors the device's jobs (one `job` message each).
    clock.t = 1015.0  # type: ignore[attr-defined]
    state.record_pr_head(UPSTREAM, PR, SHA, "2026-12-07T00:00:10Z", labels=("ciflow/crcr/gpu",))
    [mirror] = backfill(jobs.jobs_for_head(UPSTREAM, SHA), "gpu")
    assert sync(mirror, deps).detail == "booked"
    # A pass of its own is due after the pass's settle period, not at the L4 run's settle (40 s on).
    [(asked, due)] = _due(queue, deps)
    queue.sent.clear()
    assert asked.kind == "head" and due == 1015.0 + deps.pass_settle_s
    clock.t = due  # type: ignore[attr-defined]
    assert sync(asked.model_copy(update={"not_before": None}), deps).written == [f"crcr/{L3}", f"crcr/{L3}/CI/build"]
    assert api.by_name()[f"crcr/{L3}/CI/build"]["status"] == "completed"
    # The pass that took the booking over waits for the L4 run's settle itself; the one it took over is superseded
    # when its message comes: one pass runs then, not two.
    [(again, at)] = _due(queue, deps)
    queue.sent.clear()
    assert at == 1055.0 and again.kind == "head"
    clock.t = 1055.0  # type: ignore[attr-defined]
    assert sync(timer.model_copy(update={"not_before": None}), deps).detail == "superseded"
    assert sync(again.model_copy(update={"not_before": None}), deps).written == [f"crcr/{L4}"]
    assert api.by_name()[f"crcr/{L4}"]["status"] == "completed"


def test_a_request_joins_a_pass_due_sooner_than_it_would_be() -> None:
    deps, queue, _, _, jobs = _world()
    jobs.record(_job(L4, 4, completed_at=995.0))
    first, second = job_message(_job(L4, 4, 995.0)), job_message(_job(L4, 4, 996.0))
    assert first is not None and second is not None
    sync(first, deps)
    sync(second, deps)  # a burst: one pass, one message
    assert [m.kind for m, _ in queue.sent] == ["head"]
