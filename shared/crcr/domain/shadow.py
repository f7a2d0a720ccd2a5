"""Shadow mode: a downstream planned exactly as it would be live, its decision recorded (what would have been sent,
or why not) and nothing sent; the deployment's `CRCR_MODE` is every downstream's mode unless its allowlist entry
says `mode: live` or `mode: shadow` (a cut-over moves one downstream at a time, without a redeploy)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from crcr.domain.allowlist import Entry

LIVE, SHADOW = "live", "shadow"
# What a shadow decision says of a downstream: dispatched (it would have been), held (until a ciflow label or an
# approval), skipped (its rules or path filter left it out, with the reason).
DISPATCH, HOLD, SKIP = "dispatch", "hold", "skip"
# A write the relay would have made for a shadow downstream (a dispatch, a check run, a comment, a HUD push, ...),
# kept by the outbound door (crcr.app.outbound) with what it would have carried; not a planning decision.
WITHHELD = "withheld"
SHADOW_KEPT_S = 30 * 86_400  # decisions kept this long


def mode_of(entry: Entry, default: str) -> str:
    """The downstream's own `mode`, else the deployment's."""
    return entry.settings.mode or default


@dataclass(frozen=True)
class ShadowDecision:
    """One downstream's decision for one upstream event, as a shadow relay records it."""

    delivery_id: str
    received_at: float  # when the webhook took the event: the decisions' order
    event: str  # pull_request or push (the event type a dispatch carries)
    action: str | None
    upstream: str
    pr: int | None
    head_sha: str
    repo: str
    level: int
    decision: str  # dispatch, hold or skip
    reason: str = ""  # why held or skipped; empty for a dispatch
    # The client_payload it would have sent, but the ticket and the callback URL (minted when sent), with the
    # downstream's target (a Buildkite pipeline, a workflow file) when not repository_dispatch.
    payload: dict[str, Any] | None = None
    target: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ShadowDecision:
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})


@dataclass(frozen=True)
class LiveRow:
    """One job row the relay in service left in PyTorch's HUD (`crcr_workflow_job`): which delivery dispatched which
    downstream, and the run it started."""

    delivery_id: str
    repo: str
    run_id: str
    event_type: str = ""
    pr: int | None = None
    head_sha: str = ""


# Why the two relays differ on one downstream of one event, as the comparison names it.
NOT_SEEN = "not_seen_by_shadow"  # the shadow relay has no decision for the event (it was not running, or never got it)
LOST = "no_rows_in_service"  # shadow would dispatch; the relay in service has no row (lost, or never reported)
DUPLICATED = "dispatched_twice_in_service"  # the relay in service started more than one run for the delivery
L1_NO_ROWS = "l1_never_reports"  # an L1 downstream never reports: nothing to compare


def compare(decisions: list[ShadowDecision], rows: list[LiveRow]) -> dict[str, Any]:
    """Per upstream event, the downstreams both relays dispatched, those only one did, each difference with its
    reason, and the share of (event, downstream) pairs on which they agree. L1 downstreams, which never report, are
    listed apart, not compared."""
    runs: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        runs.setdefault((r.delivery_id, r.repo.lower()), set()).add(r.run_id)
    decisions = [d for d in decisions if d.decision != WITHHELD]  # the planner's decisions are what is compared
    shadow = {(d.delivery_id, d.repo.lower()): d for d in decisions}
    about = {d.delivery_id: d for d in decisions}
    events: dict[str, dict[str, Any]] = {}

    def event(delivery: str) -> dict[str, Any]:
        if delivery not in events:
            d = about.get(delivery)
            live = next((r for r in rows if r.delivery_id == delivery), None)
            events[delivery] = {
                "delivery_id": delivery,
                "event": d.event if d else (live.event_type if live else ""),
                "pr": d.pr if d else (live.pr if live else None),
                "head_sha": d.head_sha if d else (live.head_sha if live else ""),
                "received_at": d.received_at if d else None,
                "both": [], "only_shadow": [], "only_in_service": [], "not_compared": [],
            }  # fmt: skip
        return events[delivery]

    agree = compared = 0
    reasons: dict[str, int] = {}
    for key in sorted(set(shadow) | set(runs)):
        delivery, repo = key
        d, started = shadow.get(key), runs.get(key, set())
        out = event(delivery)
        name = d.repo if d else repo
        if d is not None and d.decision == DISPATCH and not started and d.level == 1:
            out["not_compared"].append({"repo": name, "reason": L1_NO_ROWS})
            continue
        if not started and (d is None or d.decision != DISPATCH):
            continue  # neither relay dispatched it: nothing to compare
        compared += 1
        reason = None
        if d is not None and d.decision == DISPATCH and started:
            if len(started) > 1:
                reason = DUPLICATED
            out["both"].append({"repo": name, "runs": len(started)} | ({"reason": reason} if reason else {}))
        elif d is not None and d.decision == DISPATCH:
            reason = LOST
            out["only_shadow"].append({"repo": name, "reason": reason})
        else:
            reason = f"{d.decision}: {d.reason}" if d is not None else NOT_SEEN
            out["only_in_service"].append({"repo": name, "reason": reason, "runs": len(started)})
        if reason is None:
            agree += 1
        else:
            reasons[reason] = reasons.get(reason, 0) + 1
    listed = sorted(events.values(), key=lambda e: (e["received_at"] is None, -(e["received_at"] or 0)))
    return {
        "schema": 1,
        "events": listed,
        "pairs_compared": compared,
        "pairs_agreeing": agree,
        "agreement": round(agree / compared, 4) if compared else None,
        "differences": dict(sorted(reasons.items())),
    }
