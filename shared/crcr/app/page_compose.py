"""crcr's PR and repository pages, composed when read from their commits' documents and the results table."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from crcr.app.page_entries import HISTORY_FIELDS, entry
from crcr.app.ports.jobs import NewestJobs
from crcr.app.summaries import (
    PR_COMMITS,
    PR_LIVE_COMMITS,
    REPO_HISTORY,
    SCHEMA,
    newest_commits,
    repo_doc_key,
    summary_of,
)

# -- the pages composed when read -----------------------------------------------------------------------------


class PageDocs(Protocol):
    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]: ...


def pr_page(docs: PageDocs, pr: int) -> dict[str, Any] | None:
    """The PR page's document: the PR's commits as its stored document lists them, the newest PR_LIVE_COMMITS with
    their cells from their own documents (older ones as listed); None when the relay knows nothing of the PR."""
    doc, _ = docs.get(f"pr/{pr}.json")
    if not doc or doc.get("schema") != SCHEMA:
        return None
    listed = newest_commits({c.get("sha"): c for c in doc.get("commits", [])}, PR_COMMITS)
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
    doc["commits"] = newest_commits({c["sha"]: c for c in commits + listed[PR_LIVE_COMMITS:]}, PR_COMMITS)
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
