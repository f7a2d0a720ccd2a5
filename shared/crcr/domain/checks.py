"""Upstream check runs (docs/contracts.md): who gets one, its name, and which writes move it forward."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

from crcr.domain.ids import RUN_ID_PATTERN, ascii_lower, run_order
from crcr.domain.levels import Level
from crcr.domain.pacing import WindowLevel

STATUS_RANK = {"queued": 0, "in_progress": 1, "completed": 2}
CIFLOW_DEVICE_PREFIX = "ciflow/crcr/"


def wants_check_run(level: int, device: str | None, labels: tuple[str, ...]) -> bool:
    """L4 always; L3 only while the PR carries ciflow/crcr/<device>; L1/L2 never."""
    if level >= Level.L4:
        return True
    if level == Level.L3 and device:
        return ascii_lower(f"{CIFLOW_DEVICE_PREFIX}{device}") in {ascii_lower(label) for label in labels}
    return False


def parse_external_id(external_id: str | None) -> tuple[str, str] | None:
    """`<downstream repo>:<run_id>:<pr>` (docs/contracts.md) -> (repo, run_id)."""
    parts = (external_id or "").rsplit(":", 2)
    if len(parts) != 3 or not re.fullmatch(RUN_ID_PATTERN, parts[1]):
        return None
    return parts[0], parts[1]


def check_run_name(repo: str, workflow_name: str, job_name: str, ciflow: str | None = None) -> str:
    """Per job; a dispatch no job started on is the repository's own check run, crcr/<owner>/<repo>. A ciflow tag
    push's dispatch runs beside the PR's own on the same commit: its runs carry the tag's name, so neither
    dispatch overwrites the other's and a ruleset keeps requiring the PR's."""
    name = f"crcr/{repo}/{workflow_name}/{job_name}" if job_name else f"crcr/{repo}"
    return f"{name} (ciflow/{ciflow})" if ciflow else name


def downstream_of(name: str) -> str:
    """The downstream repository a check run named by check_run_name speaks for."""
    return "/".join(name.removeprefix("crcr/").split(" (ciflow/", 1)[0].split("/")[:2])


@dataclass(frozen=True)
class Known:
    """What the relay last wrote to a check run."""

    check_run_id: int
    status: str
    conclusion: str | None
    run_attempt: int = 0


def superseded(known: Known | None) -> bool:
    """The relay's own `cancelled`, written on a repository's run still queued when a newer commit replaced its PR's
    head (no job had started: attempt 0). A rollup never completes `cancelled` without a job, so nothing else looks
    like it."""
    return known is not None and (known.status, known.conclusion, known.run_attempt) == ("completed", "cancelled", 0)


def should_write(
    known: Known | None,
    status: str,
    conclusion: str | None,
    run_attempt: int = 0,
    genuine: bool = True,
    head_again: bool = False,
) -> bool:
    """Create when unknown; then only forward: never back to an earlier status, and a completed run is
    rewritten only by a genuine result with another conclusion (one replacing the relay's own timed_out
    or cancelled; the relay never overwrites a completed run with its own verdict).
    A newer run attempt (a re-run from the Checks tab) starts the same check run over, and so does a dispatch of a
    commit that is its PR's head again (`head_again`: A, B, then A force-pushed) when the relay had cancelled the
    run as superseded."""
    if known is None or (head_again and superseded(known)):
        return True
    if run_attempt != known.run_attempt:
        return run_attempt > known.run_attempt
    if STATUS_RANK[status] != STATUS_RANK[known.status]:
        return STATUS_RANK[status] > STATUS_RANK[known.status]
    return status == "completed" and genuine and conclusion != known.conclusion


class Need(Enum):
    """What one check-run write is for: with `check_runs: auto` this decides whether it is made while the
    upstream installation's write budget is tight. Nothing a run needs to end is ever left out."""

    RESULT = "result"  # completes a run, or moves one that exists (a re-run starts it over): always made
    QUEUED = "queued"  # the repository's run created `queued` at dispatch: made while it goes without waiting
    DETAIL = "detail"  # a new per-job run, the repository's `in_progress`: made while the window has room


# Detail writes may fill the hourly window's burst up to this share: what is left stays free for the writes
# that complete runs, so those go without waiting while per-job runs come and go with the demand.
DETAIL_SHARE = 0.5


def job_run_need(known: Known | None, status: str) -> tuple[Need, int]:
    """A per-job run: creating one is detail (it commits to its completion too, unless created completed);
    a run that exists is always carried to its end."""
    if known is not None:
        return Need.RESULT, 1
    return Need.DETAIL, 1 if status == "completed" else 2


def repo_run_need(known: Known | None, status: str, run_attempt: int) -> tuple[Need, int]:
    """The repository's run: its result always; `queued` while it goes at once; `in_progress` as detail, unless
    a newer run attempt starts a completed run over."""
    restarted = known is not None and known.status == "completed" and run_attempt > known.run_attempt
    if status == "completed" or restarted:
        return Need.RESULT, 1
    return (Need.QUEUED, 1) if status == "queued" else (Need.DETAIL, 1)


def affordable(need: Need, writes: int, level: WindowLevel) -> bool:
    """Whether the budget's longest window has room for `writes` more of this kind: detail while what is
    booked beyond the sustained rate, with them, stays within DETAIL_SHARE of the burst; queued while it
    would go without waiting; results always (paced, never dropped)."""
    if need is Need.RESULT:
        return True
    room = level.burst * (DETAIL_SHARE if need is Need.DETAIL else 1.0)
    return level.booked + writes <= room


def makes(mode: str, need: Need, writes: int, level: Callable[[], WindowLevel]) -> bool:
    """`check_runs` per repository: per_job makes every write; per_repo no per-job run and no `in_progress`
    (a run that exists still ends); auto as per_job while the window has room, as per_repo's results and
    (when they go at once) queued runs when it has not. `level` is read only when it decides."""
    if mode == "per_job" or need is Need.RESULT:
        return True
    if mode == "per_repo":
        return need is Need.QUEUED
    return affordable(need, writes, level())


# Worst first: a repository's check run is only as good as its worst job. Anything unknown counts as failure.
_CONCLUSION_ORDER = ("failure", "timed_out", "cancelled", "action_required", "success", "neutral", "skipped")
DONE_STATES = ("completed", "timed_out", "not_started")  # a job in either has a completed check run
SWEPT = "swept"  # fingerprint of a sweeper write: any genuine report differs from it


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
        if any(not j.job_name and j.state == "not_started" for j in jobs):
            return Rollup("completed", "action_required", 0, genuine=False)  # GitHub started no run
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
