"""Sweeper use case: dispatches no job reported on in time, and jobs that never finished, become timed_out.

Found through sparse indexes (only watched rows carry the key), never a scan. The reporter then pushes
the change to the HUD and the check run like any other; a later genuine completion replaces timed_out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from crcr.app.checks import SWEPT
from crcr.app.ports import Clock, Metrics
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.ledger import LedgerRow
from crcr.domain.ids import NO_RUN


class StartWatch(Protocol):
    def due_starts(self, now: float, limit: int = 100) -> list[LedgerRow]: ...
    def clear_start_watch(self, delivery_id: str, repo: str) -> None: ...


class RunWatch(Protocol):
    def due_runs(self, now: float, limit: int = 100) -> list[JobRecord]: ...
    def put_job(self, record: JobRecord, expected_version: int | None) -> bool: ...


@dataclass(frozen=True)
class SweepDeps:
    starts: StartWatch
    runs: RunWatch
    metrics: Metrics
    clock: Clock


@dataclass
class SweepSummary:
    never_started: list[str] = field(default_factory=list)
    never_finished: list[str] = field(default_factory=list)


def sweep(deps: SweepDeps) -> SweepSummary:
    now = deps.clock.now()
    summary = SweepSummary()
    for row in deps.starts.due_starts(now):
        # The dispatch itself becomes a timed_out "job" with no name: check run crcr/<owner>/<repo>.
        record = JobRecord.of_dispatch(
            row,
            now,
            run_id=NO_RUN,
            run_attempt=0,
            job_name="",
            workflow_name="",
            state="timed_out",
            conclusion="timed_out",
            fingerprint=SWEPT,
            url="",
            started_at=None,
            completed_at=now,
            callback_payload="{}",
            version=1,
        )
        if deps.runs.put_job(record, None):
            deps.metrics.count("DispatchTimedOut")
            summary.never_started.append(row.repo)
        deps.starts.clear_start_watch(row.delivery_id, row.repo)
    for job in deps.runs.due_runs(now):
        timed_out = replace(
            job, state="timed_out", conclusion="timed_out", fingerprint=SWEPT, completed_at=now, version=job.version + 1
        )
        if deps.runs.put_job(timed_out, job.version):  # lost to a genuine report meanwhile: that one stands
            deps.metrics.count("JobTimedOut")
            summary.never_finished.append(f"{job.repo}/{job.job_name}")
    return summary
