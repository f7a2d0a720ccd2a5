"""Which jobs get an upstream check run, and which writes move one forward."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.checks import CheckDeps, SyncOutcome, sync
from crcr.app.checks_booking import job_message
from crcr.app.outbound import Permit
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.ledger import LedgerRow, LedgerState
from crcr.app.ports.pulls import PrInfo
from crcr.contracts.check_messages import CheckSync, DispatchChanged, HeadSuperseded
from crcr.domain.check_run_text import check_run_fields
from crcr.domain.checks import JobOutcome, Known, check_run_name, rollup, should_write, wants_check_run
from crcr.domain.failed_tests import cap, to_json
from tests.unit.fakes import FakeCheckStore, FakeClock, FakePacer, FakeState, RecordingMetrics, StaticAllowlist, door


@pytest.mark.parametrize(
    ("level", "device", "labels", "expected"),
    [
        (4, None, (), True),
        (3, "rocm", ("ciflow/crcr/rocm",), True),
        (3, "rocm", ("CIFLOW/CRCR/ROCM",), True),
        (3, "rocm", ("ciflow/crcr/mps", "ciflow/trunk"), False),
        (3, "rocm", (), False),
        (2, None, ("ciflow/crcr/rocm",), False),
        (1, None, (), False),
    ],
)
def test_who_gets_a_check_run(level: int, device: str | None, labels: tuple[str, ...], expected: bool) -> None:
    assert wants_check_run(level, device, labels) is expected


def test_the_name_follows_the_contract() -> None:
    assert check_run_name("Org/Repo", "CI", "build") == "crcr/Org/Repo/CI/build"


@pytest.mark.parametrize(
    ("known", "status", "conclusion", "expected"),
    [
        (None, "in_progress", None, True),
        (Known(1, "queued", None), "in_progress", None, True),
        (Known(1, "in_progress", None), "completed", "success", True),
        (Known(1, "in_progress", None), "in_progress", None, False),
        (Known(1, "completed", "success"), "in_progress", None, False),  # never regresses
        (Known(1, "completed", "success"), "completed", "success", False),
        (Known(1, "completed", "timed_out"), "completed", "success", True),  # a genuine result replaces it
    ],
)
def test_only_forward_writes(known: Known | None, status: str, conclusion: str | None, expected: bool) -> None:
    assert should_write(known, status, conclusion) is expected


def _job(state: str, conclusion: str | None) -> JobRecord:
    return JobRecord(
        dispatch_id="d", run_id="7", run_attempt=1, job_name="build", workflow_name="CI", state=state,
        conclusion=conclusion, fingerprint=state, url="https://github.com/o/r/actions/runs/7", repo="o/r",
        repo_id=1, level=4, delivery_id="x", upstream="pytorch/pytorch", head_sha="a" * 40, pr=5, device=None,
        dispatched_at=100.0, started_at=110.0, completed_at=150.0 if state == "completed" else None,
        callback_payload="{}", version=1 if state == "in_progress" else 2,
    )  # fmt: skip


class _Api:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def installation_for(self, upstream: str) -> int:
        return 1

    def create_check_run(self, upstream: str, fields: dict[str, Any], *, permit: Permit) -> int:
        self.calls.append(("create", fields))
        return 99

    def update_check_run(self, upstream: str, check_run_id: int, fields: dict[str, Any], *, permit: Permit) -> None:
        self.calls.append(("update", fields))


class _Results:
    def __init__(self, latest: JobRecord) -> None:
        self.latest = latest
        self.reads: list[str] = []

    def get_job(self, dispatch_id: str, run_id: int, run_attempt: int, job_name: str) -> JobRecord | None:
        self.reads.append("get_job")
        return self.latest

    def jobs_of_dispatch(self, dispatch_id: str) -> list[JobRecord]:
        self.reads.append("jobs_of_dispatch")
        return [self.latest]

    def jobs_for_head(self, upstream: str, head_sha: str) -> list[JobRecord]:
        self.reads.append("jobs_for_head")
        return [self.latest]

    def put_job(self, record: JobRecord, expected_version: int | None) -> bool:
        raise AssertionError("check runs never write results")


class _Queue:
    def __init__(self) -> None:
        self.sent: list[tuple[CheckSync, float]] = []

    def send_checks(self, messages: list[CheckSync], delay_s: float = 0.0) -> None:
        self.sent += [(m, delay_s) for m in messages]

    def dead_letter(self, message: CheckSync, reason: str) -> None:
        raise AssertionError(reason)


def _deps(latest: JobRecord, pacer: FakePacer | None = None, now: float = 1000.0) -> tuple[CheckDeps, _Api, _Queue]:
    api, queue, state = _Api(), _Queue(), FakeState()
    state.ledger[("x", "o/r")] = LedgerRow("x", "o/r", LedgerState.DISPATCHED, "d", level=4, head_sha="a" * 40,
                                           upstream="pytorch/pytorch", pr=5)  # fmt: skip
    deps = CheckDeps(
        api=api, store=FakeCheckStore(), results=_Results(latest), ledger=state, prs=state, queue=queue,
        pacer=pacer or FakePacer(),
        allowlist=StaticAllowlist(parse_allowlist("L4:\n  - o/r\n")), metrics=RecordingMetrics(),
        clock=FakeClock(now), settle_s=60.0, door=door()
    )  # fmt: skip
    return deps, api, queue


def _pass(deps: CheckDeps, *changes: JobRecord) -> SyncOutcome:
    """What the reporter and ChecksQueue do for a burst of changes on the commit: each change books the head's pass
    (the first sends its message), then the pass runs once."""
    queue = deps.queue
    before = len(queue.sent)  # type: ignore[attr-defined]
    for change in changes:
        message = job_message(change)
        assert message is not None
        assert sync(message, deps).detail == "booked"
    booked = queue.sent[before:]  # type: ignore[attr-defined]
    assert [m.kind for m, _ in booked] == ["head"]  # one message for the burst, however many changes
    del queue.sent[before:]  # type: ignore[attr-defined]
    deps.clock.t += deps.pass_settle_s  # type: ignore[attr-defined]  # the message's delay: the burst's settle period
    return sync(booked[0][0].model_copy(update={"not_before": None}), deps)


def test_a_burst_of_changes_is_one_pass_writing_each_check_run_once_as_it_stands() -> None:
    deps, api, queue = _deps(_job("completed", "success"))
    # The job started and finished before its pass ran: its check run is created once, as finished.
    outcome = _pass(deps, _job("in_progress", None), _job("completed", "success"))
    job_writes = [
        (kind, f["status"], f.get("conclusion")) for kind, f in api.calls if f.get("name", "").endswith("/build")
    ]
    assert job_writes == [("create", "completed", "success")]
    # The repository's run too (the ledger's dispatch), in the same pass: completed, its job long settled.
    assert [(f["name"], f["status"]) for _, f in api.calls] == [
        ("crcr/o/r", "completed"),
        ("crcr/o/r/CI/build", "completed"),
    ]
    assert outcome.detail == "done" and not queue.sent
    assert deps.results.reads == ["jobs_for_head"]  # type: ignore[attr-defined]  # the head's jobs read once


def test_over_the_budget_a_write_waits_in_the_queue_and_nothing_is_written() -> None:
    # None free now (the first wait), and the next slot booked 42 s ahead (the second).
    deps, api, queue = _deps(_job("in_progress", None), pacer=FakePacer(waits=[42.0, 42.0]))
    outcome = _pass(deps, _job("in_progress", None))
    assert (outcome.detail, api.calls) == ("paced", [])
    [(later, delay)] = queue.sent
    assert delay == 42.0 and later.not_before == 1047.0 and later.kind == "head"
    # The pacer booked that slot: back then, the pass spends it, and takes the rest it needs in one step.
    assert later.slot_at == 1047.0
    sync(later, replace(deps, clock=FakeClock(1047.0)))
    assert [kind for kind, _ in api.calls] == ["create", "create"]
    assert deps.pacer.counts == [2, 1]  # type: ignore[attr-defined]  # both writes asked for at once


def test_the_repository_run_waits_for_its_jobs_to_settle_before_completing() -> None:
    done = _job("completed", "failure")  # completed at 150
    deps, api, queue = _deps(done, now=180.0)
    outcome = _pass(deps, done)
    assert [(f["name"], f["status"]) for _, f in api.calls if f["name"] == "crcr/o/r"] == [("crcr/o/r", "in_progress")]
    assert outcome.detail == "again" and queue.sent[0][1] == 25.0  # 150 + 60 - 185 (its burst settled at 185)
    later = replace(deps, clock=FakeClock(211.0))
    sync(queue.sent[0][0], later)
    assert [(f["status"], f.get("conclusion")) for _, f in api.calls if f["name"] == "crcr/o/r"] == [
        ("in_progress", None),
        ("completed", "failure"),
    ]


def _state(name: str, state: str, conclusion: str | None = None, attempt: int = 1, at: float = 0.0,
           genuine: bool = True) -> JobOutcome:  # fmt: skip
    return JobOutcome("7", name, attempt, state, conclusion, genuine, at)


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ([], ("queued", None)),
        ([_state("", "timed_out", "timed_out", 0)], ("completed", "timed_out")),
        ([_state("a", "in_progress")], ("in_progress", None)),
        ([_state("a", "completed", "success"), _state("b", "in_progress")], ("in_progress", None)),
        ([_state("a", "completed", "success"), _state("b", "completed", "failure")], ("completed", "failure")),
        ([_state("a", "completed", "success"), _state("b", "completed", "skipped")], ("completed", "success")),
        ([_state("a", "completed", "startup_failure")], ("completed", "failure")),  # unknown never goes green
        # A re-run's attempt replaces the failed one.
        ([_state("a", "completed", "failure", 1), _state("a", "completed", "success", 2)], ("completed", "success")),
        # A late genuine job replaces the sweeper's "nothing started".
        ([_state("", "timed_out", "timed_out", 0), _state("a", "completed", "success")], ("completed", "success")),
        # Finished a moment ago: the next job of the workflow may not have reported yet.
        ([_state("a", "completed", "success", at=990.0)], ("in_progress", None)),
    ],
)
def test_a_repository_is_as_good_as_its_worst_job(jobs: list[JobOutcome], expected: tuple[str, str | None]) -> None:
    result = rollup(jobs, now=1000.0, settle_s=60.0)
    assert (result.status, result.conclusion) == expected


def test_the_relay_never_overwrites_a_completed_run_with_its_own_verdict() -> None:
    cancelled = Known(1, "completed", "cancelled")
    assert not should_write(cancelled, "completed", "timed_out", genuine=False)  # the sweeper, later
    assert should_write(cancelled, "completed", "success", genuine=True)  # the job ran after all


@pytest.mark.parametrize(
    ("known", "status", "head_again", "expected"),
    [
        (Known(1, "completed", "cancelled", 0), "queued", True, True),  # superseded, its commit the head again
        (Known(1, "completed", "cancelled", 0), "queued", False, False),  # still superseded: never back to queued
        (Known(1, "completed", "cancelled", 1), "queued", True, False),  # its jobs were cancelled: a result
        (Known(1, "completed", "timed_out", 0), "queued", True, False),  # the sweeper's: not a supersession
    ],
)
def test_a_run_cancelled_as_superseded_starts_over_only_when_its_commit_is_the_head_again(
    known: Known, status: str, head_again: bool, expected: bool
) -> None:
    assert should_write(known, status, None, 0, True, head_again) is expected


def test_a_commit_its_pr_went_back_to_is_not_cancelled_and_its_superseded_run_is_queued_again() -> None:
    """Red team: A, B, then A force-pushed left A's required check `cancelled` ("superseded by B") for good."""
    deps, api, queue = _deps(_job("in_progress", None))
    deps = replace(deps, results=_NoJobs())
    head, name = "a" * 40, "crcr/o/r"
    deps.prs.record_pr_head("pytorch/pytorch", 5, head, "2026-12-07T10:00:00Z")  # type: ignore[attr-defined]
    deps.store.rows[("pytorch/pytorch", head, name)] = (Known(7, "queued", None), 1)  # type: ignore[attr-defined]
    # B's cancel of A, run after the PR went back to A: A is its head, nothing on it is cancelled.
    late = HeadSuperseded(upstream="pytorch/pytorch", head_sha=head, superseded_by="b" * 40, pr=5)
    assert sync(late, deps).written == [] and api.calls == []
    # A's run was cancelled when B came; A is the head again and dispatched again: its run is queued again.
    deps.store.rows[("pytorch/pytorch", head, name)] = (Known(7, "completed", "cancelled"), 2)  # type: ignore[attr-defined]
    booked = DispatchChanged(upstream="pytorch/pytorch", head_sha=head, delivery_id="x", repo="o/r")
    assert sync(booked, deps).detail == "booked"
    [(message, _)] = queue.sent
    deps.clock.t += deps.pass_settle_s  # type: ignore[attr-defined]
    assert sync(message.model_copy(update={"not_before": None}), deps).written == [name]
    [(kind, fields)] = api.calls
    assert (kind, fields["status"], fields.get("conclusion")) == ("update", "queued", None)
    assert "waiting for the first job" in fields["output"]["summary"]
    # While the PR's head is another commit, the same pass leaves the cancelled run as it is.
    deps.store.rows[("pytorch/pytorch", head, name)] = (Known(7, "completed", "cancelled"), 3)  # type: ignore[attr-defined]
    deps.prs.record_pr_head("pytorch/pytorch", 5, "b" * 40, "2026-12-07T11:00:00Z")  # type: ignore[attr-defined]
    api.calls.clear()
    queue.sent.clear()
    assert sync(booked, deps).detail == "booked"
    deps.clock.t += deps.pass_settle_s  # type: ignore[attr-defined]
    sync(queue.sent[0][0].model_copy(update={"not_before": None}), deps)
    assert api.calls == []


class _NoJobs(_Results):
    def __init__(self) -> None:
        super().__init__(_job("in_progress", None))

    def jobs_for_head(self, upstream: str, head_sha: str) -> list[JobRecord]:
        return []  # a dispatch no job of which has started


def test_a_summary_is_shown_without_control_or_bidi_characters() -> None:
    import json  # noqa: PLC0415

    summary = "## Failed\r\n\t* test_\x1b[31mfoo\x1b[0m\x00 \u202eevil\u2066 \x85ok"
    job = replace(_job("completed", "failure"), callback_payload=json.dumps({"summary": summary}))
    shown = check_run_fields(job, "crcr/o/r/CI/build")["output"]["summary"]
    assert shown.endswith("## Failed\n\t* test_[31mfoo[0m evil ok")


@pytest.mark.parametrize("label", ["ciflow/crcr/roc\u217d", "ciflow/crcr/\u0280ocm", "ciflow/crcr/ROCM\u0131"])
def test_a_look_alike_label_is_not_the_device_label(label: str) -> None:
    assert wants_check_run(3, "rocm", (label,)) is False
    assert wants_check_run(3, "kpu", ("ciflow/crcr/\u212aPU",)) is False  # Kelvin sign lower()s to "k"


class _Demotions:
    def __init__(self, since: dict[str, float]) -> None:
        self._since = since

    def since(self, repo: str) -> float | None:
        return self._since.get(repo.lower())


def _l3(job: JobRecord) -> JobRecord:
    return replace(job, level=3, device="npu")


def test_an_open_demotion_stops_new_check_runs_and_lets_running_ones_finish() -> None:
    started_before = _l3(_job("completed", "failure"))  # started at 110
    deps, api, _ = _deps(started_before)
    deps.ledger.ledger[("x", "o/r")] = LedgerRow(  # type: ignore[attr-defined]
        "x",
        "o/r",
        LedgerState.DISPATCHED,
        "d",
        level=3,
        device="npu",
        head_sha="a" * 40,
        upstream="pytorch/pytorch",
        pr=5,
        dispatched_at=100.0,
    )
    l3 = StaticAllowlist(parse_allowlist("L3:\n  npu: {o/r: x}\n"))
    labelled = replace(deps, prs=_LabelledPr(), allowlist=l3)
    # Demoted at 95, before the dispatch (100) and its job (110): no new check run for either.
    demoted = replace(labelled, demotions=_Demotions({"o/r": 95.0}))
    _pass(demoted, started_before)
    assert api.calls == [] and demoted.metrics.counts["CheckRunSuppressed"] == 2  # type: ignore[attr-defined]
    # Demoted at 120, while it ran: its check run is still written (and carried to its end).
    _pass(replace(labelled, demotions=_Demotions({"o/r": 120.0})), started_before)
    assert [f["name"] for _, f in api.calls] == ["crcr/o/r", "crcr/o/r/CI/build"]
    # The PR closed (no demotion): check runs as before.
    assert _demoted_nothing(labelled)


def _demoted_nothing(deps: CheckDeps) -> bool:
    from crcr.app.checks_plan import demoted as _demoted  # noqa: PLC0415

    return not _demoted("o/r", 3, 110.0, replace(deps, demotions=_Demotions({})))


class _LabelledPr:
    def pr_info(self, upstream: str, pr: int) -> PrInfo:
        return PrInfo("a" * 40, labels=("ciflow/crcr/npu",))


def test_a_ciflow_push_has_check_runs_of_its_own_beside_the_prs() -> None:
    ciflow = replace(_job("completed", "failure"), ciflow="trunk", event_type="push")
    deps, api, _ = _deps(ciflow)
    row = deps.ledger.ledger[("x", "o/r")]  # type: ignore[attr-defined]
    deps.ledger.ledger[("x", "o/r")] = replace(row, ciflow="trunk", event_type="push")  # type: ignore[attr-defined]
    _pass(deps, ciflow)
    assert [f["name"] for _, f in api.calls] == ["crcr/o/r (ciflow/trunk)", "crcr/o/r/CI/build (ciflow/trunk)"]
    assert check_run_name("o/r", "", "", "trunk") == "crcr/o/r (ciflow/trunk)"


def test_the_summary_names_the_failing_tests() -> None:
    failing = cap([{"name": "test_add", "classname": "TestOps", "message": "expected 2\ngot 3", "duration": 1.5}])
    job = replace(_job("completed", "failure"), failed_tests=to_json(failing))
    summary = check_run_fields(job, "crcr/o/r/CI/build")["output"]["summary"]
    assert "Failing tests:\n- `TestOps.test_add` (1.5 s): expected 2 got 3" in summary


@dataclass
class _Shares:
    """A downstream's share of the installation's budget, scripted: how many of its writes may go now."""

    allowed: list[int] = field(default_factory=list)
    keys: list[int | str] = field(default_factory=list)

    def acquire(self, key: int | str, now: float, reserve: bool = False) -> float:
        raise AssertionError("a share is taken for all of a pass's writes at once")

    def acquire_many(self, key: int | str, now: float, count: int) -> tuple[int, float]:
        self.keys.append(key)
        allowed = min(count, self.allowed.pop(0)) if self.allowed else count
        return allowed, 0.0 if allowed == count else 30.0


def test_a_downstream_over_its_share_waits_without_spending_the_installations_budget() -> None:
    installation = FakePacer()
    deps, api, queue = _deps(_job("in_progress", None), pacer=installation)
    shares = _Shares(allowed=[0, 1])
    deps = replace(deps, share=shares)
    outcome = _pass(deps, _job("in_progress", None))
    assert (outcome.detail, outcome.delay_s, api.calls, installation.keys) == ("again", 30.0, [], [])
    assert shares.keys == ["pytorch/pytorch#o/r"] and deps.metrics.counts["DownstreamThrottled"] == 1  # type: ignore[attr-defined]
    # Room for one of its two writes: the repository's run goes (the installation asked for that one), the job's waits.
    [(later, _)] = queue.sent
    sync(later.model_copy(update={"not_before": None}), deps)
    assert [f["name"] for _, f in api.calls] == ["crcr/o/r"] and installation.counts == [1]
    # Within its share, the rest goes, spending both.
    sync(queue.sent[-1][0].model_copy(update={"not_before": None}), deps)
    assert [kind for kind, _ in api.calls] == ["create", "create"] and installation.counts == [1, 1]
