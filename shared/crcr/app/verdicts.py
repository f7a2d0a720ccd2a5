"""Verdicts of failed L3/L4 jobs on pull requests, computed by the reporter against the job's baseline (its latest
branch result at or before the PR's base, from the commit order the planner keeps)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from crcr.app.ports import Clock
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.pulls import PrInfos
from crcr.app.ports.regressions import RegressionStore
from crcr.domain.failed_tests import parse as parse_failed_tests
from crcr.domain.ids import run_order
from crcr.domain.known import Disabled, KnownFailures, known_issues, known_refs
from crcr.domain.regressions import covers
from crcr.domain.verdicts import BROKEN_TRUNK, FLAKY, KNOWN, TRUNK_MAY_EXPLAIN, Attempt, classify


class BranchOrder(Protocol):
    def commit_times(self, upstream: str, shas: list[str]) -> dict[str, float]:
        """The order of each commit the relay saw pushed to the default branch (absent: never seen)."""
        ...


class JobAttempts(Protocol):
    def attempts_of_job(self, dispatch_id: str, run_id: str, job_name: str) -> list[JobRecord]:
        """Every recorded attempt of one job of one run (at most MAX_RUN_ATTEMPT), read by key (never the dispatch's
        other jobs), without `callback_payload` and `fingerprint` (both ""): read them, never write them back."""
        ...


class BaselineJobs(Protocol):
    def baseline_jobs(self, repo: str, workflow_name: str, job_name: str, since: float) -> list[JobRecord]:
        """One downstream job's results on the branch (a push or a scheduled run, never a PR's) dispatched at or
        after `since`; names compare case-insensitively for the repository, exactly for the workflow and job. Rows
        without `callback_payload` and `fingerprint` (both ""): read them, never write them back."""
        ...


class VerdictStore(Protocol):
    def set_verdict(
        self, record: JobRecord, verdict: str, baseline_sha: str | None = None, known_issues: str = ""
    ) -> bool:
        """Put a verdict (and the commit of the baseline it compared, if any; a `known` one's issues) on the job's
        row if it is still at the record's version; False when it has moved on."""
        ...


BASELINE_EVENTS = frozenset({"push", "nightly"})
BASELINE_WINDOW_S = 14 * 86_400


@dataclass(frozen=True)
class VerdictDeps:
    results: JobAttempts
    store: VerdictStore
    by_repo: BaselineJobs
    branch: BranchOrder
    prs: PrInfos
    clock: Clock
    window_s: float = BASELINE_WINDOW_S
    regressions: RegressionStore | None = None  # the branch's regressions: a failure they explain is `broken trunk`
    # The tests disabled upstream (crcr.domain.known); None: none configured. Raises when it cannot be read.
    known: Callable[[], KnownFailures] | None = None
    on_unknown: Callable[[Exception], None] = lambda exc: None  # a source that cannot be read: counted, fails open


def judged(job: JobRecord) -> bool:
    """Only L3/L4 jobs of pull requests get a verdict."""
    return job.pr is not None and job.level >= 3


def attempt(job: JobRecord) -> Attempt:
    return Attempt(job.run_attempt, job.state, job.conclusion, job.failure_kind)


def _attempts(job: JobRecord, deps: VerdictDeps) -> list[JobRecord]:
    """Every attempt of this job's run (a re-run is the run's next attempt): read by key, so the work is the job's
    own, however many other jobs its dispatch has."""
    found = [
        j
        for j in deps.results.attempts_of_job(job.dispatch_id, job.run_id, job.job_name)
        if j.workflow_name == job.workflow_name and j.run_attempt != job.run_attempt
    ]
    found.append(job)  # this change as it stands now
    return sorted(found, key=lambda j: j.run_attempt)


def baseline(job: JobRecord, deps: VerdictDeps) -> JobRecord | None:
    """The job's latest push or scheduled result on the newest commit at or before the PR's base commit."""
    assert job.pr is not None
    pr = deps.prs.pr_info(job.upstream, job.pr)
    if pr is None or not pr.base_sha:
        return None
    base_time = deps.branch.commit_times(job.upstream, [pr.base_sha]).get(pr.base_sha)
    if base_time is None:
        return None
    # The job's own branch history (an index holding only branch results): never the repository's other jobs.
    history = deps.by_repo.baseline_jobs(job.repo, job.workflow_name, job.job_name, deps.clock.now() - deps.window_s)
    candidates = [
        j
        for j in history
        if j.event_type in BASELINE_EVENTS
        and j.pr is None  # a ciflow tag push is a PR's CI, not the branch's
        and j.workflow_name == job.workflow_name
        and j.job_name == job.job_name
        and j.state != "in_progress"
    ]
    times = deps.branch.commit_times(job.upstream, [j.head_sha for j in candidates]) if candidates else {}
    eligible = [j for j in candidates if j.head_sha in times and times[j.head_sha] <= base_time]
    if not eligible:
        return None
    return max(eligible, key=lambda j: (times[j.head_sha], j.completed_at or 0.0, run_order(j.run_id), j.run_attempt))


@dataclass(frozen=True)
class Judgement:
    verdict: str | None  # None when none of the job's attempts failed
    baseline_sha: str | None = None  # the upstream commit of the baseline result it compared, if one was found
    known_issues: str = ""  # `known`: the issues' URLs (each with its author, if known), spaced: known_refs


def judgement(job: JobRecord, deps: VerdictDeps) -> Judgement:
    """The verdict of the job as this change leaves it, with the commit of the baseline it was judged against."""
    attempts = _attempts(job, deps)
    mine = [attempt(j) for j in attempts]
    latest = mine[-1]
    needs_baseline = latest.failed and not latest.infra
    base = baseline(job, deps) if needs_baseline else None
    verdict = classify(mine, attempt(base) if base else None)
    if verdict in TRUNK_MAY_EXPLAIN:
        issues = known_failure(attempts[-1], deps)
        if issues:
            return Judgement(KNOWN, None, known_refs(issues[:MAX_KNOWN_LINKS]))
        if broken_trunk(job, deps):
            verdict = BROKEN_TRUNK
    return Judgement(verdict, base.head_sha if base is not None and verdict is not None else None)


MAX_KNOWN_LINKS = 5


def known_failure(job: JobRecord, deps: VerdictDeps) -> tuple[Disabled, ...] | None:
    """The upstream issues that explain every failing test of the job's latest attempt; None when a test is not
    known, none was reported, or the source cannot be read (counted: fails open)."""
    if deps.known is None or not job.failed_tests:
        return None
    try:
        known = deps.known()
    except Exception as exc:
        deps.on_unknown(exc)
        return None
    today = datetime.fromtimestamp(deps.clock.now(), UTC).date()
    return known_issues(parse_failed_tests(job.failed_tests), known, job.device, (job.repo, job.job_name), today)


def broken_trunk(job: JobRecord, deps: VerdictDeps) -> bool:
    """The job has a regression on the default branch that was open at the PR's base commit (one read of the job's
    regressions; the PR and the commits' places only when it has any)."""
    if deps.regressions is None or job.pr is None:
        return False
    kept, _ = deps.regressions.job_regressions(job.upstream, job.repo, job.workflow_name, job.job_name)
    if not kept:
        return False
    pr = deps.prs.pr_info(job.upstream, job.pr)
    if pr is None or not pr.base_sha:
        return False
    shas = [pr.base_sha, *(t.last_pass for t in kept), *(t.fixed_by for t in kept if t.fixed_by)]
    times = deps.branch.commit_times(job.upstream, shas)
    return any(covers(t, times, pr.base_sha) for t in kept)


def flaky_predecessors(job: JobRecord, deps: VerdictDeps) -> list[JobRecord]:
    """A passing attempt turns the failed earlier attempts of its run into `flaky` ones (their rows are
    updated, so the HUD and the pages say so too)."""
    if not (job.state == "completed" and job.conclusion == "success" and job.run_attempt > 1):
        return []
    return [
        replace(j, verdict=FLAKY)
        for j in _attempts(job, deps)
        if j.run_attempt < job.run_attempt and attempt(j).failed and j.verdict != FLAKY
    ]
