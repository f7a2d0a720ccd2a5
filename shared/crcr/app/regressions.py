"""Regression tracking (ReporterFunction, per stream batch): each finished default-branch result of a downstream job
(push or scheduled) places its recent branch results in the branch's order, keeps its regressions
(crcr.domain.regressions) and the HUD's `regressions.json`; advisory: it changes no job, check run or HUD row."""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.github import GitHubError
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.queues import ChecksQueue, DispatchQueue
from crcr.app.ports.regressions import RegressionStore
from crcr.app.summaries import SummaryConflict, SummaryDeps, update_document
from crcr.app.verdicts import BASELINE_EVENTS, JobAttempts, attempt
from crcr.contracts.check_messages import RegressionNotice
from crcr.contracts.messages import DispatchMessage, downstream_target
from crcr.domain.allowlist import Entry
from crcr.domain.failed_tests import parse as parse_failed_tests
from crcr.domain.ids import repo_key
from crcr.domain.known import KnownFailures, known_issues
from crcr.domain.paths import PathFilter
from crcr.domain.regressions import (
    BISECT,
    CLOSED_KEPT_S,
    Blamed,
    BranchCommit,
    CommitResult,
    Regression,
    Tracked,
    bisect_limit,
    commit_result,
    merged,
    midpoint,
    regressions,
    same_regression,
)

RECENT_RESULTS = 100  # the job's newest branch results looked at (an open regression older than them is kept)
MAX_BLAMELIST = 250  # commits named per regression (GitHub's compare lists as many)
WRITE_TRIES = 8
CONFLICT_WAIT_S = 0.05  # the first wait after a lost write (doubling, jittered)
DOC_KEY = "regressions.json"  # read by the HUD pages and `GET /hud/api/crcr/regressions`
DOC_SCHEMA = 1


class BranchResults(Protocol):
    def branch_results(self, repo: str, workflow_name: str, job_name: str, limit: int) -> list[JobRecord]:
        """One downstream job's newest `limit` results on the branch (a push or a scheduled run), newest first; rows
        without `callback_payload` and `fingerprint`."""
        ...


class BranchCommits(Protocol):
    def commit_times(self, upstream: str, shas: list[str]) -> dict[str, float]: ...

    def record_commits(self, upstream: str, commits: list[BranchCommit]) -> None: ...

    def commits_between(self, upstream: str, start: float, end: float) -> list[BranchCommit]:
        """The commits pushed with times from `start` to `end`, in the branch's order."""
        ...


class BranchHistory(Protocol):
    def commits_between(self, upstream: str, base_sha: str, head_sha: str) -> list[BranchCommit] | None:
        """GitHub's comparison: the commits after `base_sha` up to `head_sha`, oldest first (None: it cannot say)."""
        ...


class DailyBudget(Protocol):
    def hit(self, repo: str, now: float, per_day: int) -> float:
        """Spend one of the repository's `per_day` runs today; the wait until tomorrow when none was left."""
        ...


class HourlyBudget(Protocol):
    def hit(self, key: str, now: float) -> float:
        """Spend one of the hour's calls; the wait until the next window when none was left (0: spent)."""
        ...


@dataclass(frozen=True)
class RegressionDeps:
    results: BranchResults
    branch: BranchCommits
    store: RegressionStore
    metrics: Metrics
    clock: Clock
    docs: SummaryDeps | None = None  # the HUD's regressions.json; None: kept in the table only
    notices: ChecksQueue | None = None  # a regression that opens asks the check-run writer to tell its owners once
    # Each downstream's entry: its path filter names a blamelist's suspects, its `bisect` allows bisection.
    allowlist: AllowlistProvider | None = None
    # Opt-in bisection: the dispatcher's queue and each downstream's daily budget.
    dispatches: DispatchQueue | None = None
    bisect_budget: DailyBudget | None = None
    history: BranchHistory | None = None  # GitHub's comparison, for the commits of a range the relay never saw pushed
    # The tests upstream disables, and each attempt's failing tests: a failure they all explain opens nothing.
    known: Callable[[], KnownFailures] | None = None
    attempts: JobAttempts | None = None
    compare_budget: HourlyBudget | None = None  # comparisons per hour on the upstream installation
    # Results of one job arrive on several stream shards at once: a look that lost the write looks again after a
    # jittered wait.
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random


REGRESSION_EVENTS = BASELINE_EVENTS | {BISECT}  # a bisection run's result is a result of the branch's commit too


def tracked(job: JobRecord) -> bool:
    """A finished result on the branch: what a regression range is read from."""
    return job.event_type in REGRESSION_EVENTS and job.pr is None and job.state not in ("in_progress", "pending")


JobKey = tuple[str, str, str, str]  # upstream, repository, workflow, job


def track(jobs: Sequence[JobRecord], deps: RegressionDeps) -> list[tuple[JobRecord, Exception]]:
    """Look again at each job a batch brought a branch result of (once per job, however many results). Advisory: a
    failure is counted and returned (for the log), never raised; the job's next result looks again."""
    seen: dict[JobKey, JobRecord] = {}
    for job in jobs:
        if tracked(job):
            seen[(job.upstream, repo_key(job.repo), job.workflow_name, job.job_name)] = job
    failed: list[tuple[JobRecord, Exception]] = []
    for job in seen.values():
        try:
            track_job(job, deps)
        except Exception as exc:
            deps.metrics.count("RegressionTrackingFailed")
            failed.append((job, exc))
    return failed


def track_job(job: JobRecord, deps: RegressionDeps) -> list[Tracked]:
    """Recompute one job's regressions from its newest branch results; returns them as kept."""
    entry = _entry(job, deps)
    for tries in range(WRITE_TRIES):
        stored, version = deps.store.job_regressions(job.upstream, job.repo, job.workflow_name, job.job_name)
        kept, by_sha = _look(job, stored, entry, deps)
        kept, runs = _bisect(job, kept, by_sha, entry, deps)
        if kept == stored:
            return kept
        if deps.store.save_job_regressions(job.upstream, job.repo, job.workflow_name, job.job_name, kept, version):
            opened = _count_changes(stored, kept, deps)
            if deps.docs is not None:
                _publish(job, kept, deps)
            _ask_notices(job, opened, deps)
            if runs and deps.dispatches is not None:
                deps.dispatches.send_dispatches(runs)
                deps.metrics.count("BisectDispatched", len(runs))
            return kept
        deps.metrics.count("RegressionConflict")
        deps.sleep(deps.rand() * CONFLICT_WAIT_S * 2**tries)
    raise SummaryConflict(f"regressions of {job.repo} {job.workflow_name}/{job.job_name} kept changing")


def _entry(job: JobRecord, deps: RegressionDeps) -> Entry | None:
    """The downstream's allowlist entry; an allowlist that cannot be read narrows nothing and pauses bisection (the
    regression itself is still kept)."""
    try:
        return deps.allowlist.current().get(job.repo) if deps.allowlist is not None else None
    except Exception:
        deps.metrics.count("BisectPaused", reason="allowlist")
        return None


def _look(
    job: JobRecord, stored: list[Tracked], entry: Entry | None, deps: RegressionDeps
) -> tuple[list[Tracked], dict[str, list[JobRecord]]]:
    """The job's regressions from its newest branch results, and those results by commit."""
    rows = [
        r
        for r in deps.results.branch_results(job.repo, job.workflow_name, job.job_name, RECENT_RESULTS)
        if r.event_type in REGRESSION_EVENTS and r.pr is None and r.upstream == job.upstream
    ]
    by_sha: dict[str, list[JobRecord]] = {}
    for r in rows:
        by_sha.setdefault(r.head_sha, []).append(r)
    results: dict[str, CommitResult | None] = {
        sha: commit_result(attempt(r) for r in found) for sha, found in by_sha.items()
    }
    # An open regression older than the rows looked at goes on from its own ends.
    for s in stored:
        if s.open:
            results.setdefault(s.last_pass, "pass")
            results.setdefault(s.first_fail, "fail")
    times = deps.branch.commit_times(job.upstream, [sha for sha, r in results.items() if r is not None])
    now = deps.clock.now()
    if not times:
        return merged(stored, [], lambda r: (), _job(job), now, lambda sha: False), by_sha
    commits = deps.branch.commits_between(job.upstream, min(times.values()), max(times.values()))
    found = regressions(results, [c.sha for c in commits])
    seen = {(s.last_pass, s.first_fail) for s in stored}
    found = _without_known(found, results, by_sha, seen, [c.sha for c in commits], deps)
    gaps = [r for r in found if (r.last_pass, r.first_fail) not in seen and _gap(r, commits)]
    if gaps and _fill(job.upstream, gaps, deps):
        commits = deps.branch.commits_between(job.upstream, min(times.values()), max(times.values()))
        found = regressions(results, [c.sha for c in commits])
    known = {c.sha: c for c in commits}
    blame = _blamer(known, entry.settings.path_filter if entry is not None else None)
    return merged(stored, found, blame, _job(job), now, lambda sha: sha in known), by_sha


def _bisect(
    job: JobRecord, kept: list[Tracked], by_sha: dict[str, list[JobRecord]], entry: Entry | None, deps: RegressionDeps
) -> tuple[list[Tracked], list[DispatchMessage]]:
    """Opt-in bisection: an open regression of a downstream that allows it (`bisect: {runs_per_day: N}`) gets its job's
    repository dispatched at the middle of its range, one run at a time, at most ceil(log2 n) runs, until one commit
    is left; each run's result narrows the range like any branch result. Never while its run is pending, after it is
    cancelled or closed, or past the day's budget (then the next look tries again)."""
    if deps.dispatches is None:
        return kept, []
    per_day = entry.settings.bisect_runs_per_day if entry is not None else 0
    if entry is None or per_day == 0:
        return kept, []
    runs: list[DispatchMessage] = []
    out = [
        _bisect_one(job, t, by_sha, per_day, deps, runs, entry) if t.open and not t.bisect_stopped else t for t in kept
    ]
    return out, runs


def _bisect_one(
    job: JobRecord,
    t: Tracked,
    by_sha: dict[str, list[JobRecord]],
    per_day: int,
    deps: RegressionDeps,
    runs: list[DispatchMessage],
    entry: Entry,
) -> Tracked:
    if t.bisect_pending is not None:
        rows = [r for r in by_sha.get(t.bisect_pending, []) if r.event_type == BISECT]
        if not rows or any(r.state == "in_progress" for r in rows):
            return t  # its run has not reported yet
        if commit_result(attempt(r) for r in rows) is None:
            deps.metrics.count("BisectStopped", reason="no_result")
            return replace(t, bisect_pending=None, bisect_stopped="no_result")  # infra, timed out, cancelled
        t = replace(t, bisect_pending=None)  # its result narrowed the range already
    mid = midpoint(t)
    limit = t.bisect_limit or bisect_limit(t)
    if mid is None:
        return t
    if t.bisect_runs >= limit:
        deps.metrics.count("BisectStopped", reason="limit")
        return replace(t, bisect_stopped="limit")
    if deps.bisect_budget is not None and deps.bisect_budget.hit(job.repo, deps.clock.now(), per_day) > 0:
        deps.metrics.count("BisectPaused", reason="budget")
        return t
    runs.append(_bisect_message(job, t, mid, entry, deps.clock.now()))
    return replace(t, bisect_pending=mid, bisect_runs=t.bisect_runs + 1, bisect_limit=limit)


def _bisect_message(job: JobRecord, t: Tracked, mid: str, entry: Entry, now: float) -> DispatchMessage:
    key = f"{repo_key(t.repo)}\n{t.workflow_name}\n{t.job_name}\n{mid}"
    marker = {"workflow": t.workflow_name, "job": t.job_name, "last_pass": t.last_pass, "first_fail": t.first_fail}
    return DispatchMessage(
        delivery_id=f"bisect-{hashlib.sha256(key.encode()).hexdigest()[:32]}",
        event_type=BISECT,
        target_repo=entry.repo,
        level=entry.level,
        device=entry.device,
        upstream=job.upstream,
        head_sha=mid,
        payload={"after": mid, "head_commit": {"id": mid}, "repository": {"full_name": job.upstream}},
        planned_at=now,
        bisect=marker | {"testing": mid},
        **downstream_target(entry),  # a Buildkite pipeline, a workflow file, or repository_dispatch
    )


KNOWN_LOOKS = 5  # first failures looked at per look for failures known upstream


def _without_known(
    found: list[Regression],
    results: dict[str, CommitResult | None],
    by_sha: dict[str, list[JobRecord]],
    seen: set[tuple[str, str]],
    order: list[str],
    deps: RegressionDeps,
) -> list[Regression]:
    """A new range's first failure whose failing attempts only failed tests upstream disabled says nothing of the code:
    it is left out, and the range looked for again (its attempts read by key: new ranges only)."""
    looked: set[str] = set()
    for _ in range(KNOWN_LOOKS):
        new = [r.first_fail for r in found if (r.last_pass, r.first_fail) not in seen and r.first_fail not in looked]
        if not new:
            break
        looked.update(new)
        explained = [sha for sha in new if _known_only(by_sha.get(sha, []), deps)]
        if not explained:
            break
        for sha in explained:
            results[sha] = None
        found = regressions(results, order)
    return found


def _known_only(rows: list[JobRecord], deps: RegressionDeps) -> bool:
    failing = [r for r in rows if attempt(r).failed and not attempt(r).infra]
    if not failing or deps.known is None or deps.attempts is None:
        return False
    try:
        known = deps.known()
    except Exception:
        deps.metrics.count("KnownFailuresUnavailable")
        return False
    today = datetime.fromtimestamp(deps.clock.now(), UTC).date()
    for r in failing:
        attempts = deps.attempts.attempts_of_job(r.dispatch_id, r.run_id, r.job_name)
        full = next((j for j in attempts if j.run_attempt == r.run_attempt), None)
        failed = parse_failed_tests(full.failed_tests) if full is not None else []
        if full is None or known_issues(failed, known, full.device, (full.repo, full.job_name), today) is None:
            return False
    deps.metrics.count("RegressionKnownUpstream")
    return True


def _gap(r: Regression, commits: list[BranchCommit]) -> bool:
    """Whether the relay's record of the branch may miss commits of the range: walking first parents back from the
    first failure does not reach the last pass (a push it never got, a webhook lost)."""
    parent = {c.sha: c.parent for c in commits}
    at: str | None = r.first_fail
    for _ in range(len(commits) + 1):
        if at == r.last_pass:
            return False
        if at is None or at not in parent:
            return True
        at = parent[at]
    return True


def _fill(upstream: str, gaps: list[Regression], deps: RegressionDeps) -> bool:
    """Ask GitHub for the commits of each new range with a gap, once (budgeted per hour on the upstream installation),
    and record them in the branch's order. Advisory: a refused or failed comparison leaves the range as known."""
    if deps.history is None:
        return False
    filled = False
    for r in gaps:
        if deps.compare_budget is not None and deps.compare_budget.hit(upstream, deps.clock.now()) > 0:
            deps.metrics.count("RegressionCompareSkipped", reason="budget")
            continue
        try:
            listed = deps.history.commits_between(upstream, r.last_pass, r.first_fail)
        except GitHubError:
            deps.metrics.count("RegressionCompareFailed")
            continue
        deps.metrics.count("RegressionCompared")
        if listed:
            deps.branch.record_commits(upstream, listed)
            filled = True
    return filled


def _job(job: JobRecord) -> tuple[str, str, str]:
    return (job.repo, job.workflow_name, job.job_name)


def _blamer(known: dict[str, BranchCommit], paths: PathFilter | None) -> Callable[[Regression], tuple[Blamed, ...]]:
    def blame(r: Regression) -> tuple[Blamed, ...]:
        named = []
        for sha in r.blamelist[-MAX_BLAMELIST:]:
            c = known.get(sha)
            if c is None:
                named.append(Blamed(sha))
                continue
            suspect = paths is None or c.files is None or paths.concerns(c.files)  # no filter concerns everything
            named.append(Blamed(sha, c.pr, c.title, c.author, suspect))
        return tuple(named)

    return blame


def _count_changes(before: list[Tracked], after: list[Tracked], deps: RegressionDeps) -> list[Tracked]:
    """Count the regressions that opened and closed; returns those that opened."""
    was_open = {t.first_fail for t in before if t.open}
    opened = []
    for t in after:
        if t.open and not any(same_regression(t, b) for b in before):
            deps.metrics.count("RegressionOpened")
            opened.append(t)
        elif not t.open and t.first_fail in was_open:
            deps.metrics.count("RegressionClosed")
    return opened


def _ask_notices(job: JobRecord, opened: list[Tracked], deps: RegressionDeps) -> None:
    """Each regression that opened (and whose owners were not told of it under an earlier range) asks for its one
    notice, on the PR that landed its first failing commit; one with no PR is shown on the pages only."""
    if deps.notices is None:
        return
    asks = []
    for t in opened:
        pr = next((b.pr for b in t.blamelist if b.sha == t.first_fail), None)
        if t.told:
            continue
        if pr is None:
            deps.metrics.count("RegressionNotTold", reason="no_pr")
            continue
        asks.append(
            RegressionNotice(upstream=job.upstream, head_sha=t.first_fail, repo=t.repo, pr=pr,
                             workflow_name=t.workflow_name, job_name=t.job_name)
        )  # fmt: skip
    if asks:
        deps.notices.send_checks(asks)


def _publish(job: JobRecord, kept: list[Tracked], deps: RegressionDeps) -> None:
    """The HUD's regressions.json: this job's regressions replace what it listed of the job."""
    assert deps.docs is not None
    now = deps.clock.now()
    ours = (repo_key(job.repo), job.workflow_name, job.job_name)

    def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        listed = doc.get("regressions", []) if doc and doc.get("schema") == DOC_SCHEMA else []
        others = [
            r
            for r in listed
            if (repo_key(str(r.get("repo"))), r.get("workflow_name"), r.get("job_name")) != ours
            and (r.get("state") == "open" or now - float(r.get("closed_at") or 0) < CLOSED_KEPT_S)
        ]
        entries = sorted(others + [t.to_json() for t in kept], key=lambda r: float(r.get("opened_at") or 0))
        if doc is not None and doc.get("regressions") == entries:
            return None
        return {"schema": DOC_SCHEMA, "upstream": job.upstream, "updated_at": round(now, 3), "regressions": entries}

    update_document(deps.docs, DOC_KEY, change)
