"""HUD summaries: the JSON documents behind the HUD pages, updated by the reporter for each recorded change.

Four kinds, each merged from the change (never rebuilt from a scan), so a record retried by the stream
or two reporters racing converge: an entry is replaced only by one of a higher version, and every write
is conditional on the version of the document that was read.

- `commit/<sha>.json`: every job attempt recorded on one upstream commit (the commit page);
- `pr/<n>.json`: the PR's commits with one cell per downstream repository (the PR page);
- `index.json`: the newest commits with their cells, and the repositories seen (the overview);
- `repo/<owner>/<name>.json`: the repository's newest job attempts, and its health (the repository page).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from crcr.app.hud import NO_JOB_NAME, reported
from crcr.app.ports import Clock, HudDocs, JobRecord, Metrics
from crcr.domain.ids import repo_key, run_order

SCHEMA = 1
INDEX_COMMITS = 60
PR_COMMITS = 100
REPO_HISTORY = 100
WRITE_TRIES = 8

# Worst first: what a repository's cell shows when its jobs disagree.
SEVERITY = ("failure", "timed_out", "cancelled", "action_required", "running", "success", "neutral", "skipped")


@dataclass(frozen=True)
class SummaryDeps:
    docs: HudDocs
    metrics: Metrics
    clock: Clock
    # Computes the repository's health section; None leaves it out (see the reporter's composition).
    health: Callable[[JobRecord], dict[str, Any] | None] | None = None
    health_refresh_s: float = 300.0


class SummaryConflict(Exception):
    """A document kept changing under us: the stream retries the record."""


def job_key(job: JobRecord) -> str:
    return f"{job.dispatch_id}/{job.run_id}/{job.run_attempt}/{job.job_name}"


def repo_doc_key(repo: str) -> str:
    return f"repo/{repo_key(repo)}.json"


def _shown_state(job: JobRecord) -> str:
    if job.state == "in_progress":
        return "running"
    if job.state == "timed_out":
        return "timed_out"
    return job.conclusion or "failure"


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def entry(job: JobRecord) -> dict[str, Any]:
    """One job attempt as the pages show it (the job's words are untrusted: the pages render them as text)."""
    tests = reported(job).get("test_results")
    return {
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


def _latest_attempts(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def cells(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One cell per downstream repository: the worst state of its jobs' newest attempts, with counts."""
    by_repo: dict[str, list[dict[str, Any]]] = {}
    for e in _latest_attempts(entries):
        by_repo.setdefault(e["repo"], []).append(e)
    out: dict[str, dict[str, Any]] = {}
    for repo, jobs in sorted(by_repo.items()):
        worst = min(jobs, key=lambda e: SEVERITY.index(e["state"]) if e["state"] in SEVERITY else 0)
        out[repo] = {
            "state": worst["state"],
            "level": max(e["level"] for e in jobs),
            "jobs": len(jobs),
            "passed": sum(1 for e in jobs if e["state"] in ("success", "neutral", "skipped")),
            "failed": sum(1 for e in jobs if e["state"] in ("failure", "timed_out", "cancelled", "action_required")),
            "running": sum(1 for e in jobs if e["state"] == "running"),
        }
    return out


# What the repository page's history table reads of an entry (the rest is the commit page's).
HISTORY_FIELDS = frozenset(
    {"key", "version", "workflow", "job", "attempt", "state", "url", "head_sha", "pr", "dispatched_at", "verdict"}
    | {"queue_s", "run_s", "tests"}
)


def _merge_entry(entries: dict[str, Any], new: dict[str, Any]) -> bool:
    old = entries.get(new["key"])
    if old is not None:
        # A retried or overtaken record: what is there is as new or newer. At the same version only a
        # verdict (a new one, or `flaky` replacing the first) changes an entry.
        if old.get("version", 0) > new["version"]:
            return False
        if old.get("version", 0) == new["version"] and new.get("verdict") in (None, old.get("verdict")):
            return False
    entries[new["key"]] = new
    return True


def _update(deps: SummaryDeps, key: str, change: Callable[[dict[str, Any] | None], dict[str, Any] | None]) -> None:
    """Read, change, write if unchanged since read; `change` returns None when there is nothing to write."""
    for _ in range(WRITE_TRIES):
        doc, tag = deps.docs.get(key)
        new = change(doc)
        if new is None:
            return
        if deps.docs.put(key, new, tag):
            deps.metrics.count("HudSummaryWritten")
            return
        deps.metrics.count("HudSummaryConflict")
    raise SummaryConflict(f"{key} kept changing during {WRITE_TRIES} tries")


def update_summaries(jobs: Sequence[JobRecord], deps: SummaryDeps) -> None:
    """Merge a batch of changes: one read-modify-write per document touched, however many changes it gets."""
    now = round(deps.clock.now(), 3)
    by_commit: dict[str, list[JobRecord]] = {}
    by_repo: dict[str, list[JobRecord]] = {}
    for job in jobs:
        by_commit.setdefault(job.head_sha, []).append(job)
        by_repo.setdefault(repo_key(job.repo), []).append(job)
    summaries = [_update_commit(group, deps, now) for group in by_commit.values()]
    _update(deps, "index.json", lambda doc: _with_commits(doc, summaries, INDEX_COMMITS, now, with_repos=True))
    by_pr: dict[int, list[dict[str, Any]]] = {}
    for summary in summaries:
        if summary["pr"] is not None:
            by_pr.setdefault(summary["pr"], []).append(summary)
    for pr, commits in by_pr.items():
        _update(deps, f"pr/{pr}.json", partial(_with_commits, summaries=commits, keep=PR_COMMITS, now=now, pr=pr))
    for group in by_repo.values():
        _update(deps, repo_doc_key(group[0].repo), partial(_with_history, jobs=group, now=now, deps=deps))


def record_refusal(repo: str, reason: str, message: str, count: int, deps: SummaryDeps) -> None:
    """Name a downstream whose reports the relay refuses on its repository page: `refused` holds the reason, the
    relay's words, how many this hour (at least `count`) and when; the reporter's merges keep it."""
    now = round(deps.clock.now(), 3)

    def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        if not doc or doc.get("schema") != SCHEMA:
            doc = {"schema": SCHEMA, "repo": repo, "history": [], "health": None}
        refused = doc.get("refused")
        by_reason = dict(refused.get("by_reason") or {}) if isinstance(refused, dict) else {}
        by_reason[reason] = {"count_this_hour": count, "hour": int(now // 3600) * 3600, "last_at": now}
        doc["refused"] = {"reason": reason, "message": message[:500], "at": now, "by_reason": by_reason}
        doc["updated_at"] = now
        return doc

    _update(deps, repo_doc_key(repo), change)


def _update_commit(jobs: list[JobRecord], deps: SummaryDeps, now: float) -> dict[str, Any]:
    """Merge one commit's changes into its document; returns its overview summary (cells per repository)."""
    entries = [entry(job) for job in jobs]
    first = jobs[0]
    merged: dict[str, Any] = {}

    def commit(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        doc = doc if doc and doc.get("schema") == SCHEMA else _commit_doc(first)
        for e in entries:
            doc["first_seen"] = min(doc.get("first_seen") or e["dispatched_at"], e["dispatched_at"])
        pr = next((job.pr for job in jobs if job.pr is not None), None)
        if pr is not None:
            doc["pr"] = pr
        doc.setdefault("event_type", first.event_type)
        changed = [_merge_entry(doc["jobs"], e) for e in entries]  # every entry, no short-circuit
        merged.clear()
        merged.update(doc)
        if not any(changed):
            return None
        doc["updated_at"] = now
        return doc

    _update(deps, f"commit/{first.head_sha}.json", commit)
    return {
        "sha": first.head_sha,
        "upstream": first.upstream,
        "pr": merged.get("pr"),
        "event_type": merged.get("event_type", first.event_type),
        "first_seen": merged["first_seen"],
        "repos": cells(list(merged["jobs"].values())),
    }


def _commit_doc(job: JobRecord) -> dict[str, Any]:
    return {"schema": SCHEMA, "upstream": job.upstream, "sha": job.head_sha, "pr": job.pr, "jobs": {}}


def _with_commits(
    doc: dict[str, Any] | None,
    summaries: list[dict[str, Any]],
    keep: int,
    now: float,
    *,
    with_repos: bool = False,
    pr: int | None = None,
) -> dict[str, Any] | None:
    if not doc or doc.get("schema") != SCHEMA:
        doc = {"schema": SCHEMA, "commits": []}
        if pr is not None:
            doc |= {"pr": pr, "upstream": summaries[0]["upstream"]}
    by_sha = {c.get("sha"): c for c in doc["commits"]}
    fresh = [s for s in summaries if by_sha.get(s["sha"]) != s]
    if not fresh:
        return None  # no cell changed: no write
    by_sha |= {s["sha"]: s for s in fresh}
    doc["commits"] = sorted(by_sha.values(), key=lambda c: c.get("first_seen") or 0, reverse=True)[:keep]
    if with_repos:
        levels: dict[str, int] = {}
        for c in doc["commits"]:
            for repo, cell in c["repos"].items():
                levels[repo] = max(levels.get(repo, 0), cell["level"])
        doc["repos"] = [{"repo": repo, "level": levels[repo]} for repo in sorted(levels, key=str.lower)]
    doc["updated_at"] = now
    return doc


def _with_history(
    doc: dict[str, Any] | None, jobs: list[JobRecord], now: float, deps: SummaryDeps
) -> dict[str, Any] | None:
    latest = jobs[-1]
    if not doc or doc.get("schema") != SCHEMA:
        doc = {"schema": SCHEMA, "repo": latest.repo, "history": [], "health": None}
    entries = {e["key"]: e for e in doc["history"]}
    changed = [_merge_entry(entries, {k: v for k, v in entry(job).items() if k in HISTORY_FIELDS}) for job in jobs]
    stale = deps.health is not None and (
        not doc.get("health") or now - float(doc["health"].get("computed_at") or 0) >= deps.health_refresh_s
    )
    if not any(changed) and not stale:
        return None
    doc["history"] = sorted(entries.values(), key=lambda e: (e.get("dispatched_at") or 0, e["attempt"]), reverse=True)[
        :REPO_HISTORY
    ]
    doc["level"] = latest.level
    if stale and deps.health is not None:
        health = deps.health(latest)
        doc["health"] = (health or {}) | {"computed_at": now}
    doc["updated_at"] = now
    return doc
