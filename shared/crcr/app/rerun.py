"""Re-runs of downstream GitHub runs (`rerun-failed-jobs`): those asked for upstream (the Checks tab, a comment command)
and the relay's one retry of an infrastructure failure, both on the check-run writer (docs/contracts.md, "Re-runs")."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from crcr.app.outbound import GITHUB, Outbound, Permit, Write
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.checkruns import CheckRunStore
from crcr.app.ports.github import GitHubRejected, NotInstalled
from crcr.app.ports.jobs import JobRecord, ResultsStore
from crcr.app.ports.reruns import RerunClaim, WorkflowRun
from crcr.contracts.check_messages import JobKey
from crcr.domain.checks import parse_external_id
from crcr.domain.ids import NO_RUN, is_github_run
from crcr.domain.levels import Level
from crcr.domain.verdicts import Attempt


class Reruns(Protocol):
    def installation_for(self, repo: str) -> int:
        """The downstream's installation: a re-run spends its content-creating budget (paced like dispatches)."""
        ...

    def workflow_run(self, repo: str, run_id: str) -> WorkflowRun: ...
    def rerun_failed_jobs(self, repo: str, run_id: str, *, permit: Permit) -> bool:
        """True when GitHub started a new attempt; False when GitHub says the run is already running.
        Any other refusal raises GitHubRejected."""
        ...

    def suite_check_runs(self, upstream: str, suite_id: int) -> list[tuple[int, str, str | None]]:
        """(check run id, name, external_id) of every check run in an upstream check suite."""
        ...


class RerunMarker(Protocol):
    """The relay's automatic re-run of a downstream run, once per (dispatch, run) ever.

    The marker (pk `RERUN#<dispatch_id>`, sk `RUN#<run_id>`, `status` in RERUN_STATUSES) is the outcome, which
    the PR comment reads; a short lease on a separate row (sk `CLAIM#<run_id>`) lets one message at a time
    decide, so two jobs of one run failing together never re-run it twice or mark it wrong."""

    def claim_rerun(self, dispatch_id: str, run_id: str, owner: str, now: float, lease_s: float) -> RerunClaim: ...
    def release_rerun(self, dispatch_id: str, run_id: str, owner: str) -> None: ...
    def mark_rerun(self, dispatch_id: str, run_id: str, status: str, now: float) -> bool:
        """Write the marker if there is none (a conditional put): True when this call wrote it."""
        ...


# Spends a slot of an installation's content-creating budget, or raises to bring the message back later.
Pace = Callable[[int], None]

MIN_WAIT_S = 30.0
MAX_WAIT_S = 900.0  # one SQS delay


@dataclass(frozen=True)
class RerunDeps:
    github: Reruns
    store: CheckRunStore
    allowlist: AllowlistProvider
    metrics: Metrics
    door: Outbound  # a shadow downstream's run is never re-run (crcr.app.outbound)


@dataclass(frozen=True)
class RetryDeps:
    """What the relay's own retry of an infrastructure failure needs besides the re-run itself."""

    results: ResultsStore
    marks: RerunMarker
    clock: Clock
    lease_s: float = 30.0  # one GitHub read and one write with their timeouts
    give_up_s: float = 43_200.0  # a run still running this long after its failed job ended is not waited for
    owner: Callable[[], str] = field(default=lambda: uuid.uuid4().hex)


class RerunBusy(Exception):
    """Another message is deciding the same run's retry right now: look again shortly."""


@dataclass(frozen=True)
class RetryOutcome:
    outcome: str
    wait_s: float | None = None  # the run is still running: look again after this long


# -- the Checks tab --------------------------------------------------------------------------------------------


def _ours(upstream: str, head_sha: str, check_run_id: int, name: str, deps: RerunDeps) -> bool:
    known, _ = deps.store.get_check(upstream, head_sha, name)
    return known is not None and known.check_run_id == check_run_id


def check_run_target(upstream: str, head_sha: str, check_run_id: int, name: str, external_id: str | None,
                     deps: RerunDeps) -> tuple[str, str] | None:  # fmt: skip
    """The downstream (repo, run_id) behind one of the relay's own check runs; None when it is not ours."""
    target = parse_external_id(external_id)
    if target is None or not name.startswith("crcr/") or not _ours(upstream, head_sha, check_run_id, name, deps):
        deps.metrics.count("RerunIgnored", reason="not_ours")
        return None
    return target


def check_suite_targets(upstream: str, head_sha: str, suite_id: int, deps: RerunDeps) -> list[tuple[str, str]]:
    """Each distinct downstream run behind the suite's crcr check runs, once."""
    runs: dict[tuple[str, str], None] = {}
    for check_run_id, name, external_id in deps.github.suite_check_runs(upstream, suite_id):
        target = parse_external_id(external_id)
        if target is None or target in runs or not name.startswith("crcr/"):
            continue
        if _ours(upstream, head_sha, check_run_id, name, deps):
            runs[target] = None
    return list(runs)


def _blocked(repo: str, run_id: str, deps: RerunDeps) -> str | None:
    """Why this run cannot be re-run at all (None: it is a GitHub run of an L3+ repository)."""
    entry = deps.allowlist.current().get(repo)
    if entry is None or entry.level < Level.L3:
        return "not_l3"
    if run_id == NO_RUN:
        return "never_started"  # a dispatch the sweeper timed out has no run to re-run
    if not is_github_run(run_id):
        return "not_github"  # a Buildkite build: the Actions API cannot re-run it
    return None


def _request(upstream: str, repo: str, run_id: str, deps: RerunDeps, pace: Pace) -> bool | None:
    """The run is completed: with the door's permit, spend a slot of the downstream installation's budget, then ask
    GitHub. False: GitHub says it is already running (someone re-ran it since it was read); None: withheld (a shadow
    downstream, kept as a shadow decision)."""
    permit = deps.door.permit(Write(GITHUB, "rerun", repo, upstream, f"{repo}:{run_id}", {"run_id": run_id}))
    if permit is None:
        return None
    pace(deps.github.installation_for(repo))
    return deps.github.rerun_failed_jobs(repo, run_id, permit=permit)


def rerun_requested(upstream: str, repo: str, run_id: str, deps: RerunDeps, pace: Pace) -> str:
    """A re-run asked for from the Checks tab: any attempt, as often as asked; a running run is left alone."""
    outcome = _blocked(repo, run_id, deps)
    if outcome is None:
        try:
            if deps.github.workflow_run(repo, run_id).status != "completed":
                outcome = "running"
            else:
                asked = _request(upstream, repo, run_id, deps, pace)
                outcome = "withheld" if asked is None else "requested" if asked else "running"
        except (GitHubRejected, NotInstalled):
            outcome = "refused"  # a 4xx will not change on retry (5xx and rate limits propagate: retried)
    deps.metrics.count("RerunRequested" if outcome == "requested" else "RerunIgnored", reason=outcome)
    return outcome


# -- the relay's own retry of an infrastructure failure ----------------------------------------------------------


def _infra(job: JobRecord) -> bool:
    """The downstream said its infrastructure failed, or the relay timed the job out (crcr.domain.verdicts)."""
    return Attempt(job.run_attempt, job.state, job.conclusion, job.failure_kind).infra


def retry_infra(failed: JobKey, deps: RerunDeps, retry: RetryDeps, pace: Pace) -> RetryOutcome:
    """Re-run the failed jobs of the run behind an infrastructure failure, once per (dispatch, run) ever."""
    job = retry.results.get_job(failed.dispatch_id, failed.run_id, failed.run_attempt, failed.job_name)
    if job is None:
        return _ignored("unknown_job", deps)
    blocked = _blocked(job.repo, job.run_id, deps)
    if blocked is not None:
        return _decided(job, "not_retryable", blocked, deps, retry)
    if not _infra(job):
        return _ignored("not_infra", deps)  # this job's word, not the run's: no marker
    if job.run_attempt != 1:
        return _decided(job, "not_retryable", "not_first_attempt", deps, retry)
    owner = retry.owner()
    claim = retry.marks.claim_rerun(job.dispatch_id, job.run_id, owner, retry.clock.now(), retry.lease_s)
    if claim is RerunClaim.BUSY:
        raise RerunBusy(f"{job.repo} run {job.run_id}")
    if claim is RerunClaim.DONE:
        return _ignored("already_decided", deps)  # another job of the run asked first
    try:
        return _retry_claimed(job, deps, retry, pace)
    finally:
        retry.marks.release_rerun(job.dispatch_id, job.run_id, owner)


def _retry_claimed(job: JobRecord, deps: RerunDeps, retry: RetryDeps, pace: Pace) -> RetryOutcome:
    try:
        run = deps.github.workflow_run(job.repo, job.run_id)
        if run.run_attempt > 1:
            return _decided(job, "not_retryable", "rerun_already", deps, retry)  # re-run by someone: not again
        if run.status != "completed":
            waited = retry.clock.now() - (job.completed_at or job.started_at or job.dispatched_at)
            if waited >= retry.give_up_s:
                return _decided(job, "not_retryable", "still_running", deps, retry)
            # Other jobs of the run go on: GitHub re-runs a run's failed jobs only once it has completed.
            return RetryOutcome("running", wait_s=min(MAX_WAIT_S, max(MIN_WAIT_S, waited / 2)))
        asked = _request(job.upstream, job.repo, job.run_id, deps, pace)
        if asked is None:
            return _decided(job, "not_retryable", "withheld", deps, retry)
        if not asked:
            return _decided(job, "not_retryable", "rerun_already", deps, retry)
    except (GitHubRejected, NotInstalled):
        return _decided(job, "refused", "refused", deps, retry)
    return _decided(job, "requested", "requested", deps, retry)


def _decided(job: JobRecord, status: str, reason: str, deps: RerunDeps, retry: RetryDeps) -> RetryOutcome:
    retry.marks.mark_rerun(job.dispatch_id, job.run_id, status, retry.clock.now())
    if status == "requested":
        deps.metrics.count("InfraRetryRequested")
        return RetryOutcome("requested")
    return _ignored(reason, deps)


def _ignored(reason: str, deps: RerunDeps) -> RetryOutcome:
    deps.metrics.count("RerunIgnored", reason=reason)
    return RetryOutcome(reason)
