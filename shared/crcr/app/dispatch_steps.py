"""What every dispatch shares, to GitHub or Buildkite: its id and ticket, pacing, supersession, how an attempt ends."""

from __future__ import annotations

import hashlib
import threading

from crcr.app.budget import STALE_SLOT_S
from crcr.app.dispatch_deps import DispatchDeps, DispatchOutcome, Result
from crcr.app.ports import Clock
from crcr.app.ports.ledger import LedgerRow, LedgerState
from crcr.app.ports.pacing import Pacer
from crcr.app.ports.pulls import PrInfos
from crcr.contracts.messages import DispatchMessage
from crcr.domain.ids import repo_key
from crcr.domain.pacing import RESERVE_HORIZON_S
from crcr.domain.ticket import TicketClaims


def dispatch_id(delivery_id: str, repo: str) -> str:
    """Stable per (delivery, repository), so a repeated attempt signs the same ticket id."""
    return hashlib.sha256(f"{delivery_id}\n{repo_key(repo)}".encode()).hexdigest()[:32]


def reschedule(
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


def dead_letter(
    message: DispatchMessage, deps: DispatchDeps, reason: str, owner: str, settled: bool = False
) -> DispatchOutcome:
    deps.ledger.mark(message, LedgerState.FAILED, reason, deps.clock.now(), owner, settled=settled)
    deps.queue.dead_letter(message, reason)
    deps.metrics.count("DispatchDeadLettered")
    return DispatchOutcome(Result.DEAD_LETTERED, reason)


def transient(
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
        return dead_letter(message, deps, f"{reason} (gave up after {attempt} attempts)", owner, settled)
    delay = max(min_delay, deps.policy.backoff(attempt, deps.rand))
    return reschedule(message, deps, delay, reason, attempt=attempt, owner=owner, settled=settled)


def refused(message: DispatchMessage, deps: DispatchDeps, row: LedgerRow | None, now: float) -> DispatchOutcome:
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


def newer_head(message: DispatchMessage, heads: PrHeads) -> str | None:
    """The PR's head, when a newer commit than this message's was pushed to it since it was planned."""
    if message.pr_number is None or message.action == "closed" or heads.known_at(message.head_at):
        return None
    latest = heads.head(message.upstream, message.pr_number)
    return latest if latest is not None and latest != message.head_sha else None


def superseded(message: DispatchMessage, deps: DispatchDeps, latest: str, owner: str) -> DispatchOutcome:
    deps.ledger.mark(message, LedgerState.SUPERSEDED, f"superseded by {latest}", deps.clock.now(), owner, settled=True)
    deps.metrics.count("DispatchSuperseded")
    return DispatchOutcome(Result.SUPERSEDED, f"superseded by {latest}")


def slot(message: DispatchMessage, pacer: Pacer, key: int | str, now: float) -> float:
    """0 when this attempt may call now: it holds the slot it booked when it was last paced (due about now),
    or takes one. Otherwise the wait, with that slot booked for it when the wait is within the horizon."""
    held = message.slot_at
    if held is not None and now - STALE_SLOT_S <= held <= now + 1:
        return 0.0
    return pacer.acquire(key, now, reserve=True)


def paced(message: DispatchMessage, deps: DispatchDeps, wait: float, asked_at: float, owner: str) -> DispatchOutcome:
    """Back to the queue until the booked slot (once, whatever the backlog ahead of it); a wait past the
    horizon books nothing, and the message asks again at the horizon."""
    booked = wait <= RESERVE_HORIZON_S
    delay = wait if booked else RESERVE_HORIZON_S
    slot_at = asked_at + wait if booked else None
    return reschedule(
        message, deps, delay, "paced", attempt=message.attempt, owner=owner, settled=True, slot_at=slot_at
    )


def ticket_claims(
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
