"""Repository health: figures from recorded job attempts, judged against PyTorch's L3 criteria as its HUD's
`crcr_l3_summary` query computes them (docs/contracts.md; matches and deviations in docs/decisions.md)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from crcr.domain.levels import Level
from crcr.domain.verdicts import Attempt

DAY_S = 86_400
FINISHED_STATES = frozenset({"completed", "timed_out", "not_started"})


class Verdict(StrEnum):
    PROMOTE = "promote"
    KEEP = "keep"
    DEMOTE = "demote"
    INSUFFICIENT_DATA = "insufficient_data"


# -- thresholds ----------------------------------------------------------------------------------------


class Thresholds(BaseModel):
    """What a repository at one level is judged against: rates in 0..1, times in seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pass_rate: float = Field(0.90, ge=0, le=1)  # at least
    timeout_rate: float = Field(0.01, gt=0, le=1)  # below (0 would fail every repository, even a perfect one)
    avg_queue_s: float = Field(30 * 60, gt=0)  # below
    p50_end_to_end_s: float = Field(3 * 3600, gt=0)  # below
    max_execution_s: float = Field(3 * 3600, gt=0)  # below


class LevelThresholds(BaseModel):
    """Overrides for one level; what is left out comes from the top level."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pass_rate: float | None = Field(None, ge=0, le=1)
    timeout_rate: float | None = Field(None, gt=0, le=1)
    avg_queue_s: float | None = Field(None, gt=0)
    p50_end_to_end_s: float | None = Field(None, gt=0)
    max_execution_s: float | None = Field(None, gt=0)


class HealthPolicy(Thresholds):
    """The whole `CRCR_HEALTH_THRESHOLDS` document: thresholds for every level, per-level overrides under
    `L2`/`L3`/`L4`, and the defaults of `--window-days` and `--min-jobs`."""

    window_days: int = Field(14, ge=1)
    min_jobs: int = Field(10, ge=1)
    L2: LevelThresholds | None = None
    L3: LevelThresholds | None = None
    L4: LevelThresholds | None = None

    def thresholds(self, level: Level) -> Thresholds:
        base = {name: getattr(self, name) for name in Thresholds.model_fields}
        override = getattr(self, level.name, None) if level >= Level.L2 else None
        if isinstance(override, LevelThresholds):
            base |= override.model_dump(exclude_none=True)
        return Thresholds(**base)


class HealthConfigError(ValueError):
    """A bad thresholds document; `key` is the dotted path of the offending key ("" for the document)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key
        self.message = message


def parse_policy(text: str | None) -> HealthPolicy:
    """The policy from its JSON text (None or blank: PyTorch's defaults). Strict: "0.9" is not a number."""
    if text is None or not text.strip():
        return HealthPolicy()
    try:
        return HealthPolicy.model_validate_json(text, strict=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        if error["type"] == "json_invalid":
            detail = error.get("ctx", {}).get("error", "")
            raise HealthConfigError("", f"not valid JSON ({detail})" if detail else "not valid JSON") from None
        if error["type"] in {"model_type", "model_attributes_type"}:
            raise HealthConfigError(
                key, "must be a JSON object" if key else "the document must be a JSON object"
            ) from None
        if error["type"] == "extra_forbidden":
            known = _KNOWN_TOP if "." not in key else _KNOWN_LEVEL
            raise HealthConfigError(key, f"unknown key (known: {', '.join(known)})") from None
        raise HealthConfigError(key, str(error["msg"]).lower()) from None


_KNOWN_LEVEL = tuple(Thresholds.model_fields)
_KNOWN_TOP = tuple(HealthPolicy.model_fields)


# -- figures -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One recorded job attempt, as health reads it (times are epoch seconds on the relay's clock)."""

    dispatch_id: str
    run_id: str
    run_attempt: int
    job_name: str  # "": the sweeper's record of a dispatch no job ever started on
    state: str  # in_progress, completed, timed_out
    conclusion: str | None
    pr: int | None
    dispatched_at: float
    started_at: float | None
    completed_at: float | None
    workflow_name: str = ""
    event_type: str = ""

    @property
    def timed_out(self) -> bool:
        return self.state == "timed_out" or self.conclusion == "timed_out"

    @property
    def queue_s(self) -> float | None:
        return self.started_at - self.dispatched_at if self.started_at is not None else None


@dataclass(frozen=True)
class Figures:
    jobs: int = 0
    passed: int = 0
    timed_out: int = 0
    avg_queue_s: float | None = None
    p50_end_to_end_s: float | None = None
    max_execution_s: float | None = None
    flaky_jobs: dict[str, int] = field(default_factory=dict)  # "<workflow>/<job>" -> flaky jobs of that name
    not_started: int = 0  # dispatches in the window GitHub started no run for (push and scheduled ones too)
    not_started_reason: str = ""  # the latest one's reason

    @property
    def flaky(self) -> int:
        return sum(self.flaky_jobs.values())

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.jobs if self.jobs else None

    @property
    def timeout_rate(self) -> float | None:
        return self.timed_out / self.jobs if self.jobs else None


def _finished_pr(sample: Sample) -> bool:
    return sample.state in FINISHED_STATES and sample.pr is not None and sample.pr > 0


def counted(samples: Iterable[Sample]) -> list[Sample]:
    """The jobs health counts: finished attempts of pull-request dispatches, the latest attempt of each job."""
    latest: dict[tuple[str, str, str], Sample] = {}
    for sample in samples:
        if not _finished_pr(sample):
            continue
        # GitHub's run ids are unique per repository, so the dispatch adds nothing for real runs; it keeps
        # the sweeper's nameless rows (run 0) apart, one per dispatch.
        key = (sample.dispatch_id, sample.run_id, sample.job_name)
        kept = latest.get(key)
        if kept is None or sample.run_attempt > kept.run_attempt:
            latest[key] = sample
    return list(latest.values())


def quantile_exact(values: list[float], q: float) -> float | None:
    """ClickHouse's quantileExact: the value at index floor(q * n) of the sorted values (for an even count,
    the median is the upper middle one)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(samples: Iterable[Sample]) -> dict[str, float | None]:
    """Queue and execution P50/P90 of the counted jobs (the repository page shows them beside the verdict)."""
    jobs = counted(samples)
    queues = [q for q in (s.queue_s for s in jobs) if q is not None]
    executions = [
        s.completed_at - s.started_at for s in jobs if s.started_at is not None and s.completed_at is not None
    ]
    return {
        "queue_p50_s": _round(quantile_exact(queues, 0.5), 1),
        "queue_p90_s": _round(quantile_exact(queues, 0.9), 1),
        "execution_p50_s": _round(quantile_exact(executions, 0.5), 1),
        "execution_p90_s": _round(quantile_exact(executions, 0.9), 1),
    }


def flaky_jobs(samples: Iterable[Sample]) -> dict[str, int]:
    """Flaky jobs per `<workflow>/<job>`: jobs (dispatch, run and job name) of the counted kind whose attempts
    include a failure followed by a later passing attempt."""
    attempts: dict[tuple[str, str, str], list[Sample]] = defaultdict(list)
    for sample in samples:
        if sample.job_name and _finished_pr(sample):
            attempts[(sample.dispatch_id, sample.run_id, sample.job_name)].append(sample)
    found: dict[str, int] = defaultdict(int)
    for job in attempts.values():
        failed_before = False
        for sample in sorted(job, key=lambda s: s.run_attempt):
            attempt = Attempt(sample.run_attempt, sample.state, sample.conclusion)
            if failed_before and attempt.passed:
                found[f"{sample.workflow_name}/{sample.job_name}"] += 1
                break
            failed_before = failed_before or attempt.failed
    return dict(sorted(found.items()))


def _not_started(latest: Sample) -> str:
    kind = latest.event_type or "?"
    return (
        f"the latest, a `{kind}` dispatch: no workflow on the default branch listens to it (`on: repository_dispatch: "
        f"types: [{kind}]`, or the allowlist's `workflow:` file with `on: workflow_dispatch`), or it is disabled or "
        "its file was removed"
    )


def measure(samples: Iterable[Sample]) -> Figures:
    samples = list(samples)
    jobs = counted(samples)
    never = sorted((s for s in samples if s.state == "not_started"), key=lambda s: s.dispatched_at)
    reason = _not_started(never[-1]) if never else ""
    if not jobs:
        return Figures(not_started=len(never), not_started_reason=reason)
    queues = [q for q in (s.queue_s for s in jobs) if q is not None]
    executions = [
        s.completed_at - s.started_at
        for s in jobs
        if s.started_at is not None and s.completed_at is not None and not s.timed_out
    ]
    runs: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for s in jobs:
        if s.job_name and s.started_at is not None and s.completed_at is not None:
            runs[(s.dispatch_id, s.run_id)].append(s)
    end_to_end = sorted(
        max(s.queue_s or 0.0 for s in run)
        + max(s.completed_at or 0.0 for s in run)
        - min(s.started_at or 0.0 for s in run)
        for run in runs.values()
    )
    return Figures(
        jobs=len(jobs),
        passed=sum(1 for s in jobs if s.conclusion == "success" and not s.timed_out),
        timed_out=sum(1 for s in jobs if s.timed_out),
        avg_queue_s=sum(queues) / len(queues) if queues else None,
        p50_end_to_end_s=end_to_end[len(end_to_end) // 2] if end_to_end else None,
        max_execution_s=max(executions) if executions else None,
        flaky_jobs=flaky_jobs(samples),
        not_started=len(never),
        not_started_reason=reason,
    )


# -- the verdict ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Criterion:
    key: str  # the figure and the threshold it is judged by
    label: str
    at_least: bool  # False: the figure must stay below the threshold
    demotion: bool  # failing it at L3/L4 demotes
    percent: bool  # a rate (else seconds)
    unmeasured: str  # why the figure can be missing while jobs were counted


CRITERIA = (
    Criterion("pass_rate", "pass rate", True, True, True, "no finished job"),
    Criterion("timeout_rate", "timeout rate", False, True, True, "no finished job"),
    Criterion(
        "p50_end_to_end_s", "P50 end-to-end", False, True, False, "no run reported in_progress (the relay's start)"
    ),
    Criterion("avg_queue_s", "average queue", False, False, False, "no job reported in_progress (the relay's start)"),
    Criterion(
        "max_execution_s", "max execution", False, False, False, "no job that did not time out reported in_progress"
    ),
)


@dataclass(frozen=True)
class Check:
    criterion: Criterion
    measured: float | None
    target: float

    @property
    def met(self) -> bool | None:
        """None: nothing to judge (it cannot promote, and it does not demote)."""
        if self.measured is None:
            return None
        return self.measured >= self.target if self.criterion.at_least else self.measured < self.target

    def reason(self) -> str:
        c = self.criterion
        target = _percent_target(self.target) if c.percent else _duration(self.target)
        if self.measured is None:
            return f"{c.label} not measured: {c.unmeasured}; {'≥' if c.at_least else '<'} {target} required"
        value = _percent(self.measured, self.target, c.at_least) if c.percent else _duration(self.measured)
        if self.met:
            return f"{c.label} {value} {'≥' if c.at_least else '<'} {target}"
        return f"{c.label} {value} < {target} required" if c.at_least else f"{c.label} {value} ≥ {target} limit"


class RepoHealth(BaseModel):
    """One line of `crcr health`: the ten fields, then the flaky figures (docs/contracts.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str
    level: str  # "L1".."L4"
    jobs: int
    pass_rate: float | None
    timeout_rate: float | None
    avg_queue_s: float | None
    p50_end_to_end_s: float | None
    max_execution_s: float | None
    verdict: Verdict
    reasons: tuple[str, ...]
    flaky: int = 0  # jobs that failed, then passed on a retry of the same commit
    flaky_jobs: dict[str, int] = Field(default_factory=dict)  # the same, per "<workflow>/<job>"
    # Whether a repeated dispatch is told from a new one (run-name, buildkite), may start a second run (none), or
    # has not been looked at (unknown); from the level check's daily look (docs/contracts.md).
    dispatch_dedupe: str = "unknown"
    not_started: int = 0  # dispatches GitHub started no run for, and the latest one's reason (a figure)
    not_started_reason: str = ""
    _unmet: int = PrivateAttr(default=0)

    @property
    def unmet(self) -> tuple[str, ...]:
        """The leading reasons that stand in the way (failing or unmeasured criteria, or why there is
        nothing to judge); empty when every criterion is met."""
        return self.reasons[: self._unmet]

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reasons: tuple[str, ...]  # unmet first
    unmet: int  # how many of the reasons are not met


def judge(level: Level, figures: Figures, thresholds: Thresholds, min_jobs: int, window_days: float) -> Judgement:
    """promote (every criterion met, below L4), keep, demote (a demotion criterion failed at L3/L4), or
    insufficient_data (L1, or fewer than `min_jobs` counted jobs); reasons list failing criteria first."""
    if level is Level.L1:
        return Judgement(Verdict.INSUFFICIENT_DATA, ("L1 records no results: nothing to judge",), 1)
    if figures.jobs < min_jobs:
        days = f"{window_days:g} day{'s' if window_days != 1 else ''}"
        return Judgement(
            Verdict.INSUFFICIENT_DATA, (f"{figures.jobs} finished jobs in {days} < {min_jobs} required",), 1
        )
    checks = [Check(c, _figure(figures, c.key), getattr(thresholds, c.key)) for c in CRITERIA]
    failed = [check for check in checks if check.met is False]
    unmeasured = [check for check in checks if check.met is None]
    met = [check for check in checks if check.met]
    reasons = tuple(check.reason() for check in (*failed, *unmeasured, *met))
    unmet = len(failed) + len(unmeasured)
    if not unmet:
        return Judgement(Verdict.PROMOTE if level < Level.L4 else Verdict.KEEP, reasons, 0)
    if level >= Level.L3 and any(check.criterion.demotion for check in failed):
        return Judgement(Verdict.DEMOTE, reasons, unmet)
    return Judgement(Verdict.KEEP, reasons, unmet)


def assess(
    repo: str, level: Level, samples: Iterable[Sample], thresholds: Thresholds, min_jobs: int, window_days: float
) -> RepoHealth:
    figures = measure(samples) if level >= Level.L2 else Figures()
    judgement = judge(level, figures, thresholds, min_jobs, window_days)
    health = RepoHealth(
        repo=repo,
        level=level.name,
        jobs=figures.jobs,
        pass_rate=_round(figures.pass_rate, 4),
        timeout_rate=_round(figures.timeout_rate, 4),
        avg_queue_s=_round(figures.avg_queue_s, 1),
        p50_end_to_end_s=_round(figures.p50_end_to_end_s, 1),
        max_execution_s=_round(figures.max_execution_s, 1),
        verdict=judgement.verdict,
        reasons=judgement.reasons,
        flaky=figures.flaky,
        flaky_jobs=figures.flaky_jobs,
        not_started=figures.not_started,
        not_started_reason=figures.not_started_reason,
    )
    health._unmet = judgement.unmet
    return health


def _figure(figures: Figures, key: str) -> float | None:
    value = getattr(figures, key)
    return float(value) if value is not None else None


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def _percent(value: float, target: float, at_least: bool) -> str:
    """One decimal, or more when one would print a failing value as if it met the target (0.995 vs 1 %)."""
    met = value >= target if at_least else value < target
    for digits in (1, 2, 3):
        shown = round(value * 100, digits)
        if (shown / 100 >= target if at_least else shown / 100 < target) == met:
            return f"{shown:.{digits}f}%"
    return f"{value * 100:.4f}%"


def _percent_target(target: float) -> str:
    return f"{round(target * 100, 4):g}%"


def _duration(seconds: float) -> str:
    """Whole seconds, rounded down (so a time shown under a target is under it): 3h, 29m 59s, 45s."""
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return " ".join(parts) or "0s"
