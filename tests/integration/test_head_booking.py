"""A head's pass booking on moto (crcr.adapters.check_runs): a request for sooner takes over a booked pass that waits
for a timer of its own, and the row ends as it always did."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from crcr.adapters.check_runs import DynamoCheckRuns
from tests.integration.aws import dynamodb

HEAD = ("pytorch/pytorch", "a" * 40)


@pytest.fixture
def ddb() -> Iterator[Any]:
    with dynamodb(StateTable="state") as client:
        yield client


def _sync_row(ddb: Any) -> dict[str, Any]:
    [row] = [i for i in ddb.scan(TableName="state")["Items"] if i["sk"]["S"] == "SYNC"]
    return dict(row)


def test_a_request_for_sooner_takes_over_a_pass_waiting_for_its_timer_and_the_row_ends_as_before(ddb: Any) -> None:
    store = DynamoCheckRuns(ddb, "state")
    assert store.book_head(*HEAD, "t1", 100.0, 105.0, 0.0, {"x o/four"}) == "t1"
    locked, _ = store.lock_head(*HEAD, "t1", 105.0, 90.0, 105.5, 75.0)
    assert locked is not None
    # The pass keeps its booking to wait for a repository's settle at 165: its own timer.
    assert store.finish_head(*HEAD, "t1", locked, 106.0, {"x o/four"}, keep=True, timer_at=165.0) is None  # not asked
    assert _sync_row(ddb)["timer_at"] == {"N": "165.0"}
    # A request due sooner than that (a late label, at 115 + 5 s) takes the booking over: its own message runs it.
    assert store.book_head(*HEAD, "t2", 115.0, 120.0, 0.0, {"x o/gpu"}) == "t2"
    assert "timer_at" not in _sync_row(ddb)
    assert store.lock_head(*HEAD, "t1", 165.0, 90.0, 165.5, 135.0)[1].pending == "t2"  # t1's message: superseded
    # A request due later than a timer joins the booking, as any request does.
    locked, row = store.lock_head(*HEAD, "t2", 120.0, 90.0, 120.5, 90.0)
    assert locked is not None and row.rows == {"x o/gpu"}
    store.finish_head(*HEAD, "t2", locked, 121.0, {"x o/gpu"}, keep=True, timer_at=124.0)
    assert store.book_head(*HEAD, "t3", 122.0, 127.0, 0.0, set()) == "t2"
    # The pass runs at its due time and ends: the row holds what it held before bookings had timers.
    locked, _ = store.lock_head(*HEAD, "t2", 127.0, 90.0, 127.5, 97.0)
    assert locked is not None and store.finish_head(*HEAD, "t2", locked, 128.0, set(), keep=False) is None
    assert set(_sync_row(ddb)) == {"pk", "sk", "version", "expires_at"}


def test_a_pass_running_is_never_taken_over(ddb: Any) -> None:
    store = DynamoCheckRuns(ddb, "state")
    store.book_head(*HEAD, "t1", 100.0, 105.0, 0.0, set())
    locked, _ = store.lock_head(*HEAD, "t1", 105.0, 90.0, 105.5, 75.0)
    assert locked is not None
    store.finish_head(*HEAD, "t1", locked, 106.0, set(), keep=True, timer_at=165.0)
    locked, _ = store.lock_head(*HEAD, "t1", 165.0, 90.0, 165.5, 135.0)  # the timer came: the pass runs
    assert locked is not None
    assert store.book_head(*HEAD, "t2", 166.0, 171.0, 0.0, set()) == "t1"  # asked while it runs: it runs once more
    assert store.finish_head(*HEAD, "t1", locked, 167.0, set(), keep=False) == 171.0
