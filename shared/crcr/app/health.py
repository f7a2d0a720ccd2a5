"""Health use case behind `crcr health` (and the HUD's repository page): each allowlisted repository's
figures over a window and its level verdict (rules in crcr.domain.health)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crcr.app.ports import AllowlistProvider, Clock, JobRecord, JobsByRepo, LevelHistory
from crcr.domain.allowlist import Entry
from crcr.domain.health import DAY_S, HealthPolicy, RepoHealth, Sample, assess, spread
from crcr.domain.levels import Level


@dataclass(frozen=True)
class HealthDeps:
    allowlist: AllowlistProvider
    jobs: JobsByRepo
    clock: Clock
    policy: HealthPolicy
    history: LevelHistory | None = None  # which downstreams a repeated dispatch could run twice


class NotListed(LookupError):
    """The repository is not in the allowlist: it has no level to judge."""


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


def health_of(deps: HealthDeps, repo: str, window_days: int | None = None, min_jobs: int | None = None) -> RepoHealth:
    """One repository; raises NotListed when the allowlist does not name it."""
    entry = deps.allowlist.current().get(repo)
    if entry is None:
        raise NotListed(f"{repo} is not in the allowlist")
    return _assess(deps, entry, deps.clock.now(), window_days, min_jobs)


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
    queue and execution percentiles the page shows beside the verdict."""
    now = clock.now()
    records = jobs.jobs_of_repo(repo, now - policy.window_days * DAY_S) if level >= Level.L2 else []
    samples = [sample(job) for job in records]
    thresholds = policy.thresholds(level)
    health = assess(repo, level, samples, thresholds, policy.min_jobs, policy.window_days)
    return (
        health.as_json()
        | spread(samples)
        | {"thresholds": thresholds.model_dump(), "window_days": policy.window_days, "min_jobs": policy.min_jobs}
    )
