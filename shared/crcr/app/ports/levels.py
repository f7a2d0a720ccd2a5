"""Levels over time: when each downstream reached L2, the open demotion PRs, and what a demotion PR is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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

    def clear_demotion(self, repo: str, closed_at: float | None = None) -> None:
        """Forget it; `closed_at`: the relay closed its PR then (the repository recovered), which starts a cool-down."""
        ...

    def cooling(self, now: float, within: float) -> set[str]:
        """Repository keys whose demotion PR the relay closed within `within` seconds before `now`."""
        ...


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


class DemotionReader(Protocol):
    def since(self, repo: str) -> float | None:
        """When the repository's open demotion started (None: none is open)."""
        ...


@dataclass(frozen=True)
class PullRef:
    number: int
    body: str
    title: str = ""
