"""Recording a report: the job's state machine, its HUD row's key, GitHub's record beside it, refusals counted."""

from __future__ import annotations

import json
from dataclasses import replace

from crcr.app.callback_body import Report, fingerprint_of, stored_payload
from crcr.app.callback_deps import CallbackDeps, Reply
from crcr.app.page_notes import note_refusals
from crcr.app.ports.jobs import JobLimitReached, JobRecord
from crcr.app.ports.ledger import LedgerRow
from crcr.app.torchci import derived_check_run_id
from crcr.domain.errors import (
    Conflict,
    CrcrError,
    OverLimit,
    PayloadTooLarge,
    Unavailable,
)
from crcr.domain.failed_tests import cap, to_json
from crcr.domain.jobs import Current, Decision, JobState, decide
from crcr.domain.jsondoc import dumps
from crcr.domain.limits import MAX_RUN_ATTEMPT, MAX_STORED_BYTES_PER_JOB
from crcr.domain.runs import GITHUB, from_ci, with_report
from crcr.domain.triage import Dropped as TriageDropped
from crcr.domain.triage import validate as validate_triage


def _check_stored_size(record: JobRecord) -> None:
    stored = sum(len(text.encode()) for text in (record.callback_payload, record.triage, record.failed_tests))
    if stored > MAX_STORED_BYTES_PER_JOB:
        raise PayloadTooLarge(
            f"the report would store {stored} bytes; the limit is {MAX_STORED_BYTES_PER_JOB} bytes per job: "
            "shorten its summary",
            field="summary",
            limit="stored_bytes_per_job",
        )


def record_report(row: LedgerRow, report: Report, deps: CallbackDeps) -> Reply:
    try:
        return _record_within_limits(row, report, deps)
    except (OverLimit, PayloadTooLarge) as exc:
        raise refused(row.repo, exc.limit or exc.reason, exc, deps) from None


def _record_within_limits(row: LedgerRow, report: Report, deps: CallbackDeps) -> Reply:
    if report.run_attempt > MAX_RUN_ATTEMPT:
        raise OverLimit(
            f"run_attempt {report.run_attempt} is past the limit of {MAX_RUN_ATTEMPT} attempts per job "
            "(GitHub re-runs a run at most 50 times)",
            field="run_attempt",
            limit="attempts_per_job",
        )
    fingerprint = fingerprint_of(report.raw)
    triage = _triage(report, deps)
    for _ in range(5):
        now = deps.clock.now()
        current = deps.results.get_job(row.dispatch_id, report.run_id, report.run_attempt, report.job_name)
        if current is None and report.status == "completed" and report.check_run_id:
            current = _github_twin(row, report, deps)
        if current is not None and _github_only(current):
            if report.status != "completed" or current.fingerprint == fingerprint:
                return Reply.DUPLICATE  # GitHub's record says it finished: a start adds nothing
            enriched = _enriched(row, report, current, fingerprint, now, triage)
            _check_stored_size(enriched)
            if deps.results.put_job(enriched, current.version):
                if enriched.reported_conclusion is not None:
                    deps.metrics.count("ResultDisagreed")
                return Reply.RECORDED
            continue
        decision = decide(
            Current(JobState(current.state), current.fingerprint) if current else None, report.status, fingerprint
        )
        if decision is Decision.CONFLICT:
            raise Conflict(f"job {report.job_name} already reported {current.state if current else ''} differently")
        if decision in (Decision.DUPLICATE, Decision.STALE):
            return Reply.DUPLICATE
        job = _next_record(row, report, current, fingerprint, now, triage)
        _check_stored_size(job)  # before a new job takes one of the dispatch's places
        if current is None:
            _check_hud_key_free(row, report, deps, now)
        if deps.results.put_job(job, current.version if current else None):
            if current is None and row.start_watched:
                # The dispatch's first job: no start timeout (the row as read says whether one is still set,
                # so later jobs write nothing there).
                deps.ledger.clear_start_watch(row.delivery_id, row.repo)
            return Reply.RECORDED
        # Another callback for the same job won the conditional write: read it and decide again.
    # Not a conflict of content: retrying will settle it, so say so (the action retries 503).
    raise Unavailable(f"job {report.job_name} is being reported concurrently; retry", retry_after_s=1)


# A refused downstream's page is rewritten when its count this hour reaches one of these: a flood of refusals costs a
# handful of document writes an hour, never one each.
PAGE_AT_COUNTS = frozenset({1, 10, 100, 1_000, 10_000})
NOT_A_QUOTA = frozenset({"unknown_commit"})


def refused(repo: str, reason: str, exc: CrcrError, deps: CallbackDeps) -> CrcrError:
    """Count a report refused for a quota or limit (or an unknown commit) of a repository whose identity the token
    proved, and name the repository on its HUD page; returns the error to raise."""
    if reason not in NOT_A_QUOTA:
        deps.metrics.count("DownstreamThrottled")
    if deps.refusals is None:
        return exc
    now = deps.clock.now()
    count = deps.refusals.count(repo, reason, now)
    if deps.pages is not None and count in PAGE_AT_COUNTS:
        since = max((c for c in PAGE_AT_COUNTS if c < count), default=0)  # counted on the page already
        hour = int(now // 3600)
        try:
            note_refusals(
                repo, {reason: count - since}, deps.pages, key=f"{reason}:{hour}:{count}", message=exc.message
            )
        except Exception:  # the page is a courtesy: the refusal stands, answered as it is
            deps.metrics.count("RefusalNotShown")
    return exc


def _check_hud_key_free(row: LedgerRow, report: Report, deps: CallbackDeps, now: float) -> None:
    """A new job must not take the HUD row of another job of the same dispatch, nor a place beyond the dispatch's
    limit of jobs. PyTorch's HUD keys a row by workflow name, job name and check-run id (not by run or attempt): a
    check-run id the downstream reuses for another run or attempt would make two jobs overwrite one row, and lose
    one of them. The first job to report a key holds it (one transaction with the dispatch's count of jobs,
    whatever the dispatch's size). A job that sent no check-run id gets one derived from its own run and attempt,
    in a namespace callers may not use: no other job can hold that key, so only the count is written."""
    check_run_id = report.check_run_id
    hud_key = json.dumps([report.workflow_name, report.job_name, check_run_id]) if check_run_id else None
    owner = f"run {report.run_id} attempt {report.run_attempt}"
    try:
        holder = deps.torchci_keys.claim(row.dispatch_id, hud_key, owner, now, deps.max_jobs_per_dispatch)
    except JobLimitReached:
        raise OverLimit(
            f"this dispatch already holds {deps.max_jobs_per_dispatch} jobs, the limit per dispatch; "
            f"job {report.job_name} was not recorded",
            field="job_name",
            limit="jobs_per_dispatch",
        ) from None
    if holder is not None:
        raise Conflict(
            f"check run {check_run_id} of job {report.job_name} was already reported by {holder}; "
            "each job attempt has its own check_run_id",
            field="check_run_id",
        )


def _github_only(record: JobRecord) -> bool:
    """A job recorded from its CI's own word (GitHub's jobs listing, Buildkite's build) that no completed report
    has added its words to yet."""
    return from_ci(record.source, record.fingerprint)


def _github_twin(row: LedgerRow, report: Report, deps: CallbackDeps) -> JobRecord | None:
    """The record GitHub's listing made of this job under GitHub's name for it (the report names its job by another,
    e.g. the job's key): found by the job's id, which the report sends as its check_run_id."""
    for record in deps.results.jobs_of_dispatch(row.dispatch_id):
        if (
            record.run_id == report.run_id
            and record.run_attempt == report.run_attempt
            and record.check_run_id == report.check_run_id
            and _github_only(record)
        ):
            return record
    return None


def _enriched(
    row: LedgerRow, report: Report, current: JobRecord, fingerprint: str, now: float, triage: str
) -> JobRecord:
    """A report on a job GitHub's record has finished: its words (test counts, failing tests, triage) are added,
    GitHub's conclusion and times stand; a report that says otherwise is kept as `reported_conclusion`."""
    words = _next_record(row, report, current, fingerprint, now, triage)
    failed = current.conclusion in ("failure", "timed_out")
    return replace(
        words,
        job_name=current.job_name,
        workflow_name=current.workflow_name,
        check_run_id=current.check_run_id,
        conclusion=current.conclusion,
        started_at=current.started_at,
        completed_at=current.completed_at,
        url=current.url or words.url,
        failure_kind=report.failure_kind if failed else None,
        failed_tests=words.failed_tests,
        source=with_report(current.source.removesuffix("+report") or GITHUB),
        reported_conclusion=report.conclusion if report.conclusion != current.conclusion else None,
        version=current.version + 1,
    )


def _triage(report: Report, deps: CallbackDeps) -> str:
    """The downstream's triage verdict, normalised; a malformed one is dropped whole, the result still records."""
    try:
        verdict = validate_triage(report.triage_verdict)
    except TriageDropped:
        deps.metrics.count("TriageDropped")
        return ""
    return dumps(verdict) if verdict else ""


def _next_record(
    row: LedgerRow, report: Report, current: JobRecord | None, fingerprint: str, now: float, triage: str = ""
) -> JobRecord:
    completed = report.status == "completed"
    # Queue and execution times are measured on the relay's clock: start is when in_progress arrived.
    started_at = current.started_at if current and current.started_at else (None if completed else now)
    return JobRecord.of_dispatch(
        row,
        now,
        run_id=report.run_id,
        run_attempt=report.run_attempt,
        job_name=report.job_name,
        # The HUD keys a job's row by its workflow name: the first one recorded stays, so a later report under
        # another name updates that row instead of leaving it in progress beside a new one.
        workflow_name=(current.workflow_name if current else "") or report.workflow_name,
        state=report.status,
        conclusion=report.conclusion,
        fingerprint=fingerprint,
        url=report.url,
        started_at=started_at,
        completed_at=now if completed else None,
        callback_payload=stored_payload(report.raw),
        version=(current.version + 1) if current else 1,
        # The first id recorded for the attempt stays, so the HUD keeps one row per job attempt.
        check_run_id=(current.check_run_id if current else "")
        or report.check_run_id
        or derived_check_run_id(report.run_id, report.run_attempt),
        reported_started_at=(current.reported_started_at if current else "") or report.started_at or "",
        failure_kind=report.failure_kind,
        triage=triage,
        # Kept as PyTorch's HUD keeps them (the first 50, messages cut): what the pages and the HUD show agree.
        failed_tests=_failed_tests(report) if completed else "",
    )


def _failed_tests(report: Report) -> str:
    capped = cap(t.model_dump(exclude_none=True) for t in report.failed_tests)
    return to_json(capped) if capped else ""
