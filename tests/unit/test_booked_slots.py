"""A booked pacing slot is the message's own only when the pacer booked it: a wait past the 15-minute horizon
books nothing, and the message asks again instead of spending a slot nobody reserved for it."""

from __future__ import annotations

import pytest

from crcr.app.budget import Budget, Paced
from crcr.domain.pacing import CONTENT_RATES, RESERVE_HORIZON_S, busy_windows
from tests.unit.fakes import FakePacer


def test_a_wait_within_the_horizon_is_held_and_spent_without_asking_again() -> None:
    pacer = FakePacer(waits=[120.0])
    budget = Budget()
    with pytest.raises(Paced):
        budget.spend(pacer, lambda: 7, now=1000.0)
    assert budget.slot_at == 1120.0
    budget.spend(pacer, lambda: 7, now=1120.5)  # back at its slot: spent, the pacer not asked
    assert pacer.keys == [7] and pacer.reserved == [True]


def test_a_wait_past_the_horizon_holds_no_slot_and_asks_again() -> None:
    pacer = FakePacer(waits=[RESERVE_HORIZON_S + 300.0])
    budget = Budget()
    with pytest.raises(Paced) as paced:
        budget.spend(pacer, lambda: 7, now=1000.0)
    assert paced.value.wait_s == RESERVE_HORIZON_S + 300.0 and budget.slot_at is None
    budget.spend(pacer, lambda: 7, now=1000.0 + RESERVE_HORIZON_S + 300.0)
    assert pacer.keys == [7, 7]  # nothing was booked for it, so it asked for a slot of its own


def test_windows_are_expected_busy_only_when_seen_busy() -> None:
    assert busy_windows(None, 100.0, CONTENT_RATES) == (False, False)
    assert busy_windows((100.5, 90.0), 100.0, CONTENT_RATES) == (True, False)
    assert busy_windows((100.5,), 100.0, CONTENT_RATES) == (False, False)  # other rates: nothing to go on
