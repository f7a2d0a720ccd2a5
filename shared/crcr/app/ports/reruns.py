"""Re-runs of downstream runs: a run as GitHub shows it, and the relay's once-per-run automatic re-run markers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol


@dataclass(frozen=True)
class WorkflowRun:
    """A downstream GitHub Actions run as `GET …/actions/runs/{id}` shows it."""

    status: str  # queued, in_progress, completed, ...
    run_attempt: int  # 1 until someone re-runs it


class RerunClaim(Enum):
    CLAIMED = "claimed"  # this message decides the run's automatic re-run
    BUSY = "busy"  # another message is deciding it now: look again shortly
    DONE = "done"  # decided before (the marker exists): never again


RERUN_STATUSES = ("requested", "refused", "not_retryable")


class RerunMarks(Protocol):
    def rerun_state(self, dispatch_id: str, run_id: str) -> str | None:
        """What the relay did about the automatic re-run of a run's infrastructure failure, from the marker row
        the re-run handler writes once per (dispatch, run) (pk RERUN#<dispatch_id>, sk RUN#<run_id>, attribute
        status): requested, refused or not_retryable; None when it did nothing (yet)."""
        ...
