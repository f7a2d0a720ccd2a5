"""crcr's page documents (commits, the overview, PRs, repositories, nightlies), merged change by change by the
reporter, every write conditional on the version read."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from crcr.app.page_entries import cells, entry, latest_attempts
from crcr.app.ports import Clock, Metrics
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.pages import PageDocs
from crcr.domain.ids import repo_key
from crcr.domain.payload import encoded_size

SCHEMA = 1
INDEX_COMMITS = 60
TRUNK_COMMITS = 30  # the overview's trunk view: pushes and nightlies, kept apart from the PRs' flood
PR_COMMITS = 100
PR_LIVE_COMMITS = 30  # a PR page's newest commits whose cells are read from their documents (older: as listed)
REPO_HISTORY = 100
NIGHTLY_DAYS = 14
WRITE_TRIES = 8
# A commit's document is rewritten whole on every change of its jobs: past this, the failing tests' details (then the
# downstreams' triage words) of older attempts, then of every attempt, are left out of it; counts and states stay.
MAX_COMMIT_DOC_BYTES = 1_000_000
DETAILS = ("failed_tests", "triage")
REFUSAL_KEYS = 50  # refusals remembered by key, so a retried record is counted once


@dataclass(frozen=True)
class SummaryDeps:
    docs: PageDocs
    metrics: Metrics
    clock: Clock
    # Computes the repository's health section; None leaves it out (see the reporter's composition).
    health: Callable[[JobRecord], dict[str, Any] | None] | None = None
    health_refresh_s: float = 300.0


class SummaryConflict(Exception):
    """A document kept changing under us: the stream retries the record."""


def repo_doc_key(repo: str) -> str:
    return f"repo/{repo_key(repo)}.json"


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
    update_document(deps, "index.json", partial(with_index, summaries=summaries, now=now))
    update_prs(summaries, deps, now, new_only=True)  # the cells are read from the commits' documents
    for group in by_repo.values():
        update_document(deps, repo_doc_key(group[0].repo), partial(_with_health, jobs=group, now=now, deps=deps))
    nightly = [job for job in jobs if job.event_type == "nightly"]
    if nightly:
        update_document(deps, "nightly.json", partial(_with_nightly, jobs=nightly, now=now))


def update_prs(summaries: list[dict[str, Any]], deps: SummaryDeps, now: float, *, new_only: bool = False) -> None:
    by_pr: dict[int, list[dict[str, Any]]] = {}
    for summary in summaries:
        if summary["pr"] is not None:
            by_pr.setdefault(summary["pr"], []).append(summary)
    for pr, commits in by_pr.items():
        change = partial(_with_commits, summaries=commits, keep=PR_COMMITS, now=now, pr=pr, new_only=new_only)
        update_document(deps, f"pr/{pr}.json", change)


def first_seen(doc: dict[str, Any], moment: float | None) -> None:
    if moment is not None:
        doc["first_seen"] = min(doc.get("first_seen") or moment, moment)


def _update_commit(jobs: list[JobRecord], deps: SummaryDeps, now: float) -> dict[str, Any]:
    """Merge one commit's changes into its document; returns its overview summary (cells per repository)."""
    entries = [entry(job) for job in jobs]
    first = jobs[0]
    merged: dict[str, Any] = {}

    def commit(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        doc = doc if doc and doc.get("schema") == SCHEMA else commit_doc(first.upstream, first.head_sha, first.pr)
        for e in entries:
            first_seen(doc, e["dispatched_at"])
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
    newest = {e["key"] for e in latest_attempts(list(doc["jobs"].values()))}
    for older_only in (True, False):
        for key, e in doc["jobs"].items():
            if (older_only and key in newest) or not any(d in e for d in DETAILS):
                continue
            for d in DETAILS:
                e.pop(d, None)
            e["trimmed"] = True
        if encoded_size(doc) <= MAX_COMMIT_DOC_BYTES:
            return


def commit_doc(upstream: str, sha: str, pr: int | None) -> dict[str, Any]:
    return {"schema": SCHEMA, "upstream": upstream, "sha": sha, "pr": pr, "jobs": {}}


def newest_commits(commits: dict[str, dict[str, Any]], keep: int) -> list[dict[str, Any]]:
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
    doc["commits"] = newest_commits(by_sha, keep)
    if pr is not None:
        # The PR as people know it: its title, author and state, from its newest commit that says.
        for summary in sorted(fresh, key=lambda c: c.get("first_seen") or 0):
            doc |= {k: summary[k] for k in ("title", "author", "pr_state") if summary.get(k) is not None}
    doc["updated_at"] = now
    return doc


def with_index(
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
    doc["commits"] = newest_commits(by_sha, INDEX_COMMITS)
    doc["trunk"] = newest_commits(trunk, TRUNK_COMMITS)
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
