"""Upstream check runs (DESIGN §4.5): who gets one, its name, and which writes move it forward."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from crcr.domain.ids import RUN_ID_PATTERN, run_order
from crcr.domain.levels import Level

STATUS_RANK = {"queued": 0, "in_progress": 1, "completed": 2}
CIFLOW_DEVICE_PREFIX = "ciflow/crcr/"


def wants_check_run(level: int, device: str | None, labels: tuple[str, ...]) -> bool:
    """L4 always; L3 only while the PR carries ciflow/crcr/<device>; L1/L2 never."""
    if level >= Level.L4:
        return True
    if level == Level.L3 and device:
        return f"{CIFLOW_DEVICE_PREFIX}{device}".lower() in {label.lower() for label in labels}
    return False


def parse_external_id(external_id: str | None) -> tuple[str, str] | None:
    """`<downstream repo>:<run_id>:<pr>` (DESIGN §4.5) -> (repo, run_id)."""
    parts = (external_id or "").rsplit(":", 2)
    if len(parts) != 3 or not re.match(RUN_ID_PATTERN, parts[1]):
        return None
    return parts[0], parts[1]


def check_run_name(repo: str, workflow_name: str, job_name: str) -> str:
    """Per job; a dispatch no job started on is the repository's own check run, crcr/<owner>/<repo>."""
    return f"crcr/{repo}/{workflow_name}/{job_name}" if job_name else f"crcr/{repo}"


@dataclass(frozen=True)
class Known:
    """What the relay last wrote to a check run."""

    check_run_id: int
    status: str
    conclusion: str | None
    run_attempt: int = 0


def should_write(
    known: Known | None, status: str, conclusion: str | None, run_attempt: int = 0, genuine: bool = True
) -> bool:
    """Create when unknown; then only forward: never back to an earlier status, and a completed run is
    rewritten only by a genuine result with another conclusion (one replacing the relay's own timed_out
    or cancelled; the relay never overwrites a completed run with its own verdict).
    A newer run attempt (a re-run from the Checks tab) starts the same check run over."""
    if known is None:
        return True
    if run_attempt != known.run_attempt:
        return run_attempt > known.run_attempt
    if STATUS_RANK[status] != STATUS_RANK[known.status]:
        return STATUS_RANK[status] > STATUS_RANK[known.status]
    return status == "completed" and genuine and conclusion != known.conclusion


# Worst first: a repository's check run is only as good as its worst job. Anything unknown counts as failure.
_CONCLUSION_ORDER = ("failure", "timed_out", "cancelled", "action_required", "success", "neutral", "skipped")
DONE_STATES = ("completed", "timed_out")  # a job in either has a completed check run


class Attempt(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def job_name(self) -> str: ...
    @property
    def run_attempt(self) -> int: ...


AttemptT = TypeVar("AttemptT", bound=Attempt)


def latest_attempts(jobs: Iterable[AttemptT]) -> list[AttemptT]:
    """Each named job's latest run attempt (a re-run replaces the failed one), in (run, job) order.
    The nameless row, the dispatch the sweeper timed out, is left out."""
    latest: dict[tuple[str, str], AttemptT] = {}
    for job in jobs:
        key = (job.run_id, job.job_name)
        if job.job_name and (key not in latest or job.run_attempt > latest[key].run_attempt):
            latest[key] = job
    return [latest[key] for key in sorted(latest, key=lambda k: (run_order(k[0]), k[1]))]


@dataclass(frozen=True)
class JobOutcome:
    """One recorded job, as the repository's check run sees it. job_name "" is the dispatch itself,
    which the sweeper records as timed_out when no job started."""

    run_id: str
    job_name: str
    run_attempt: int
    state: str
    conclusion: str | None
    genuine: bool  # reported by the downstream, not the sweeper's timed_out
    changed_at: float


@dataclass(frozen=True)
class Rollup:
    status: str
    conclusion: str | None
    run_attempt: int
    genuine: bool
    settles_at: float | None = None  # every job done, but too recently to call the repository done


def worst(conclusions: list[str | None]) -> str:
    ranks = [_CONCLUSION_ORDER.index(c) if c in _CONCLUSION_ORDER else 0 for c in conclusions]
    return _CONCLUSION_ORDER[min(ranks)] if ranks else "neutral"


def rollup(jobs: list[JobOutcome], now: float, settle_s: float) -> Rollup:
    """The repository's check run from its jobs: queued until one starts, in progress while any runs,
    completed with the worst conclusion once every job is done and nothing changed for `settle_s`.
    Jobs of a workflow can run one after another: the next one reports only when it starts, so a
    repository whose jobs all finished a moment ago may not be finished at all."""
    named = latest_attempts(jobs)
    if not named:
        swept = any(not j.job_name and j.state == "timed_out" for j in jobs)
        return Rollup("completed", "timed_out", 0, genuine=False) if swept else Rollup("queued", None, 0, genuine=True)
    attempt = max(j.run_attempt for j in named)
    genuine = all(j.genuine for j in named)
    if any(j.state not in DONE_STATES for j in named):
        return Rollup("in_progress", None, attempt, genuine)
    settles_at = max(j.changed_at for j in named) + settle_s
    if now < settles_at:
        return Rollup("in_progress", None, attempt, genuine, settles_at=settles_at)
    return Rollup("completed", worst([j.conclusion for j in named]), attempt, genuine)
