"""The dispatch ledger: one row per delivery and downstream repository, the identity of what was sent."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol


@dataclass(frozen=True)
class BuildRef:
    """A Buildkite build the relay created: its UUID, its number in the pipeline, and its page."""

    id: str
    number: int
    url: str
    pipeline: str = ""  # "<organization>/<pipeline>": where to ask about the build later


class LedgerState(Enum):
    SENDING = "sending"
    DISPATCHED = "dispatched"
    RETRYING = "retrying"
    FAILED = "failed"
    SUPERSEDED = "superseded"
    SKIPPED = "skipped"  # planned, not sent: the change touched no file the repository's path filters select


@dataclass(frozen=True)
class LedgerRow:
    delivery_id: str
    repo: str
    state: LedgerState
    dispatch_id: str
    lease_until: float = 0.0
    dispatched_at: float | None = None
    reason: str | None = None
    # Identity of the dispatch, read by callbacks: what was sent where (never taken from a callback body).
    repo_id: int | None = None
    upstream: str | None = None
    head_sha: str | None = None
    pr: int | None = None
    level: int | None = None
    device: str | None = None
    event_type: str | None = None  # the upstream event dispatched: pull_request or push
    ciflow: str | None = None  # a push of refs/tags/ciflow/<name>/<pr>: the name (the dispatch is the PR's CI)
    ci: str = "github"  # github or buildkite: where the dispatch runs
    # A Buildkite dispatch: the build the relay created (from Buildkite's 201), which alone may report on it.
    build_id: str | None = None  # the build's UUID (the callback's run_id)
    build_number: int | None = None  # the token's build_number claim
    build_url: str | None = None
    build_pipeline: str | None = None  # "<organization>/<pipeline>" (rows written since the sweeper asks Buildkite)
    # Attempts that took the claim and may have sent (a timeout, a dropped connection, a 5xx, a worker that
    # died): a Buildkite re-send first looks for a build they created, since Buildkite has no idempotency key.
    unsettled: frozenset[str] = frozenset()
    start_watched: bool = False  # the sweeper still waits for its first job (cleared by the first job's report)
    run_id: str | None = None  # a workflow_dispatch's run: from GitHub's answer, or bound by its first run event


@dataclass(frozen=True)
class LedgerClaim:
    """What a claim found: `taken`, or not, with the row that refused it (final, or another attempt's live
    claim) as it stood, read by the same conditional write. `row` on a taken claim only when asked for."""

    taken: bool
    row: LedgerRow | None = None

    def __bool__(self) -> bool:
        return self.taken


class LedgerReader(Protocol):
    def get(self, delivery_id: str, repo: str) -> LedgerRow | None: ...
