"""Reconciler use case: webhook deliveries GitHub failed to hand the relay, that it has no record of queueing, asked
for again (`POST /app/hook/deliveries/{id}/attempts`), each failed attempt once, paced."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from crcr.app.ingest import ACTED_ON, ACTIONS_READ
from crcr.app.outbound import GITHUB, Outbound, Permit, Write
from crcr.app.ports import Clock, Metrics
from crcr.app.ports.deliveries import DeliveryListing, RedeliveryClaim
from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable
from crcr.app.ports.pacing import Pacer
from crcr.domain.redelivery import (
    EDGE_SETTLE_S,
    MAX_ASKS_PER_EVENT,
    OVERLAP_S,
    ActsOn,
    Attempt,
    edge_failing,
    missed,
    window_start,
)


class HookDeliveries(Protocol):
    """GitHub's record of the App's webhook deliveries, read and redelivered with the App's JWT."""

    def list_deliveries(self, since: float, max_pages: int) -> DeliveryListing:
        """GET /app/hook/deliveries, following `cursor` pages back to `since` (at most `max_pages` pages)."""
        ...

    def redeliver(self, delivery_id: int, *, permit: Permit) -> None:
        """POST /app/hook/deliveries/{id}/attempts (202: GitHub will deliver the event again, same guid)."""
        ...

    def upstream_id(self) -> int | None:
        """The upstream repository's numeric id (its deliveries are the relay's), None when it cannot be read."""
        ...


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


PACER_KEY = "app"  # one budget for the App's own (JWT) writes, apart from every installation's


class Step(Enum):
    DONE = "done"  # asked for now or before, or given up
    LATER = "later"  # another run is asking: keep it in the window
    STOP = "stop"  # this one and the rest wait for the next run (pacing, GitHub unavailable)


def relay_acts_on(event: str, action: str | None) -> bool:
    """The events the webhook queues (ingest's rules): a redelivery of any other would be answered `ignored`."""
    if event not in ACTED_ON:
        return False
    actions = ACTIONS_READ.get(event)
    return actions is None or action in actions


@dataclass(frozen=True)
class ReconcileDeps:
    hooks: HookDeliveries
    store: RedeliveryStore
    pacer: Pacer
    metrics: Metrics
    clock: Clock
    sleep: Callable[[float], None]
    door: Outbound  # redeliveries are the relay's own writes: let through in shadow too, but through the door
    lookback_s: float = 3600.0  # the first run (or one after a long gap) looks back this far
    overlap_s: float = OVERLAP_S
    max_pages: int = 100  # 10,000 deliveries a run
    budget_s: float = 60.0  # asking (and waiting for pacing slots) stops after this; the rest waits for the next run
    lease_s: float = 30.0  # one POST with its timeouts
    max_asks: int = MAX_ASKS_PER_EVENT
    edge_settle_s: float = EDGE_SETTLE_S
    acts_on: ActsOn = relay_acts_on


@dataclass
class ReconcileSummary:
    listed: int = 0
    truncated: bool = False
    edge_failing: bool = False
    missed: list[str] = field(default_factory=list)  # guids with no 2xx attempt and no queued record
    requested: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # left for the next run (pacing, GitHub unavailable)
    abandoned: dict[str, str] = field(default_factory=dict)  # guid -> why it is given up


def reconcile(deps: ReconcileDeps) -> ReconcileSummary:
    """One run. Raises GitHubError when the deliveries cannot be listed (the function fails: alarmed)."""
    started = deps.clock.now()
    since = window_start(started, deps.store.reconcile_cursor(), deps.lookback_s, deps.overlap_s)
    listing = deps.hooks.list_deliveries(since, deps.max_pages)
    summary = ReconcileSummary(listed=len(listing.attempts), truncated=listing.truncated)
    deps.metrics.count("WebhookDeliveriesListed", len(listing.attempts))
    if listing.truncated:
        # Deliveries older than the last page were not looked at; the next run starts from now.
        deps.metrics.count("WebhookReconcileTruncated")
    if listing.incomplete:
        # A later page could not be read: what was listed is handled, and the next run lists the same window again.
        deps.metrics.count("WebhookReconcileIncomplete")
    if edge_failing(listing.attempts, started, deps.edge_settle_s):
        # A redelivery now would most likely fail too and spend one of the event's asks: wait for the next run.
        summary.edge_failing = True
        deps.metrics.count("WebhookRedeliveryDeferred", reason="edge_failing")
        return summary

    pending = [a for a in missed(listing.attempts, deps.acts_on, deps.hooks.upstream_id()) if _unrecorded(a, deps)]
    summary.missed = [a.guid for a in pending]
    left: list[Attempt] = []
    for i, attempt in enumerate(pending):
        step = _ask(attempt, deps, started, summary)
        if step is Step.LATER:
            left.append(attempt)
        elif step is Step.STOP:
            left += pending[i:]
            break
    summary.deferred = [a.guid for a in left]
    if listing.incomplete:
        return summary  # the cursor stays: the next run lists this window again, and its older pages with it
    # Everything up to the oldest delivery left for later has been handled: the next run starts there.
    deps.store.save_reconcile_cursor(min([started, *(a.delivered_at for a in left)]))
    return summary


def _unrecorded(attempt: Attempt, deps: ReconcileDeps) -> bool:
    """The relay never queued this event: no record, or one whose enqueue failed (`received`)."""
    return deps.store.delivery_state(attempt.guid) != "queued"


def _ask(attempt: Attempt, deps: ReconcileDeps, started: float, summary: ReconcileSummary) -> Step:
    """Ask GitHub to redeliver `attempt` unless it was asked for already."""
    owner = uuid.uuid4().hex
    now = deps.clock.now()
    claim = deps.store.claim_redelivery(attempt.guid, attempt.id, owner, now, deps.lease_s, deps.max_asks)
    if claim is RedeliveryClaim.EXHAUSTED:
        deps.metrics.count("WebhookRedeliveryAbandoned")
        summary.abandoned[attempt.guid] = f"asked for {deps.max_asks} times"
        return Step.DONE
    if claim is RedeliveryClaim.BUSY:
        return Step.LATER  # if that run dies, its lease lapses and a later run asks
    if claim is not RedeliveryClaim.CLAIMED:
        return Step.DONE  # asked for already (GitHub's redelivery is due or made), or given up before
    wait = deps.pacer.acquire(PACER_KEY, now, reserve=True)
    if now + wait > started + deps.budget_s:
        deps.store.release_redelivery(attempt.guid, attempt.id, owner)
        deps.metrics.count("WebhookRedeliveryDeferred", reason="paced")
        return Step.STOP
    if wait > 0:
        deps.sleep(wait)  # a booked slot: a background run may wait for it
    permit = deps.door.permit(Write(GITHUB, "redelivery", None, deps.door.upstream, str(attempt.id)))
    assert permit is not None  # the relay's own deliveries are never held back (crcr.app.outbound.OWN_WRITES)
    try:
        deps.hooks.redeliver(attempt.id, permit=permit)
    except GitHubRejected as exc:
        # 404 or 422: GitHub will not redeliver this one (gone, too old). It is lost unless someone acts.
        deps.store.finish_redelivery(attempt.guid, attempt.id, owner, "refused", deps.clock.now())
        deps.metrics.count("WebhookRedeliveryAbandoned")
        summary.abandoned[attempt.guid] = f"refused: {exc}"
        return Step.DONE
    except (GitHubRateLimited, GitHubUnavailable) as exc:
        # Not asked (or not known to be): the next run asks again; a redelivery that did happen is harmless,
        # since it keeps the guid the webhook deduplicates on.
        deps.store.release_redelivery(attempt.guid, attempt.id, owner)
        reason = "rate_limited" if isinstance(exc, GitHubRateLimited) else "unavailable"
        deps.metrics.count("WebhookRedeliveryRetried", reason=reason)
        return Step.STOP
    deps.store.finish_redelivery(attempt.guid, attempt.id, owner, "requested", deps.clock.now())
    deps.metrics.count("WebhookRedeliveryRequested")
    summary.requested.append(attempt.guid)
    return Step.DONE
