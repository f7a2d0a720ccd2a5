"""Check-run writer: upstream check runs (docs/contracts.md) for L4 and labelled L3 dispatches.

Two kinds, each one per (head SHA, name), created once and then PATCHed forward only:
- the repository's, crcr/<owner>/<repo>: created `queued` when an L4 dispatch is sent, so a required
  check exists before anything reports; in progress while any job runs; completed with the worst
  conclusion once every job finished and nothing changed for the settle period; timed_out when no
  job started. Its summary lists the jobs. With `check_runs: per_repo` it is the only one;
- per job, crcr/<owner>/<repo>/<workflow>/<job> (`check_runs: per_job`).

Every write goes through the upstream installation, whose budget GitHub caps (80 content-creating
requests a minute, 500 an hour): writes are paced per installation, and over the budget a message goes
back to the queue with a delay, never dropped. A message names what to look at; the writer reads the
latest recorded state when it gets there, so waiting merges writes instead of piling them up.

`check_runs: auto` (the default) adapts to that budget write by write (crcr.domain.checks.makes): while the
pacer's hourly window has room, per_job; once it has not, no new per-job run and no `in_progress`, and the
repository's `queued` run only while it would go at once. Runs that exist are always carried to their end.

The PR comment shares the queue and the budget; `comment` messages go to its writer (crcr.app.comment).

Re-runs of downstream runs (kind "rerun", crcr.app.rerun) go through the same writer and pacer, spending
the downstream installation's budget instead: asked for from the Checks tab, or the relay's own retry of
an infrastructure failure.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from crcr.app.budget import Budget, Paced
from crcr.app.comment import CommentDeps, ask_render, sync_comment
from crcr.app.outbound import GITHUB, Outbound, Permit, Write
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.checkruns import CheckRunStore
from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable, NotInstalled
from crcr.app.ports.jobs import JobRecord, ResultsStore
from crcr.app.ports.ledger import LedgerReader, LedgerRow, LedgerState
from crcr.app.ports.levels import DemotionReader
from crcr.app.ports.pacing import BudgetGauge, Pacer
from crcr.app.ports.pulls import PrInfo, PrInfos
from crcr.app.ports.queues import ChecksQueue
from crcr.app.regression_notices import NoticeBusy, NoticeDeps, tell
from crcr.app.rerun import RerunBusy, RerunDeps, RetryDeps, rerun_requested, retry_infra
from crcr.contracts.messages import CheckSyncMessage
from crcr.domain import failed_tests
from crcr.domain.checks import (
    DONE_STATES,
    JobOutcome,
    Known,
    Need,
    Rollup,
    check_run_name,
    downstream_of,
    job_run_need,
    latest_attempts,
    makes,
    repo_run_need,
    rollup,
    should_write,
    superseded,
    wants_check_run,
)
from crcr.domain.comment import known_links
from crcr.domain.ids import NO_RUN, ascii_lower
from crcr.domain.pacing import WindowLevel
from crcr.domain.planning import NO_MATCHING_FILES
from crcr.domain.regressions import BISECT
from crcr.domain.retry import RetryPolicy
from crcr.domain.text import shown
from crcr.domain.verdicts import VERDICT_MEANING, Attempt


class CheckRunApi(Protocol):
    def installation_for(self, upstream: str) -> int:
        """The installation whose budget the writes spend (paced per installation, like dispatches)."""
        ...

    def create_check_run(self, upstream: str, fields: dict[str, Any], *, permit: Permit) -> int: ...
    def update_check_run(self, upstream: str, check_run_id: int, fields: dict[str, Any], *, permit: Permit) -> None: ...


class Reactions(Protocol):
    def installation_for(self, upstream: str) -> int: ...
    def react(self, upstream: str, comment_id: int, content: str, *, permit: Permit) -> None:
        """A reaction on an issue comment (`+1`, `rocket`, `confused`, …)."""
        ...


MAX_SUMMARY = 65_535  # GitHub's limit on output.summary
SWEPT = "swept"  # fingerprint of a sweeper write: any genuine report differs from it
SCHEDULED = "scheduled"  # delivery id of scheduled runs: they report on a commit, not on a PR's checks


@dataclass(frozen=True)
class CheckDeps:
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
    door: Outbound  # every check run and reaction is written only with its permit (crcr.app.outbound)
    settle_s: float = 60.0
    reruns: RerunDeps | None = None  # kind "rerun": re-runs from the Checks tab and the relay's own retries
    retries: RetryDeps | None = None
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    rand: Callable[[], float] = field(default=random.random)
    comment: CommentDeps | None = None  # the PR comment (CRCR_PR_COMMENT=off: None)
    gauge: BudgetGauge | None = None  # check_runs: auto reads the installation's hourly window (None: always room)
    demotions: DemotionReader | None = None  # L3 repositories with an open demotion PR get no new check runs
    reactions: Reactions | None = None  # answers to PR comment commands
    notices: NoticeDeps | None = None  # a regression's one notice to its downstream's owners
    # Each downstream's share of the upstream installation's write budget (CRCR_DOWNSTREAM_WRITE_SHARE): one whose
    # jobs would take more waits for its own share, never for another's. None: no share (the whole budget).
    share: Pacer | None = None
    pass_settle_s: float = 5.0  # a change waits this long for the rest of its burst before its head's pass runs
    # A pass's lock lapses after this: longer than ChecksFunction's time-out, so only a writer that is gone loses it.
    pass_lease_s: float = 90.0
    pass_max_wait_s: float = 30.0  # a steady stream of changes still gets a pass at least this often
    # What this instance last asked the PR comment to show, per PR: a pass asks again only when that changed.
    comment_asked: dict[tuple[str, int], tuple[Any, ...]] = field(default_factory=dict)

    @property
    def ask(self) -> HeadAsk:
        return HeadAsk(self.store, self.queue, self.clock, self.pass_settle_s)


@dataclass
class SyncOutcome:
    written: list[str] = field(default_factory=list)
    detail: str = "done"
    delay_s: float = 0.0
    delivery_of: dict[str, str] = field(default_factory=dict)  # a pass's writes: check run -> its dispatch's delivery


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts is not None else None


def _tests(body: dict[str, Any]) -> str | None:
    results = body.get("test_results") or (body.get("workflow") or {}).get("test_results")
    if not isinstance(results, dict):
        return None
    return (
        f"{results.get('passed', 0)} passed, {results.get('failed', 0)} failed, "
        f"{results.get('skipped', 0)} skipped of {results.get('total', 0)}"
    )


def _triage_line(job: JobRecord) -> str | None:
    """The downstream's own reading of the failure: advice, shown as theirs."""
    if not job.triage:
        return None
    triage = json.loads(job.triage)
    line = f"The downstream's triage (advice, not a gate): {triage['category']}, {triage['confidence']} confidence"
    suspected = triage.get("suspected_upstream") or {}
    if suspected.get("pr"):
        line += f"; suspects upstream PR #{suspected['pr']}"
    if suspected.get("commit"):
        line += f"; suspects upstream commit {suspected['commit']}"
    return f"{line}. {triage['summary']}"


def _failing_tests(job: JobRecord) -> str | None:
    """The failing tests as the downstream named them (the first 50 kept, messages cut), as a Markdown list."""
    tests = failed_tests.parse(job.failed_tests)
    if not tests:
        return None
    lines = ["Failing tests:"]
    for test in tests[:20]:
        name = f"{test['classname']}.{test['name']}" if test.get("classname") else test["name"]
        line = f"- `{shown(name)[:300].replace('`', '')}`"
        if isinstance(test.get("duration"), int | float):
            line += f" ({test['duration']:.1f} s)"
        if test.get("message"):
            line += ": " + " ".join(shown(str(test["message"])).split())[:500]
        lines.append(line)
    if len(tests) > 20:
        lines.append(f"- … and {len(tests) - 20} more")
    return "\n".join(lines)


def _summary(job: JobRecord) -> str:
    body: dict[str, Any] = json.loads(job.callback_payload)
    lines = [f"**{job.repo}** · {job.workflow_name} / {job.job_name} · {job.conclusion or job.state}"]
    if job.verdict:
        lines.append(f"Verdict: **{job.verdict}** ({VERDICT_MEANING.get(job.verdict, '')})")
        if job.known_issues:
            lines.append(f"Known upstream: {known_links(job.known_issues)}")
    if (triage := _triage_line(job)) is not None:
        lines.append(triage)
    tests = _tests(body)
    if tests:
        lines.append(f"Tests: {tests}")
    if (failing := _failing_tests(job)) is not None:
        lines.append(failing)
    if job.started_at is not None:
        lines.append(f"Queue time: {job.started_at - job.dispatched_at:.0f} s")
        if job.completed_at is not None:
            lines.append(f"Execution time: {job.completed_at - job.started_at:.0f} s")
    if job.url:
        lines.append(f"Run: {job.url}")
    artifact = body.get("artifact_url")
    if isinstance(artifact, str):
        lines.append(f"Artifacts: {artifact}")
    summary = body.get("summary")
    if isinstance(summary, str) and summary:
        lines += ["", shown(summary)]  # the downstream's Markdown, without control or bidirectional characters
    return "\n\n".join(lines)[:MAX_SUMMARY]


def _external_id(repo: str, run_id: str, pr: int | None) -> str:
    return f"{repo}:{run_id}:{pr if pr is not None else ''}"


def check_run_fields(job: JobRecord, name: str) -> dict[str, Any]:
    status = "completed" if job.state in DONE_STATES else "in_progress"
    fields: dict[str, Any] = {
        "name": name,
        "head_sha": job.head_sha,
        "status": status,
        "external_id": _external_id(job.repo, job.run_id, job.pr),
        "output": {"title": f"{job.repo}: {job.conclusion or job.state}", "summary": _summary(job)},
    }
    if job.url:
        fields["details_url"] = job.url
    if job.started_at is not None:
        fields["started_at"] = _iso(job.started_at)
    if status == "completed":
        fields["conclusion"] = job.conclusion or "timed_out"
        fields["completed_at"] = _iso(job.completed_at or job.started_at or job.dispatched_at)
    return fields


def _job_line(job: JobRecord) -> str:
    line = f"- {job.workflow_name} / {job.job_name}: **{job.conclusion or job.state}**"
    if job.verdict:
        line += f" ({job.verdict})"
    tests = _tests(json.loads(job.callback_payload))
    if tests:
        line += f" · {tests}"
    if job.url:
        line += f" · [run]({job.url})"
    return line


def repo_check_fields(row: LedgerRow, jobs: list[JobRecord], state: Rollup, name: str) -> dict[str, Any]:
    repo = row.repo
    shown = latest_attempts(jobs)
    word = state.conclusion or ("dispatched" if state.status == "queued" else "running")
    lines = [f"**{repo}** · {word}"]
    if state.status == "queued":
        lines.append("Dispatched; waiting for the first job to start.")
    elif not shown:
        reasons = [j.reason for j in jobs if not j.job_name and j.state == "not_started" and j.reason]
        lines.append(reasons[0] if reasons else "No job of this dispatch started before the start timeout.")
    else:
        lines.append("\n".join(_job_line(j) for j in shown))
    first = shown[0] if shown else None
    fields: dict[str, Any] = {
        "name": name,
        "head_sha": row.head_sha,
        "status": state.status,
        "external_id": _external_id(repo, first.run_id if first else NO_RUN, row.pr),
        "output": {"title": f"{repo}: {word}", "summary": "\n\n".join(lines)[:MAX_SUMMARY]},
    }
    if first is not None and first.url:
        fields["details_url"] = first.url
    starts = [j.started_at for j in shown if j.started_at is not None]
    if starts:
        fields["started_at"] = _iso(min(starts))
    if state.status == "completed":
        fields["conclusion"] = state.conclusion
        ends = [j.completed_at for j in jobs if j.completed_at is not None]
        fields["completed_at"] = _iso(max(ends) if ends else None)
    return fields


@dataclass(frozen=True)
class _Check:
    """One check run as the relay last wrote it (known None: never written), read once per pass."""

    upstream: str
    head_sha: str
    name: str
    known: Known | None
    version: int


@dataclass(frozen=True)
class _Why:
    """The repository's `check_runs` setting and what the write is for (crcr.domain.checks.makes)."""

    mode: str = "per_job"
    need: Need = Need.RESULT
    writes: int = 1  # this write and the ones it commits to


def _makes(check: _Check, why: _Why, deps: CheckDeps) -> bool:
    """Whether the repository's setting makes this write now (with `auto`, as the budget's hourly window stands: a
    pass decides every write afresh, and a slot it holds goes to the first write made)."""
    now = deps.clock.now()

    def level() -> WindowLevel:
        if deps.gauge is None:
            return WindowLevel(0.0, 1_000_000)
        return deps.gauge.level(deps.api.installation_for(check.upstream), now)

    if makes(why.mode, why.need, why.writes, level):
        return True
    if why.mode == "auto":
        deps.metrics.count("CheckRunSkipped", need=why.need.value)
    return False


SHARE_RECHECK_S = 60.0
COMMENT_ASKED_KEPT = 1000  # PRs whose last request this instance remembers


def share_key(upstream: str, repo: str) -> str:
    return f"{ascii_lower(upstream)}#{ascii_lower(repo)}"


@dataclass
class _Write:
    """One write a pass means to make: a check run's fields, and what the write is for."""

    check: _Check
    fields: dict[str, Any]
    attempt: int
    genuine: bool
    repo: str
    row: str | None = None  # the booked dispatch ("<delivery id> <repository>") it settles, if any
    counted: str | None = None  # a metric counted once written (CheckRunCancelled, CheckRunSkippedByPaths)
    delivery_id: str = ""  # the delivery whose dispatch the check run shows (for the log)
    permit: Permit | None = None  # the outbound door's, once asked (_permitted)


class _Head:
    """What a pass knows of one commit: the check runs the relay wrote on it and the PRs it read, each read once."""

    def __init__(self, upstream: str, head_sha: str, deps: CheckDeps) -> None:
        self.upstream, self.head_sha, self._deps = upstream, head_sha, deps
        self.checks = deps.store.checks_of_head(upstream, head_sha)
        self.jobs: list[JobRecord] = []  # read by a pass's plan
        self._prs: dict[int, PrInfo | None] = {}

    def check(self, name: str) -> _Check:
        known, version = self.checks.get(name, (None, 0))
        return _Check(self.upstream, self.head_sha, name, known, version)

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


def _mode(repo: str, deps: CheckDeps) -> str:
    entry = deps.allowlist.current().get(repo)
    return entry.settings.check_runs if entry is not None else "auto"


def _demoted(repo: str, level: int, began: float | None, deps: CheckDeps) -> bool:
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


def row_key(delivery_id: str, repo: str) -> str:
    return f"{delivery_id} {repo}"


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


VERDICT_WAIT_S = 300.0  # a failed PR job's check run waits this long at most for its verdict before it completes


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


def _job_writes(head: _Head, jobs: list[JobRecord], deps: CheckDeps, budget: Budget) -> list[_Write]:
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
        if check.known is None and _demoted(job.repo, job.level, job.started_at or job.dispatched_at, deps):
            continue
        if _makes(check, _Why(mode, *job_run_need(check.known, fields["status"])), deps):
            writes.append(_Write(check, fields, job.run_attempt, genuine, job.repo, delivery_id=job.delivery_id))
    return writes


def _repo_write(
    head: _Head, row: LedgerRow, jobs: list[JobRecord], deps: CheckDeps, budget: Budget
) -> tuple[_Write | None, float | None]:
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
    if known is None and _demoted(row.repo, row.level or 0, row.dispatched_at, deps):
        return None, None
    # per_repo (and auto when the budget is tight) spends it on what decides a merge: the result.
    why = _Why(_mode(row.repo, deps), *repo_run_need(known, state.status, state.run_attempt))
    if not _makes(check, why, deps):
        return None, state.settles_at
    write = _Write(check, fields, state.run_attempt, state.genuine, row.repo, delivery_id=row.delivery_id)
    return write, state.settles_at


@dataclass
class _Pass:
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


def _plan(
    head: _Head, booked: frozenset[str], in_hand: dict[str, LedgerRow], deps: CheckDeps, budget: Budget, done: _Pass
) -> list[_Write]:
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
    writes: list[_Write] = []
    for dispatch_id, row in rows.items():
        write, settles_at = _repo_write(head, row, by_dispatch.get(dispatch_id, []), deps, budget)
        key = row_key(row.delivery_id, row.repo)
        if write is not None:
            write.row = key if key in booked or key in in_hand else None
            writes.append(write)
        elif key in booked or key in in_hand:
            done.done.add(key)
        if settles_at is not None:
            done.later(settles_at)
    return writes + _job_writes(head, jobs, deps, budget)


def _shares(writes: list[_Write], deps: CheckDeps, done: _Pass) -> list[_Write]:
    """Each downstream's own share first: one over it waits (its writes are left for a later pass) without touching
    the installation's budget or holding up another downstream's."""
    if deps.share is None:
        return writes
    by_repo: dict[str, list[_Write]] = {}
    for write in writes:
        if write.repo:
            by_repo.setdefault(write.repo, []).append(write)
    now, kept = deps.clock.now(), [w for w in writes if not w.repo]
    for repo, theirs in by_repo.items():
        allowed, wait = deps.share.acquire_many(share_key(theirs[0].check.upstream, repo), now, len(theirs))
        if allowed < len(theirs):
            deps.metrics.count("DownstreamThrottled")
            done.later(now + min(wait, SHARE_RECHECK_S))
        kept += theirs[:allowed]
    order = {id(w): i for i, w in enumerate(writes)}
    return sorted(kept, key=lambda w: order[id(w)])


def _make(writes: list[_Write], deps: CheckDeps, budget: Budget, done: _Pass) -> None:
    """The writes, their slots taken in one booking of the upstream installation's budget: those it allows now are
    made, the rest wait for the slots booked for them (the pass runs again then, holding them)."""
    if not writes:
        return
    upstream, now = writes[0].check.upstream, deps.clock.now()
    allowed, wait = budget.take(deps.pacer, lambda: deps.api.installation_for(upstream), now, len(writes))
    if wait > 0:
        deps.metrics.count("CheckRunPaced")
        done.budget_at = now + wait
    for write in writes[:allowed]:
        if _made(write, deps):
            done.outcome.written.append(write.check.name)
            done.outcome.delivery_of[write.check.name] = write.delivery_id
            if write.counted:
                deps.metrics.count(write.counted)
        if write.row is not None:
            done.done.add(write.row)


def _made(write: _Write, deps: CheckDeps) -> bool:
    """One write, under the head's lock (one writer per check run, so two PATCHes never land out of order), then
    recorded at the version the pass read. A 4xx for this check run is dead-lettered with the reason; the rest of
    the pass goes on."""
    check, fields, permit = write.check, write.fields, write.permit
    assert permit is not None  # _permitted kept only the writes the door let through
    try:
        if check.known is None:
            check_run_id = deps.api.create_check_run(check.upstream, fields, permit=permit)
            deps.metrics.count("CheckRunCreated")
        else:
            check_run_id = check.known.check_run_id
            deps.api.update_check_run(
                check.upstream, check_run_id, {k: v for k, v in fields.items() if k != "head_sha"}, permit=permit
            )
            deps.metrics.count("CheckRunUpdated")
    except GitHubRejected as exc:
        failed = CheckSyncMessage(kind="head", upstream=check.upstream, head_sha=check.head_sha, repo=write.repo)
        deps.queue.dead_letter(failed, f"GitHub rejected the check run {check.name}: {exc}")
        deps.metrics.count("CheckRunDeadLettered")
        return False
    known = Known(check_run_id, fields["status"], fields.get("conclusion"), write.attempt)
    if not deps.store.record_check(check.upstream, check.head_sha, check.name, known, check.version, deps.clock.now()):
        deps.metrics.count("CheckRunRecordLost")  # only a pass whose lock lapsed gets here: the next pass reads again
    return True


def _permitted(writes: list[_Write], deps: CheckDeps) -> list[_Write]:
    """The writes the outbound door lets through, each holding its permit; a shadow downstream's check run is kept
    as a shadow decision instead, and spends no budget."""
    kept = []
    for write in writes:
        check, fields = write.check, write.fields
        permit = deps.door.permit(
            Write(
                system=GITHUB,
                action="check_run",
                repo=downstream_of(check.name),
                upstream=check.upstream,
                key=f"{check.head_sha}:{check.name}:{fields.get('status')}:{fields.get('conclusion')}",
                body=fields,
                head_sha=check.head_sha,
            )
        )
        if permit is not None:
            kept.append(replace(write, permit=permit))
    return kept


def cancel_superseded(message: CheckSyncMessage, head: _Head, deps: CheckDeps) -> list[_Write]:
    """A newer commit was pushed to the PR: the old commit's check runs still queued (nothing started)
    are completed as cancelled, naming the newer commit. Only GitHub itself may set `stale`."""
    newer, writes = message.superseded_by or "", []
    info = head.pr_info(message.pr) if message.pr is not None else None
    if info is not None and info.head_sha == message.head_sha:
        return []  # the PR went back to this commit before the cancel ran (A -> B -> A): it is the head again
    for name, (known, version) in head.checks.items():
        if known is None or known.status != "queued":
            continue
        repo = name.removeprefix("crcr/")
        fields = {
            "name": name,
            "status": "completed",
            "conclusion": "cancelled",
            "completed_at": _iso(deps.clock.now()),
            "output": {
                "title": f"{repo}: superseded by {newer[:12]}",
                "summary": f"A newer commit, {newer}, was pushed to the pull request before any job of "
                f"{repo} started on this one. Its results are reported on the newer commit.",
            },
        }
        check = _Check(message.upstream, message.head_sha, name, known, version)
        writes.append(_Write(check, fields, known.run_attempt, False, "", counted="CheckRunCancelled"))
    return writes


def skip_repo(message: CheckSyncMessage, head: _Head, deps: CheckDeps) -> list[_Write]:
    """An L4 repository the change did not concern (its path filters): its required check, concluded skipped
    with the reason, so a ruleset requiring it never waits. A run that already exists on the commit (a dispatch
    of the same commit went out) is left as it is."""
    check = head.check(check_run_name(message.repo, "", "", message.ciflow))
    if check.known is not None:
        return []
    now = _iso(deps.clock.now())
    why = "no file it watches changed (its paths filter)" if message.reason == NO_MATCHING_FILES else message.reason
    fields = {
        "name": check.name,
        "head_sha": message.head_sha,
        "status": "completed",
        "conclusion": "skipped",
        "started_at": now,
        "completed_at": now,
        "external_id": _external_id(message.repo, NO_RUN, message.pr),
        "output": {
            "title": f"{message.repo}: skipped, no matching files",
            "summary": f"**{message.repo}** was not dispatched for this commit: {why}.",
        },
    }
    if not _makes(check, _Why(_mode(message.repo, deps), Need.RESULT, 1), deps):
        return []
    return [_Write(check, fields, 0, True, "", counted="CheckRunSkippedByPaths", delivery_id=message.delivery_id)]


def _later(message: CheckSyncMessage, deps: CheckDeps, delay: float, attempt: int, budget: Budget) -> None:
    update = {"not_before": deps.clock.now() + delay, "attempt": attempt, "slot_at": budget.slot_at}
    deps.queue.send_checks([message.model_copy(update=update)], delay)


@dataclass(frozen=True)
class HeadAsk:
    """What asks for a head's pass (the reporter, the stream of dispatches sent, a late label): its booking, and the
    one message that carries it."""

    store: CheckRunStore
    queue: ChecksQueue
    clock: Clock
    settle_s: float = 5.0  # a change waits this long for the rest of its burst before the pass runs
    stale_s: float = 1200.0  # a booked pass not heard of for this long was lost (its message dead-lettered)
    new_ticket: Callable[[], str] = field(default=lambda: uuid.uuid4().hex)


def ask_head(
    ask: HeadAsk, upstream: str, head_sha: str, rows: Iterable[str] = (), due_in: float | None = None
) -> str | None:
    """Book a pass over the head (adding the dispatches in `rows`): one write, and a message only when no pass was
    booked yet. Returns the ticket when this call booked it (the caller may run it at once instead of waiting)."""
    now, ticket = ask.clock.now(), ask.new_ticket()
    delay = ask.settle_s if due_in is None else due_in
    booked = ask.store.book_head(upstream, head_sha, ticket, now, now + delay, now - ask.stale_s, set(rows))
    return ticket if booked == ticket else None


def head_message(upstream: str, head_sha: str, ticket: str, delay: float, now: float) -> CheckSyncMessage:
    return CheckSyncMessage(kind="head", upstream=upstream, head_sha=head_sha, render=ticket, not_before=now + delay)


def request_head(ask: HeadAsk, upstream: str, head_sha: str, rows: Iterable[str] = ()) -> bool:
    """Book a pass over the head and, when this booked it, send its message (delayed by the settle period)."""
    ticket = ask_head(ask, upstream, head_sha, rows)
    if ticket is None:
        return False
    ask.queue.send_checks([head_message(upstream, head_sha, ticket, ask.settle_s, ask.clock.now())], ask.settle_s)
    return True


def sync_head(message: CheckSyncMessage, deps: CheckDeps, in_hand: dict[str, LedgerRow] | None = None) -> SyncOutcome:
    """One pass over every check run of a commit, under the head's lock: read its check runs and its jobs once,
    decide every write that moves one forward, take their slots in one booking, make them. A booked pass (`render`,
    its ticket) runs again when something was asked for while it ran, when a repository's jobs settle, or when the
    budget delays some writes; a pass of its own (`cancel`, `skip`) only writes what it was sent for."""
    upstream, head_sha, ticket, now = message.upstream, message.head_sha, message.render, deps.clock.now()
    if message.kind != "head":
        ticket = None
    locked, row = deps.store.lock_head(
        upstream, head_sha, ticket, now, deps.pass_lease_s, now + 0.5, now - deps.pass_max_wait_s
    )
    if locked is None:
        if ticket is not None and row.pending != ticket:
            deps.metrics.count("CheckPassSkipped", reason="superseded")
            return SyncOutcome(detail="superseded")
        if row.lock_until >= now or row.due_at is None:
            _later(message, deps, 1.0, message.attempt, Budget(message.slot_at))
            deps.metrics.count("CheckRunRetried", reason="busy")
            return SyncOutcome(detail="busy", delay_s=1.0)
        until = min(row.due_at, (row.pending_since or now) + deps.pass_max_wait_s)
        _later(message, deps, max(0.5, until - now), message.attempt, Budget(message.slot_at))
        return SyncOutcome(detail="settling", delay_s=max(0.5, until - now))
    budget = Budget(message.slot_at)
    done = _Pass()
    try:
        keep, attempt, failed = _run(message, deps, row.rows, in_hand or {}, budget, done)
    except BaseException:
        deps.store.finish_head(upstream, head_sha, ticket, locked, deps.clock.now(), done.done, True)
        raise  # the booking stays: SQS delivers this pass again once its visibility lapses
    if failed is not None:
        deps.store.finish_head(upstream, head_sha, ticket, locked, deps.clock.now(), done.done, False)
        return _dead_letter(message, deps, failed, done.outcome)
    now = deps.clock.now()
    rerun = done.next_at(None) is not None
    asked = deps.store.finish_head(upstream, head_sha, ticket, locked, now, done.done, rerun)
    if ticket is None:
        if rerun:  # a write of its own that could not go yet: its message again
            delay = max(1.0, (done.next_at(None) or now) - now)
            _later(message, deps, delay, attempt, budget)
            done.outcome.detail, done.outcome.delay_s = "paced", delay
        return done.outcome
    if (at := done.next_at(asked)) is not None:
        # Asked for again while it ran (once more, after that burst), a repository settling, or writes the budget
        # delayed: the same pass, holding the slot booked for it.
        delay = max(0.0, at - now)
        paced = keep or done.budget_at is not None
        _later(message, deps, delay, attempt if keep else 0, budget)
        done.outcome.detail, done.outcome.delay_s = ("paced" if paced else "again"), delay
    return done.outcome


def _run(
    message: CheckSyncMessage,
    deps: CheckDeps,
    booked: frozenset[str],
    in_hand: dict[str, LedgerRow],
    budget: Budget,
    done: _Pass,
) -> tuple[bool, int, str | None]:
    """The pass under the lock: (keep the booking, the attempt its next message carries, why to dead-letter it)."""
    now = deps.clock.now()
    try:
        head = _Head(message.upstream, message.head_sha, deps)
        if message.kind == "cancel":
            writes = _permitted(cancel_superseded(message, head, deps), deps)
        elif message.kind == "skip":
            writes = _permitted(skip_repo(message, head, deps), deps)
        else:
            writes = _shares(_permitted(_plan(head, booked, in_hand, deps, budget, done), deps), deps, done)
        _make(writes, deps, budget, done)
        _comment_after(head, deps)
    except Paced as exc:
        done.budget_at = now + exc.wait_s
        deps.metrics.count("CheckRunPaced")
        return True, message.attempt, None
    except GitHubRateLimited as exc:
        done.later(deps.clock.now() + exc.wait_s)
        deps.metrics.count("CheckRunRetried", reason="rate_limited")
        return True, message.attempt, None
    except GitHubUnavailable as exc:
        attempt = message.attempt + 1
        if attempt >= deps.policy.max_attempts:
            return False, attempt, f"unavailable: {exc} (gave up after {attempt} attempts)"
        done.later(deps.clock.now() + deps.policy.backoff(attempt, deps.rand))
        deps.metrics.count("CheckRunRetried", reason="unavailable")
        return True, attempt, None
    except NotInstalled as exc:
        return False, message.attempt, f"GitHub rejected the check run: {exc}"
    return False, message.attempt, None


def _comment_after(head: _Head, deps: CheckDeps) -> None:
    """The PR comment shows finished L3/L4 jobs: a pass that saw one on a PR asks for a render, booked in the PR's row,
    so a burst of passes is one render (crcr.app.comment)."""
    if deps.comment is None:
        return
    finished: dict[int, list[tuple[Any, ...]]] = {}
    for job in head.jobs:
        if job.level >= 3 and job.pr is not None and job.state in DONE_STATES:
            shown = (job.dispatch_id, job.run_id, job.run_attempt, job.job_name, job.state, job.conclusion, job.verdict)
            finished.setdefault(job.pr, []).append(shown)
    for pr, jobs in sorted(finished.items()):
        # What the comment would show of this commit: asked for already (by this instance), nothing to ask again.
        seen = (head.head_sha, *sorted(jobs, key=str))
        if deps.comment_asked.get((head.upstream, pr)) == seen:
            continue
        ask_render(head.upstream, head.head_sha, pr, deps.comment)
        if len(deps.comment_asked) >= COMMENT_ASKED_KEPT:
            deps.comment_asked.pop(next(iter(deps.comment_asked)))
        deps.comment_asked[(head.upstream, pr)] = seen


def sync(message: CheckSyncMessage, deps: CheckDeps) -> SyncOutcome:
    """Handle one message. Over the budget, behind another writer, or GitHub asking to wait: back to
    the queue with a delay. 5xx and timeouts: backoff, then the dead-letter queue. 4xx: dead-lettered
    with the reason at once (retrying will not change GitHub's answer); a re-run GitHub refuses is
    counted and dropped (see crcr.app.rerun)."""
    now = deps.clock.now()
    if message.not_before is not None and message.not_before > now + 1:
        delay = message.not_before - now  # SQS delays at most 15 minutes; longer waits hop until due
        deps.queue.send_checks([message], delay)
        return SyncOutcome(detail="not_due", delay_s=delay)
    if message.kind == "comment":
        return _comment(message, deps)
    if message.kind in ("head", "cancel", "skip"):
        return sync_head(message, deps)
    if message.kind in ("job", "repo"):
        # Sent before passes existed (or a late label's backfill): book the head's pass, naming the dispatch.
        rows = {row_key(message.delivery_id, message.repo)} if message.delivery_id and message.repo else set()
        request_head(deps.ask, message.upstream, message.head_sha, rows)
        return SyncOutcome(detail="booked")
    budget = Budget(message.slot_at)
    # metric names: RerunPaced, RegressionNoticePaced, CheckRunPaced, ...
    what = {"rerun": "Rerun", "notice": "RegressionNotice"}.get(message.kind, "CheckRun")
    try:
        if message.kind == "rerun":
            return rerun(message, deps, budget)
        if message.kind == "notice":
            return notice(message, deps, budget)
        return react(message, deps, budget)
    except Paced as exc:
        _later(message, deps, exc.wait_s, message.attempt, budget)
        deps.metrics.count(f"{what}Paced")
        return SyncOutcome(detail="paced", delay_s=exc.wait_s)
    except (RerunBusy, NoticeBusy):
        _later(message, deps, 1.0, message.attempt, budget)
        deps.metrics.count(f"{what}Retried", reason="busy")
        return SyncOutcome(detail="busy", delay_s=1.0)
    except GitHubRateLimited as exc:
        _later(message, deps, exc.wait_s, message.attempt, budget)
        deps.metrics.count(f"{what}Retried", reason="rate_limited")
        return SyncOutcome(detail=f"rate_limited: {exc}", delay_s=exc.wait_s)
    except GitHubUnavailable as exc:
        attempt = message.attempt + 1
        if attempt >= deps.policy.max_attempts:
            return _dead_letter(message, deps, f"unavailable: {exc} (gave up after {attempt} attempts)", SyncOutcome())
        delay = deps.policy.backoff(attempt, deps.rand)
        _later(message, deps, delay, attempt, budget)
        deps.metrics.count(f"{what}Retried", reason="unavailable")
        return SyncOutcome(detail=f"unavailable: {exc}", delay_s=delay)
    except (GitHubRejected, NotInstalled) as exc:
        return _dead_letter(
            message, deps, f"GitHub rejected the {'re-run' if what == 'Rerun' else 'reaction'}: {exc}", SyncOutcome()
        )


def notice(message: CheckSyncMessage, deps: CheckDeps, budget: Budget) -> SyncOutcome:
    """A regression's one notice (crcr.app.regression_notices.tell)."""
    if deps.notices is None:
        return SyncOutcome(detail="notices_off")
    return SyncOutcome(detail=tell(message, deps.notices, budget))


def _comment(message: CheckSyncMessage, deps: CheckDeps) -> SyncOutcome:
    """The PR comment shares this queue and the installation's budget; its writer is crcr.app.comment."""
    if deps.comment is None:
        deps.metrics.count("PrCommentSkipped", reason="off")
        return SyncOutcome(detail="comment off")
    result = sync_comment(message, deps.comment)
    return SyncOutcome(result.written, result.detail, result.delay_s)


def rerun(message: CheckSyncMessage, deps: CheckDeps, budget: Budget) -> SyncOutcome:
    """A re-run of a downstream run, paced on the downstream's installation: one asked for from the Checks
    tab, or the relay's own retry of an infrastructure failure (which waits while the run still runs)."""
    if deps.reruns is None or (message.requested_by == "relay" and deps.retries is None):
        return SyncOutcome(detail="reruns_off")

    def pace(installation: int) -> None:
        budget.spend(deps.pacer, lambda: installation, deps.clock.now())

    if message.requested_by in ("checks_tab", "comment"):
        return SyncOutcome(detail=rerun_requested(message.upstream, message.repo, message.run_id, deps.reruns, pace))
    assert deps.retries is not None
    retried = retry_infra(message, deps.reruns, deps.retries, pace)
    if retried.wait_s is not None:
        _later(message, deps, retried.wait_s, message.attempt, budget)
        deps.metrics.count("RerunRetried", reason=retried.outcome)
        return SyncOutcome(detail=retried.outcome, delay_s=retried.wait_s)
    return SyncOutcome(detail=retried.outcome)


def react(message: CheckSyncMessage, deps: CheckDeps, budget: Budget) -> SyncOutcome:
    """The answer to a comment command: a reaction, paced on the upstream installation like every write. A 4xx
    (the comment was deleted) is counted and dropped: there is nothing left to answer."""
    if deps.reactions is None or message.comment_id is None or not message.reaction:
        return SyncOutcome(detail="reactions_off")
    reactions = deps.reactions
    what = Write(GITHUB, "reaction", message.repo or None, message.upstream, f"{message.comment_id}:{message.reaction}",
                 {"content": message.reaction}, message.pr)  # fmt: skip
    permit = deps.door.permit(what)
    if permit is None:
        return SyncOutcome(detail="withheld")
    budget.spend(deps.pacer, lambda: reactions.installation_for(message.upstream), deps.clock.now())
    try:
        reactions.react(message.upstream, message.comment_id, message.reaction, permit=permit)
    except (GitHubRejected, NotInstalled) as exc:
        deps.metrics.count("CommandReactionRefused")
        return SyncOutcome(detail=f"refused: {exc}")
    deps.metrics.count("CommandReacted", reaction=message.reaction)
    return SyncOutcome(detail=message.reaction)


def _dead_letter(message: CheckSyncMessage, deps: CheckDeps, reason: str, outcome: SyncOutcome) -> SyncOutcome:
    deps.queue.dead_letter(message, reason)
    deps.metrics.count("RerunDeadLettered" if message.kind == "rerun" else "CheckRunDeadLettered")
    return SyncOutcome(outcome.written, reason)


def job_message(job: JobRecord) -> CheckSyncMessage | None:
    """What the reporter asks the writer to look at after a job changed (None: nothing to mirror)."""
    if job.level < 3 or not job.head_sha or job.delivery_id == SCHEDULED or job.event_type == BISECT:
        return None
    return CheckSyncMessage(
        kind="job",
        upstream=job.upstream,
        head_sha=job.head_sha,
        delivery_id=job.delivery_id,
        repo=job.repo,
        dispatch_id=job.dispatch_id,
        run_id=job.run_id,
        run_attempt=job.run_attempt,
        job_name=job.job_name,
    )


def backfill(jobs: list[JobRecord], device: str) -> list[CheckSyncMessage]:
    """A ciflow/crcr/<device> label added late: mirror the device's L3 jobs already reported on this
    head, as they stand (in progress or finished), without dispatching anything again."""
    return [
        message
        for job in jobs
        if job.level == 3 and ascii_lower(job.device or "") == ascii_lower(device)
        if (message := job_message(job)) is not None
    ]
