"""Runs use case: GitHub's own record of each run the relay started, bound through the inbound door and reconciled
with the downstream's reports (GitHub's word on how a job ended stands)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.github import GitHubError, NotInstalled
from crcr.app.ports.jobs import JobLimitReached, JobRecord, ResultsStore, TorchciKeys
from crcr.app.ports.ledger import LedgerRow
from crcr.app.ports.runs import BoundRun, DispatchLookup, GitHubJob, RunRecords, RunStore
from crcr.contracts.messages import RunMessage
from crcr.domain.identity import Known, Refused, admit
from crcr.domain.levels import Level
from crcr.domain.limits import MAX_JOBS_PER_DISPATCH
from crcr.domain.runs import GITHUB, is_report_job, run_progress, with_report


class RunNotYetKnown(Exception):
    """The title names a dispatch the ledger's index does not show yet: the message is retried."""


@dataclass(frozen=True)
class RunsDeps:
    ledger: DispatchLookup
    runs: RunStore
    github: RunRecords
    results: ResultsStore
    torchci_keys: TorchciKeys
    metrics: Metrics
    clock: Clock
    allowlist: AllowlistProvider  # the inbound door's pins
    run_timeout_s: float = 43200.0  # a bound run not completed by then is asked about (a lost `completed` event)
    lease_s: float = 60.0  # one jobs listing with its pages
    bind_grace_s: float = 120.0  # an unknown dispatch id is looked for again this long (the index catching up)
    max_jobs_per_dispatch: int = MAX_JOBS_PER_DISPATCH


def observe_run(message: RunMessage, deps: RunsDeps) -> str:
    """Bind the run and, on completion, reconcile the attempt. Returns what happened (for the log). Raises
    RunNotYetKnown or GitHubError when the message should be retried."""
    row = _dispatch_of(message, deps)
    if row is None:
        return "dropped"
    now = deps.clock.now()
    run = BoundRun(
        repo=row.repo,
        run_id=str(message.run_id),
        delivery_id=row.delivery_id,
        dispatch_id=row.dispatch_id,
        attempt=message.run_attempt,
        status=message.action,
        conclusion=message.conclusion,
        workflow_name=message.workflow_name,
        url=message.url,
        progress=run_progress(message.run_attempt, message.action),
    )
    completed = message.action == "completed"
    moved = deps.runs.record(run, now, None if completed else now + deps.run_timeout_s)
    if row.start_watched:
        deps.ledger.clear_start_watch(row.delivery_id, row.repo)  # a run exists: it is not a dispatch lost
    if moved:
        deps.metrics.count("RunBound" if message.action == "requested" else "RunEventRecorded")
    if message.event == "workflow_dispatch" and row.run_id is None:
        deps.ledger.note_run(row.delivery_id, row.repo, run.run_id)  # a repeated send finds it, no listing
    if not completed:
        return "bound" if moved else "stale"
    # Even a repeated `completed` gets here: the claim decides whether the attempt's jobs are still to be read.
    return reconcile_attempt(row, run, deps)


def _dispatch_of(message: RunMessage, deps: RunsDeps) -> LedgerRow | None:
    """The dispatch the run belongs to, or None (dropped, counted with the reason)."""
    row: LedgerRow | None = None
    if message.dispatch_id is not None:
        row = deps.ledger.by_dispatch(message.dispatch_id)
    else:
        bound = deps.runs.bound(message.repo, str(message.run_id))
        if bound is not None:
            row = deps.ledger.by_dispatch(bound.dispatch_id)
    if row is None:
        if deps.clock.now() - message.received_at < deps.bind_grace_s:
            raise RunNotYetKnown(f"no dispatch {message.dispatch_id} in the ledger yet")
        deps.metrics.count("RunUnbound", reason="unknown_dispatch")
        return None
    if row.ci != "github":
        deps.metrics.count("RunUnbound", reason="not_github")
        return None
    if not Level(row.level or 1).records_results:
        deps.metrics.count("RunUnbound", reason="level")
        return None
    # The inbound door, against the dispatch: its repository's entry (a title naming another repository's dispatch
    # binds nothing), GitHub's id of it when dispatched, and, for a run that passes all that, the installation the
    # relay dispatches and reads through.
    try:
        entry = deps.allowlist.current().get(row.repo)
        known = Known(repository_id=row.repo_id or 0)
        admit(entry, message.evidence(), known)
        try:
            installation = deps.github.installation_for(row.repo)
        except NotInstalled:
            installation = 0  # no installation has it now: no event speaks for it
        admit(entry, message.evidence(), replace(known, installation_id=installation))
    except Refused as exc:
        deps.metrics.count("IdentityRefused", channel=exc.channel, reason=exc.check)
        deps.metrics.count("RunUnbound", reason=exc.check)
        return None
    return row


def reconcile_attempt(row: LedgerRow, run: BoundRun, deps: RunsDeps) -> str:
    """Read a completed attempt's jobs once and record what no report completed. Raises GitHubError (released:
    the next delivery or the sweeper reads it)."""
    owner = uuid.uuid4().hex
    if not deps.runs.claim_reconcile(row.repo, run.run_id, run.attempt, owner, deps.clock.now(), deps.lease_s):
        return "reconciled already"
    try:
        jobs = deps.github.run_jobs(row.repo, run.run_id, run.attempt)
    except GitHubError:
        deps.runs.release(row.repo, run.run_id, owner)
        deps.metrics.count("RunJobsRetried")
        raise
    deps.metrics.count("RunJobsListed")
    record_jobs(row, run, jobs, deps)
    deps.runs.reconciled(row.repo, run.run_id, run.attempt, owner)
    return "reconciled"


class JobRecording(Protocol):
    """What recording a CI's own word on a run's jobs needs (RunsDeps has it)."""

    @property
    def results(self) -> ResultsStore: ...
    @property
    def torchci_keys(self) -> TorchciKeys: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def max_jobs_per_dispatch(self) -> int: ...


@dataclass(frozen=True)
class Recording:
    """JobRecording on its own, for a sweeper without GitHub's record (no App credentials) that reads Buildkite's."""

    results: ResultsStore
    torchci_keys: TorchciKeys
    metrics: Metrics
    clock: Clock
    max_jobs_per_dispatch: int = MAX_JOBS_PER_DISPATCH


def record_jobs(
    row: LedgerRow, run: BoundRun, jobs: Iterable[GitHubJob], deps: JobRecording, source: str = GITHUB
) -> None:
    """Record every finished job of a run attempt, as the CI (`source`: GitHub's listing, or Buildkite's build)
    says it ended, where no report completed it; a report that said otherwise is overruled and counted."""
    mine = [
        r
        for r in deps.results.jobs_of_dispatch(row.dispatch_id)
        if r.run_id == run.run_id and r.run_attempt == run.attempt
    ]
    for job in jobs:
        if job.status == "completed" and not is_report_job(job.name):
            _reconcile_job(row, run, job, mine, deps, source)


def twin_of(recorded: list[JobRecord], check_run_id: str | None, name: str) -> JobRecord | None:
    """The record of the same job: by GitHub's job id (the report's `check_run_id`), else by name."""
    for record in recorded:
        if check_run_id and record.check_run_id == check_run_id:
            return record
    return next((r for r in recorded if r.job_name == name), None)


def _reconcile_job(
    row: LedgerRow, run: BoundRun, job: GitHubJob, mine: list[JobRecord], deps: JobRecording, source: str
) -> None:
    conclusion = job.conclusion or "neutral"
    for _ in range(3):
        current = twin_of(mine, str(job.id), job.name)
        if current is not None:
            current = deps.results.get_job(row.dispatch_id, run.run_id, run.attempt, current.job_name) or current
        if current is not None and current.state == "completed":
            if current.conclusion == conclusion:
                deps.metrics.count("RunJobConfirmed")
                return
            overruled = replace(
                current,
                conclusion=conclusion,
                failure_kind=current.failure_kind if conclusion in ("failure", "timed_out") else None,
                source=with_report(source),
                reported_conclusion=current.reported_conclusion or current.conclusion,
                completed_at=job.completed_at or current.completed_at,
                verdict=None,
                version=current.version + 1,
            )
            if deps.results.put_job(overruled, current.version):
                deps.metrics.count("ResultDisagreed")
                return
            continue
        record = _from_ci(row, run, job, conclusion, current, deps.clock.now(), source)
        if current is None and not _take_hud_key(row, run, record, deps):
            return
        if deps.results.put_job(record, current.version if current else None):
            deps.metrics.count("RunJobRecorded", state=current.state if current else "absent")
            return
        # A report of the job won the write meanwhile: read it and decide again.
        mine = [r for r in deps.results.jobs_of_dispatch(row.dispatch_id) if r.run_id == run.run_id]


def _from_ci(
    row: LedgerRow, run: BoundRun, job: GitHubJob, conclusion: str, current: JobRecord | None, now: float, source: str
) -> JobRecord:
    """The job as its CI says it ended; on a record a report started (in progress, or timed out by the sweeper),
    its name, first start and words stay."""
    completed_at = job.completed_at or now
    started_at = (current.started_at if current and current.started_at else None) or job.started_at or completed_at
    return JobRecord.of_dispatch(
        row,
        now,
        run_id=run.run_id,
        run_attempt=run.attempt,
        job_name=current.job_name if current else job.name,
        workflow_name=(current.workflow_name if current else "") or run.workflow_name,
        state="completed",
        conclusion=conclusion,
        fingerprint=f"{source}:{job.id}",
        url=job.url or (current.url if current else "") or run.url,
        started_at=started_at,
        completed_at=completed_at,
        callback_payload=current.callback_payload if current else "{}",
        version=(current.version + 1) if current else 1,
        check_run_id=(current.check_run_id if current else "") or str(job.id),
        reported_started_at=current.reported_started_at if current else "",
        triage=current.triage if current else "",
        source=with_report(source)
        if current is not None and current.source != source and current.fingerprint
        else source,
    )


def _take_hud_key(row: LedgerRow, run: BoundRun, record: JobRecord, deps: JobRecording) -> bool:
    """A job only GitHub reported takes its HUD row's key among the dispatch's jobs, as a report would."""
    key = json.dumps([record.workflow_name, record.job_name, record.check_run_id])  # the callback's key
    owner = f"run {run.run_id} attempt {run.attempt}"
    try:
        holder = deps.torchci_keys.claim(row.dispatch_id, key, owner, deps.clock.now(), deps.max_jobs_per_dispatch)
    except JobLimitReached:
        deps.metrics.count("RunJobRefused", reason="jobs_per_dispatch")
        return False
    if holder is not None:
        deps.metrics.count("RunJobRefused", reason="hud_key_taken")
        return False
    return True
