"""`check_runs: auto`: per-job check runs while the upstream installation's hourly write budget has room, the
repository's run alone once it has not, and back; every run the relay created ends."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.checks import CheckDeps, sync
from crcr.app.checks_booking import ask_head, head_message, job_message
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.ledger import LedgerRow, LedgerState
from crcr.contracts.check_messages import CheckSync, DispatchChanged
from crcr.domain.checks import Known, Need, job_run_need, makes, repo_run_need
from crcr.domain.pacing import CONTENT_RATES, Rate, WindowLevel, grant, pace, window_level
from tests.unit.fakes import (
    FakeCheckRunApi,
    FakeChecksQueue,
    FakeCheckStore,
    FakeClock,
    FakeGauge,
    FakeJobs,
    FakePacer,
    FakeState,
    RecordingMetrics,
    StaticAllowlist,
    door,
)

UPSTREAM, REPO = "pytorch/pytorch", "o/r"
ROOM, TIGHT, FULL = WindowLevel(0.0, 50), WindowLevel(40.0, 50), WindowLevel(50.0, 50)


def _never() -> WindowLevel:
    raise AssertionError("the window was read for a write that does not depend on it")


@pytest.mark.parametrize(
    ("mode", "need", "writes", "booked", "expected"),
    [
        ("per_job", Need.DETAIL, 2, 500.0, True),  # per_job writes everything (paced, never dropped)
        ("per_repo", Need.DETAIL, 2, 0.0, False),  # no per-job run, no in_progress, even when idle
        ("per_repo", Need.QUEUED, 1, 500.0, True),
        ("auto", Need.DETAIL, 2, 0.0, True),
        ("auto", Need.DETAIL, 2, 23.0, True),  # 25 of the burst of 50 may go to detail
        ("auto", Need.DETAIL, 2, 23.5, False),
        ("auto", Need.DETAIL, 1, 24.0, True),  # created completed: it commits to nothing more
        ("auto", Need.QUEUED, 1, 49.0, True),  # the queued run while it goes without waiting
        ("auto", Need.QUEUED, 1, 49.5, False),
        ("auto", Need.RESULT, 1, 5000.0, True),  # a result is never left out
    ],
)
def test_what_each_setting_writes_for_how_full_the_hourly_window_is(
    mode: str, need: Need, writes: int, booked: float, expected: bool
) -> None:
    assert makes(mode, need, writes, lambda: WindowLevel(booked, 50)) is expected


@pytest.mark.parametrize(("mode", "need"), [("per_job", Need.DETAIL), ("per_repo", Need.QUEUED), ("auto", Need.RESULT)])
def test_the_window_is_read_only_when_it_decides(mode: str, need: Need) -> None:
    assert makes(mode, need, 1, _never)


@pytest.mark.parametrize(
    ("known", "status", "attempt", "expected"),
    [
        (None, "queued", 1, (Need.QUEUED, 1)),
        (None, "in_progress", 1, (Need.DETAIL, 1)),
        (Known(1, "queued", None, 0), "in_progress", 1, (Need.DETAIL, 1)),  # queued runs are written as attempt 0
        (Known(1, "in_progress", None, 1), "in_progress", 2, (Need.DETAIL, 1)),
        (Known(1, "in_progress", None, 1), "completed", 1, (Need.RESULT, 1)),
        (None, "completed", 1, (Need.RESULT, 1)),  # a result creates the run if nothing was written yet
        (Known(1, "completed", "failure", 1), "in_progress", 2, (Need.RESULT, 1)),  # a re-run starts it over
    ],
)
def test_what_a_write_to_the_repositorys_run_is_for(
    known: Known | None, status: str, attempt: int, expected: tuple[Need, int]
) -> None:
    assert repo_run_need(known, status, attempt) == expected


def test_a_new_per_job_run_is_detail_and_one_that_exists_is_carried_to_its_end() -> None:
    assert job_run_need(None, "in_progress") == (Need.DETAIL, 2)  # it commits to its completion too
    assert job_run_need(None, "completed") == (Need.DETAIL, 1)
    assert job_run_need(Known(1, "in_progress", None, 1), "completed") == (Need.RESULT, 1)


def test_the_level_is_what_the_pacer_booked_beyond_its_rate_and_reading_it_books_nothing() -> None:
    rates = (Rate(10, 100.0, burst=3),)  # one window: 1 call per 10 s, bursts of 4
    tats: tuple[float, ...] | None = None
    for _ in range(3):
        tats, wait = pace(tats, 1000.0, rates)
        assert wait == 0
    assert window_level(tats, 1000.0, rates) == WindowLevel(3.0, 3)  # 3 booked: the next still goes
    assert window_level(tats, 1000.0, rates) == WindowLevel(3.0, 3)  # a read changes nothing
    tats, wait = pace(tats, 1000.0, rates)
    assert wait == 0 and window_level(tats, 1000.0, rates).booked == 4.0  # above the burst: the next waits
    assert pace(tats, 1000.0, rates)[1] > 0
    assert window_level(tats, 1015.0, rates).booked == 2.5  # the window drains at its rate
    assert window_level(tats, 5000.0, rates).booked == 0.0
    assert window_level(None, 1000.0, CONTENT_RATES) == WindowLevel(0.0, 50)  # GitHub's hour is the longest window


def _all_go(tats: tuple[float, ...] | None, calls: int, at: float, rates: tuple[Rate, ...]) -> bool:
    """`calls` single calls one after another at `at` all go without waiting."""
    for _ in range(calls):
        tats, wait = pace(tats, at, rates)
        if wait > 1e-9:
            return False
    return True


@pytest.mark.parametrize("seed", [3, 17, 101])
def test_many_slots_at_once_are_what_single_calls_one_after_another_would_get(seed: int) -> None:
    print(f"seed {seed}")
    rng = random.Random(seed)
    rates = (Rate(60, 60.0, burst=15), Rate(440, 3600.0, burst=50))
    many: tuple[float, ...] | None = None
    one: tuple[float, ...] | None = None
    now = 0.0
    for _ in range(200):
        now += rng.choice((0.0, 0.5, 3.0, 20.0))
        count = rng.randint(1, 30)
        many, granted, wait = grant(many, now, rates, count)
        singles = 0
        while singles < count and pace(one, now, rates)[1] == 0:
            one = pace(one, now, rates)[0]
            singles += 1
        assert granted == singles, f"seed {seed}: {granted} granted at once, {singles} one by one"
        assert many == pytest.approx(one if one is not None else many)  # the same state (to float rounding)
        # The rest waits until it fits at once (at most a burst: 16 here), booking nothing; all granted: the next one.
        rest = max(1, min(count - granted, 16))
        assert _all_go(one, rest, now + wait, rates), f"seed {seed}: {rest} do not fit after {wait} s"
        assert wait == 0 or not _all_go(one, rest, now + wait - 0.01, rates), f"seed {seed}: {wait} s is too long"


def test_the_longest_window_is_the_one_read() -> None:
    tats = None
    for _ in range(10):
        tats, _ = pace(tats, 0.0, CONTENT_RATES, reserve=True)
    # 10 calls at once: the hour's window (440 an hour, 8.2 s each) has 10 booked; the minute's is not read.
    assert window_level(tats, 0.0, CONTENT_RATES).booked == pytest.approx(10.0)


# --------------------------------------------------------------------------------------------- the writer
def _job(name: str, state: str, dispatch: str = "d1", sha: str = "a" * 40, at: float = 100.0) -> JobRecord:
    done = state == "completed"
    return JobRecord(
        dispatch_id=dispatch, run_id="7", run_attempt=1, job_name=name, workflow_name="CI", state=state,
        conclusion="success" if done else None, fingerprint=state, url=f"https://github.com/{REPO}/actions/runs/7",
        repo=REPO, repo_id=1, level=4, delivery_id=f"x-{dispatch}", upstream=UPSTREAM, head_sha=sha, pr=5,
        device=None, dispatched_at=at, started_at=at + 10, completed_at=at + 50 if done else None,
        callback_payload="{}", version=2 if done else 1,
    )  # fmt: skip


@dataclass
class World:
    """The check-run writer with recording fakes; the queue is drained by hand, each message at its time."""

    allowlist: str = "L4:\n  - o/r\n"
    clock: FakeClock = field(default_factory=lambda: FakeClock(1000.0))
    gauge: FakeGauge = field(default_factory=FakeGauge)
    api: FakeCheckRunApi = field(default_factory=FakeCheckRunApi)
    store: FakeCheckStore = field(default_factory=FakeCheckStore)
    jobs: FakeJobs = field(default_factory=FakeJobs)
    state: FakeState = field(default_factory=FakeState)
    queue: FakeChecksQueue = field(default_factory=FakeChecksQueue)
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)

    @property
    def deps(self) -> CheckDeps:
        return CheckDeps(
            api=self.api, store=self.store, results=self.jobs, ledger=self.state, prs=self.state, queue=self.queue,
            pacer=FakePacer(),
            allowlist=StaticAllowlist(parse_allowlist(self.allowlist)), metrics=self.metrics, clock=self.clock,
            settle_s=60.0, gauge=self.gauge, door=door()
        )  # fmt: skip

    def dispatched(self, dispatch: str, sha: str) -> None:
        self.state.ledger[(f"x-{dispatch}", REPO)] = LedgerRow(
            f"x-{dispatch}", REPO, LedgerState.DISPATCHED, dispatch, level=4, head_sha=sha, upstream=UPSTREAM, pr=5
        )
        self.sync(DispatchChanged(upstream=UPSTREAM, head_sha=sha, delivery_id=f"x-{dispatch}", repo=REPO))

    def reported(self, job: JobRecord) -> None:
        self.jobs.record(job)
        message = job_message(job)
        assert message is not None
        self.sync(message)

    def sync(self, message: CheckSync) -> None:
        sync(message, self.deps)
        self.passes()

    def passes(self) -> None:
        """Run each pass booked for a burst once its settle period is over (what ChecksQueue's delay does)."""
        while due := [(m, d) for m, d in self.queue.sent if m.kind == "head" and d <= self.deps.pass_settle_s]:
            self.queue.sent.remove(due[0])
            self.clock.t = max(self.clock.t, due[0][0].not_before or self.clock.t)
            sync(due[0][0], self.deps)

    def settle(self) -> None:
        """Let the settle period pass and hand the writer what it asked to look at again."""
        self.clock.t += 61.0
        waiting, self.queue.sent = self.queue.sent, []
        for message, _ in waiting:
            self.sync(message)

    def runs(self, sha: str) -> dict[str, tuple[str, str | None]]:
        return {r["name"]: (r["status"], r.get("conclusion")) for r in self.api.runs.values() if r["head_sha"] == sha}


def test_a_dispatch_that_started_per_job_and_then_ran_short_of_budget_ends_every_run() -> None:
    w, sha = World(), "a" * 40
    a, b = f"crcr/{REPO}/CI/a", f"crcr/{REPO}/CI/b"
    w.dispatched("d1", sha)
    w.reported(_job("a", "in_progress", sha=sha))
    assert w.runs(sha) == {f"crcr/{REPO}": ("in_progress", None), a: ("in_progress", None)}

    w.gauge.window = TIGHT  # other pull requests filled the hour: 40 of the burst of 50 booked
    w.reported(_job("b", "in_progress", sha=sha))
    assert b not in w.runs(sha)  # no new per-job run: job b is shown in the repository's run
    assert w.metrics.counts["CheckRunSkipped.need=detail"] == 1
    w.reported(_job("a", "completed", sha=sha))
    w.reported(_job("b", "completed", sha=sha))
    w.settle()
    assert w.runs(sha) == {f"crcr/{REPO}": ("completed", "success"), a: ("completed", "success")}
    summary = w.api.by_name()[f"crcr/{REPO}"]["output"]["summary"]
    assert "CI / a: **success**" in summary and "CI / b: **success**" in summary  # the repository's run lists both

    w.gauge.window = ROOM  # demand fell: the next commit gets its per-job runs again
    other = "b" * 40
    w.dispatched("d2", other)
    w.reported(_job("a", "in_progress", dispatch="d2", sha=other))
    w.reported(_job("b", "completed", dispatch="d2", sha=other))
    assert set(w.runs(other)) == {f"crcr/{REPO}", a, b}


def test_when_the_window_is_full_the_repositorys_run_is_written_once_with_its_result() -> None:
    w, sha = World(gauge=FakeGauge(FULL)), "c" * 40
    w.dispatched("d1", sha)
    w.reported(_job("a", "in_progress", sha=sha))
    assert w.api.calls == []  # neither queued (it would wait for a slot) nor in_progress
    w.reported(_job("a", "completed", sha=sha))
    w.settle()
    assert [(kind, f["status"]) for kind, f in w.api.calls] == [("create", "completed")]
    assert w.metrics.counts["CheckRunSkipped.need=queued"] == 1


def test_a_pass_back_with_its_booked_slot_spends_it_on_what_the_window_still_allows() -> None:
    w, sha = World(gauge=FakeGauge(TIGHT)), "d" * 40
    w.state.ledger[("x-d1", REPO)] = LedgerRow(
        "x-d1", REPO, LedgerState.DISPATCHED, "d1", level=4, head_sha=sha, upstream=UPSTREAM, pr=5
    )
    w.jobs.record(_job("a", "completed", sha=sha, at=0.0))
    ticket = ask_head(w.deps.ask, UPSTREAM, sha, {"x-d1 o/r"}, due_in=0.0)
    assert ticket is not None
    pacer = FakePacer()
    back = head_message(UPSTREAM, sha, ticket, 0.0, w.clock.t).model_copy(update={"slot_at": w.clock.t})
    sync(back, replace(w.deps, pacer=pacer))  # back from the queue with the slot it booked
    # The window is tight: no new per-job run; the repository's result goes on the slot held, asking nothing more.
    assert w.runs(sha) == {f"crcr/{REPO}": ("completed", "success")}
    assert pacer.keys == [] and w.metrics.counts["CheckRunSkipped.need=detail"] == 1


def test_per_repo_ends_a_per_job_run_created_before_the_setting_changed() -> None:
    w, sha = World(), "e" * 40
    w.dispatched("d1", sha)
    w.reported(_job("a", "in_progress", sha=sha))
    w.allowlist, w.gauge.reads = "L4:\n  - o/r\nrepos:\n  o/r:\n    check_runs: per_repo\n", 0
    w.reported(_job("b", "in_progress", sha=sha))
    w.reported(_job("a", "completed", sha=sha))
    w.reported(_job("b", "completed", sha=sha))
    w.settle()
    assert w.runs(sha) == {f"crcr/{REPO}": ("completed", "success"), f"crcr/{REPO}/CI/a": ("completed", "success")}
    assert w.gauge.reads == 0  # per_repo never asks the budget


def test_per_job_writes_every_run_whatever_the_window_says() -> None:
    w, sha = World(allowlist="L4:\n  - o/r\nrepos:\n  o/r:\n    check_runs: per_job\n", gauge=FakeGauge(FULL)), "f" * 40
    w.dispatched("d1", sha)
    w.reported(_job("a", "in_progress", sha=sha))
    w.reported(_job("a", "completed", sha=sha))
    w.settle()
    writes = [(kind, f["name"].rsplit("/", 1)[-1], f["status"]) for kind, f in w.api.calls]
    assert writes == [  # each pass writes the repository's run first: it is what decides a merge
        ("create", "r", "queued"),
        ("update", "r", "in_progress"),
        ("create", "a", "in_progress"),
        ("update", "r", "completed"),  # its job finished long ago (at 150): nothing left to settle
        ("update", "a", "completed"),
    ]
    assert w.gauge.reads == 0


def test_an_unknown_repository_falls_back_to_auto() -> None:
    w = World()
    job = replace(_job("a", "in_progress"), repo="gone/repo")
    w.state.ledger[("x-d1", "gone/repo")] = LedgerRow(
        "x-d1", "gone/repo", LedgerState.DISPATCHED, "d1", level=4, head_sha="a" * 40, upstream=UPSTREAM, pr=5
    )
    w.gauge.window = TIGHT
    w.reported(job)
    assert w.api.calls == [] and w.gauge.reads >= 1


def test_a_wait_past_the_pacers_booking_horizon_books_nothing_so_no_two_messages_share_a_slot() -> None:
    """Past 15 minutes the pacer books nothing and tells every waiting message the same moment: each used to
    take it for a slot of its own, and they all wrote at once (the bench saw 680 writes in an hour, and
    GitHub's 403s). A pass told that waits without a slot and asks again then."""
    w, sha = World(), "9" * 40
    w.state.ledger[("x-d1", REPO)] = LedgerRow(
        "x-d1", REPO, LedgerState.DISPATCHED, "d1", level=4, head_sha=sha, upstream=UPSTREAM, pr=5
    )
    # None free now, and the next one past the horizon (nothing booked); later, none free and one 300 s ahead.
    pacer = FakePacer(waits=[1200.0, 1200.0, 300.0, 300.0])
    deps = replace(w.deps, pacer=pacer)
    ticket = ask_head(deps.ask, UPSTREAM, sha, {"x-d1 o/r"}, due_in=0.0)
    assert ticket is not None
    assert sync(head_message(UPSTREAM, sha, ticket, 0.0, w.clock.t), deps).detail == "paced"
    assert [(m.slot_at, m.not_before) for m, _ in w.queue.sent] == [(None, 2200.0)]
    w.clock.t = 2200.0
    assert sync(w.queue.sent[0][0], deps).detail == "paced"  # it asks again, and this time books
    assert w.queue.sent[-1][0].slot_at == 2500.0
    assert w.api.calls == [] and pacer.reserved == [True, True]
