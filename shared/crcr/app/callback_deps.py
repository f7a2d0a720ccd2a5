"""The callback use case's ports and dependencies: what a report is checked against and recorded in."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.identity import TicketVerifier, TokenVerifier
from crcr.app.ports.jobs import ResultsStore, TorchciKeys
from crcr.app.ports.ledger import LedgerRow
from crcr.app.summaries import SummaryDeps
from crcr.domain.limits import MAX_JOBS_PER_DISPATCH
from crcr.domain.providers import Providers


class CallbackLedger(Protocol):
    """What a callback reads of the dispatch it reports on, and the start watch its first job ends."""

    def get(self, delivery_id: str, repo: str) -> LedgerRow | None: ...
    def clear_start_watch(self, delivery_id: str, repo: str) -> None: ...


class RateLimiter(Protocol):
    def hit(self, key: str, now: float) -> float:
        """0 when under the limit; otherwise seconds until the window frees up."""
        ...


class RefusalLog(Protocol):
    def count(self, repo: str, reason: str, now: float) -> int:
        """Count one refused report of `repo` for `reason`: how many this hour, this one included."""
        ...


class CommitMemory(Protocol):
    def commit_seen(self, upstream: str, sha: str, now: float, repo: str) -> bool | None:
        """What the relay knows of an upstream commit without asking GitHub: True when it saw it pushed to the default
        branch or GitHub found it before (for anyone), False when GitHub said it has no such commit when `repo`'s own
        report asked (remembered ten minutes), None when it never asked for `repo` or its answer is past its time."""
        ...

    def remember_commit(self, upstream: str, sha: str, found: bool, now: float, repo: str) -> None:
        """GitHub's answer to `repo`'s report: found is kept for everyone, not found for `repo` alone (a commit not
        pushed yet when one downstream asked may be there when another does)."""
        ...


class UpstreamCommits(Protocol):
    def exists(self, sha: str) -> bool: ...
    def repo_id(self, repo: str) -> int:
        """GitHub's numeric id of a repository the App is installed on."""
        ...


class ProvidersSource(Protocol):
    """PyTorch's ci_providers.yml: which Buildkite pipeline reports as which repository (last good version)."""

    def current(self) -> Providers: ...


MAX_CALLBACK_BYTES = 256 * 1024


class Reply(Enum):
    RECORDED = "recorded"
    DUPLICATE = "duplicate"
    IGNORED = "ignored"


@dataclass(frozen=True)
class CallbackDeps:
    tokens: TokenVerifier
    tickets: TicketVerifier
    ledger: CallbackLedger
    allowlist: AllowlistProvider
    results: ResultsStore
    torchci_keys: TorchciKeys
    limiter: RateLimiter
    metrics: Metrics
    clock: Clock
    upstream: str = ""
    commits: UpstreamCommits | None = None
    providers: ProvidersSource | None = None  # Buildkite pipelines -> repositories; None: Buildkite cannot report
    max_body_bytes: int = MAX_CALLBACK_BYTES
    max_jobs_per_dispatch: int = MAX_JOBS_PER_DISPATCH
    # Scheduled reports: commits the relay saw pushed or looked up (answers, found or not, remembered), and each
    # downstream's budget of GitHub lookups for the others (a lookup spends the upstream installation's requests).
    known_commits: CommitMemory | None = None
    lookups: RateLimiter | None = None
    # A downstream over a quota or limit is counted and named on its HUD repository page (`refused`).
    refusals: RefusalLog | None = None
    pages: SummaryDeps | None = None
