"""Job state machine (docs/contracts.md), per dispatch x run_id x run_attempt x job_name: dispatched → in_progress →
completed, and dispatched → completed; terminal states never go back; timed_out (written by the sweeper) is replaced
by a later genuine completion."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class JobState(Enum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    TIMED_OUT = "timed_out"
    NOT_STARTED = "not_started"  # GitHub started no run for the dispatch (crcr.app.sweep)


class Decision(Enum):
    RECORD = "recorded"
    DUPLICATE = "duplicate"  # the same report again: safe for a downstream to retry
    STALE = "stale"  # an older state arriving late (in_progress after completion): nothing changes
    CONFLICT = "conflict"  # a different report for a state already recorded


@dataclass(frozen=True)
class Current:
    state: JobState
    fingerprint: str


def decide(current: Current | None, status: str, fingerprint: str) -> Decision:
    if current is None:
        return Decision.RECORD
    if current.state in (JobState.TIMED_OUT, JobState.NOT_STARTED):
        return Decision.RECORD if status == "completed" else Decision.STALE
    if current.state is JobState.IN_PROGRESS:
        if status == "completed":
            return Decision.RECORD
        return Decision.DUPLICATE if fingerprint == current.fingerprint else Decision.CONFLICT
    if status == "in_progress":
        return Decision.STALE
    return Decision.DUPLICATE if fingerprint == current.fingerprint else Decision.CONFLICT
