"""Sweeper use case: dispatches no job reported on in time and jobs that never finished, asked of GitHub's or
Buildkite's record first; only what neither can tell becomes timed_out."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.buildkite import BuildkiteError, BuildReader
from crcr.app.ports.github import GitHubError, GitHubRejected
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.ledger import LedgerRow
from crcr.app.ports.runs import BoundRun, GitHubJob, RunFinder, Search
from crcr.app.runs import JobRecording, RunsDeps, reconcile_attempt, record_jobs
from crcr.domain.checks import SWEPT
from crcr.domain.errors import AllowlistError
from crcr.domain.identity import Known, Refused, admit
from crcr.domain.ids import NO_RUN, is_github_run
from crcr.domain.runs import BUILDKITE, GITHUB, NOT_STARTED, not_started_reason, run_progress


class StartWatch(Protocol):
    def due_starts(self, now: float, limit: int = 100) -> list[LedgerRow]: ...
    def clear_start_watch(self, delivery_id: str, repo: str) -> None: ...
    def rewatch_start(self, delivery_id: str, repo: str, until: float) -> None: ...
    def get(self, delivery_id: str, repo: str) -> LedgerRow | None: ...


class RunWatch(Protocol):
    def due_runs(self, now: float, limit: int = 100) -> list[JobRecord]: ...
    def put_job(self, record: JobRecord, expected_version: int | None) -> bool: ...
    def get_job(self, dispatch_id: str, run_id: str, run_attempt: int, job_name: str) -> JobRecord | None: ...
    def has_jobs(self, dispatch_id: str) -> bool: ...


class Finder(RunFinder, Protocol):
    pass


GONE = "gone"  # GitHub has no such run
REFUSED = "refused"  # GitHub's run is not the dispatched repository's own (crcr.domain.identity)
MIN_ASKS = 5  # GitHub unavailable at a job's deadline: asked at least this many times before it is timed out


@dataclass(frozen=True)
class GitHubRecord:
    """What the sweeper asks GitHub with (None in SweepDeps: no App credentials, time-outs only)."""

    runs: RunsDeps  # the runs worker's deps: GitHub's Actions API, the bound runs, the ledger's index
    finder: Finder
    start_timeout_s: float  # a dispatch GitHub cannot tell about is timed_out after this, as before
    run_create_timeout_s: float  # the dispatch's run must exist by then, or it is not_started
    recheck_s: float = 3600.0  # a job or run GitHub says is still running is asked about again after this
    retry_s: float = 300.0  # GitHub unavailable: asked again after this


@dataclass(frozen=True)
class BuildkiteRecord:
    """What the sweeper asks Buildkite with, about the builds the relay created (None in SweepDeps: no API token,
    time-outs only)."""

    builds: BuildReader
    recording: JobRecording
    start_timeout_s: float
    run_timeout_s: float  # Buildkite unavailable for twice this past a deadline: timed out
    allowlist: AllowlistProvider  # the inbound door's entry for the build's repository
    recheck_s: float = 3600.0  # a build Buildkite says is still running is asked about again after this
    retry_s: float = 300.0  # Buildkite unavailable: asked again after this


@dataclass(frozen=True)
class SweepDeps:
    starts: StartWatch
    runs: RunWatch
    metrics: Metrics
    clock: Clock
    github: GitHubRecord | None = None
    buildkite: BuildkiteRecord | None = None


@dataclass
class SweepSummary:
    never_started: list[str] = field(default_factory=list)
    never_finished: list[str] = field(default_factory=list)
    not_started: list[str] = field(default_factory=list)
    runs_found: list[str] = field(default_factory=list)
    asked_about: list[str] = field(default_factory=list)  # jobs at their deadline that GitHub said more about


def sweep(deps: SweepDeps) -> SweepSummary:
    now = deps.clock.now()
    summary = SweepSummary()
    for row in deps.starts.due_starts(now):
        if deps.runs.has_jobs(row.dispatch_id):
            # A job reported before the dispatch was marked sent (the downstream was faster than GitHub's answer
            # to the POST), so the report found no watch to clear: the dispatch started; only the watch goes.
            deps.starts.clear_start_watch(row.delivery_id, row.repo)
            deps.metrics.count("StartWatchCleared")
            continue
        if deps.github is not None and _asked_about_start(row, deps.github, deps, now, summary):
            continue
        if deps.buildkite is not None and _asked_buildkite(row, None, deps.buildkite, deps, now):
            continue
        _time_out_start(row, deps, now, summary)
    if deps.github is not None:
        for run in deps.github.runs.runs.due_runs(now):
            _ask_about_run(run, deps.github, deps, now)
    for job in deps.runs.due_runs(now):
        if deps.github is not None and is_github_run(job.run_id) and _asked_about_job(job, deps.github, deps, now):
            summary.asked_about.append(f"{job.repo}/{job.job_name}")
            continue
        # A Buildkite job's run id is its build's UUID: only those read their ledger row to ask Buildkite.
        buildkite = deps.buildkite if not is_github_run(job.run_id) else None
        dispatched = deps.starts.get(job.delivery_id, job.repo) if buildkite is not None else None
        if buildkite is not None and dispatched is not None and _asked_buildkite(dispatched, job, buildkite, deps, now):
            summary.asked_about.append(f"{job.repo}/{job.job_name}")
            continue
        timed_out = replace(
            job, state="timed_out", conclusion="timed_out", fingerprint=SWEPT, completed_at=now, version=job.version + 1
        )
        if deps.runs.put_job(timed_out, job.version):  # lost to a genuine report meanwhile: that one stands
            deps.metrics.count("JobTimedOut")
            summary.never_finished.append(f"{job.repo}/{job.job_name}")
    return summary


def _dispatch_record(row: LedgerRow, now: float, state: str, conclusion: str, reason: str = "") -> JobRecord:
    """The dispatch itself as a job with no name: check run crcr/<owner>/<repo>."""
    return JobRecord.of_dispatch(
        row,
        now,
        run_id=NO_RUN,
        run_attempt=0,
        job_name="",
        workflow_name="",
        state=state,
        conclusion=conclusion,
        fingerprint=SWEPT,
        url="",
        started_at=None,
        completed_at=now,
        callback_payload="{}",
        version=1,
        reason=reason,
        source=GITHUB if state == NOT_STARTED else "",
    )


def _time_out_start(row: LedgerRow, deps: SweepDeps, now: float, summary: SweepSummary) -> None:
    if deps.runs.put_job(_dispatch_record(row, now, "timed_out", "timed_out"), None):
        deps.metrics.count("DispatchTimedOut")
        summary.never_started.append(row.repo)
    deps.starts.clear_start_watch(row.delivery_id, row.repo)


def _asked_about_start(row: LedgerRow, gh: GitHubRecord, deps: SweepDeps, now: float, summary: SweepSummary) -> bool:
    """A GitHub dispatch no run event or report has come for: did GitHub create its run? False: time it out."""
    dispatched = row.dispatched_at or now
    if row.ci != "github" or now >= dispatched + gh.start_timeout_s:
        return False
    try:
        found = gh.finder.search(row.repo, row.dispatch_id, dispatched - 60)
    except GitHubError:
        deps.metrics.count("SweepGitHubUnavailable")
        deps.starts.rewatch_start(row.delivery_id, row.repo, min(now + gh.retry_s, dispatched + gh.start_timeout_s))
        return True
    if found.outcome is Search.UNTITLED:
        # Runs were created, none titled with the dispatch id: which one is this dispatch's, GitHub cannot say.
        deps.starts.rewatch_start(row.delivery_id, row.repo, dispatched + gh.start_timeout_s)
        return True
    if found.outcome is Search.NO_RUN:
        minutes = max(1, round(gh.run_create_timeout_s / 60))
        reason = not_started_reason(row.repo, row.event_type or "", minutes)
        if deps.runs.put_job(_dispatch_record(row, now, NOT_STARTED, NOT_STARTED, reason), None):
            deps.metrics.count("DispatchNotStarted")
            summary.not_started.append(row.repo)
        deps.starts.clear_start_watch(row.delivery_id, row.repo)
        return True
    run_id = str(found.run_id)
    if _bind_and_settle(row, run_id, gh, deps, now) == REFUSED:
        # Titled with the dispatch id, but not the dispatched repository's own run: not this dispatch's.
        deps.starts.rewatch_start(row.delivery_id, row.repo, dispatched + gh.start_timeout_s)
        return True
    deps.metrics.count("DispatchRunFound")
    summary.runs_found.append(f"{row.repo}#{run_id}")
    deps.starts.clear_start_watch(row.delivery_id, row.repo)
    return True


def _bind_and_settle(row: LedgerRow, run_id: str, gh: GitHubRecord, deps: SweepDeps, now: float) -> str | None:
    """Bind a run GitHub has and, if it completed, reconcile its attempt: the run's status, GONE when GitHub has no
    such run, REFUSED when the inbound door says it is not the dispatched repository's own, or None when GitHub (or
    the allowlist) cannot tell now."""
    try:
        current = gh.runs.github.run(row.repo, run_id)
        if current is None:
            return GONE
        entry = gh.runs.allowlist.current().get(row.repo)
        admit(entry, current.evidence(), Known(repository_id=row.repo_id or 0))
        completed = current.status == "completed"
        action = "completed" if completed else ("in_progress" if current.status == "in_progress" else "requested")
        bound = BoundRun(
            repo=row.repo,
            run_id=run_id,
            delivery_id=row.delivery_id,
            dispatch_id=row.dispatch_id,
            attempt=current.attempt,
            status=action,
            conclusion=current.conclusion,
            workflow_name=current.workflow_name,
            url=current.url,
            progress=run_progress(current.attempt, action),
        )
        gh.runs.runs.record(bound, now, None if completed else now + gh.recheck_s)
        if completed:
            reconcile_attempt(row, bound, gh.runs)
        return current.status
    except Refused as exc:
        deps.metrics.count("IdentityRefused", channel=exc.channel, reason=exc.check)
        return REFUSED
    except GitHubRejected:
        # A 4xx (no actions: read on the installation, a listing GitHub will not give): asking again will not help.
        deps.metrics.count("SweepGitHubRefused")
        return GONE
    except GitHubError:
        deps.metrics.count("SweepGitHubUnavailable")
        return None
    except AllowlistError:
        deps.metrics.count("SweepAllowlistUnavailable")
        return None


def _ask_about_run(run: BoundRun, gh: GitHubRecord, deps: SweepDeps, now: float) -> None:
    """A bound run whose `completed` event has not come by its watch time."""
    row = gh.runs.ledger.by_dispatch(run.dispatch_id)
    if row is None:
        gh.runs.runs.record(
            replace(run, status="completed", progress=run_progress(run.attempt, "completed")), now, None
        )
        return
    status = _bind_and_settle(row, run.run_id, gh, deps, now)
    if status in (GONE, REFUSED):
        gh.runs.runs.record(
            replace(run, status="completed", progress=run_progress(run.attempt, "completed")), now, None
        )
    elif status is None:
        gh.runs.runs.watch(run.repo, run.run_id, now + gh.retry_s)
    elif status != "completed":
        deps.metrics.count("RunStillRunning")


def _asked_about_job(job: JobRecord, gh: GitHubRecord, deps: SweepDeps, now: float) -> bool:
    """A job in progress at its deadline: GitHub's record first. False: GitHub cannot tell (time it out)."""
    row = deps.starts.get(job.delivery_id, job.repo)
    if row is None:
        return False
    status = _bind_and_settle(row, job.run_id, gh, deps, now)
    if status in (GONE, REFUSED):
        return False  # GitHub has no such run of the dispatched repository (deleted, a run id only the report named)
    if status is None:
        # GitHub unavailable: asked again up to twice the run's time-out and at least MIN_ASKS times in all (counted
        # on the job, so a sweeper slower than retry_s still asks that often), then timed out.
        asked = job.unanswered + 1
        last = (job.started_at or job.dispatched_at) + 2 * gh.runs.run_timeout_s
        if now >= last and asked >= MIN_ASKS:
            return False
        at = now + gh.retry_s if now >= last else min(now + gh.retry_s, last)
        return _recheck(replace(job, unanswered=asked), at, deps)
    if status != "completed":
        deps.metrics.count("JobStillRunning")
        return _recheck(replace(job, unanswered=0), now + gh.recheck_s, deps)
    latest = deps.runs.get_job(job.dispatch_id, job.run_id, job.run_attempt, job.job_name)
    if latest is None or latest.state != "in_progress":
        deps.metrics.count("JobFinishedPerGitHub")
        return True
    # GitHub says the attempt finished but its listing names no such job (the report named it otherwise and sent
    # no check_run_id): it is not running, and how it ended GitHub cannot say for it alone.
    done = replace(
        latest, state="completed", conclusion="neutral", completed_at=now, source=GITHUB, version=latest.version + 1
    )
    if deps.runs.put_job(done, latest.version):
        deps.metrics.count("RunJobUnmatched")
    return True


def _recheck(job: JobRecord, at: float, deps: SweepDeps) -> bool:
    deps.runs.put_job(replace(job, recheck_at=at, version=job.version + 1), job.version)
    return True


def _asked_buildkite(row: LedgerRow, job: JobRecord | None, bk: BuildkiteRecord, deps: SweepDeps, now: float) -> bool:
    """A Buildkite build the relay created with no job reported by its start time-out (`job` None), or with `job`
    unfinished at its deadline: one read of the build. Finished: its jobs are recorded as Buildkite says they ended;
    still running: asked again later. False: Buildkite cannot tell (no such build, a row from before the build's
    pipeline was kept, Buildkite unavailable for long): time it out."""
    if row.ci != "buildkite" or row.build_number is None or not row.build_id or not row.build_pipeline:
        return False
    organization, _, pipeline = row.build_pipeline.partition("/")
    try:
        build = bk.builds.build(organization, pipeline, row.build_number)
    except BuildkiteError:
        # Buildkite unavailable: asked again, up to twice the run's time-out past the deadline, then timed out.
        deps.metrics.count("SweepBuildkiteUnavailable")
        since = job.started_at or job.dispatched_at if job is not None else (row.dispatched_at or now)
        last = since + (bk.run_timeout_s if job is not None else bk.start_timeout_s) + 2 * bk.run_timeout_s
        return now < last and _ask_again(row, job, min(now + bk.retry_s, last), deps)
    if build is None:
        deps.metrics.count("SweepBuildkiteRefused")
        return False
    try:  # the inbound door: the build Buildkite answered with is the one the relay created
        known = Known(build_number=row.build_number, build_id=row.build_id)
        admit(bk.allowlist.current().get(row.repo), build.evidence(), known)
    except Refused as exc:
        deps.metrics.count("IdentityRefused", channel=exc.channel, reason=exc.check)
        return False
    except AllowlistError:
        deps.metrics.count("SweepAllowlistUnavailable")
        return _ask_again(row, job, now + bk.retry_s, deps)
    if not build.finished:
        deps.metrics.count("BuildStillRunning")  # it runs: asked again, as GitHub's runs are
        return _ask_again(row, job, now + bk.recheck_s, deps)
    run = BoundRun(
        repo=row.repo,
        run_id=row.build_id,
        delivery_id=row.delivery_id,
        dispatch_id=row.dispatch_id,
        attempt=job.run_attempt if job is not None else 1,
        status="completed",
        workflow_name=pipeline,
        url=row.build_url or "",
    )
    jobs = [
        GitHubJob(
            j.id, j.name, "completed" if j.conclusion else j.state, j.conclusion, j.started_at, j.finished_at, j.url
        )
        for j in build.jobs
    ]
    record_jobs(row, run, jobs, bk.recording, BUILDKITE)
    deps.metrics.count("BuildRead")
    if job is None:
        deps.starts.clear_start_watch(row.delivery_id, row.repo)
        return True
    latest = deps.runs.get_job(job.dispatch_id, job.run_id, job.run_attempt, job.job_name)
    if latest is not None and latest.state == "in_progress":
        # The build is over and names no such job: it is not running, and how it ended Buildkite cannot say.
        done = replace(latest, state="completed", conclusion="neutral", completed_at=now, version=latest.version + 1)
        if deps.runs.put_job(replace(done, source=BUILDKITE), latest.version):
            deps.metrics.count("RunJobUnmatched")
    return True


def _ask_again(row: LedgerRow, job: JobRecord | None, at: float, deps: SweepDeps) -> bool:
    if job is None:
        deps.starts.rewatch_start(row.delivery_id, row.repo, at)
        return True
    return _recheck(job, at, deps)
