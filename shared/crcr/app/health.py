"""Health use case behind `crcr health` (and the HUD's repository page): each allowlisted repository's
figures over a window and its level verdict (rules in crcr.domain.health)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from crcr.app.ports import AllowlistProvider, Clock
from crcr.app.ports.jobs import JobRecord, JobsByRepo
from crcr.app.ports.levels import LevelHistory
from crcr.domain.allowlist import Entry
from crcr.domain.health import DAY_S, HealthPolicy, RepoHealth, Sample, assess, counted, spread
from crcr.domain.level_status import status_of
from crcr.domain.levels import Level


@dataclass(frozen=True)
class HealthDeps:
    allowlist: AllowlistProvider
    jobs: JobsByRepo
    clock: Clock
    policy: HealthPolicy
    history: LevelHistory | None = None  # which downstreams a repeated dispatch could run twice


def sample(job: JobRecord) -> Sample:
    return Sample(
        dispatch_id=job.dispatch_id,
        run_id=job.run_id,
        run_attempt=job.run_attempt,
        job_name=job.job_name,
        state=job.state,
        conclusion=job.conclusion,
        pr=job.pr,
        dispatched_at=job.dispatched_at,
        started_at=job.started_at,
        completed_at=job.completed_at,
        workflow_name=job.workflow_name,
        event_type=job.event_type or "",
    )


def health_report(deps: HealthDeps, window_days: int | None = None, min_jobs: int | None = None) -> list[RepoHealth]:
    """Every allowlisted repository, by level then name (as `crcr allowlist check` lists them)."""
    entries = sorted(deps.allowlist.current().entries, key=lambda e: (e.level, e.key))
    now = deps.clock.now()
    dedupe = deps.history.dedupe_states() if deps.history is not None else {}
    found = []
    for entry in entries:
        health = _assess(deps, entry, now, window_days, min_jobs)
        state = "buildkite" if entry.settings.buildkite is not None else dedupe.get(entry.key, ("unknown", 0.0))[0]
        found.append(health.model_copy(update={"dispatch_dedupe": state}))
    return found


def _assess(deps: HealthDeps, entry: Entry, now: float, window_days: int | None, min_jobs: int | None) -> RepoHealth:
    days = window_days or deps.policy.window_days
    # L1 records no results: there is nothing to read.
    jobs = deps.jobs.jobs_of_repo(entry.repo, now - days * DAY_S) if entry.level >= Level.L2 else []
    return assess(
        entry.repo,
        entry.level,
        (sample(job) for job in jobs),
        deps.policy.thresholds(entry.level),
        min_jobs or deps.policy.min_jobs,
        days,
    )


def page_health(jobs: JobsByRepo, policy: HealthPolicy, clock: Clock, repo: str, level: Level) -> dict[str, Any]:
    """The repository page's health: what `crcr health` says, judged at the level the repository's latest
    job was dispatched at (the reporter reads no allowlist), with the thresholds, the window and the
    queue and execution percentiles the page shows beside the verdict; PyTorch's level-status criteria and the
    daily trend, from the same records at the same moment, so the page's figures agree with each other."""
    now = clock.now()
    records = jobs.jobs_of_repo(repo, now - policy.window_days * DAY_S) if level >= Level.L2 else []
    samples = [sample(job) for job in records]
    thresholds = policy.thresholds(level)
    health = assess(repo, level, samples, thresholds, policy.min_jobs, policy.window_days)
    status = status_of(repo, level, samples, now).as_json() if level >= Level.L2 else None
    return (
        health.as_json()
        | spread(samples)
        | {"thresholds": thresholds.model_dump(), "window_days": policy.window_days, "min_jobs": policy.min_jobs}
        | {"level_status": status, "trend": trend(samples, now, policy.window_days)}
    )


def trend(samples: list[Sample], now: float, days: int) -> list[dict[str, Any]]:
    """Per UTC day of the window, oldest first: the jobs health counts (finished PR jobs, the latest attempt of
    each) dispatched that day, how many passed, and their average queue and run times."""
    first = int(now // DAY_S) - days + 1
    jobs = [0] * days
    passed = [0] * days
    queues: list[list[float]] = [[] for _ in range(days)]
    runs: list[list[float]] = [[] for _ in range(days)]
    for s in counted(samples):
        i = int(s.dispatched_at // DAY_S) - first
        if not 0 <= i < days:
            continue
        jobs[i] += 1
        passed[i] += 1 if s.conclusion == "success" and not s.timed_out else 0
        if s.queue_s is not None:
            queues[i].append(s.queue_s)
        if s.started_at is not None and s.completed_at is not None and not s.timed_out:
            runs[i].append(s.completed_at - s.started_at)
    return [
        {"day": _day(first + i), "jobs": jobs[i], "passed": passed[i], "queue_s": _mean(queues[i])}
        | {"run_s": _mean(runs[i])}
        for i in range(days)
    ]


def _day(day: int) -> str:
    return datetime.fromtimestamp(day * DAY_S, UTC).date().isoformat()


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None
