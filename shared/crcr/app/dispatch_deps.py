"""The dispatcher's ports, dependencies and outcomes."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from crcr.app.outbound import Outbound, Permit
from crcr.app.ports import Clock, Metrics
from crcr.app.ports.buildkite import (
    NewBuild,
)
from crcr.app.ports.github import (
    DispatchRuns,
    RepoToken,
)
from crcr.app.ports.ledger import BuildRef, LedgerClaim, LedgerRow, LedgerState
from crcr.app.ports.pacing import Pacer
from crcr.app.ports.pulls import PrInfos
from crcr.app.ports.queues import DispatchQueue
from crcr.app.ports.runs import BoundRun
from crcr.contracts.messages import DispatchMessage
from crcr.domain.retry import RetryPolicy
from crcr.domain.ticket import TicketClaims


class GitHub(Protocol):
    def installation_for(self, repo: str) -> int: ...
    def repo_token(self, installation_id: int, repo: str) -> RepoToken: ...
    def forget_token(self, repo: str) -> None: ...
    def dispatch(
        self, repo: str, token: RepoToken, event_type: str, client_payload: dict[str, Any], *, permit: Permit
    ) -> None: ...


class Workflows(Protocol):
    def dispatch_workflow(
        self, repo: str, file: str, ref: str, inputs: dict[str, str], *, permit: Permit
    ) -> str | None:
        """`workflow_dispatch` with `return_run_details`: the new run's id, None when GitHub gave none (204)."""
        ...


class Ledger(Protocol):
    def get(self, delivery_id: str, repo: str) -> LedgerRow | None: ...
    def claim(
        self,
        message: DispatchMessage,
        dispatch_id: str,
        now: float,
        lease_s: float,
        owner: str,
        repo_id: int,
        full_name: str,
        *,
        row: bool = False,
    ) -> LedgerClaim:
        """Take the send for one attempt: no row yet, or not final and no live claim by another attempt.
        Refused, the claim carries the row that refused it; taken with `row`, the row as claimed."""
        ...

    def mark_dispatched(
        self,
        message: DispatchMessage,
        claims: TicketClaims,
        now: float,
        build: BuildRef | None = None,
        run_id: str | None = None,
    ) -> None:
        """DISPATCHED, with the ticket's identity (and `ci`) and, for Buildkite, the build that was created; for a
        workflow_dispatch, the run GitHub said it started."""
        ...

    def mark(
        self,
        message: DispatchMessage,
        state: LedgerState,
        reason: str,
        now: float,
        owner: str = "",
        settled: bool = False,
    ) -> None:
        """Record a state that is not DISPATCHED; never undoes a sent dispatch or another attempt's live claim.

        A claim counts its attempt as unsettled (it may send); `settled` says this attempt's send is known
        not to have happened (refused, rate-limited, never connected), so it is no longer."""
        ...

    def clear_start_watch(self, delivery_id: str, repo: str) -> None: ...


class Builds(Protocol):
    """Buildkite's REST API, as far as dispatching goes: create a build, and find one by dispatch id."""

    def create(self, organization: str, pipeline: str, build: NewBuild, *, permit: Permit) -> BuildRef: ...

    def find(self, organization: str, pipeline: str, dispatch_id: str) -> list[BuildRef]:
        """Builds of the pipeline whose meta_data crcr_dispatch_id is this dispatch id, oldest first."""
        ...


class RunRecorder(Protocol):
    def record(self, run: BoundRun, now: float, watch_until: float | None) -> bool: ...


class TicketSigner(Protocol):
    def sign(self, claims: TicketClaims) -> str: ...


class Result(Enum):
    DISPATCHED = "dispatched"
    DUPLICATE = "duplicate"
    SUPERSEDED = "superseded"
    SKIPPED = "skipped"
    RESCHEDULED = "rescheduled"
    DEAD_LETTERED = "dead_lettered"
    WITHHELD = "withheld"  # a shadow downstream: kept as a shadow decision by the outbound door, never sent


@dataclass(frozen=True)
class DispatchOutcome:
    result: Result
    reason: str = ""
    delay_s: float = 0.0
    build: BuildRef | None = None  # a Buildkite dispatch: the build created (or found) and recorded


@dataclass(frozen=True)
class BuildkiteDeps:
    """What a Buildkite dispatch needs: the REST API (one token) and a pacer keyed by organization."""

    builds: Builds
    pacer: Pacer
    lease_s: float = 35.0  # covers a lookup and a create, each with its timeouts
    call_s: float = 10.0  # the longest one Buildkite call may take (connect + read timeouts)
    # After a send whose outcome is unknown, the next attempt waits at least this long before it looks for
    # the build: a request the relay gave up on may still be creating one.
    settle_s: float = 30.0


@dataclass(frozen=True)
class DispatchDeps:
    github: GitHub
    door: Outbound  # every dispatch, of every event type, is sent only with its permit (crcr.app.outbound)
    ledger: Ledger
    prs: PrInfos  # the PR's head: a dispatch of an older commit is superseded
    queue: DispatchQueue
    pacer: Pacer
    signer: TicketSigner
    metrics: Metrics
    clock: Clock
    callback_url: str
    ticket_ttl_s: int
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    rand: Callable[[], float] = field(default=random.random)
    lease_s: float = 30.0  # longer than one GitHub call with its timeouts; a crashed worker's claim lapses
    # The longest one GitHub call may take (connect + read timeouts): a send goes only while the claim has
    # this much left, so a claim taken before pacing still covers the POST whole.
    send_s: float = 13.05
    buildkite: BuildkiteDeps | None = None  # None: no Buildkite API token; Buildkite repositories dead-letter
    # After a send whose outcome is unknown, the next attempt first looks for the run it may have started (a
    # workflow whose run-name carries the dispatch id), once GitHub has had this long to create it.
    runs: DispatchRuns | None = None
    run_settle_s: float = 15.0
    # Downstreams whose allowlist entry names a workflow file: workflow_dispatch, and the run it started recorded.
    workflows: Workflows | None = None
    bound_runs: RunRecorder | None = None
    run_timeout_s: float = 43200.0
