"""What a relay in shadow decided (crcr.domain.shadow), for `GET /hud/api/crcr/shadow` and the pages: the newest
decisions first, each with the event, the downstream, the decision and its reason, and the payload it would have
sent."""

from __future__ import annotations

from typing import Any

from crcr.app.ports.shadow import ShadowLog

SHADOW_PAGE = 200  # decisions the route serves


def shadow_page(log: ShadowLog, upstream: str, mode: str, limit: int = SHADOW_PAGE) -> dict[str, Any]:
    decisions = log.recent(upstream, limit)
    return {"schema": 1, "upstream": upstream, "mode": mode, "decisions": [d.to_json() for d in decisions]}
