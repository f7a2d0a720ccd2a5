"""The upstream installation's write budget, shared by every upstream write (check runs, the PR comment):
a message holds the pacing slot it booked when it was last paced, and its next write spends it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from crcr.app.ports.pacing import Pacer
from crcr.domain.pacing import RESERVE_HORIZON_S

STALE_SLOT_S = 5.0  # a booked slot is spent within this long of its moment, else dropped


class Paced(Exception):
    def __init__(self, wait_s: float) -> None:
        super().__init__(f"over the installation's write budget for {wait_s:.1f} s")
        self.wait_s = wait_s


@dataclass
class Budget:
    """The pacing slot a message holds, booked when it was last paced: its next write spends it."""

    slot_at: float | None = None

    def holds(self, now: float) -> bool:
        """A slot booked for about now: the next write spends it without asking the pacer again."""
        return self.slot_at is not None and now - STALE_SLOT_S <= self.slot_at <= now + 1

    def spend(self, pacer: Pacer, installation: Callable[[], int], now: float) -> None:
        """Take a slot for one write now, or raise Paced with the wait (that later slot is then booked for
        this message: it goes back to the queue carrying `slot_at`, and spends it without asking again)."""
        held, self.slot_at = self.holds(now), None
        if held:
            return  # a slot booked for about now; a stale one is dropped (its moment has passed)
        self._book(pacer.acquire(installation(), now, reserve=True), now)

    def take(self, pacer: Pacer, installation: Callable[[], int], now: float, count: int) -> tuple[int, float]:
        """Slots for up to `count` writes now: (how many may go, how long until the next slot after them). The slot
        held is spent first, then as many as the budget has free are taken in one step. None free: the next slot is
        booked for this message and Paced raised, as `spend` does."""
        held = 1 if self.holds(now) else 0
        self.slot_at = None
        if held >= count:
            return count, 0.0
        n, wait = pacer.acquire_many(installation(), now, count - held)
        if n + held > 0:
            return n + held, wait if n + held < count else 0.0
        self._book(pacer.acquire(installation(), now, reserve=True), now)
        return 1, 0.0

    def _book(self, wait: float, now: float) -> None:
        """After asking for one slot with `reserve`: nothing to do when it is free now; otherwise hold it and raise."""
        if wait > 0:
            # Booked (nobody else gets that slot) when within the horizon; a longer wait booked nothing, and the
            # message must ask again rather than spend a slot that is not its own.
            self.slot_at = now + wait if wait <= RESERVE_HORIZON_S else None
            raise Paced(wait)
