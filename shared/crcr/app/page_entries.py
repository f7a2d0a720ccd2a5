"""A job attempt as crcr's pages show it (an entry), and a downstream's cell of a commit."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from crcr.app.ports.jobs import JobRecord
from crcr.app.torchci import NO_JOB_NAME, reported
from crcr.domain import failed_tests
from crcr.domain.ids import repo_key, run_order
from crcr.domain.known import parse_known_refs

PAGE_TESTS = 10  # failing tests a page document keeps per job attempt (the count says how many more)
PAGE_TEST_MESSAGE = 300
# Worst first: what a repository's cell shows when its jobs disagree.
SEVERITY = (
    "failure", "timed_out", "not_started", "cancelled", "action_required", "running", "success", "neutral", "skipped"
)  # fmt: skip


def job_key(job: JobRecord) -> str:
    return f"{job.dispatch_id}/{job.run_id}/{job.run_attempt}/{job.job_name}"


def _shown_state(job: JobRecord) -> str:
    if job.state == "in_progress":
        return "running"
    if job.state in ("timed_out", "not_started"):
        return job.state
    return job.conclusion or "failure"


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def entry(job: JobRecord) -> dict[str, Any]:
    """One job attempt as the pages show it (the job's words are untrusted: the pages render them as text)."""
    tests = reported(job).get("test_results")
    return (
        {
            "key": job_key(job),
            "repo": job.repo,
            "level": job.level,
            "workflow": job.workflow_name,
            "job": job.job_name or NO_JOB_NAME,
            "run_id": job.run_id,
            "attempt": job.run_attempt,
            "state": _shown_state(job),
            "url": job.url,
            "delivery_id": job.delivery_id,
            "event_type": job.event_type,
            "head_sha": job.head_sha,
            "pr": job.pr,
            "dispatched_at": _round(job.dispatched_at),
            "started_at": _round(job.started_at),
            "completed_at": _round(job.completed_at),
            "queue_s": _round(job.started_at - job.dispatched_at) if job.started_at is not None else None,
            "run_s": _round(job.completed_at - job.started_at)
            if job.completed_at is not None and job.started_at is not None
            else None,
            "verdict": job.verdict,
            "tests": {k: tests[k] for k in ("passed", "failed", "skipped", "total") if k in tests}
            if isinstance(tests, dict)
            else None,
            "version": job.version,
        }
        | _failure(job)
        | _source(job)
    )


def _source(job: JobRecord) -> dict[str, Any]:
    """Where the state came from when not (only) the downstream's reports: GitHub's record of the run, a report that
    said otherwise, and why a dispatch never started."""
    out: dict[str, Any] = {}
    if job.source:
        out["source"] = job.source
    if job.reported_conclusion:
        out["reported_conclusion"] = job.reported_conclusion
    if job.reason:
        out["reason"] = job.reason
    return out


def _failure(job: JobRecord) -> dict[str, Any]:
    """A failed attempt's explanation as the pages show it: the commit its verdict compared, its failing tests (the
    first few, messages cut), the downstream's own word on the kind of failure and its triage verdict (advice), and a
    ciflow run's name."""
    out: dict[str, Any] = {}
    if job.verdict_baseline:
        out["verdict_baseline"] = job.verdict_baseline
    if refs := parse_known_refs(job.known_issues):
        out["known_issues"] = [url for url, _ in refs]
        if authors := {url: author for url, author in refs if author}:
            out["known_authors"] = authors  # the issue search's: a file names none
    if job.ciflow:
        out["ciflow"] = job.ciflow
    if job.failure_kind:
        out["failure_kind"] = job.failure_kind
    tests = failed_tests.parse(job.failed_tests)
    if tests:
        out["failed_tests"] = [
            {k: failed_tests.utf16_cut(v, PAGE_TEST_MESSAGE) if k == "message" else v for k, v in t.items()}
            for t in tests[:PAGE_TESTS]
        ]
        out["failed_tests_total"] = len(tests)
    if job.triage:
        try:
            triage = json.loads(job.triage)
        except ValueError:
            triage = None
        if isinstance(triage, dict):
            out["triage"] = {k: triage[k] for k in ("category", "confidence", "summary") if k in triage}
    return out


def latest_attempts(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (repository, delivery, workflow, job): its newest run attempt. A dispatch's no-job row counts
    only while no job of that dispatch has reported."""
    latest: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for e in entries:
        group = (repo_key(e["repo"]), e["delivery_id"], e["workflow"], e["job"])
        newer = (
            (run_order(str(e["run_id"])), e["attempt"])
            > (run_order(str(latest[group]["run_id"])), latest[group]["attempt"])
            if group in latest
            else True
        )
        if newer:
            latest[group] = e
    started = {(repo_key(e["repo"]), e["delivery_id"]) for e in latest.values() if e["job"] != NO_JOB_NAME}
    return [
        e for e in latest.values() if e["job"] != NO_JOB_NAME or (repo_key(e["repo"]), e["delivery_id"]) not in started
    ]


FAILED_STATES = ("failure", "timed_out", "not_started", "cancelled", "action_required")


def cells(
    entries: list[dict[str, Any]], planned: Mapping[str, Any] | None = None, superseded_by: str | None = None
) -> dict[str, dict[str, Any]]:
    """One cell per downstream repository: the worst state of its jobs' newest attempts, with counts and the
    verdicts of its failures. A repository no job has reported on yet shows what the planner decided: pending
    (dispatched, not started: since when), held, skipped or not targeted; pending on a commit its PR has moved
    on from is superseded."""
    by_repo: dict[str, list[dict[str, Any]]] = {}
    for e in latest_attempts(entries):
        by_repo.setdefault(e["repo"], []).append(e)
    out: dict[str, dict[str, Any]] = {}
    for repo, jobs in sorted(by_repo.items()):
        worst = min(jobs, key=lambda e: SEVERITY.index(e["state"]) if e["state"] in SEVERITY else 0)
        out[repo] = {
            "state": worst["state"],
            "level": max(e["level"] for e in jobs),
            "jobs": len(jobs),
            "passed": sum(1 for e in jobs if e["state"] in ("success", "neutral", "skipped")),
            "failed": sum(1 for e in jobs if e["state"] in FAILED_STATES),
            "running": sum(1 for e in jobs if e["state"] == "running"),
        }
        verdicts = sorted({e["verdict"] for e in jobs if e.get("verdict") and e["state"] in FAILED_STATES})
        if verdicts:
            out[repo]["verdicts"] = verdicts
    reported_repos = {repo_key(repo) for repo in out}
    for repo, plan in sorted((planned or {}).items()):
        if repo_key(repo) in reported_repos:
            continue
        state = plan["state"]
        if state == "pending" and superseded_by:
            state = "superseded"
        cell = {"state": state, "level": plan.get("level", 0), "jobs": 0, "passed": 0, "failed": 0, "running": 0}
        cell |= {k: plan[k] for k in ("reason", "since") if plan.get(k) is not None}
        out[repo] = cell
    return out


# What the repository page's history table reads of an entry (the rest is the commit page's).
HISTORY_FIELDS = frozenset(
    {"key", "version", "workflow", "job", "attempt", "state", "url", "head_sha", "pr", "dispatched_at", "verdict"}
    | {"queue_s", "run_s", "tests", "event_type", "ciflow", "completed_at", "failed_tests_total", "failure_kind"}
    | {"source", "reported_conclusion", "reason"}  # GitHub's record: what it overruled, why a dispatch never started
)
