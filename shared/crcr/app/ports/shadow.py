"""The decisions a relay in shadow makes (crcr.domain.shadow): recorded by the planner, read by the HUD's route and
`crcr shadow compare`."""

from __future__ import annotations

from typing import Protocol

from crcr.domain.shadow import ShadowDecision


class ShadowLog(Protocol):
    def record(self, decisions: list[ShadowDecision]) -> None:
        """Keep the decisions (again, unchanged, when an event is planned again)."""
        ...

    def recent(self, upstream: str, limit: int, before: float | None = None) -> list[ShadowDecision]:
        """The newest `limit` decisions (received before `before` when given), newest first."""
        ...

    def between(self, upstream: str, start: float, end: float) -> list[ShadowDecision]:
        """Every decision for events received from `start` to `end`, oldest first."""
        ...
