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
