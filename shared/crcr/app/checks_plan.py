"""What one pass over a commit writes: each check run's next write, decided from the latest recorded state."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from crcr.app.checks_booking import SCHEDULED, row_key
from crcr.app.checks_outcome import SyncOutcome
from crcr.app.comment import CommentDeps
from crcr.app.outbound import Outbound, Permit
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.checkruns import CheckRunStore
from crcr.app.ports.jobs import JobRecord, ResultsStore
from crcr.app.ports.ledger import LedgerReader, LedgerRow, LedgerState
from crcr.app.ports.levels import DemotionReader
from crcr.app.ports.pacing import BudgetGauge, Pacer
from crcr.app.ports.pulls import PrInfo, PrInfos
from crcr.app.ports.queues import ChecksQueue
from crcr.contracts.check_messages import HeadSuperseded, RepoSkipped
from crcr.domain.check_run_text import cancelled_fields, check_run_fields, repo_check_fields, skipped_fields
from crcr.domain.checks import (
    SWEPT,
    JobOutcome,
    Known,
    Need,
    check_run_name,
    job_run_need,
    makes,
    repo_run_need,
    rollup,
    should_write,
    superseded,
    wants_check_run,
)
from crcr.domain.pacing import WindowLevel
from crcr.domain.regressions import BISECT
from crcr.domain.retry import RetryPolicy
from crcr.domain.verdicts import Attempt

VERDICT_WAIT_S = 300.0  # a failed PR job's check run waits this long at most for its verdict before it completes


class CheckRunApi(Protocol):
    def installation_for(self, upstream: str) -> int:
        """The installation whose budget the writes spend (paced per installation, like dispatches)."""
        ...

    def create_check_run(self, upstream: str, fields: dict[str, Any], *, permit: Permit) -> int: ...
    def update_check_run(self, upstream: str, check_run_id: int, fields: dict[str, Any], *, permit: Permit) -> None: ...


@dataclass(frozen=True)
class PassDeps:
    """What a pass over a commit reads and writes through."""

    api: CheckRunApi
    store: CheckRunStore
    results: ResultsStore
    ledger: LedgerReader
    prs: PrInfos  # a PR's labels (an L3 run needs its label) and head (a superseded commit shows no queued run)
    queue: ChecksQueue
    pacer: Pacer
    allowlist: AllowlistProvider
    metrics: Metrics
    clock: Clock
    door: Outbound  # every check run is written only with its permit (crcr.app.outbound)
    settle_s: float = 60.0
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    rand: Callable[[], float] = field(default=random.random)
    comment: CommentDeps | None = None  # the PR comment, whose render a pass asks for (CRCR_PR_COMMENT=off: None)
    gauge: BudgetGauge | None = None  # check_runs: auto reads the installation's hourly window (None: always room)
    demotions: DemotionReader | None = None  # L3 repositories with an open demotion PR get no new check runs
    # Each downstream's share of the upstream installation's write budget (CRCR_DOWNSTREAM_WRITE_SHARE): one whose
    # jobs would take more waits for its own share, never for another's. None: no share (the whole budget).
    share: Pacer | None = None
    # A pass's lock lapses after this: longer than ChecksFunction's time-out, so only a writer that is gone loses it.
    pass_lease_s: float = 90.0
    pass_max_wait_s: float = 30.0  # a steady stream of changes still gets a pass at least this often
    # What this instance last asked the PR comment to show, per PR: a pass asks again only when that changed.
    comment_asked: dict[tuple[str, int], tuple[Any, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckRecord:
    """One check run as the relay last wrote it (known None: never written), read once per pass."""

    upstream: str
    head_sha: str
    name: str
    known: Known | None
    version: int


@dataclass(frozen=True)
class Purpose:
    """The repository's `check_runs` setting and what the write is for (crcr.domain.checks.makes)."""

    mode: str = "per_job"
    need: Need = Need.RESULT
    writes: int = 1  # this write and the ones it commits to


@dataclass
class PlannedWrite:
    """One write a pass means to make: a check run's fields, and what the write is for."""

    check: CheckRecord
    fields: dict[str, Any]
    attempt: int
    genuine: bool
    repo: str
    row: str | None = None  # the booked dispatch ("<delivery id> <repository>") it settles, if any
    counted: str | None = None  # a metric counted once written (CheckRunCancelled, CheckRunSkippedByPaths)
    delivery_id: str = ""  # the delivery whose dispatch the check run shows (for the log)
    permit: Permit | None = None  # the outbound door's, once asked (crcr.app.checks_pass.permitted)


class HeadView:
    """What a pass knows of one commit: the check runs the relay wrote on it and the PRs it read, each read once."""

    def __init__(self, upstream: str, head_sha: str, deps: PassDeps) -> None:
        self.upstream, self.head_sha, self._deps = upstream, head_sha, deps
        self.checks = deps.store.checks_of_head(upstream, head_sha)
        self.jobs: list[JobRecord] = []  # read by a pass's plan
        self._prs: dict[int, PrInfo | None] = {}

    def check(self, name: str) -> CheckRecord:
        known, version = self.checks.get(name, (None, 0))
        return CheckRecord(self.upstream, self.head_sha, name, known, version)

    def pr_info(self, pr: int) -> PrInfo | None:
        if pr not in self._prs:
            self._prs[pr] = self._deps.prs.pr_info(self.upstream, pr)
        return self._prs[pr]

    def wanted(self, level: int, device: str | None, pr: int | None) -> bool:
        info = self.pr_info(pr) if pr is not None and level == 3 else None
        return wants_check_run(level, device, info.labels if info is not None else ())

    def not_to_show(self, row: LedgerRow) -> bool:
        """A queued run is shown only for a dispatch that was sent, on a commit still the PR's head."""
        if row.state is not LedgerState.DISPATCHED:
            return True  # not sent (yet, or ever)
        info = self.pr_info(row.pr) if row.pr is not None else None
        return info is not None and info.head_sha != row.head_sha  # superseded before it was shown


@dataclass
class PassRecord:
    """What one pass over a head did, and whether (and when) it must run again."""

    outcome: SyncOutcome = field(default_factory=SyncOutcome)
    done: set[str] = field(default_factory=set)  # booked dispatches it settled
    again_at: float | None = None
    # Writes left for the budget: the pass comes back when they fit, not sooner (a settle or a request meanwhile
    # is looked at then, since anything it would write waits for the same budget).
    budget_at: float | None = None

    def later(self, at: float) -> None:
        self.again_at = at if self.again_at is None else min(self.again_at, at)

    def next_at(self, asked: float | None) -> float | None:
        if self.budget_at is not None:
            return self.budget_at
        due = [at for at in (asked, self.again_at) if at is not None]
        return min(due) if due else None


def setting_allows(check: CheckRecord, purpose: Purpose, deps: PassDeps) -> bool:
    """Whether the repository's setting makes this write now (with `auto`, as the budget's hourly window stands: a
    pass decides every write afresh, and a slot it holds goes to the first write made)."""
    now = deps.clock.now()

    def level() -> WindowLevel:
        if deps.gauge is None:
            return WindowLevel(0.0, 1_000_000)
        return deps.gauge.level(deps.api.installation_for(check.upstream), now)

    if makes(purpose.mode, purpose.need, purpose.writes, level):
        return True
    if purpose.mode == "auto":
        deps.metrics.count("CheckRunSkipped", need=purpose.need.value)
    return False


def _mode(repo: str, deps: PassDeps) -> str:
    entry = deps.allowlist.current().get(repo)
    return entry.settings.check_runs if entry is not None else "auto"


def demoted(repo: str, level: int, began: float | None, deps: PassDeps) -> bool:
    """An L3 repository with an open demotion PR gets no new check run for work that began after the demotion
    started (`began` None: now, a label or a re-run); one shown for work already under way is carried to its end."""
    if level != 3 or deps.demotions is None:
        return False
    since = deps.demotions.since(repo)
    if since is None or (began is not None and began < since):
        return False
    deps.metrics.count("CheckRunSuppressed")
    return True


def _outcome(job: JobRecord) -> JobOutcome:
    changed = job.completed_at or job.started_at or job.dispatched_at
    return JobOutcome(
        job.run_id, job.job_name, job.run_attempt, job.state, job.conclusion, job.fingerprint != SWEPT, changed
    )


def _row_of(job: JobRecord) -> LedgerRow:
    """A dispatch as its jobs recorded it: everything the repository's check run reads of its ledger row."""
    return LedgerRow(
        delivery_id=job.delivery_id, repo=job.repo, state=LedgerState.DISPATCHED, dispatch_id=job.dispatch_id,
        dispatched_at=job.dispatched_at, upstream=job.upstream, head_sha=job.head_sha, pr=job.pr, level=job.level,
        device=job.device, ciflow=job.ciflow,
    )  # fmt: skip


def _newer(job: JobRecord, than: JobRecord) -> bool:
    return (job.dispatched_at or 0.0, job.run_attempt, job.version) > (
        than.dispatched_at or 0.0,
        than.run_attempt,
        than.version,
    )


def _awaiting_verdict(job: JobRecord, now: float) -> bool:
    """A failed L3/L4 PR job the reporter has not judged yet: its check run completes with the verdict in its summary
    (the reporter puts one on every such failure before anyone hears of it)."""
    finished = job.completed_at or job.dispatched_at
    return (
        job.pr is not None
        and job.level >= 3
        and job.verdict is None
        and Attempt(job.run_attempt, job.state, job.conclusion, job.failure_kind).failed
        and now - finished < VERDICT_WAIT_S
    )


def _job_writes(head: HeadView, jobs: list[JobRecord], deps: PassDeps) -> list[PlannedWrite]:
    """Each job's own check run (per_job, and auto while the budget has room), from its latest recorded attempt."""
    latest: dict[str, JobRecord] = {}
    for job in jobs:
        if job.level < 3 or not job.job_name or job.delivery_id == SCHEDULED:
            continue
        name = check_run_name(job.repo, job.workflow_name, job.job_name, job.ciflow)
        if name not in latest or _newer(job, latest[name]):
            latest[name] = job
    writes = []
    for name, job in latest.items():
        check = head.check(name)
        mode = _mode(job.repo, deps)
        # A check run that exists keeps following its job even if the label is removed or the setting changed
        # later (README): every run the relay created ends.
        if check.known is None and (mode == "per_repo" or not head.wanted(job.level, job.device, job.pr)):
            continue
        fields = check_run_fields(job, check.name)
        genuine = job.fingerprint != SWEPT
        if not should_write(check.known, fields["status"], fields.get("conclusion"), job.run_attempt, genuine):
            continue
        if _awaiting_verdict(job, deps.clock.now()):
            continue  # its verdict's image brings the next pass: a completed run is never rewritten for a verdict
        if check.known is None and demoted(job.repo, job.level, job.started_at or job.dispatched_at, deps):
            continue
        if setting_allows(check, Purpose(mode, *job_run_need(check.known, fields["status"])), deps):
            writes.append(PlannedWrite(check, fields, job.run_attempt, genuine, job.repo, delivery_id=job.delivery_id))
    return writes


def _repo_write(
    head: HeadView, row: LedgerRow, jobs: list[JobRecord], deps: PassDeps
) -> tuple[PlannedWrite | None, float | None]:
    """The repository's check run for one dispatch, and when to look again if its jobs have not settled yet."""
    if not row.head_sha or not row.upstream or (row.level or 0) < 3:
        return None, None
    check = head.check(check_run_name(row.repo, "", "", row.ciflow))
    known = check.known
    if known is None and not head.wanted(row.level or 0, row.device, row.pr):
        return None, None
    state = rollup([_outcome(j) for j in jobs], deps.clock.now(), deps.settle_s)
    if known is None and state.status == "queued" and head.not_to_show(row):
        return None, None
    fields = repo_check_fields(row, jobs, state, check.name)
    info = head.pr_info(row.pr) if row.pr is not None and superseded(known) else None
    again = info is not None and info.head_sha == row.head_sha  # its PR went back to this commit (A -> B -> A)
    if not should_write(known, fields["status"], fields.get("conclusion"), state.run_attempt, state.genuine, again):
        return None, state.settles_at
    if known is None and demoted(row.repo, row.level or 0, row.dispatched_at, deps):
        return None, None
    # per_repo (and auto when the budget is tight) spends it on what decides a merge: the result.
    purpose = Purpose(_mode(row.repo, deps), *repo_run_need(known, state.status, state.run_attempt))
    if not setting_allows(check, purpose, deps):
        return None, state.settles_at
    write = PlannedWrite(check, fields, state.run_attempt, state.genuine, row.repo, delivery_id=row.delivery_id)
    return write, state.settles_at


def plan(
    head: HeadView, booked: frozenset[str], in_hand: dict[str, LedgerRow], deps: PassDeps, done: PassRecord
) -> list[PlannedWrite]:
    """Every write that moves one of the head's check runs forward, the repositories' first (they decide merges)."""
    # Bisection runs have no upstream check runs (crcr.app.regressions).
    jobs = head.jobs = [j for j in deps.results.jobs_for_head(head.upstream, head.head_sha) if j.event_type != BISECT]
    by_dispatch: dict[str, list[JobRecord]] = {}
    rows: dict[str, LedgerRow] = {}
    for job in jobs:
        if job.delivery_id != SCHEDULED:
            by_dispatch.setdefault(job.dispatch_id, []).append(job)
            rows.setdefault(job.dispatch_id, _row_of(job))
    keys = {row_key(row.delivery_id, row.repo): row for row in rows.values()}
    for key in sorted(booked | set(in_hand)):
        row = keys.get(key) or in_hand.get(key)
        if row is None:
            delivery_id, _, repo = key.partition(" ")
            row = deps.ledger.get(delivery_id, repo)
        if row is None or key in keys:
            done.done.add(key)  # gone, or known from its jobs from now on
            continue
        rows.setdefault(row.dispatch_id or key, row)
        keys[key] = row
    writes: list[PlannedWrite] = []
    for dispatch_id, row in rows.items():
        write, settles_at = _repo_write(head, row, by_dispatch.get(dispatch_id, []), deps)
        key = row_key(row.delivery_id, row.repo)
        if write is not None:
            write.row = key if key in booked or key in in_hand else None
            writes.append(write)
        elif key in booked or key in in_hand:
            done.done.add(key)
        if settles_at is not None:
            done.later(settles_at)
    return writes + _job_writes(head, jobs, deps)


def cancel_writes(message: HeadSuperseded, head: HeadView, deps: PassDeps) -> list[PlannedWrite]:
    """A newer commit was pushed to the PR: the old commit's check runs still queued (nothing started)
    are completed as cancelled, naming the newer commit. Only GitHub itself may set `stale`."""
    newer, writes = message.superseded_by or "", []
    info = head.pr_info(message.pr) if message.pr is not None else None
    if info is not None and info.head_sha == message.head_sha:
        return []  # the PR went back to this commit before the cancel ran (A -> B -> A): it is the head again
    for name, (known, version) in head.checks.items():
        if known is None or known.status != "queued":
            continue
        fields = cancelled_fields(name, newer, deps.clock.now())
        check = CheckRecord(message.upstream, message.head_sha, name, known, version)
        writes.append(PlannedWrite(check, fields, known.run_attempt, False, "", counted="CheckRunCancelled"))
    return writes


def skip_writes(message: RepoSkipped, head: HeadView, deps: PassDeps) -> list[PlannedWrite]:
    """An L4 repository the change did not concern (its path filters): its required check, concluded skipped
    with the reason, so a ruleset requiring it never waits. A run that already exists on the commit (a dispatch
    of the same commit went out) is left as it is."""
    check = head.check(check_run_name(message.repo, "", "", message.ciflow))
    if check.known is not None:
        return []
    fields = skipped_fields(
        check.name, message.repo, message.head_sha, message.pr, message.reason, deps.clock.now()
    )  # fmt: skip
    if not setting_allows(check, Purpose(_mode(message.repo, deps), Need.RESULT, 1), deps):
        return []
    return [PlannedWrite(check, fields, 0, True, "", counted="CheckRunSkippedByPaths", delivery_id=message.delivery_id)]
