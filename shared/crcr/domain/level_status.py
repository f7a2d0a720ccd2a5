"""Level status: which downstreams should change level, judged as torchci's `l3Thresholds.ts` and level-status route
judge them (windows, criteria and formats in docs/decisions.md)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from crcr.domain.health import DAY_S, Sample, counted, quantile_exact
from crcr.domain.levels import Level

PROMOTION_WINDOW_DAYS = 14
DEMOTION_WINDOW_DAYS = 7
NOT_MEASURED = "\u2013"  # torchci's en dash for no data
OVERRUN_S = 3 * 3600  # a job running longer than this overruns (crcr_l3_summary's cutoff)


@dataclass(frozen=True)
class Threshold:
    key: str
    label: str
    target_label: str
    target: float
    at_least: bool  # False: the measured value must stay below the target
    demotion: bool  # failing it over the demotion window demotes an L3 repository
    format: str  # days, duration or percent


TENURE = Threshold("tenureAtL2Days", "Time at L2", "≥ 1 month", 30, True, False, "days")
E2E = Threshold("e2eTimeS", "End-to-End Time (P50)", "< 3 h", 3 * 3600, False, True, "duration")
AVG_QUEUE = Threshold("avgQueueTimeS", "Avg Queue Time", "< 30 min", 30 * 60, False, False, "duration")
TIMEOUT = Threshold("timeoutRate", "Timeout Rate", "< 1%", 0.01, False, True, "percent")
PASS = Threshold("passRate", "Job Pass Rate", "≥ 90%", 0.9, True, True, "percent")
OVERRUN = Threshold("overrunRate", "Overrun Rate", "< 1%", 0.01, False, False, "percent")
# The five summary metrics, in the order torchci lists them (max execution is a figure, judged by overrun).
METRICS = (E2E, OVERRUN, AVG_QUEUE, TIMEOUT, PASS)


@dataclass(frozen=True)
class Summary:
    """One repository's crcr_l3_summary row over a window."""

    successes: int
    timed_out: int
    total_jobs: int
    pass_rate: float
    avg_queue_time_s: float | None
    max_exec_time_s: float | None
    overrun_rate: float
    median_e2e_time_s: float | None
    timeout_rate: float
    queue_p95_s: float | None = None
    execution_p50_s: float | None = None
    execution_p95_s: float | None = None
    e2e_p95_s: float | None = None

    def measured(self, key: str) -> float | None:
        return {
            "e2eTimeS": self.median_e2e_time_s,
            "overrunRate": self.overrun_rate,
            "avgQueueTimeS": self.avg_queue_time_s,
            "timeoutRate": self.timeout_rate,
            "passRate": self.pass_rate,
            "maxExecTimeS": self.max_exec_time_s,
        }[key]


def summarize(samples: Iterable[Sample]) -> Summary | None:
    """The summary row of the samples' finished PR jobs; None when there is none (torchci: no row)."""
    jobs = counted(samples)
    if not jobs:
        return None
    total = len(jobs)
    timed_out = sum(1 for s in jobs if s.timed_out)
    successes = sum(1 for s in jobs if s.conclusion == "success" and not s.timed_out)
    queues = [q for q in (s.queue_s for s in jobs) if q is not None]
    ran = [s for s in jobs if not s.timed_out]
    executions = [s.completed_at - s.started_at for s in ran if s.started_at is not None and s.completed_at is not None]
    all_executions = [
        s.completed_at - s.started_at for s in jobs if s.started_at is not None and s.completed_at is not None
    ]
    runs: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for s in jobs:
        if s.job_name:
            runs[(s.dispatch_id, s.run_id)].append(s)
    e2e = []
    for run in runs.values():
        run_queues = [q for q in (s.queue_s for s in run) if q is not None]
        starts = [s.started_at for s in run if s.started_at is not None]
        ends = [s.completed_at for s in run if s.completed_at is not None]
        if run_queues and starts and ends:
            e2e.append(max(run_queues) + max(ends) - min(starts))
    overruns = sum(
        1
        for s in ran
        if s.started_at is not None and s.completed_at is not None and s.completed_at - s.started_at > OVERRUN_S
    )
    return Summary(
        successes=successes,
        timed_out=timed_out,
        total_jobs=total,
        pass_rate=successes / total,
        avg_queue_time_s=sum(queues) / len(queues) if queues else None,
        max_exec_time_s=max(executions) if executions else None,
        overrun_rate=overruns / len(ran) if ran else 0.0,
        median_e2e_time_s=quantile_exact(e2e, 0.5),
        timeout_rate=timed_out / total,
        queue_p95_s=quantile_exact(queues, 0.95),
        execution_p50_s=quantile_exact(all_executions, 0.5),
        execution_p95_s=quantile_exact(all_executions, 0.95),
        e2e_p95_s=quantile_exact(e2e, 0.95),
    )


# -- JavaScript's number formatting, as the HUD prints measured values ---------------------------------------


def to_fixed(value: float, digits: int) -> str:
    """`Number.prototype.toFixed`: the exact binary value rounded half away from zero."""
    quantum = Decimal(1).scaleb(-digits)
    return str(Decimal(value).quantize(quantum, rounding=ROUND_HALF_UP))


def js_round(value: float) -> float:
    """`Math.round`: half toward +infinity."""
    return float(Decimal(value + 0.5).to_integral_value(rounding="ROUND_FLOOR"))


def duration_display(seconds: float) -> str:
    """torchci's durationDisplay: the largest unit, one decimal (5400 -> 1.5h)."""
    if seconds < 60:
        return to_fixed(seconds, 1) + "s"
    minutes = seconds / 60.0
    if minutes < 60:
        return to_fixed(minutes, 1) + "m"
    hours = minutes / 60.0
    if hours < 24:
        return to_fixed(hours, 1) + "h"
    return to_fixed(hours / 24.0, 1) + "d"


def format_measured(threshold: Threshold, measured: float | None) -> str:
    if measured is None:
        return NOT_MEASURED
    if threshold.format == "days":
        return f"{to_fixed(measured, 0)} days"
    if threshold.format == "duration":
        return duration_display(js_round(measured))
    return f"{to_fixed(measured * 100, 1)}%"


# -- criteria ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    threshold: Threshold
    measured: float | None

    @property
    def met(self) -> bool | None:
        """True meets, False fails, None nothing to judge (evaluateL3Threshold)."""
        if self.measured is None or self.measured != self.measured:
            return None
        t = self.threshold
        return self.measured >= t.target if t.at_least else self.measured < t.target

    def as_json(self) -> dict[str, Any]:
        return {
            "criterion": self.threshold.label,
            "measured": format_measured(self.threshold, self.measured),
            "target": self.threshold.target_label,
            "met": self.met,
        }


def promotion_rows(summary: Summary | None, tenure_days: float | None) -> list[Row]:
    return [Row(TENURE, tenure_days), *(Row(t, summary.measured(t.key) if summary else None) for t in METRICS)]


def demotion_rows(summary: Summary | None) -> list[Row]:
    return [Row(t, summary.measured(t.key) if summary else None) for t in METRICS if t.demotion]


@dataclass(frozen=True)
class RepoStatus:
    repo: str
    level: Level
    change: str | None  # promote, demote or None
    no_data: bool
    window_days: int
    rows: tuple[Row, ...]
    summary: Summary | None
    tenure_days: float | None
    # Whether a repeated dispatch can be told from a new one: run-name, none, buildkite or unknown.
    dispatch_dedupe: str = "unknown"

    @property
    def failing(self) -> list[Row]:
        return [row for row in self.rows if row.met is False]

    def as_json(self) -> dict[str, Any]:
        s = self.summary
        figures: dict[str, Any] = {
            "jobs": s.total_jobs if s else 0,
            "successes": s.successes if s else 0,
            "timed_out": s.timed_out if s else 0,
            "max_exec_time_s": _r(s.max_exec_time_s) if s else None,
            "median_e2e_time_s": _r(s.median_e2e_time_s) if s else None,
            "e2e_p95_s": _r(s.e2e_p95_s) if s else None,
            "avg_queue_time_s": _r(s.avg_queue_time_s) if s else None,
            "queue_p95_s": _r(s.queue_p95_s) if s else None,
            "execution_p50_s": _r(s.execution_p50_s) if s else None,
            "execution_p95_s": _r(s.execution_p95_s) if s else None,
            "tenure_days": _r(self.tenure_days),
            "dispatch_dedupe": self.dispatch_dedupe,
        }
        return {
            "repo": self.repo,
            "level": self.level.name,
            "change": self.change,
            "noData": self.no_data,
            "windowDays": self.window_days,
            "criteria": [row.as_json() for row in self.rows],
            "figures": figures,
        }


def _r(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def status_of(
    repo: str, level: Level, samples: Iterable[Sample], now: float, tenure_days: float | None = None
) -> RepoStatus:
    """One L2-L4 repository: an L2 one judged for promotion over 14 days (with its time at L2), an L3 or L4 one
    for demotion over 7 days."""
    samples = list(samples)
    if level == Level.L2:
        since = now - PROMOTION_WINDOW_DAYS * DAY_S
        summary = summarize(s for s in samples if s.dispatched_at >= since)
        rows = promotion_rows(summary, tenure_days)
        ready = all(row.met for row in rows)
        return RepoStatus(
            repo, level, "promote" if ready else None, summary is None, PROMOTION_WINDOW_DAYS, tuple(rows), summary,
            tenure_days,
        )  # fmt: skip
    since = now - DEMOTION_WINDOW_DAYS * DAY_S
    summary = summarize(s for s in samples if s.dispatched_at >= since)
    rows = demotion_rows(summary)
    violating = summary is not None and any(row.met is False for row in rows)
    return RepoStatus(
        repo, level, "demote" if violating else None, summary is None, DEMOTION_WINDOW_DAYS, tuple(rows), summary,
        tenure_days,
    )  # fmt: skip


def window_s(level: Level) -> float:
    """How far back a repository's jobs are read for its status."""
    return (PROMOTION_WINDOW_DAYS if level == Level.L2 else DEMOTION_WINDOW_DAYS) * DAY_S


def document(statuses: Iterable[RepoStatus], generated_at: float) -> dict[str, Any]:
    """`GET /api/crcr/level-status`'s body, with when it was computed."""
    return {"repos": [status.as_json() for status in statuses], "generated_at": generated_at}


def tenure(l2_since: float | None, now: float) -> float | None:
    return (now - l2_since) / DAY_S if l2_since is not None and l2_since > 0 else None


def pr_title(repo: str) -> str:
    return f"[crcr] Demote {repo} from L3 to L2"


def pr_body(status: RepoStatus, oncalls: Iterable[str], allowlist_path: str, hud_url: str | None) -> str:
    """The demotion PR's description: the criteria it missed, its owners mentioned, what happens next."""
    rows = "\n".join(
        f"| {r.threshold.label} | {format_measured(r.threshold, r.measured)} | {r.threshold.target_label} |"
        for r in status.failing
    )
    where = f"[`{status.repo}`]({hud_url.rstrip('/')}/repo/{status.repo})" if hud_url else f"`{status.repo}`"
    names = [f"@{o.strip().removeprefix('@')}" for o in oncalls if o.strip()]
    cc = "cc " + " ".join(names) if names else "No oncalls are listed for this repository in the allowlist."
    return (
        f"Over the last {status.window_days} days, {where} missed these L3 targets:\n\n"
        "| Criterion | Measured | L3 target |\n| --- | --- | --- |\n"
        f"{rows}\n\n"
        f"This moves it from L3 to L2 in `{allowlist_path}`. L2 entries have no device, so it is dropped.\n\n"
        f"{cc}\n\n"
        "- While this PR is open, the relay creates no new upstream check runs for the repository (jobs already "
        "running finish); its PR events are still dispatched and its results still reach the HUD.\n"
        "- If it gets back within its L3 targets before this is merged, the relay closes this PR.\n"
        "- The relay never merges it: to demote the repository, merge it.\n\n"
        "---\nOpened by crcr's level check.\n"
    )


# Hysteresis against demotion PRs opened and closed as a repository's figures swing about a threshold: a PR is opened
# only on this many finished jobs in the window, and not within COOL_DOWN_S of the relay closing the last one.
DEMOTION_MIN_JOBS = 20
COOL_DOWN_S = 86_400.0


def plan_demotions(
    statuses: Mapping[str, RepoStatus],
    l3: Iterable[str],
    open_prs: Mapping[str, int],
    cooling: Iterable[str] = (),
    min_jobs: int = DEMOTION_MIN_JOBS,
) -> list[tuple[str, str, str]]:
    """(action, repo, reason): `open` for an L3 repository to demote without a PR, `update` for one with a PR
    (its body follows the figures), `close` for a PR whose repository recovered or is no longer at L3. A
    repository with no status (its figures could not be read) is left as it is; one with fewer than `min_jobs`
    finished jobs, or in `cooling` (its last PR closed by the relay within COOL_DOWN_S), gets no
    new PR: its status still says demote."""
    cool = {r.lower() for r in cooling}
    l3_keys = {r.lower(): r for r in l3}
    actions: list[tuple[str, str, str]] = []
    for repo in sorted(open_prs):
        status = statuses.get(repo.lower())
        if repo.lower() not in l3_keys:
            actions.append(("close", repo, "is no longer at L3 in the allowlist"))
        elif status is not None and status.change != "demote":
            actions.append(("close", repo, "is back within its L3 targets"))
    open_keys = {r.lower() for r in open_prs}
    for key, repo in sorted(l3_keys.items()):
        status = statuses.get(key)
        if status is None or status.change != "demote":
            continue
        if key in open_keys:
            actions.append(("update", repo, ""))
        elif key not in cool and status.summary is not None and status.summary.total_jobs >= min_jobs:
            actions.append(("open", repo, ""))
    return actions
