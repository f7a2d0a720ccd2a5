"""An upstream webhook as the planner reads it: its stored body checked, then one UpstreamEvent, a push's commits in
the branch's order with what a blamelist shows of each."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from crcr.app.ports.queues import BlobStore
from crcr.contracts.github import PullRequestEvent, PushCommit, PushEvent
from crcr.contracts.messages import EventMessage
from crcr.domain.errors import BadRequest
from crcr.domain.ids import repo_key
from crcr.domain.jsondoc import loads
from crcr.domain.planning import (
    MAX_RESOLVED_PRS,
    MERGED_LABEL,
    UpstreamEvent,
    ciflow_tag,
)
from crcr.domain.regressions import MAX_COMMIT_FILES, BranchCommit, landed_pr


def load_body(message: EventMessage, blobs: BlobStore) -> dict[str, Any]:
    raw = message.body.encode() if message.body is not None else blobs.get(message.body_ref or "")
    if hashlib.sha256(raw).hexdigest() != message.body_sha256:
        raise BadRequest(f"body of delivery {message.delivery_id} does not match its digest", field="body")
    doc = loads(raw)  # the rules ingest applied: a body stored before them, or replayed, meets them too
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object", field="body")
    return doc


def to_upstream_event(event: str, doc: dict[str, Any]) -> UpstreamEvent:
    try:
        if event == "pull_request":
            pr_event = PullRequestEvent.model_validate(doc)
            pr = pr_event.pull_request
            return UpstreamEvent(
                kind="pull_request",
                action=pr_event.action,
                repo=pr_event.repository.full_name,
                head_sha=pr.head.sha,
                pr_number=pr.number,
                ref=pr.head.ref,
                default_branch=pr_event.repository.default_branch,
                draft=pr.draft,
                author_association=pr.author_association,
                labels=tuple(label.name for label in pr.labels),
                added_label=pr_event.label.name if pr_event.label else None,
                base_sha=pr.base.sha,
                closed=pr.state == "closed",
                updated_at=pr.updated_at or "",
                changed_files=pr.changed_files,
                title=pr.title,
                author=pr.user.login if pr.user else None,
                at=epoch_of(pr.updated_at),
                merged=bool(pr.merged) or MERGED_LABEL in (label.name for label in pr.labels),
            )
        push = PushEvent.model_validate(doc)
    except ValidationError as exc:
        raise BadRequest(f"{event} payload is malformed: {exc.errors()[0]['msg']}", field="body") from exc
    tag = ciflow_tag(push.ref)
    head = push.head_commit if push.head_commit is not None and push.head_commit.id == push.after else None
    return UpstreamEvent(
        kind="push",
        action=None,
        repo=push.repository.full_name,
        head_sha=push.after,
        pr_number=tag[1] if tag else None,
        ciflow=tag[0] if tag else None,
        ref=push.ref,
        default_branch=push.repository.default_branch,
        deleted=push.deleted,
        commits=_branch_commits(push),
        pushed_files=_pushed_files(push),
        title=head.message if head else None,
        author=(head.author.username or head.author.name) if head and head.author else None,
        at=epoch_of(head.timestamp) if head else None,
        resolved_prs=_resolved(push),
    )


def _branch_commits(push: PushEvent) -> tuple[BranchCommit, ...]:
    """The pushed commits in the branch's order, each with its parent in the push (the first: the push's `before`) and
    what a blamelist shows of it: the PR it landed, its first line, its author, its files."""
    found: list[BranchCommit] = []
    parent = push.before if push.before and push.before.strip("0") else None
    for i, c in enumerate(push.commits):
        t = epoch_of(c.timestamp)
        if t is not None and i >= len(push.commits) - MAX_ORDERED_COMMITS:
            files = _files_of(c)
            found.append(
                BranchCommit(
                    c.id,
                    t,
                    place=i,
                    parent=parent,
                    pr=landed_pr(c.resolves, c.message, push.repository.full_name),
                    title=c.message,  # its first line (contracts' Title)
                    author=(c.author.username or c.author.name) if c.author else None,
                    files=tuple(sorted(files)) if files is not None and len(files) <= MAX_COMMIT_FILES else None,
                )
            )
        parent = c.id
    return tuple(found)


def _files_of(commit: PushCommit) -> set[str] | None:
    """The files a pushed commit added, modified or removed; None when the payload does not list them."""
    if commit.added is None or commit.modified is None or commit.removed is None:
        return None
    return {*commit.added, *commit.modified, *commit.removed}


def _resolved(push: PushEvent) -> tuple[int, ...]:
    """The upstream PRs a push to the default branch says it lands (the merge bot's trailer in its commits)."""
    if push.ref != f"refs/heads/{push.repository.default_branch}":
        return ()
    upstream = repo_key(push.repository.full_name)
    found = {c.resolves[1] for c in push.commits if c.resolves is not None and repo_key(c.resolves[0]) == upstream}
    return tuple(sorted(found))[:MAX_RESOLVED_PRS]


MAX_PUSH_COMMITS = 2048  # GitHub lists at most this many commits in a push's payload
MAX_COMPARED_FILES = 300  # GitHub's comparison of two commits names at most this many files


def _pushed_files(push: PushEvent) -> tuple[str, ...] | None:
    """Every file the push's commits added, modified or removed; None when the payload cannot tell them all."""
    if not push.commits or len(push.commits) >= MAX_PUSH_COMMITS:
        return None
    files: set[str] = set()
    for commit in push.commits:
        listed = _files_of(commit)
        if listed is None:
            return None
        files |= listed
    return tuple(sorted(files))


def pushed_by_payload(event: UpstreamEvent) -> tuple[str, ...] | None:
    """A branch push's files as its payload lists them (a ciflow tag's are its PR's: not known without a listing)."""
    return event.pushed_files if event.kind == "push" and event.ciflow is None else None


MAX_ORDERED_COMMITS = 250


def epoch_of(timestamp: str | None) -> float | None:
    try:
        return datetime.fromisoformat(timestamp).timestamp() if timestamp else None
    except ValueError:
        return None
