"""Dispatch use case: one DispatchMessage -> at most one repository_dispatch (or Buildkite build), whatever
GitHub, Buildkite or SQS do.

Idempotent on (delivery, repository) through the ledger; transient failures go back to the queue with
a delay (never sleeping in the Lambda), permanent ones are recorded and dead-lettered with the reason.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from crcr.app.ports import (
    DELIVERY_META_KEY,
    DISPATCH_META_KEY,
    BuildkiteRateLimited,
    BuildkiteRejected,
    BuildkiteUnavailable,
    BuildRef,
    Builds,
    ChecksQueue,
    Clock,
    DispatchQueue,
    GitHub,
    GitHubRateLimited,
    GitHubRejected,
    GitHubUnavailable,
    Ledger,
    LedgerState,
    Metrics,
    NewBuild,
    NotInstalled,
    Pacer,
    TicketSigner,
)
from crcr.contracts.messages import CheckSyncMessage, DispatchMessage
from crcr.domain.retry import RetryPolicy
from crcr.domain.ticket import TicketClaims


class Result(Enum):
    DISPATCHED = "dispatched"
    DUPLICATE = "duplicate"
    SUPERSEDED = "superseded"
    RESCHEDULED = "rescheduled"
    DEAD_LETTERED = "dead_lettered"


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
    # After a send whose outcome is unknown, the next attempt waits at least this long before it looks for
    # the build: a request the relay gave up on may still be creating one.
    settle_s: float = 30.0


@dataclass(frozen=True)
class DispatchDeps:
    github: GitHub
    ledger: Ledger
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
    checks: ChecksQueue | None = None  # L3/L4: the repository's check run, created queued once sent
    buildkite: BuildkiteDeps | None = None  # None: no Buildkite API token; Buildkite repositories dead-letter


def dispatch_id(delivery_id: str, repo: str) -> str:
    """Stable per (delivery, repository), so a repeated attempt signs the same ticket id."""
    return hashlib.sha256(f"{delivery_id}\n{repo.lower()}".encode()).hexdigest()[:32]


def client_payload(message: DispatchMessage, ticket: str, callback_url: str) -> dict[str, Any]:
    return {
        "event_type": message.event_type,
        "delivery_id": message.delivery_id,
        "payload": message.payload,
        "ticket": ticket,
        "callback_url": callback_url,
    }


def new_build(message: DispatchMessage, ticket: str, callback_url: str, did: str) -> NewBuild:
    """A Buildkite build for one dispatch: the downstream branch's HEAD, the upstream change in env (a build
    has no client_payload), and meta_data that finds the build again."""
    assert message.buildkite is not None
    pr = message.pr_number
    if pr is not None:
        about = f"{message.upstream}#{pr} ({message.action or message.event_type})"
    else:
        about = f"{message.upstream} push to {message.ref or 'a branch'}"
    return NewBuild(
        branch=message.buildkite.branch,
        message=f"crcr: {about} at {message.head_sha}",
        env={
            "CRCR_TICKET": ticket,
            "CRCR_CALLBACK_URL": callback_url,
            "CRCR_DELIVERY_ID": message.delivery_id,
            "CRCR_EVENT_TYPE": message.event_type,
            "CRCR_UPSTREAM_REPO": message.upstream,
            "CRCR_UPSTREAM_SHA": message.head_sha,
            "CRCR_UPSTREAM_PR": str(pr) if pr is not None else "",
        },
        meta_data={DISPATCH_META_KEY: did, DELIVERY_META_KEY: message.delivery_id},
    )


def _announce(message: DispatchMessage, deps: DispatchDeps) -> None:
    """Ask the check-run writer for the repository's check run (L4: queued now, so a required check
    exists before anything reports). Sent again on every repeat of a sent dispatch, so a worker that
    died between the dispatch and this send loses nothing; the writer creates it once."""
    if deps.checks is None or message.level < 3:
        return
    deps.checks.send_checks(
        [
            CheckSyncMessage(
                kind="repo",
                upstream=message.upstream,
                head_sha=message.head_sha,
                delivery_id=message.delivery_id,
                repo=message.target_repo,
            )
        ]
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
) -> DispatchOutcome:
    """Record RETRYING and re-send the message after `delay`. `settled` (here and below): this attempt
    certainly sent nothing (refused, rate-limited, never connected), so the ledger stops counting it among
    the attempts that may have created something."""
    now = deps.clock.now()
    deps.ledger.mark(message, LedgerState.RETRYING, reason, now, owner, settled=settled)
    deps.queue.reschedule(message.model_copy(update={"attempt": attempt, "not_before": now + delay}), delay)
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


def _claim_held(message: DispatchMessage, deps: DispatchDeps, now: float) -> DispatchOutcome:
    """Another worker holds a live claim (a redelivered copy, or a worker that died mid-call): look again
    when that claim lapses."""
    held = deps.ledger.get(message.delivery_id, message.target_repo)
    if held is not None and held.state in (LedgerState.DISPATCHED, LedgerState.SUPERSEDED):
        deps.metrics.count("DispatchDuplicate")
        return DispatchOutcome(Result.DUPLICATE, held.state.value)
    wait = max(1.0, (held.lease_until if held else now) - now + 1.0)
    deps.queue.reschedule(message, wait)
    deps.metrics.count("DispatchRetried", reason="in_flight")
    return DispatchOutcome(Result.RESCHEDULED, "in_flight", wait)


def dispatch(message: DispatchMessage, deps: DispatchDeps) -> DispatchOutcome:
    now = deps.clock.now()
    if message.not_before is not None and message.not_before > now + 1:
        # SQS delays at most 15 minutes; longer waits (an hourly rate limit) hop until due.
        delay = message.not_before - now
        deps.queue.reschedule(message, delay)
        return DispatchOutcome(Result.RESCHEDULED, "not_due", delay)

    row = deps.ledger.get(message.delivery_id, message.target_repo)
    # FAILED is not final: an operator's redrive of a dead letter must be able to try again.
    if row is not None and row.state in (LedgerState.DISPATCHED, LedgerState.SUPERSEDED):
        deps.metrics.count("DispatchDuplicate")
        if row.state is LedgerState.DISPATCHED:
            _announce(message, deps)
        return DispatchOutcome(Result.DUPLICATE, row.state.value)

    if message.pr_number is not None and message.action != "closed":
        latest = deps.ledger.pr_head(message.upstream, message.pr_number)
        if latest is not None and latest != message.head_sha:
            deps.ledger.mark(message, LedgerState.SUPERSEDED, f"superseded by {latest}", now)
            deps.metrics.count("DispatchSuperseded")
            return DispatchOutcome(Result.SUPERSEDED, f"superseded by {latest}")

    did = dispatch_id(message.delivery_id, message.target_repo)
    owner = uuid.uuid4().hex  # this attempt's claim: only it may release the claim early
    if message.buildkite is not None:
        return _dispatch_build(message, deps, did, owner)
    try:
        # Everything slow or fallible happens before the claim, so the claim covers one POST only.
        installation = deps.github.installation_for(message.target_repo)
        token = deps.github.repo_token(installation, message.target_repo)
        wait = deps.pacer.acquire(installation, deps.clock.now())
        if wait > 0:
            return _reschedule(message, deps, wait, "paced", attempt=message.attempt, owner=owner)
        now = deps.clock.now()
        if not deps.ledger.claim(message, did, now, deps.lease_s, owner, token.repo_id, token.full_name):
            return _claim_held(message, deps, now)
        issued = int(now)
        claims = TicketClaims(
            sub=token.full_name,
            repo_id=token.repo_id,
            delivery_id=message.delivery_id,
            upstream=message.upstream,
            pr=message.pr_number,
            head_sha=message.head_sha,
            level=int(message.level),
            iat=issued,
            exp=issued + deps.ticket_ttl_s,
            jti=did,
        )
        ticket = deps.signer.sign(claims)
        deps.github.dispatch(
            message.target_repo, token, message.event_type, client_payload(message, ticket, deps.callback_url)
        )
    except NotInstalled as exc:
        return _dead_letter(message, deps, f"not_installed: {exc}", owner)
    except GitHubRateLimited as exc:
        return _reschedule(
            message, deps, exc.wait_s, f"rate_limited: {exc}", attempt=message.attempt, owner=owner, settled=True
        )
    except GitHubUnavailable as exc:
        return _transient(message, deps, f"unavailable: {exc}", owner)
    except GitHubRejected as exc:
        if exc.status == 401:
            # A revoked or expired installation token: mint a new one on the next attempt.
            deps.github.forget_token(message.target_repo)
            return _transient(message, deps, f"token_rejected: {exc}", owner, settled=True)
        return _dead_letter(message, deps, f"rejected: {exc}", owner, settled=True)

    deps.ledger.mark_dispatched(message, claims, deps.clock.now())
    deps.metrics.count("DispatchSent", level=message.level.name)
    _announce(message, deps)
    return DispatchOutcome(Result.DISPATCHED)


BUILDKITE_NOT_CONFIGURED = (
    "not_configured: Buildkite dispatches need an API token with write_builds and read_builds: "
    "set CRCR_BUILDKITE_API_TOKEN (or key buildkite_api_token in CRCR_SECRETS_ARN)"
)


def _dispatch_build(message: DispatchMessage, deps: DispatchDeps, did: str, owner: str) -> DispatchOutcome:
    """A Buildkite downstream: create one build of its pipeline, under the same claim, lease and outcomes
    as a repository_dispatch. Buildkite has no idempotency key, so an attempt that follows one whose send
    may have reached Buildkite first looks for that attempt's build (by dispatch id) and records it."""
    assert message.buildkite is not None
    bk, target = deps.buildkite, message.buildkite
    if bk is None:
        return _dead_letter(message, deps, BUILDKITE_NOT_CONFIGURED, owner)
    # No GitHub installation or token: the allowlist's pin (or 0) is the ticket's repository id.
    repo_id, full_name = message.repository_id or 0, message.target_repo
    wait = bk.pacer.acquire(target.organization, deps.clock.now())
    if wait > 0:
        return _reschedule(message, deps, wait, "paced", attempt=message.attempt, owner=owner)
    now = deps.clock.now()
    if not deps.ledger.claim(message, did, now, bk.lease_s, owner, repo_id, full_name):
        return _claim_held(message, deps, now)
    issued = int(now)
    claims = TicketClaims(
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
        ci="buildkite",
    )
    where = f"{target.organization}/{target.pipeline}"

    # Read after the claim: every earlier attempt has recorded its outcome or lost its lease by now.
    row = deps.ledger.get(message.delivery_id, message.target_repo)
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
            target.organization, target.pipeline, new_build(message, ticket, deps.callback_url, did)
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
    _announce(message, deps)
    return DispatchOutcome(Result.DISPATCHED, f"build {build.number} {how}", build=build)
