"""Ports the use cases need; adapters implement them, tests pass recording fakes."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from crcr.contracts.messages import CheckSyncMessage, DispatchMessage, EventMessage
from crcr.domain.allowlist import Allowlist
from crcr.domain.checks import Known
from crcr.domain.comment import Posted
from crcr.domain.pacing import WindowLevel
from crcr.domain.providers import Providers
from crcr.domain.redelivery import Attempt
from crcr.domain.ticket import TicketClaims


class Clock(Protocol):
    def now(self) -> float: ...


class Metrics(Protocol):
    def count(self, name: str, value: int = 1, **dimensions: str) -> None: ...


class Claim(Enum):
    NEW = "new"
    QUEUED = "queued"  # seen before and handed to the queue: a redelivery
    PENDING = "pending"  # seen before but never reached the queue: send it again
    REPLAYED = "replayed"  # the same signed body was accepted under another delivery id: a replay
    REUSED = "reused"  # this delivery id was accepted with another body: this body claims nothing under it


class DeliveryStore(Protocol):
    def claim_delivery(self, delivery_id: str, event: str, now: float, body_sha256: str) -> Claim:
        """Claim the delivery id and the body's digest (GitHub's signature covers the body, not the id)."""
        ...

    def mark_queued(self, delivery_id: str, now: float) -> None: ...


@dataclass(frozen=True)
class DeliveryListing:
    """The App's webhook deliveries made since a time, newest first; `truncated`: the page cap was reached
    before that time, so older deliveries were not looked at."""

    attempts: list[Attempt]
    truncated: bool = False


class HookDeliveries(Protocol):
    """GitHub's record of the App's webhook deliveries, read and redelivered with the App's JWT."""

    def list_deliveries(self, since: float, max_pages: int) -> DeliveryListing:
        """GET /app/hook/deliveries, following `cursor` pages back to `since` (at most `max_pages` pages)."""
        ...

    def redeliver(self, delivery_id: int) -> None:
        """POST /app/hook/deliveries/{id}/attempts (202: GitHub will deliver the event again, same guid)."""
        ...

    def upstream_id(self) -> int | None:
        """The upstream repository's numeric id (its deliveries are the relay's), None when it cannot be read."""
        ...


class RedeliveryClaim(Enum):
    CLAIMED = "claimed"  # this run asks GitHub now
    ASKED = "asked"  # this attempt was asked for already (or refused): GitHub's redelivery is due or done
    BUSY = "busy"  # another run is asking right now
    EXHAUSTED = "exhausted"  # the event was asked for MAX_ASKS_PER_EVENT times: given up, first seen now
    ABANDONED = "abandoned"  # given up before


class RedeliveryStore(Protocol):
    """What the relay knows of a delivery (the webhook's `DLV#<guid>`/`META` row) and of the reconciler's asks
    (`DLV#<guid>`/`REDELIVERY`: conditional writes, so each failed attempt is asked for once)."""

    def delivery_state(self, guid: str) -> str | None:
        """The webhook's record of the event: `queued` (handed to the planner), `received` (the enqueue failed),
        None (never reached the relay)."""
        ...

    def claim_redelivery(
        self, guid: str, attempt_id: int, owner: str, now: float, lease_s: float, max_asks: int
    ) -> RedeliveryClaim: ...
    def finish_redelivery(self, guid: str, attempt_id: int, owner: str, status: str, now: float) -> None:
        """`requested` (GitHub's 202) or `refused` (a 4xx): this attempt is never asked for again."""
        ...

    def release_redelivery(self, guid: str, attempt_id: int, owner: str) -> None:
        """GitHub could not be asked now (5xx, timeout, rate limit, pacing): the next run asks again."""
        ...

    def reconcile_cursor(self) -> float | None:
        """Up to when the last run handled every delivery (None: no run yet)."""
        ...

    def save_reconcile_cursor(self, at: float) -> None: ...


class EventQueue(Protocol):
    def send_event(self, message: EventMessage) -> None: ...


class BlobStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...


class AllowlistProvider(Protocol):
    def current(self) -> Allowlist: ...


class DispatchQueue(Protocol):
    def send_dispatches(self, messages: list[DispatchMessage]) -> None: ...
    def reschedule(self, message: DispatchMessage, delay_s: float) -> None: ...
    def dead_letter(self, message: DispatchMessage, reason: str) -> None: ...


@dataclass(frozen=True)
class PrInfo:
    """What the relay knows of an upstream PR from its newest webhook."""

    head_sha: str
    base_sha: str = ""  # the commit it is based on: its jobs' baselines are at or before it
    labels: tuple[str, ...] = ()
    closed: bool = False


@dataclass(frozen=True)
class HeadRecord:
    """What storing a PR event's head did."""

    newest: bool  # the event was the newest the relay knows of the PR: its head is the PR's head now
    replaced: str | None = None  # the head it replaced, when that changed


class PlannerState(Protocol):
    def record_pr_head(
        self,
        upstream: str,
        pr: int,
        head_sha: str,
        updated_at: str,
        labels: tuple[str, ...] = (),
        base_sha: str = "",
        closed: bool = False,
    ) -> HeadRecord:
        """Store the head of the newest event (GitHub's updated_at): an older event, delivered late, stores
        nothing."""
        ...

    def record_commits(self, upstream: str, commits: list[tuple[str, float]]) -> None:
        """Commits pushed to the upstream's default branch with their order (the commit time)."""
        ...

    def mark_released(self, upstream: str, pr: int, head_sha: str, repo: str, delivery_id: str, now: float) -> bool:
        """True for the first release of this head to this repository, and for retries of that same delivery."""
        ...

    def pr_info(self, upstream: str, pr: int) -> PrInfo | None: ...


class BranchOrder(Protocol):
    def commit_times(self, upstream: str, shas: list[str]) -> dict[str, float]:
        """The order of each commit the relay saw pushed to the default branch (absent: never seen)."""
        ...

    def pr_info(self, upstream: str, pr: int) -> PrInfo | None: ...


@dataclass(frozen=True)
class BuildRef:
    """A Buildkite build the relay created: its UUID, its number in the pipeline, and its page."""

    id: str
    number: int
    url: str


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
    # Attempts that took the claim and may have sent (a timeout, a dropped connection, a 5xx, a worker that
    # died): a Buildkite re-send first looks for a build they created, since Buildkite has no idempotency key.
    unsettled: frozenset[str] = frozenset()
    start_watched: bool = False  # the sweeper still waits for its first job (cleared by the first job's report)


@dataclass(frozen=True)
class LedgerClaim:
    """What a claim found: `taken`, or not, with the row that refused it (final, or another attempt's live
    claim) as it stood, read by the same conditional write. `row` on a taken claim only when asked for."""

    taken: bool
    row: LedgerRow | None = None

    def __bool__(self) -> bool:
        return self.taken


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
        self, message: DispatchMessage, claims: TicketClaims, now: float, build: BuildRef | None = None
    ) -> None:
        """DISPATCHED, with the ticket's identity (and `ci`) and, for Buildkite, the build that was created."""
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

    def pr_head(self, upstream: str, pr: int) -> str | None: ...
    def clear_start_watch(self, delivery_id: str, repo: str) -> None: ...


class Pacer(Protocol):
    def acquire(self, key: int | str, now: float, reserve: bool = False) -> float:
        """0 when a call budgeted under `key` (a GitHub installation id, a Buildkite organization) may go now;
        otherwise seconds to wait. With `reserve`, a wait up to RESERVE_HORIZON_S (15 minutes, one SQS delay)
        books that slot: the caller then makes its call at that time without asking again. A longer wait books
        nothing: ask again then."""
        ...


class BudgetGauge(Protocol):
    def level(self, key: int | str, now: float) -> WindowLevel:
        """Read-only: how full the longest window of `key`'s budget is (GitHub's hour for an installation),
        without taking a slot. The pacer answers it from what it saw at its own last booking when that is recent."""
        ...


@dataclass(frozen=True)
class RepoToken:
    token: str
    repo_id: int
    full_name: str
    expires_at: float


class GitHubError(Exception):
    """Base of errors the GitHub adapter raises; each tells the use case how to react."""


class GitHubUnavailable(GitHubError):
    """5xx, timeout or connection failure: retry with backoff."""


class GitHubRateLimited(GitHubError):
    def __init__(self, wait_s: float, message: str) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class GitHubRejected(GitHubError):
    """A 4xx that retrying will not fix."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class NotInstalled(GitHubError):
    """The App is not installed on the repository."""


class GitHub(Protocol):
    def installation_for(self, repo: str) -> int: ...
    def repo_token(self, installation_id: int, repo: str) -> RepoToken: ...
    def forget_token(self, repo: str) -> None: ...
    def dispatch(self, repo: str, token: RepoToken, event_type: str, client_payload: dict[str, Any]) -> None: ...


class DispatchRuns(Protocol):
    def find(self, repo: str, dispatch_id: str, since: float) -> str | None:
        """The id of a `repository_dispatch` run of `repo` created since then whose title (its `run-name`) carries
        the dispatch id, or None."""
        ...

    def title(self, repo: str, run_id: str) -> str:
        """A run's title (its resolved `run-name`)."""
        ...


class RepoLookup(Protocol):
    """What the App can learn about a repository: its installation, and (through a token down-scoped to it)
    its numeric id and name as GitHub spells them."""

    def installation_for(self, repo: str) -> int: ...
    def repo_token(self, installation_id: int, repo: str, permissions: dict[str, str] | None = None) -> RepoToken: ...


# Buildkite meta_data keys of a relay-created build; the dispatch id finds the build again
# (GET .../builds?meta_data[crcr_dispatch_id]=<id>).
DISPATCH_META_KEY = "crcr_dispatch_id"
DELIVERY_META_KEY = "crcr_delivery_id"


@dataclass(frozen=True)
class NewBuild:
    """What a Buildkite dispatch asks for: the downstream's branch at HEAD, with the relay's word in env."""

    branch: str
    message: str
    env: dict[str, str]  # CRCR_TICKET, CRCR_CALLBACK_URL, ... (the build's only input from the relay)
    meta_data: dict[str, str]  # crcr_dispatch_id, crcr_delivery_id: what finds the build again
    commit: str = "HEAD"


class BuildkiteError(Exception):
    """Base of errors the Buildkite adapter raises; each tells the use case how to react."""


class BuildkiteUnavailable(BuildkiteError):
    """5xx, timeout or connection failure: retry with backoff. `maybe_sent`: the request may have reached
    Buildkite (so a build may exist); False only when it certainly never left (no connection)."""

    def __init__(self, message: str, maybe_sent: bool = True) -> None:
        super().__init__(message)
        self.maybe_sent = maybe_sent


class BuildkiteRateLimited(BuildkiteError):
    """429: nothing was done; wait `wait_s` (Buildkite's reset) and spend no attempt."""

    def __init__(self, wait_s: float, message: str) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class BuildkiteRejected(BuildkiteError):
    """401/403/404/422 and other 4xx: Buildkite refused, with its `message`; retrying will not fix it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Builds(Protocol):
    """Buildkite's REST API, as far as dispatching goes: create a build, and find one by dispatch id."""

    def create(self, organization: str, pipeline: str, build: NewBuild) -> BuildRef: ...

    def find(self, organization: str, pipeline: str, dispatch_id: str) -> list[BuildRef]:
        """Builds of the pipeline whose meta_data crcr_dispatch_id is this dispatch id, oldest first."""
        ...


class TicketSigner(Protocol):
    def sign(self, claims: TicketClaims) -> str: ...


@dataclass(frozen=True)
class VerifiedToken:
    """An OIDC token whose signature, issuer, audience and times were verified."""

    ci: str  # which issuer signed it, which decides the identity rules: "github" or "buildkite"
    claims: dict[str, Any]


class TokenVerifier(Protocol):
    def verify(self, token: str) -> VerifiedToken: ...


class ProvidersSource(Protocol):
    """PyTorch's ci_providers.yml: which Buildkite pipeline reports as which repository (last good version)."""

    def current(self) -> Providers: ...


class TicketVerifier(Protocol):
    def verify(self, token: str, now: float) -> TicketClaims: ...


@dataclass(frozen=True)
class JobRecord:
    """One job's recorded state; identity fields come from the dispatch ledger."""

    dispatch_id: str
    run_id: str  # GitHub's run id (digits) or a Buildkite build UUID; see crcr.domain.ids
    run_attempt: int
    job_name: str
    workflow_name: str
    state: str
    conclusion: str | None
    fingerprint: str
    url: str
    repo: str
    repo_id: int
    level: int
    delivery_id: str
    upstream: str
    head_sha: str
    pr: int | None
    device: str | None
    dispatched_at: float
    started_at: float | None
    completed_at: float | None
    callback_payload: str  # the body as the downstream sent it (untrusted), JSON text
    version: int = 0
    event_type: str = ""  # pull_request, push, or nightly (a scheduled run); from the ledger
    # Unique per job attempt (PyTorch's HUD keys its rows with it): the downstream's job.check_run_id
    # when it sent one, else derived from the attempt; the first one recorded stays.
    check_run_id: str = ""
    reported_started_at: str = ""  # the downstream's start time, once any report of the attempt gave it
    failure_kind: str | None = None  # infra, build or test: the downstream's word on a completed failure
    triage: str = ""  # the downstream's triage verdict, validated and capped (JSON), advice only
    verdict: str | None = None  # new, pre-existing, infra, flaky, no baseline (crcr.domain.verdicts)
    verdict_baseline: str | None = None  # the upstream commit whose result a new or pre-existing verdict compared
    ciflow: str | None = None  # dispatched for a ciflow/<name>/<pr> tag push (from the ledger)
    failed_tests: str = ""  # failed_tests_detail as PyTorch's HUD keeps it (JSON, crcr.domain.failed_tests)

    @classmethod
    def of_dispatch(cls, row: LedgerRow, now: float, **job: Any) -> JobRecord:
        """A job of this dispatch: its identity is what was sent (the ledger row), never a callback's word."""
        return cls(
            dispatch_id=row.dispatch_id,
            repo=row.repo,
            repo_id=row.repo_id or 0,
            level=row.level or 0,
            delivery_id=row.delivery_id,
            upstream=row.upstream or "",
            head_sha=row.head_sha or "",
            pr=row.pr,
            device=row.device,
            dispatched_at=row.dispatched_at or now,
            event_type=row.event_type or "",
            ciflow=row.ciflow,
            **job,
        )


class ResultsStore(Protocol):
    def get_job(self, dispatch_id: str, run_id: str, run_attempt: int, job_name: str) -> JobRecord | None: ...
    def jobs_of_dispatch(self, dispatch_id: str) -> list[JobRecord]: ...
    def put_job(self, record: JobRecord, expected_version: int | None) -> bool:
        """Conditional write: False when someone else wrote the job first (read and decide again)."""
        ...


class JobAttempts(Protocol):
    def attempts_of_job(self, dispatch_id: str, run_id: str, job_name: str) -> list[JobRecord]:
        """Every recorded attempt of one job of one run (at most MAX_RUN_ATTEMPT), read by key (never the dispatch's
        other jobs), without `callback_payload` and `fingerprint` (both ""): read them, never write them back."""
        ...


class JobLimitReached(Exception):
    """The dispatch has as many jobs as it may hold: a new one is not taken."""


class HudKeys(Protocol):
    def claim(self, dispatch_id: str, hud_key: str | None, owner: str, now: float, max_jobs: int) -> str | None:
        """Take one HUD row's key among a dispatch's jobs for `owner` (the job's run and attempt; the key names the
        job), counting it among the dispatch's jobs: None when the key is the owner's (taken now, or by an earlier
        report of the same job, counted once), else the owner that holds it. With no key (a job whose row its own
        run and attempt name) it only counts. Raises JobLimitReached when the dispatch holds `max_jobs` jobs
        already (and takes nothing)."""
        ...


class VerdictStore(Protocol):
    def set_verdict(self, record: JobRecord, verdict: str, baseline_sha: str | None = None) -> bool:
        """Put a verdict (and the commit of the baseline it compared, if any) on the job's row if it is still at the
        record's version; False when it has moved on."""
        ...


class RateLimiter(Protocol):
    def hit(self, key: str, now: float) -> float:
        """0 when under the limit; otherwise seconds until the window frees up."""
        ...


class HudUnavailable(Exception):
    """5xx, 429, timeout: worth retrying."""


class HudRejected(Exception):
    """A 4xx: the HUD will not take this push however often it is sent."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Hud(Protocol):
    def push(self, envelope: dict[str, Any]) -> None: ...


class DeadLetters(Protocol):
    def send(self, body: dict[str, Any], reason: str) -> None: ...


class CommitMemory(Protocol):
    def commit_seen(self, upstream: str, sha: str) -> bool | None:
        """What the relay knows of an upstream commit without asking GitHub: True when it saw it pushed to the default
        branch or GitHub found it before, False when GitHub said it has no such commit (remembered a while), None
        when it never asked."""
        ...

    def remember_commit(self, upstream: str, sha: str, found: bool, now: float) -> None: ...


class RefusalLog(Protocol):
    def count(self, repo: str, reason: str, now: float) -> int:
        """Count one refused report of `repo` for `reason`: how many this hour, this one included."""
        ...


class UpstreamCommits(Protocol):
    def exists(self, sha: str) -> bool: ...
    def repo_id(self, repo: str) -> int:
        """GitHub's numeric id of a repository the App is installed on."""
        ...


class CheckRunApi(Protocol):
    def installation_for(self, upstream: str) -> int:
        """The installation whose budget the writes spend (paced per installation, like dispatches)."""
        ...

    def create_check_run(self, upstream: str, fields: dict[str, Any]) -> int: ...
    def update_check_run(self, upstream: str, check_run_id: int, fields: dict[str, Any]) -> None: ...


class CheckRunStore(Protocol):
    def get_check(self, upstream: str, head_sha: str, name: str) -> tuple[Known | None, int]:
        """What was last written to this check run, and the row's version (0: no row)."""
        ...

    def lock_check(
        self, upstream: str, head_sha: str, name: str, version: int, now: float, lease_s: float
    ) -> int | None:
        """Take the check run for one write, if it is still at `version` and no live lock holds it;
        returns the locked version, or None."""
        ...

    def unlock_check(self, upstream: str, head_sha: str, name: str, locked: int) -> None: ...

    def save_check(self, upstream: str, head_sha: str, name: str, known: Known, locked: int) -> bool:
        """Record what was written and release the lock (False: the lock lapsed and another writer took it)."""
        ...

    def pr_labels(self, upstream: str, pr: int) -> tuple[str, ...]: ...
    def checks_of_head(self, upstream: str, head_sha: str) -> list[tuple[str, Known, int]]:
        """(name, what was written, version) of every check run the relay wrote on one commit."""
        ...


class CheckReads(Protocol):
    """What the check-run writer reads from the ledger: the dispatch, and the PR's current head."""

    def get(self, delivery_id: str, repo: str) -> LedgerRow | None: ...
    def pr_head(self, upstream: str, pr: int) -> str | None: ...


@dataclass(frozen=True)
class IssueComment:
    """One comment of an upstream PR's conversation, as GitHub lists it; `ours`: written by this App."""

    id: int
    body: str
    ours: bool


class IssueComments(Protocol):
    """The upstream PR's conversation, written with the App's installation token for the upstream alone
    (issues: write, pull_requests: write). Writes spend the installation's budget, like check runs."""

    def installation_for(self, upstream: str) -> int: ...
    def create_comment(self, upstream: str, pr: int, body: str) -> int:
        """POST /repos/{o}/{r}/issues/{n}/comments; the new comment's id."""
        ...

    def update_comment(self, upstream: str, comment_id: int, body: str) -> None:
        """PATCH /repos/{o}/{r}/issues/comments/{id}."""
        ...

    def list_comments(self, upstream: str, pr: int) -> list[IssueComment]:
        """GET /repos/{o}/{r}/issues/{n}/comments, every page, oldest first."""
        ...


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


class CommentStore(Protocol):
    def pr_info(self, upstream: str, pr: int) -> PrInfo | None: ...
    def get_comment(self, upstream: str, pr: int) -> CommentRow: ...

    def book_render(self, upstream: str, pr: int, ticket: str, now: float, due_at: float, stale_before: float) -> str:
        """Ask for a render of the PR's comment no earlier than `due_at`. Returns the ticket of the render
        that will do it: `ticket` when none was pending (or the pending one was booked before `stale_before`
        and is presumed lost), else the pending render's, whose due time moves to `due_at`."""
        ...

    def lock_comment(self, upstream: str, pr: int, ticket: str, version: int, now: float, lease_s: float) -> int | None:
        """Take the comment for one render, if `ticket` is the render booked, the row still at `version` and no
        live lock holds it; what was asked for so far is now being rendered (`due_at` cleared). The locked
        version, or None."""
        ...

    def release_comment(self, upstream: str, pr: int, locked: int, now: float, posted: Posted | None = None) -> bool:
        """Release the lock, recording what was written (`posted`; any `posted` also marks the conversation
        searched). False: the lock had lapsed and another render took the row."""
        ...

    def end_render(self, upstream: str, pr: int, ticket: str, now: float, keep: bool = False) -> float | None:
        """After a render: None when the booking is over (nothing asked for meanwhile), else when the same
        render must run again (a change asked for meanwhile, or `keep`: it could not write yet)."""
        ...

    def drop_render(self, upstream: str, pr: int, ticket: str) -> None:
        """End the booking whatever was asked for meanwhile (the render was dead-lettered)."""
        ...


class RerunMarks(Protocol):
    def rerun_state(self, dispatch_id: str, run_id: str) -> str | None:
        """What the relay did about the automatic re-run of a run's infrastructure failure, from the marker row
        the re-run handler writes once per (dispatch, run) (pk RERUN#<dispatch_id>, sk RUN#<run_id>, attribute
        status): requested, refused or not_retryable; None when it did nothing (yet)."""
        ...


class ChecksQueue(Protocol):
    def send_checks(self, messages: list[CheckSyncMessage], delay_s: float = 0.0) -> None: ...
    def dead_letter(self, message: CheckSyncMessage, reason: str) -> None: ...


class StartWatch(Protocol):
    def due_starts(self, now: float, limit: int = 100) -> list[LedgerRow]: ...
    def clear_start_watch(self, delivery_id: str, repo: str) -> None: ...


class JobsByHead(Protocol):
    def jobs_for_head(self, upstream: str, head_sha: str) -> list[JobRecord]: ...


class JobsByRepo(Protocol):
    def jobs_of_repo(self, repo: str, since: float) -> list[JobRecord]:
        """Every job row (every attempt, any state) of one downstream repository dispatched at or after
        `since`, oldest dispatch first; names compare case-insensitively. Rows come from an index without
        `callback_payload` and `fingerprint` (both ""): read them, never write them back."""
        ...


class BaselineJobs(Protocol):
    def baseline_jobs(self, repo: str, workflow_name: str, job_name: str, since: float) -> list[JobRecord]:
        """One downstream job's results on the branch (a push or a scheduled run, never a PR's) dispatched at or
        after `since`; names compare case-insensitively for the repository, exactly for the workflow and job. Rows
        without `callback_payload` and `fingerprint` (both ""): read them, never write them back."""
        ...


class RunWatch(Protocol):
    def due_runs(self, now: float, limit: int = 100) -> list[JobRecord]: ...
    def put_job(self, record: JobRecord, expected_version: int | None) -> bool: ...


@dataclass(frozen=True)
class WorkflowRun:
    """A downstream GitHub Actions run as `GET …/actions/runs/{id}` shows it."""

    status: str  # queued, in_progress, completed, ...
    run_attempt: int  # 1 until someone re-runs it


class Reruns(Protocol):
    def installation_for(self, repo: str) -> int:
        """The downstream's installation: a re-run spends its content-creating budget (paced like dispatches)."""
        ...

    def workflow_run(self, repo: str, run_id: str) -> WorkflowRun: ...
    def rerun_failed_jobs(self, repo: str, run_id: str) -> bool:
        """True when GitHub started a new attempt; False when GitHub says the run is already running.
        Any other refusal raises GitHubRejected."""
        ...

    def suite_check_runs(self, upstream: str, suite_id: int) -> list[tuple[int, str, str | None]]:
        """(check run id, name, external_id) of every check run in an upstream check suite."""
        ...


class RerunClaim(Enum):
    CLAIMED = "claimed"  # this message decides the run's automatic re-run
    BUSY = "busy"  # another message is deciding it now: look again shortly
    DONE = "done"  # decided before (the marker exists): never again


RERUN_STATUSES = ("requested", "refused", "not_retryable")


class RerunMarker(Protocol):
    """The relay's automatic re-run of a downstream run, once per (dispatch, run) ever.

    The marker (pk `RERUN#<dispatch_id>`, sk `RUN#<run_id>`, `status` in RERUN_STATUSES) is the outcome, which
    the PR comment reads; a short lease on a separate row (sk `CLAIM#<run_id>`) lets one message at a time
    decide, so two jobs of one run failing together never re-run it twice or mark it wrong."""

    def claim_rerun(self, dispatch_id: str, run_id: str, owner: str, now: float, lease_s: float) -> RerunClaim: ...
    def release_rerun(self, dispatch_id: str, run_id: str, owner: str) -> None: ...
    def mark_rerun(self, dispatch_id: str, run_id: str, status: str, now: float) -> bool:
        """Write the marker if there is none (a conditional put): True when this call wrote it."""
        ...


class HudDocs(Protocol):
    """JSON documents the HUD pages read, written with optimistic concurrency."""

    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """The document and its version tag; (None, None) when there is none."""
        ...

    def put(self, key: str, doc: dict[str, Any], tag: str | None) -> bool:
        """Write if the document is still at `tag` (None: only if it does not exist); False otherwise."""
        ...


class HudDocReader(Protocol):
    def read(self, key: str) -> bytes | None:
        """A document's bytes as stored, or None when there is none."""
        ...


# -- levels: history, demotions, the allowlist's own repository ----------------------------------------------


@dataclass(frozen=True)
class Demotion:
    """An L3 repository with an open demotion PR: no new upstream check runs for it from `since`."""

    repo: str
    pr: int
    since: float


class Demotions(Protocol):
    def open_demotions(self) -> dict[str, Demotion]:
        """Every open demotion, by repository key (a few at most: read whole, cached briefly by readers)."""
        ...

    def set_demotion(self, repo: str, pr: int, since: float) -> None:
        """Record it (an existing record keeps its `since`: the demotion started then)."""
        ...

    def clear_demotion(self, repo: str) -> None: ...


class LevelHistory(Protocol):
    def l2_since(self, levels: list[tuple[str, int]], now: float) -> dict[str, float]:
        """Record each repository's current level; return, by repository key, when each was first seen at L2 or
        above (kept across later demotions: time at L2 is cumulative)."""
        ...

    def dedupe_states(self) -> dict[str, tuple[str, float]]:
        """By repository key: whether its runs carry the dispatch id in their title (`run-name` or `none`), and when
        that was last looked at."""
        ...

    def set_dedupe(self, repo: str, state: str, now: float) -> None: ...


@dataclass(frozen=True)
class PullRef:
    number: int
    body: str
    title: str = ""


class AllowlistPulls(Protocol):
    """The repository holding the allowlist (its `github:owner/repo/path@base` source), as a demotion PR needs it."""

    @property
    def repo(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def base(self) -> str: ...

    def installation_for(self, repo: str) -> int: ...
    def find_open(self, branch: str) -> PullRef | None:
        """The open PR from `branch` (in the same repository) to the base, if any."""
        ...

    def base_sha(self) -> str: ...
    def read_file(self, ref: str) -> tuple[str, str]:
        """The allowlist's text and blob sha at `ref` (a branch or commit)."""
        ...

    def prepare_branch(self, branch: str, sha: str) -> None:
        """Create `branch` at `sha`, or move it there when it is left over from an earlier PR."""
        ...

    def write_file(self, branch: str, text: str, blob_sha: str, message: str) -> None: ...
    def open_pull(self, branch: str, title: str, body: str, labels: list[str]) -> int: ...
    def update_pull(self, number: int, title: str, body: str) -> None: ...
    def close_pull(self, number: int, comment: str) -> None: ...


class ChangedFiles(Protocol):
    def pull_files(self, upstream: str, pr: int, head_sha: str) -> tuple[str, ...] | None:
        """The files a PR changes at this head (renamed ones under both names); None when GitHub cannot list them
        all (over its 3,000-file limit) or the list cannot be read now."""
        ...


class DemotionReader(Protocol):
    def since(self, repo: str) -> float | None:
        """When the repository's open demotion started (None: none is open)."""
        ...


class Collaborators(Protocol):
    def role(self, upstream: str, login: str) -> str | None:
        """The person's role on the upstream as GitHub gives it (admin, maintain, write, triage, read), or None."""
        ...


class Reactions(Protocol):
    def installation_for(self, upstream: str) -> int: ...
    def react(self, upstream: str, comment_id: int, content: str) -> None:
        """A reaction on an issue comment (`+1`, `rocket`, `confused`, …)."""
        ...
