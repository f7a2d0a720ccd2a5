"""HUD summaries: the JSON documents behind the HUD pages, updated by the reporter for each recorded change.

Four kinds, each merged from the change (never rebuilt from a scan), so a record retried by the stream
or two reporters racing converge: an entry is replaced only by one of a higher version, and every write
is conditional on the version of the document that was read.

- `commit/<sha>.json`: every job attempt recorded on one upstream commit (the commit page);
- `pr/<n>.json`: the PR's commits with one cell per downstream repository (the PR page);
- `index.json`: the newest commits with their cells, and the repositories seen (the overview);
- `repo/<owner>/<name>.json`: the repository's newest job attempts, and its health (the repository page);
- `nightly.json`: each day's scheduled (nightly) runs per downstream repository (the nightly matrix).

A change is written to its commit's document and the overview only. The PR page and the repository page are composed
when read (`pr_page`, `repo_page`): the PR's stored document lists its commits (the planner's notes and a commit the
reporter sees first), their cells come from their commits' documents; the repository's stored document holds its
health and refused reports, its job attempts come from the results table. A change cost 1.7 document writes when
each batch rewrote every PR and repository document it touched (a PR's cells and a repository's history change with
every job); now it costs its commit's, and the overview's when a cell there changed.

The planner adds what it decided for each commit (`note_plan`): the commit's title, author and time, its PR's
state, and per downstream repository whether it was dispatched (and since when), held, skipped or not targeted,
so a dispatch no job has started on shows as pending, never as nothing. Reports the relay refused are counted on
the repository's page (`note_refusals`), so a downstream whose reports are refused stays on the grid.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from crcr.app.hud import NO_JOB_NAME, reported
from crcr.app.ports import Clock, Metrics
from crcr.app.ports.hud import HudDocs
from crcr.app.ports.jobs import JobRecord, NewestJobs
from crcr.domain import failed_tests
from crcr.domain.ids import repo_key, run_order
from crcr.domain.known import parse_known_refs
from crcr.domain.payload import encoded_size

SCHEMA = 1
INDEX_COMMITS = 60
TRUNK_COMMITS = 30  # the overview's trunk view: pushes and nightlies, kept apart from the PRs' flood
PR_COMMITS = 100
PR_LIVE_COMMITS = 30  # a PR page's newest commits whose cells are read from their documents (older: as listed)
REPO_HISTORY = 100
NIGHTLY_DAYS = 14
WRITE_TRIES = 8
PAGE_TESTS = 10  # failing tests a page document keeps per job attempt (the count says how many more)
PAGE_TEST_MESSAGE = 300
# A commit's document is rewritten whole on every change of its jobs: past this, the failing tests' details (then the
# downstreams' triage words) of older attempts, then of every attempt, are left out of it; counts and states stay.
MAX_COMMIT_DOC_BYTES = 1_000_000
DETAILS = ("failed_tests", "triage")
REFUSAL_KEYS = 50  # refusals remembered by key, so a retried record is counted once

# Worst first: what a repository's cell shows when its jobs disagree.
SEVERITY = (
    "failure", "timed_out", "not_started", "cancelled", "action_required", "running", "success", "neutral", "skipped"
)  # fmt: skip


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


FAILED_STATES = ("failure", "timed_out", "not_started", "cancelled", "action_required")


def cells(
    entries: list[dict[str, Any]], planned: Mapping[str, Any] | None = None, superseded_by: str | None = None
) -> dict[str, dict[str, Any]]:
    """One cell per downstream repository: the worst state of its jobs' newest attempts, with counts and the
    verdicts of its failures. A repository no job has reported on yet shows what the planner decided: pending
    (dispatched, not started: since when), held, skipped or not targeted; pending on a commit its PR has moved
    on from is superseded."""
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


Change = Callable[[dict[str, Any] | None], dict[str, Any] | None]


def update_document(deps: SummaryDeps, key: str, change: Change) -> None:
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
    update_document(deps, "index.json", partial(_with_index, summaries=summaries, now=now))
    _update_prs(summaries, deps, now, new_only=True)  # the cells are read from the commits' documents
    for group in by_repo.values():
        update_document(deps, repo_doc_key(group[0].repo), partial(_with_health, jobs=group, now=now, deps=deps))
    nightly = [job for job in jobs if job.event_type == "nightly"]
    if nightly:
        update_document(deps, "nightly.json", partial(_with_nightly, jobs=nightly, now=now))


def _update_prs(summaries: list[dict[str, Any]], deps: SummaryDeps, now: float, *, new_only: bool = False) -> None:
    by_pr: dict[int, list[dict[str, Any]]] = {}
    for summary in summaries:
        if summary["pr"] is not None:
            by_pr.setdefault(summary["pr"], []).append(summary)
    for pr, commits in by_pr.items():
        change = partial(_with_commits, summaries=commits, keep=PR_COMMITS, now=now, pr=pr, new_only=new_only)
        update_document(deps, f"pr/{pr}.json", change)


def _first_seen(doc: dict[str, Any], moment: float | None) -> None:
    if moment is not None:
        doc["first_seen"] = min(doc.get("first_seen") or moment, moment)


def _update_commit(jobs: list[JobRecord], deps: SummaryDeps, now: float) -> dict[str, Any]:
    """Merge one commit's changes into its document; returns its overview summary (cells per repository)."""
    entries = [entry(job) for job in jobs]
    first = jobs[0]
    merged: dict[str, Any] = {}

    def commit(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        doc = doc if doc and doc.get("schema") == SCHEMA else _commit_doc(first.upstream, first.head_sha, first.pr)
        for e in entries:
            _first_seen(doc, e["dispatched_at"])
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
        _fit_commit(doc)
        return doc

    update_document(deps, f"commit/{first.head_sha}.json", commit)
    return summary_of(merged)


META = ("title", "author", "at", "pr_state", "base_sha")


def summary_of(doc: dict[str, Any]) -> dict[str, Any]:
    """A commit as the overview and its PR's page list it: identity, title and author, and one cell per repository."""
    summary = {
        "sha": doc["sha"],
        "upstream": doc.get("upstream", ""),
        "pr": doc.get("pr"),
        "event_type": doc.get("event_type", ""),
        "first_seen": doc.get("first_seen"),
        "repos": cells(list(doc.get("jobs", {}).values()), doc.get("planned"), doc.get("superseded_by")),
    }
    meta = doc.get("meta") or {}
    summary |= {k: meta[k] for k in META if meta.get(k) is not None and k != "base_sha"}
    summary |= {k: doc[k] for k in ("ciflow", "superseded_by") if doc.get(k)}
    return summary


def _fit_commit(doc: dict[str, Any]) -> None:
    """Keep the document within MAX_COMMIT_DOC_BYTES (a flood of failing jobs made one 4.8 MB): details go first from
    attempts that are not their job's newest, then from all; an entry whose details went says so (`trimmed`)."""
    if encoded_size(doc) <= MAX_COMMIT_DOC_BYTES:
        return
    newest = {e["key"] for e in _latest_attempts(list(doc["jobs"].values()))}
    for older_only in (True, False):
        for key, e in doc["jobs"].items():
            if (older_only and key in newest) or not any(d in e for d in DETAILS):
                continue
            for d in DETAILS:
                e.pop(d, None)
            e["trimmed"] = True
        if encoded_size(doc) <= MAX_COMMIT_DOC_BYTES:
            return


def _commit_doc(upstream: str, sha: str, pr: int | None) -> dict[str, Any]:
    return {"schema": SCHEMA, "upstream": upstream, "sha": sha, "pr": pr, "jobs": {}}


def _newest(commits: dict[str, dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    return sorted(commits.values(), key=lambda c: c.get("first_seen") or 0, reverse=True)[:keep]


def _with_commits(
    doc: dict[str, Any] | None,
    summaries: list[dict[str, Any]],
    keep: int,
    now: float,
    *,
    pr: int | None = None,
    new_only: bool = False,
) -> dict[str, Any] | None:
    """`new_only`: add the commits the document does not list yet, leave the listed ones as they are."""
    if not doc or doc.get("schema") != SCHEMA:
        doc = {"schema": SCHEMA, "commits": []}
        if pr is not None:
            doc |= {"pr": pr, "upstream": summaries[0]["upstream"]}
    by_sha = {c.get("sha"): c for c in doc["commits"]}
    fresh = [s for s in summaries if s["sha"] not in by_sha if new_only or by_sha.get(s["sha"]) != s]
    if not fresh:
        return None  # no cell changed: no write
    by_sha |= {s["sha"]: s for s in fresh}
    doc["commits"] = _newest(by_sha, keep)
    if pr is not None:
        # The PR as people know it: its title, author and state, from its newest commit that says.
        for summary in sorted(fresh, key=lambda c: c.get("first_seen") or 0):
            doc |= {k: summary[k] for k in ("title", "author", "pr_state") if summary.get(k) is not None}
    doc["updated_at"] = now
    return doc


def _with_index(
    doc: dict[str, Any] | None,
    summaries: list[dict[str, Any]],
    now: float,
    flags: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """The overview: the newest commits of every kind, the newest trunk commits (pushes and nightlies, which a
    flood of PR commits would push out of the first list), and the repositories to show as columns."""
    if not doc or doc.get("schema") != SCHEMA:
        doc = {"schema": SCHEMA, "commits": []}
    by_sha = {c.get("sha"): c for c in doc["commits"]}
    trunk = {c.get("sha"): c for c in doc.get("trunk", [])}
    fresh = [s for s in summaries if by_sha.get(s["sha"]) != s]
    fresh_trunk = [s for s in summaries if s["pr"] is None and trunk.get(s["sha"]) != s]
    known = {r["repo"]: r for r in doc.get("repos", [])}
    flagged = {repo: dict(known.get(repo, {"repo": repo})) | dict(f) for repo, f in (flags or {}).items()}
    if not fresh and not fresh_trunk and all(known.get(repo) == r for repo, r in flagged.items()):
        return None  # no cell changed: no write
    by_sha |= {s["sha"]: s for s in fresh}
    trunk |= {s["sha"]: s for s in fresh_trunk}
    doc["commits"] = _newest(by_sha, INDEX_COMMITS)
    doc["trunk"] = _newest(trunk, TRUNK_COMMITS)
    levels: dict[str, int] = {}
    for c in doc["commits"] + doc["trunk"]:
        for repo, cell in c["repos"].items():
            levels[repo] = max(levels.get(repo, 0), cell["level"])
    repos: dict[str, dict[str, Any]] = {}
    for repo, entry_ in (known | flagged).items():
        extra = {k: v for k, v in entry_.items() if k not in ("repo", "level") and v}
        if extra or repo in levels:  # a repository stays while it has cells, refused reports or is nightly-only
            repos[repo] = {"repo": repo, "level": max(levels.get(repo, 0), entry_.get("level") or 0)} | extra
    for repo, level in levels.items():
        repos.setdefault(repo, {"repo": repo, "level": level})
    doc["repos"] = [repos[repo] for repo in sorted(repos, key=str.lower)]
    doc["updated_at"] = now
    return doc


def _with_health(
    doc: dict[str, Any] | None, jobs: list[JobRecord], now: float, deps: SummaryDeps
) -> dict[str, Any] | None:
    """The repository's stored document: its level and, past the refresh interval, its health (its job attempts are
    read from the results table when the page is)."""
    latest = max(jobs, key=lambda j: (j.dispatched_at or 0, j.run_attempt))
    fresh = not doc or doc.get("schema") != SCHEMA
    if fresh:
        doc = {"schema": SCHEMA, "repo": latest.repo, "health": None}
    assert doc is not None
    stale = deps.health is not None and (
        not doc.get("health") or now - float(doc["health"].get("computed_at") or 0) >= deps.health_refresh_s
    )
    moved = doc.get("level") != latest.level
    if not (fresh or stale or moved):
        return None
    doc["level"] = latest.level
    if stale and deps.health is not None:
        try:
            health = deps.health(latest)
        except Exception:  # the page keeps the health it shows; the next change past the refresh asks again
            # Health is the page's own reading of the results table: a slow or failed read never holds the batch's
            # pages, nor the HUD pushes after them (a batch failed for it would be retried and, in the end,
            # dead-lettered with its pushes).
            deps.metrics.count("HudHealthNotRefreshed")
            if not (fresh or moved):
                return None
        else:
            doc["health"] = (health or {}) | {"computed_at": now}
    doc["updated_at"] = now
    return doc


# -- the pages composed when read -----------------------------------------------------------------------------


class PageDocs(Protocol):
    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]: ...


def pr_page(docs: PageDocs, pr: int) -> dict[str, Any] | None:
    """The PR page's document: the PR's commits as its stored document lists them, the newest PR_LIVE_COMMITS with
    their cells from their own documents (older ones as listed); None when the relay knows nothing of the PR."""
    doc, _ = docs.get(f"pr/{pr}.json")
    if not doc or doc.get("schema") != SCHEMA:
        return None
    listed = _newest({c.get("sha"): c for c in doc.get("commits", [])}, PR_COMMITS)
    live = listed[:PR_LIVE_COMMITS]
    with ThreadPoolExecutor(max_workers=8) as pool:
        read = list(pool.map(lambda c: docs.get(f"commit/{c['sha']}.json")[0], live))
    stamp = float(doc.get("updated_at") or 0)
    commits = []
    for listed_one, commit in zip(live, read, strict=True):
        if commit and commit.get("schema") == SCHEMA:
            commits.append(summary_of(commit))
            stamp = max(stamp, float(commit.get("updated_at") or 0))
        else:
            commits.append(listed_one)
    doc["commits"] = _newest({c["sha"]: c for c in commits + listed[PR_LIVE_COMMITS:]}, PR_COMMITS)
    # The PR as people know it: its title, author and state, from its newest commit that says.
    for summary in sorted(doc["commits"], key=lambda c: c.get("first_seen") or 0):
        doc |= {k: summary[k] for k in ("title", "author", "pr_state") if summary.get(k) is not None}
    doc["updated_at"] = stamp
    doc["stamp"] = _stamp(doc)
    return doc


def composer(docs: PageDocs, jobs: NewestJobs | None) -> Callable[[str], dict[str, Any] | None]:
    """What answers `pr/<n>.json` and `repo/<owner>/<name>.json` for the pages (crcr.app.pages.serve)."""

    def compose(key: str) -> dict[str, Any] | None:
        name = key.removesuffix(".json")
        if name.startswith("pr/"):
            return pr_page(docs, int(name.removeprefix("pr/")))
        if name.startswith("repo/") and jobs is not None:
            return repo_page(docs, jobs, name.removeprefix("repo/"))
        doc, _ = docs.get(key)
        return doc

    return compose


def repo_page(docs: PageDocs, jobs: NewestJobs, repo: str) -> dict[str, Any] | None:
    """The repository page's document: its stored health, level and refused reports, and its REPO_HISTORY newest job
    attempts from the results table; None when neither has anything."""
    doc, _ = docs.get(repo_doc_key(repo))
    newest = jobs.newest_of_repo(repo, REPO_HISTORY)
    if not newest and not doc:
        return None
    if not doc or doc.get("schema") != SCHEMA:
        doc = {"schema": SCHEMA, "repo": newest[0].repo, "health": None}
    entries = [{k: v for k, v in entry(job).items() if k in HISTORY_FIELDS} for job in newest]
    doc["history"] = sorted(entries, key=lambda e: (e.get("dispatched_at") or 0, e["attempt"]), reverse=True)
    if newest:
        doc["level"] = newest[0].level
    moments = [t for job in newest for t in (job.dispatched_at, job.started_at, job.completed_at) if t is not None]
    doc["updated_at"] = max([float(doc.get("updated_at") or 0), *moments])
    doc["stamp"] = _stamp(doc)
    return doc


def _stamp(doc: dict[str, Any]) -> str:
    """What a composed page's script compares to redraw only on a change (a verdict changes no time)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def day_of(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).date().isoformat()


def _with_nightly(doc: dict[str, Any] | None, jobs: list[JobRecord], now: float) -> dict[str, Any] | None:
    """Each day's scheduled runs per repository and job (`<workflow>/<job>`): the newest attempt of the day."""
    if not doc or doc.get("schema") != SCHEMA:
        doc = {"schema": SCHEMA, "days": {}}
    changed = False
    for job in jobs:
        e = entry(job)
        new = {"state": e["state"], "sha": job.head_sha, "attempt": job.run_attempt, "version": job.version}
        new |= {"at": e["dispatched_at"], "url": job.url}
        slot = doc["days"].setdefault(day_of(job.dispatched_at), {}).setdefault(job.repo, {})
        name = f"{e['workflow'] or ''}/{e['job']}"
        old = slot.get(name)
        if old is None or (old["at"] or 0, old["attempt"], old["version"]) < (
            new["at"] or 0,
            new["attempt"],
            job.version,
        ):
            slot[name] = new
            changed = True
    if not changed:
        return None
    doc["days"] = {day: doc["days"][day] for day in sorted(doc["days"], reverse=True)[:NIGHTLY_DAYS]}
    doc["updated_at"] = now
    return doc


# -- what the planner decided, and refused reports -------------------------------------------------------------

# A later decision on the same commit replaces an earlier one of the same or a lower rank: a dispatch (pending)
# replaces a hold (its release), a skip, a not-targeted; nothing but a dispatch replaces a dispatch.
PLAN_RANK = {"pending": 3, "dispatched": 3, "held": 2, "skipped": 2, "not_targeted": 1}


@dataclass(frozen=True)
class PlanNote:
    """What the planner decided for one upstream event, as the pages show it."""

    upstream: str
    sha: str
    event_type: str  # pull_request or push
    pr: int | None = None
    ciflow: str | None = None  # a ciflow tag push: its name (the PR's CI on the PR's head)
    meta: Mapping[str, Any] = field(default_factory=dict)  # title, author, at, pr_state, base_sha
    planned: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # repo -> state, reason, level
    replaced: str | None = None  # the PR's previous head: its dispatches not started are superseded
    nightly_only: tuple[str, ...] = ()  # repositories taking part through scheduled runs only


def _merge_plan(doc: dict[str, Any], note: PlanNote, now: float) -> bool:
    changed = False
    meta = doc.setdefault("meta", {})
    for key, value in note.meta.items():
        if value is not None and meta.get(key) != value:
            meta[key] = value
            changed = True
    planned = doc.setdefault("planned", {})
    for repo, plan in note.planned.items():
        old = planned.get(repo)
        new = {k: v for k, v in plan.items() if v is not None}
        if new["state"] == "pending":
            new["since"] = now
        if old is None or (PLAN_RANK[new["state"]] >= PLAN_RANK.get(old["state"], 0) and old["state"] != "pending"):
            changed = changed or old != new
            planned[repo] = new
        elif new["state"] == "pending":  # dispatched again (a reopened PR, a release): pending from now
            planned[repo] = new
            changed = True
    if note.pr is not None and doc.get("pr") != note.pr:
        doc["pr"] = note.pr
        changed = True
    if note.ciflow and doc.get("ciflow") != note.ciflow:
        doc["ciflow"] = note.ciflow
        changed = True
    if note.replaced and doc.pop("superseded_by", None):  # its PR went back to it (A -> B -> A): the head again
        changed = True
    doc.setdefault("event_type", note.event_type)
    if changed:
        _first_seen(doc, now)
    return changed


def note_plan(note: PlanNote, deps: SummaryDeps) -> None:
    """Merge the planner's decisions for one event into its commit's document, the superseded head's, the
    overview and the PR's page."""
    now = round(deps.clock.now(), 3)
    summaries: list[dict[str, Any]] = []

    def commit(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        doc = doc if doc and doc.get("schema") == SCHEMA else _commit_doc(note.upstream, note.sha, note.pr)
        changed = _merge_plan(doc, note, now)
        summaries[:] = [summary_of(doc)]
        if not changed:
            return None
        doc["updated_at"] = now
        return doc

    update_document(deps, f"commit/{note.sha}.json", commit)
    if note.replaced and note.replaced != note.sha:
        old: list[dict[str, Any]] = []

        def superseded(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            if not doc or doc.get("schema") != SCHEMA or doc.get("superseded_by") == note.sha:
                return None
            doc["superseded_by"] = note.sha
            doc["updated_at"] = now
            old.append(summary_of(doc))
            return doc

        update_document(deps, f"commit/{note.replaced}.json", superseded)
        summaries += old[-1:]
    flags = {repo: {"nightly_only": True} for repo in note.nightly_only}
    update_document(deps, "index.json", partial(_with_index, summaries=summaries, now=now, flags=flags))
    _update_prs(summaries, deps, now)


MAX_REASONS = 20
OTHER_REASON = "other"


def note_refusals(
    repo: str, reasons: Mapping[str, int], deps: SummaryDeps, key: str | None = None, message: str | None = None
) -> None:
    """Count reports the relay refused for a downstream (a HUD push refused, a report over its quota) on its
    repository page, by reason, and keep the repository on the overview's grid. `key` names one refusal, so a
    retried record counts once (the newest REFUSAL_KEYS keys are remembered); `message`, what the relay answered,
    is kept with each reason counted."""
    now = round(deps.clock.now(), 3)
    total: list[int] = []

    def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        doc = doc if doc and doc.get("schema") == SCHEMA else {"schema": SCHEMA, "repo": repo, "history": []}
        refused = doc.get("refused") or {"total": 0, "reasons": {}, "keys": []}
        if key is not None and key in refused["keys"]:
            total.append(refused["total"])
            return None
        for reason, count in reasons.items():
            text = reason.strip()[:200] or OTHER_REASON
            if text not in refused["reasons"] and len(refused["reasons"]) >= MAX_REASONS:
                text = OTHER_REASON
            slot = refused["reasons"].setdefault(text, {"count": 0})
            slot["count"] += count
            slot["last_at"] = now
            if message:
                slot["message"] = message[:300]
            refused["total"] += count
        refused["last_at"] = now
        if key is not None:
            refused["keys"] = [*refused["keys"], key][-REFUSAL_KEYS:]
        doc["refused"] = refused
        doc["updated_at"] = now
        total.append(refused["total"])
        return doc

    update_document(deps, repo_doc_key(repo), change)
    if total:
        flags = {repo: {"refused": total[-1]}}
        update_document(deps, "index.json", partial(_with_index, summaries=[], now=now, flags=flags))
