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
        wait = pacer.acquire(installation(), now, reserve=True)
        if wait > 0:
            # Booked (nobody else gets that slot) when within the horizon; a longer wait booked nothing, and the
            # message must ask again rather than spend a slot that is not its own.
            self.slot_at = now + wait if wait <= RESERVE_HORIZON_S else None
            raise Paced(wait)
