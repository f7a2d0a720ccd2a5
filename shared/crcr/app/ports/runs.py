"""GitHub's record of the runs the relay started (`workflow_run` events, the jobs listing) and the relay's record
of each bound run, shared by the runs worker and the sweeper."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from crcr.app.ports.ledger import LedgerRow
from crcr.domain.identity import Channel, Evidence, id_text


@dataclass(frozen=True)
class GitHubJob:
    """One job of a run attempt as GitHub lists it (`GET .../actions/runs/{id}/attempts/{n}/jobs`)."""

    id: int | str  # also the job's check run id (a Buildkite job's UUID, when the sweeper reads a build)
    name: str
    status: str  # queued, in_progress, completed, waiting...
    conclusion: str | None
    started_at: float | None
    completed_at: float | None
    url: str


@dataclass(frozen=True)
class GitHubRun:
    """A run as GitHub describes it now (`GET .../actions/runs/{id}`)."""

    run_id: str
    attempt: int
    status: str
    conclusion: str | None
    url: str
    workflow_name: str
    # Who ran it, as GitHub's answer says (for the inbound door): `repository` and `head_repository` (a fork's
    # differs), the workflow file as a job_workflow_ref (crcr.domain.identity.workflow_ref).
    repo: str = ""
    repository_id: int | None = None
    owner_id: int | None = None
    workflow: str | None = None
    head_repository_id: int | None = None

    def evidence(self) -> Evidence:
        return Evidence(
            Channel.RUN_READ,
            repository=self.repo,
            repository_id=id_text(self.repository_id),
            repository_owner_id=id_text(self.owner_id),
            workflow=self.workflow,
            head_repository_id=id_text(self.head_repository_id),
        )


class RunRecords(Protocol):
    """GitHub's Actions API for one downstream, with its own installation's token (never the upstream's)."""

    def installation_for(self, repo: str) -> int:
        """The installation the relay dispatches to and reads `repo` through (GitHub's answer, cached)."""
        ...

    def run(self, repo: str, run_id: str) -> GitHubRun | None:
        """None: GitHub has no such run (deleted, or never)."""
        ...

    def run_jobs(self, repo: str, run_id: str, attempt: int) -> list[GitHubJob]:
        """Every job of one attempt, all pages."""
        ...


class Search(Enum):
    FOUND = "found"
    NO_RUN = "no_run"  # GitHub created no run of that event since the dispatch
    UNTITLED = "untitled"  # runs exist, none titled with the dispatch id: the workflow writes no run-name


@dataclass(frozen=True)
class RunSearch:
    outcome: Search
    run_id: str | None = None


class RunFinder(Protocol):
    def search(self, repo: str, dispatch_id: str, since: float) -> RunSearch:
        """The run of `repo` created since `since` whose title carries the dispatch id (repository_dispatch or
        workflow_dispatch runs)."""
        ...


@dataclass(frozen=True)
class BoundRun:
    """The relay's record of a downstream run bound to a dispatch (`RUN#<repo>#<run id>`)."""

    repo: str
    run_id: str
    delivery_id: str
    dispatch_id: str
    attempt: int
    status: str  # requested, in_progress, completed (of `attempt`)
    conclusion: str | None = None
    workflow_name: str = ""
    url: str = ""
    progress: int = 0  # crcr.domain.runs.run_progress of the last event recorded
    reconciled: frozenset[int] = frozenset()  # attempts whose jobs were read and recorded


class RunStore(Protocol):
    def bound(self, repo: str, run_id: str) -> BoundRun | None: ...
    def record(self, run: BoundRun, now: float, watch_until: float | None) -> bool:
        """Record a run event when it moves the run forward (a later attempt or state); False: stale or repeated.
        `watch_until`: the sweeper asks GitHub about the run at that time unless it completed (None: no watch)."""
        ...

    def claim_reconcile(self, repo: str, run_id: str, attempt: int, owner: str, now: float, lease_s: float) -> bool:
        """Take the reading of an attempt's jobs: False when it is done already or another worker holds it."""
        ...

    def reconciled(self, repo: str, run_id: str, attempt: int, owner: str) -> None: ...
    def release(self, repo: str, run_id: str, owner: str) -> None: ...
    def due_runs(self, now: float, limit: int = 100) -> list[BoundRun]:
        """Bound runs not known to be completed at their watch time (a lost `completed` event)."""
        ...

    def watch(self, repo: str, run_id: str, until: float) -> None: ...


class DispatchLookup(Protocol):
    def by_dispatch(self, dispatch_id: str) -> LedgerRow | None:
        """The ledger row of a dispatch id (index by_dispatch, then the row itself)."""
        ...

    def clear_start_watch(self, delivery_id: str, repo: str) -> None: ...
    def note_run(self, delivery_id: str, repo: str, run_id: str) -> None: ...
