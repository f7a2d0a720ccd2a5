"""The upstream PR's conversation and the relay's row for its one comment."""

from __future__ import annotations

from dataclasses import dataclass, field

from crcr.domain.comment import Posted


@dataclass(frozen=True)
class IssueComment:
    """One comment of an upstream PR's conversation, as GitHub lists it; `ours`: written by this App."""

    id: int
    body: str
    ours: bool


@dataclass(frozen=True)
class CommentRow:
    """The state table's row for one PR's comment: what was posted, and the render that is booked.

    A render is one message chain (its `ticket`) that owns the comment until it has written: requests for
    a render made while one is pending only move `due_at` (they are merged into it), so a burst of changes
    costs one write. `due_at` present means a change was asked for after the pending render last read."""

    posted: Posted = field(default_factory=Posted)
    searched: bool = False  # the PR's conversation was looked through for the marker (after a lost row)
    pending: str | None = None  # the ticket of the render booked for this PR
    pending_since: float | None = None
    due_at: float | None = None
    lock_until: float = 0.0
    version: int = 0  # 0: no row
