"""Dispatch use case: one DispatchMessage -> at most one repository_dispatch (or Buildkite build), whatever
GitHub, Buildkite or SQS do.

Idempotent on (delivery, repository) through the ledger; transient failures go back to the queue with
a delay (never sleeping in the Lambda), permanent ones are recorded and dead-lettered with the reason.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

from crcr.app.budget import STALE_SLOT_S
from crcr.app.outbound import BUILDKITE, GITHUB, Outbound, Permit, Write
from crcr.app.ports import Clock, Metrics
from crcr.app.ports.buildkite import (
    DELIVERY_META_KEY,
    DISPATCH_META_KEY,
    BuildkiteRateLimited,
    BuildkiteRejected,
    BuildkiteUnavailable,
    NewBuild,
)
from crcr.app.ports.github import (
    DispatchRuns,
    GitHubRateLimited,
    GitHubRejected,
    GitHubUnavailable,
    NotInstalled,
    RepoToken,
)
from crcr.app.ports.ledger import BuildRef, LedgerClaim, LedgerRow, LedgerState
from crcr.app.ports.pacing import Pacer
from crcr.app.ports.pulls import PrInfos
from crcr.app.ports.queues import DispatchQueue
from crcr.app.ports.runs import BoundRun
from crcr.contracts.messages import DispatchMessage
from crcr.domain.ids import repo_key
from crcr.domain.pacing import RESERVE_HORIZON_S
from crcr.domain.payload import as_inputs
from crcr.domain.retry import RetryPolicy
from crcr.domain.runs import run_progress
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


def dispatch_id(delivery_id: str, repo: str) -> str:
    """Stable per (delivery, repository), so a repeated attempt signs the same ticket id."""
    return hashlib.sha256(f"{delivery_id}\n{repo_key(repo)}".encode()).hexdigest()[:32]


WORKFLOW_INPUTS = frozenset({"event_type", "delivery_id", "payload", "ticket", "callback_url", "dispatch_id"})


def client_payload(message: DispatchMessage, ticket: str, callback_url: str, did: str = "") -> dict[str, Any]:
    payload: dict[str, Any] = {
        "event_type": message.event_type,
        "delivery_id": message.delivery_id,
        "payload": message.payload,
        "ticket": ticket,
        "callback_url": callback_url,
    }
    if did:
        payload["dispatch_id"] = did  # for the downstream's run-name: a repeated send finds its run by it
    if message.merged is not None:
        payload["merged"] = message.merged  # a closed PR: GitHub's `merged` is false for what PyTorch's bot merged
    if message.changes is not None:
        payload["changes"] = message.changes  # advice for a downstream's own test selection, never a filter
    if message.bisect is not None:
        payload["bisect"] = message.bisect  # a bisection run: which job regressed, and the range it narrows
    return payload


def new_build(message: DispatchMessage, ticket: str, callback_url: str, did: str) -> NewBuild:
    """A Buildkite build for one dispatch: the downstream branch's HEAD, the upstream change in env (a build
    has no client_payload), and meta_data that finds the build again."""
    assert message.buildkite is not None
    pr = message.pr_number
    if pr is not None:
        about = f"{message.upstream}#{pr} ({message.action or message.event_type})"
    elif message.bisect is not None:
        about = f"{message.upstream} bisecting {message.bisect.get('workflow')}/{message.bisect.get('job')}"
    else:
        about = f"{message.upstream} push to {message.ref or 'a branch'}"
    env = {
        "CRCR_TICKET": ticket,
        "CRCR_CALLBACK_URL": callback_url,
        "CRCR_DELIVERY_ID": message.delivery_id,
        "CRCR_EVENT_TYPE": message.event_type,
        "CRCR_UPSTREAM_REPO": message.upstream,
        "CRCR_UPSTREAM_SHA": message.head_sha,
        "CRCR_UPSTREAM_PR": str(pr) if pr is not None else "",
    }
    if message.bisect is not None:  # the job that regressed and the range this build narrows (client_payload.bisect)
        env["CRCR_BISECT"] = json.dumps(message.bisect, sort_keys=True)
    return NewBuild(
        branch=message.buildkite.branch,
        message=f"crcr: {about} at {message.head_sha}",
        env=env,
        meta_data={DISPATCH_META_KEY: did, DELIVERY_META_KEY: message.delivery_id},
    )


def _reschedule(
    message: DispatchMessage,
    deps: DispatchDeps,
    delay: float,
    reason: str,
    *,
    attempt: int,
    owner: str,
    settled: bool = False,
    slot_at: float | None = None,
) -> DispatchOutcome:
    """Record RETRYING and re-send the message after `delay`. `settled` (here and below): this attempt
    certainly sent nothing (refused, rate-limited, never connected), so the ledger stops counting it among
    the attempts that may have created something. `slot_at`: the pacing slot booked for the next attempt
    (any slot the message held is spent or lapsed otherwise)."""
    now = deps.clock.now()
    deps.ledger.mark(message, LedgerState.RETRYING, reason, now, owner, settled=settled)
    update = {"attempt": attempt, "not_before": now + delay, "slot_at": slot_at}
    deps.queue.reschedule(message.model_copy(update=update), delay)
    deps.metrics.count("DispatchRetried", reason=reason.split(":", 1)[0])
    return DispatchOutcome(Result.RESCHEDULED, reason, delay)


def _dead_letter(
    message: DispatchMessage, deps: DispatchDeps, reason: str, owner: str, settled: bool = False
) -> DispatchOutcome:
    deps.ledger.mark(message, LedgerState.FAILED, reason, deps.clock.now(), owner, settled=settled)
    deps.queue.dead_letter(message, reason)
    deps.metrics.count("DispatchDeadLettered")
    return DispatchOutcome(Result.DEAD_LETTERED, reason)


def _transient(
    message: DispatchMessage,
    deps: DispatchDeps,
    reason: str,
    owner: str,
    *,
    settled: bool = False,
    min_delay: float = 0.0,
) -> DispatchOutcome:
    attempt = message.attempt + 1
    if attempt >= deps.policy.max_attempts:
        return _dead_letter(message, deps, f"{reason} (gave up after {attempt} attempts)", owner, settled)
    delay = max(min_delay, deps.policy.backoff(attempt, deps.rand))
    return _reschedule(message, deps, delay, reason, attempt=attempt, owner=owner, settled=settled)


def _refused(message: DispatchMessage, deps: DispatchDeps, row: LedgerRow | None, now: float) -> DispatchOutcome:
    """The claim was refused, and the refusal brought the row: sent (or superseded) already, a repeat; or
    another worker holds a live claim (a redelivered copy, or a worker that died mid-call): look again when
    that claim lapses."""
    if row is not None and row.state in (LedgerState.DISPATCHED, LedgerState.SUPERSEDED):
        deps.metrics.count("DispatchDuplicate")
        return DispatchOutcome(Result.DUPLICATE, row.state.value)
    wait = max(1.0, (row.lease_until if row else now) - now + 1.0)
    deps.queue.reschedule(message, wait)
    deps.metrics.count("DispatchRetried", reason="in_flight")
    return DispatchOutcome(Result.RESCHEDULED, "in_flight", wait)


class PrHeads:
    """The PR heads one invocation's records ask about. The records of a batch start together, side by side,
    so the first to ask about a PR reads its head and the others use that read, for at most `max_age_s`:
    a read made for each would answer the same, a few milliseconds apart. A message the planner sent within
    `max_age_s` of storing its commit as the PR's head needs no read at all: that write was the read."""

    def __init__(self, prs: PrInfos, clock: Clock, max_age_s: float = 1.0) -> None:
        self._prs = prs
        self._clock = clock
        self._max_age_s = max_age_s
        self._lock = threading.Lock()
        self._heads: dict[tuple[str, int], tuple[str | None, float]] = {}
        self._reading: dict[tuple[str, int], threading.Lock] = {}

    def known_at(self, at: float | None) -> bool:
        """A head known at `at` (the planner's write) is as fresh as a read this object would share. Both ways: the
        planner's clock is another host's, and one far ahead of this one must not make its write fresh for long."""
        return at is not None and abs(self._clock.now() - at) <= self._max_age_s

    def head(self, upstream: str, pr: int) -> str | None:
        key = (upstream, pr)
        with self._lock:
            reading = self._reading.setdefault(key, threading.Lock())
        with reading:  # one read per PR at a time: the others wait for it rather than read too
            known = self._heads.get(key)
            if known is not None and self._clock.now() - known[1] <= self._max_age_s:
                return known[0]
            asked = self._clock.now()
            info = self._prs.pr_info(upstream, pr)
            head = info.head_sha if info is not None else None
            self._heads[key] = (head, asked)
            return head


def _newer_head(message: DispatchMessage, heads: PrHeads) -> str | None:
    """The PR's head, when a newer commit than this message's was pushed to it since it was planned."""
    if message.pr_number is None or message.action == "closed" or heads.known_at(message.head_at):
        return None
    latest = heads.head(message.upstream, message.pr_number)
    return latest if latest is not None and latest != message.head_sha else None


def _superseded(message: DispatchMessage, deps: DispatchDeps, latest: str, owner: str) -> DispatchOutcome:
    deps.ledger.mark(message, LedgerState.SUPERSEDED, f"superseded by {latest}", deps.clock.now(), owner, settled=True)
    deps.metrics.count("DispatchSuperseded")
    return DispatchOutcome(Result.SUPERSEDED, f"superseded by {latest}")


def _slot(message: DispatchMessage, pacer: Pacer, key: int | str, now: float) -> float:
    """0 when this attempt may call now: it holds the slot it booked when it was last paced (due about now),
    or takes one. Otherwise the wait, with that slot booked for it when the wait is within the horizon."""
    held = message.slot_at
    if held is not None and now - STALE_SLOT_S <= held <= now + 1:
        return 0.0
    return pacer.acquire(key, now, reserve=True)


def _paced(message: DispatchMessage, deps: DispatchDeps, wait: float, asked_at: float, owner: str) -> DispatchOutcome:
    """Back to the queue until the booked slot (once, whatever the backlog ahead of it); a wait past the
    horizon books nothing, and the message asks again at the horizon."""
    booked = wait <= RESERVE_HORIZON_S
    delay = wait if booked else RESERVE_HORIZON_S
    slot_at = asked_at + wait if booked else None
    return _reschedule(
        message, deps, delay, "paced", attempt=message.attempt, owner=owner, settled=True, slot_at=slot_at
    )


class _Tally:
    """The Metrics port for one invocation's dispatches: a count with dimensions (a document of its own when it is
    emitted) is summed by name and dimensions and handed on once, when the batch is done (`flush`), so ten
    dispatches sent at one level are one document, not ten. Plain counts go straight through."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._sums: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self._lock = threading.Lock()

    def count(self, name: str, value: int = 1, **dimensions: str) -> None:
        if not dimensions:
            self.metrics.count(name, value)
            return
        key = (name, tuple(sorted(dimensions.items())))
        with self._lock:
            self._sums[key] = self._sums.get(key, 0) + value

    def flush(self) -> None:
        with self._lock:
            sums, self._sums = self._sums, {}
        for (name, dimensions), value in sums.items():
            self.metrics.count(name, value, **dict(dimensions))


class DispatchBatch:
    """One invocation's records: they start together, side by side, so they share each PR's head read and one
    metrics document per count. An L3/L4 dispatch's check run is asked for by its ledger row itself: marking it
    sent is a change on the state table's stream, which feeds the check-run writer (nothing to send here)."""

    def __init__(self, deps: DispatchDeps) -> None:
        self.heads = PrHeads(deps.prs, deps.clock)
        self._tally = _Tally(deps.metrics)
        self.deps = replace(deps, metrics=self._tally)

    def dispatch(self, message: DispatchMessage) -> DispatchOutcome:
        return dispatch(message, self.deps, self.heads)

    def flush_metrics(self) -> None:
        """Hand the batch's counts with dimensions to the Metrics port (once the batch is done)."""
        self._tally.flush()


def dispatch(message: DispatchMessage, deps: DispatchDeps, heads: PrHeads | None = None) -> DispatchOutcome:
    now = deps.clock.now()
    if message.not_before is not None and message.not_before > now + 1:
        # SQS delays at most 15 minutes; longer waits (an hourly rate limit) hop until due.
        delay = message.not_before - now
        deps.queue.reschedule(message, delay)
        return DispatchOutcome(Result.RESCHEDULED, "not_due", delay)

    if message.skip:
        # The planner found nothing for it in the change: recorded, never sent (a sent one is never overwritten).
        deps.ledger.mark(message, LedgerState.SKIPPED, message.skip, now, settled=True)
        deps.metrics.count("DispatchSkipped", reason=message.skip)
        return DispatchOutcome(Result.SKIPPED, message.skip)
    heads = heads or PrHeads(deps.prs, deps.clock)
    did = dispatch_id(message.delivery_id, message.target_repo)
    permit = deps.door.permit(_write(message, did))
    if permit is None:
        # A shadow downstream (now: its mode is read when the message is sent, whatever it was when planned): no
        # claim, no ledger row, nothing for the sweeper or the check runs to follow.
        return DispatchOutcome(Result.WITHHELD, "shadow")
    owner = uuid.uuid4().hex  # this attempt's claim: only it may release the claim early
    if message.buildkite is not None:
        return _dispatch_build(message, deps, did, owner, heads, permit)
    try:
        # The installation and its token (cached while valid) before the claim, which writes the repository's
        # id: a run may report before its dispatch is marked sent.
        installation = deps.github.installation_for(message.target_repo)
        token = deps.github.repo_token(installation, message.target_repo)
        # The claim first: a repeat (sent already, or in another worker's hands) is told by the refusal itself,
        # before it could spend a pacing slot. FAILED is not final: an operator's redrive may try again.
        now = deps.clock.now()
        wants_row = deps.runs is not None or message.workflow is not None
        claim = deps.ledger.claim(message, did, now, deps.lease_s, owner, token.repo_id, token.full_name, row=wants_row)
        if not claim:
            return _refused(message, deps, claim.row, now)
        if (latest := _newer_head(message, heads)) is not None:
            return _superseded(message, deps, latest, owner)
        if claim.row is not None and claim.row.unsettled - {owner}:
            found = _earlier_run(message, deps, claim.row, token, did)
            if found is not None:
                return found
        asked_at = deps.clock.now()
        wait = _slot(message, deps.pacer, installation, asked_at)
        if wait > 0:
            return _paced(message, deps, wait, asked_at, owner)
        if deps.clock.now() + deps.send_s > now + deps.lease_s:
            # Pacing took so long that the claim could lapse mid-POST (a slow table): let it go, try again.
            return _reschedule(message, deps, 1.0, "claim_lapsing", attempt=message.attempt, owner=owner, settled=True)
        claims = _claims(message, token.full_name, token.repo_id, did, int(deps.clock.now()), deps)
        ticket = deps.signer.sign(claims)
        run_id = _send(message, deps, token, client_payload(message, ticket, deps.callback_url, did), permit)
    except NotInstalled as exc:
        return _dead_letter(message, deps, f"not_installed: {exc}", owner)
    except GitHubRateLimited as exc:
        return _reschedule(
            message, deps, exc.wait_s, f"rate_limited: {exc}", attempt=message.attempt, owner=owner, settled=True
        )
    except GitHubUnavailable as exc:
        # A timeout or 5xx may have started a run: the next attempt gives GitHub time to show it, then looks.
        settle = deps.run_settle_s if deps.runs is not None or message.workflow is not None else 0.0
        return _transient(message, deps, f"unavailable: {exc}", owner, min_delay=settle)
    except GitHubRejected as exc:
        if exc.status == 401:
            # A revoked or expired installation token: mint a new one on the next attempt.
            deps.github.forget_token(message.target_repo)
            return _transient(message, deps, f"token_rejected: {exc}", owner, settled=True)
        return _dead_letter(message, deps, f"rejected: {exc}", owner, settled=True)

    deps.ledger.mark_dispatched(message, claims, deps.clock.now(), run_id=run_id)
    if run_id is not None and deps.bound_runs is not None:
        # Known before the run starts: its events bind by this id even when its title carries no dispatch id.
        now = deps.clock.now()
        bound = BoundRun(
            repo=token.full_name,
            run_id=run_id,
            delivery_id=message.delivery_id,
            dispatch_id=did,
            attempt=1,
            status="requested",
            progress=run_progress(1, "requested"),
        )
        deps.bound_runs.record(bound, now, now + deps.run_timeout_s)
    deps.metrics.count("DispatchSent", level=message.level.name)
    return DispatchOutcome(Result.DISPATCHED)


def _write(message: DispatchMessage, did: str) -> Write:
    """What the door is asked about: this dispatch, as it would be sent but for the ticket and callback URL."""
    sent = {k: v for k, v in client_payload(message, "", "").items() if k not in ("ticket", "callback_url")}
    target = {"buildkite": message.buildkite.model_dump()} if message.buildkite is not None else {}
    if message.workflow is not None:
        target = {"workflow": message.workflow.model_dump()}
    return Write(
        system=BUILDKITE if message.buildkite is not None else GITHUB,
        action="dispatch",
        repo=message.target_repo,
        upstream=message.upstream,
        key=did,
        body={"event_type": message.event_type, "client_payload": sent} | target,
        pr=message.pr_number,
        head_sha=message.head_sha,
        level=int(message.level),
    )


def _send(
    message: DispatchMessage, deps: DispatchDeps, token: RepoToken, sent: dict[str, Any], permit: Permit
) -> str | None:
    """repository_dispatch, or workflow_dispatch of the allowlist's workflow file: the run GitHub said it started."""
    if message.workflow is None or deps.workflows is None:
        deps.github.dispatch(message.target_repo, token, message.event_type, sent, permit=permit)
        return None
    # A workflow declares each input it takes (GitHub refuses any other): only the documented six are sent.
    inputs = as_inputs({k: v for k, v in sent.items() if k in WORKFLOW_INPUTS})
    workflow = message.workflow
    run_id = deps.workflows.dispatch_workflow(message.target_repo, workflow.file, workflow.ref, inputs, permit=permit)
    if run_id is None:
        deps.metrics.count("DispatchRunDetailsMissing")  # GitHub Enterprise Server without the parameter
    return run_id


def _earlier_run(
    message: DispatchMessage, deps: DispatchDeps, row: LedgerRow, token: RepoToken, did: str
) -> DispatchOutcome | None:
    """An earlier attempt may have sent (GitHub has no idempotency key): the run it started, if any, is found
    instead of sending again. A workflow_dispatch's run is the one its `workflow_run` event bound to this dispatch
    (no runs list is read); a repository_dispatch's is looked for by the dispatch id in the runs' titles."""
    run: str | None = None
    if message.workflow is not None:
        run = row.run_id
    elif deps.runs is not None:
        try:
            run = deps.runs.find(message.target_repo, did, message.planned_at - RUN_LOOKBACK_S)
        except GitHubRejected:  # no actions:read on the installation: send again, as before the lookup
            deps.metrics.count("DispatchRunLookupRefused")
    else:
        return None
    if run is None:
        deps.metrics.count("DispatchRunNotFound")
        return None
    deps.metrics.count("DispatchRunFound")
    found = _claims(message, token.full_name, token.repo_id, did, int(deps.clock.now()), deps)
    deps.ledger.mark_dispatched(message, found, deps.clock.now(), run_id=run if message.workflow else None)
    deps.metrics.count("DispatchSent", level=message.level.name)
    return DispatchOutcome(Result.DISPATCHED, f"run {run} found")


RUN_LOOKBACK_S = 60.0  # runs created this long before the event was planned cannot be this dispatch's (clock skew)


def _claims(
    message: DispatchMessage,
    full_name: str,
    repo_id: int,
    did: str,
    issued: int,
    deps: DispatchDeps,
    ci: str = "github",
) -> TicketClaims:
    return TicketClaims(
        sub=full_name,
        repo_id=repo_id,
        delivery_id=message.delivery_id,
        upstream=message.upstream,
        pr=message.pr_number,
        head_sha=message.head_sha,
        level=int(message.level),
        iat=issued,
        exp=issued + deps.ticket_ttl_s,
        jti=did,
        ci=ci,
    )


BUILDKITE_NOT_CONFIGURED = (
    "not_configured: Buildkite dispatches need an API token with write_builds and read_builds: "
    "set CRCR_BUILDKITE_API_TOKEN (or key buildkite_api_token in CRCR_SECRETS_ARN)"
)


def _dispatch_build(
    message: DispatchMessage, deps: DispatchDeps, did: str, owner: str, heads: PrHeads, permit: Permit
) -> DispatchOutcome:
    """A Buildkite downstream: create one build of its pipeline, under the same claim, lease and outcomes
    as a repository_dispatch. Buildkite has no idempotency key, so an attempt that follows one whose send
    may have reached Buildkite first looks for that attempt's build (by dispatch id) and records it."""
    assert message.buildkite is not None
    bk, target = deps.buildkite, message.buildkite
    if bk is None:
        return _dead_letter(message, deps, BUILDKITE_NOT_CONFIGURED, owner)
    # No GitHub installation or token: the allowlist's pin (or 0) is the ticket's repository id.
    repo_id, full_name = message.repository_id or 0, message.target_repo
    now = deps.clock.now()
    # The claim brings the row as claimed: every earlier attempt has recorded its outcome or lost its lease by
    # now, so its `unsettled` set is final for this attempt.
    claim = deps.ledger.claim(message, did, now, bk.lease_s, owner, repo_id, full_name, row=True)
    if not claim:
        return _refused(message, deps, claim.row, now)
    if (latest := _newer_head(message, heads)) is not None:
        return _superseded(message, deps, latest, owner)
    asked_at = deps.clock.now()
    wait = _slot(message, bk.pacer, target.organization, asked_at)
    if wait > 0:
        return _paced(message, deps, wait, asked_at, owner)
    if deps.clock.now() + 2 * bk.call_s > now + bk.lease_s:  # a lookup and a create must fit in the claim
        return _reschedule(message, deps, 1.0, "claim_lapsing", attempt=message.attempt, owner=owner, settled=True)
    claims = _claims(message, full_name, repo_id, did, int(deps.clock.now()), deps, ci="buildkite")
    where = f"{target.organization}/{target.pipeline}"

    row = claim.row
    if row is not None and row.unsettled - {owner}:
        wait = bk.pacer.acquire(target.organization, deps.clock.now())
        if wait > 0:
            return _reschedule(message, deps, wait, "paced", attempt=message.attempt, owner=owner, settled=True)
        try:
            found = bk.builds.find(target.organization, target.pipeline, did)
        except BuildkiteRateLimited as exc:
            reason = f"rate_limited: {exc}"
            return _reschedule(message, deps, exc.wait_s, reason, attempt=message.attempt, owner=owner, settled=True)
        except BuildkiteUnavailable as exc:
            reason = f"unavailable: looking for an earlier build: {exc}"
            return _transient(message, deps, reason, owner, settled=True)
        except BuildkiteRejected as exc:
            scope = " (the token needs read_builds)" if exc.status in (401, 403) else ""
            reason = f"rejected: looking for an earlier build of {where}{scope}: {exc}"
            return _dead_letter(message, deps, reason, owner, settled=True)
        if found:
            deps.metrics.count("BuildkiteBuildFound")
            if len(found) > 1:
                deps.metrics.count("BuildkiteBuildDuplicated", len(found) - 1)
            return _sent(message, deps, claims, found[0], "found")

    try:
        ticket = deps.signer.sign(claims)
        build = bk.builds.create(
            target.organization, target.pipeline, new_build(message, ticket, deps.callback_url, did), permit=permit
        )
    except BuildkiteRateLimited as exc:
        reason = f"rate_limited: {exc}"
        return _reschedule(message, deps, exc.wait_s, reason, attempt=message.attempt, owner=owner, settled=True)
    except BuildkiteUnavailable as exc:
        if not exc.maybe_sent:
            return _transient(message, deps, f"unavailable: {exc}", owner, settled=True)
        # A timeout or 5xx may have created the build, or Buildkite may still be creating it: this attempt
        # stays unsettled, and the next one waits until Buildkite must have finished, then looks first.
        return _transient(message, deps, f"unavailable: {exc}", owner, min_delay=bk.settle_s)
    except BuildkiteRejected as exc:
        return _dead_letter(message, deps, f"rejected: {where}: {exc}", owner, settled=True)
    deps.metrics.count("BuildkiteBuildCreated")
    return _sent(message, deps, claims, build, "created")


def _sent(
    message: DispatchMessage, deps: DispatchDeps, claims: TicketClaims, build: BuildRef, how: str
) -> DispatchOutcome:
    deps.ledger.mark_dispatched(message, claims, deps.clock.now(), build=build)
    deps.metrics.count("DispatchSent", level=message.level.name)
    return DispatchOutcome(Result.DISPATCHED, f"build {build.number} {how}", build=build)
