"""Job records (one per dispatch, run, attempt and job) and the reads several use cases share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from crcr.app.ports.ledger import LedgerRow


@dataclass(frozen=True)
class JobRecord:
    """One job's recorded state; identity fields come from the dispatch ledger."""

    dispatch_id: str
    run_id: str  # GitHub's run id (digits) or a Buildkite build UUID; see crcr.domain.ids
    run_attempt: int
    job_name: str
    workflow_name: str
    state: str
    conclusion: str | None
    fingerprint: str
    url: str
    repo: str
    repo_id: int
    level: int
    delivery_id: str
    upstream: str
    head_sha: str
    pr: int | None
    device: str | None
    dispatched_at: float
    started_at: float | None
    completed_at: float | None
    callback_payload: str  # the body as the downstream sent it (untrusted), JSON text
    version: int = 0
    event_type: str = ""  # pull_request, push, or nightly (a scheduled run); from the ledger
    # Unique per job attempt (PyTorch's HUD keys its rows with it): the downstream's job.check_run_id
    # when it sent one, else derived from the attempt; the first one recorded stays.
    check_run_id: str = ""
    reported_started_at: str = ""  # the downstream's start time, once any report of the attempt gave it
    failure_kind: str | None = None  # infra, build or test: the downstream's word on a completed failure
    triage: str = ""  # the downstream's triage verdict, validated and capped (JSON), advice only
    verdict: str | None = None  # new, pre-existing, infra, flaky, no baseline (crcr.domain.verdicts)
    verdict_baseline: str | None = None  # the upstream commit whose result a new or pre-existing verdict compared
    known_issues: str = ""  # a `known` verdict: the upstream issues explaining its failing tests (known_refs)
    ciflow: str | None = None  # dispatched for a ciflow/<name>/<pr> tag push (from the ledger)
    failed_tests: str = ""  # failed_tests_detail as PyTorch's HUD keeps it (JSON, crcr.domain.failed_tests)
    # Who said what is recorded: "" the downstream's reports alone; "github" GitHub's record of the run alone (its
    # jobs listing); "github+report" both, GitHub's conclusion and times standing, the report's detail kept.
    source: str = ""
    reported_conclusion: str | None = None  # a report's conclusion where GitHub's record of the job said otherwise
    reason: str = ""  # why a dispatch is not_started (what a maintainer reads)
    # A job GitHub said was still running at its deadline: the sweeper asks again at this time, instead of timing out.
    recheck_at: float | None = None
    # GitHub could not tell about the job (5xx, timeout, rate limit) at this many of its deadline's asks in a row: the
    # sweeper times it out only after MIN_ASKS of them, however slowly its runs come round.
    unanswered: int = 0

    @classmethod
    def of_dispatch(cls, row: LedgerRow, now: float, **job: Any) -> JobRecord:
        """A job of this dispatch: its identity is what was sent (the ledger row), never a callback's word."""
        return cls(
            dispatch_id=row.dispatch_id,
            repo=row.repo,
            repo_id=row.repo_id or 0,
            level=row.level or 0,
            delivery_id=row.delivery_id,
            upstream=row.upstream or "",
            head_sha=row.head_sha or "",
            pr=row.pr,
            device=row.device,
            dispatched_at=row.dispatched_at or now,
            event_type=row.event_type or "",
            ciflow=row.ciflow,
            **job,
        )


class JobLimitReached(Exception):
    """The dispatch has as many jobs as it may hold: a new one is not taken."""


class ResultsStore(Protocol):
    def get_job(self, dispatch_id: str, run_id: str, run_attempt: int, job_name: str) -> JobRecord | None: ...
    def jobs_of_dispatch(self, dispatch_id: str) -> list[JobRecord]: ...
    def jobs_for_head(self, upstream: str, head_sha: str) -> list[JobRecord]:
        """Every job reported on one upstream commit (every dispatch, every attempt)."""
        ...

    def put_job(self, record: JobRecord, expected_version: int | None) -> bool:
        """Conditional write: False when someone else wrote the job first (read and decide again)."""
        ...


class JobsByHead(Protocol):
    def jobs_for_head(self, upstream: str, head_sha: str) -> list[JobRecord]: ...


class JobsByRepo(Protocol):
    def jobs_of_repo(self, repo: str, since: float) -> list[JobRecord]:
        """Every job row (every attempt, any state) of one downstream repository dispatched at or after
        `since`, oldest dispatch first; names compare case-insensitively. Rows come from an index without
        `callback_payload` and `fingerprint` (both ""): read them, never write them back."""
        ...


class NewestJobs(Protocol):
    def newest_of_repo(self, repo: str, limit: int) -> list[JobRecord]:
        """The repository's `limit` newest job rows by dispatch time (every attempt, any state), newest first, with
        everything but `fingerprint` (""); names compare case-insensitively."""
        ...


class TorchciKeys(Protocol):
    def claim(self, dispatch_id: str, hud_key: str | None, owner: str, now: float, max_jobs: int) -> str | None:
        """Take one HUD row's key among a dispatch's jobs for `owner` (the job's run and attempt; the key names the
        job), counting it among the dispatch's jobs: None when the key is the owner's (taken now, or by an earlier
        report of the same job, counted once), else the owner that holds it. With no key (a job whose row its own
        run and attempt name) it only counts. Raises JobLimitReached when the dispatch holds `max_jobs` jobs
        already (and takes nothing)."""
        ...
