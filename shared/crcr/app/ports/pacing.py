"""Budgets of content-creating calls (per GitHub installation, per Buildkite organization): take a slot, or read how
full the budget is."""

from __future__ import annotations

from typing import Protocol

from crcr.domain.pacing import WindowLevel


class Pacer(Protocol):
    def acquire(self, key: int | str, now: float, reserve: bool = False) -> float:
        """0 when a call budgeted under `key` (a GitHub installation id, a Buildkite organization) may go now;
        otherwise seconds to wait. With `reserve`, a wait up to RESERVE_HORIZON_S (15 minutes, one SQS delay)
        books that slot: the caller then makes its call at that time without asking again. A longer wait books
        nothing: ask again then."""
        ...

    def acquire_many(self, key: int | str, now: float, count: int) -> tuple[int, float]:
        """Up to `count` slots now, taken in one step: (how many may go now, seconds until the next one is free).
        (0, wait) when none is free: nothing is booked (book one with `acquire(..., reserve=True)`)."""
        ...


class BudgetGauge(Protocol):
    def level(self, key: int | str, now: float) -> WindowLevel:
        """Read-only: how full the longest window of `key`'s budget is (GitHub's hour for an installation),
        without taking a slot. The pacer answers it from what it saw at its own last booking when that is recent."""
        ...
