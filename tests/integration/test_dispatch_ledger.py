"""The dispatch ledger's claim and the pacing cells against DynamoDB (moto server over HTTP): what each write costs,
and that writers racing on one cell never exceed the budget."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from crcr.adapters.ledger import DynamoLedger
from crcr.adapters.pacer import DynamoPacer
from crcr.app.ports.ledger import LedgerState
from crcr.contracts.messages import DispatchMessage
from crcr.domain.levels import Level
from crcr.domain.pacing import CONTENT_RATES, RESERVE_HORIZON_S, Rate
from crcr.domain.ticket import TicketClaims
from tests.integration.aws import dynamodb

TABLE = "state"


class Calls:
    """DynamoDB operations this client made, by name (botocore's `before-call` event, once per call)."""

    def __init__(self, client: Any) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        client.meta.events.register("before-call.dynamodb", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.counts[model.name] += 1

    def take(self) -> dict[str, int]:
        with self._lock:
            counts, self.counts = dict(self.counts), Counter()
        return counts


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    with dynamodb(StateTable="state") as client:
        yield client


def cell(ddb: Any, key: int | str) -> dict[str, Any]:
    item = ddb.get_item(TableName=TABLE, Key={"pk": {"S": f"PACE#{key}"}, "sk": {"S": "CONTENT"}}, ConsistentRead=True)
    return dict(item["Item"])


def message(delivery: str) -> DispatchMessage:
    return DispatchMessage(
        delivery_id=delivery,
        event_type="pull_request",
        action="synchronize",
        target_repo="Org/Backend",
        level=Level.L2,
        upstream="pytorch/pytorch",
        pr_number=5,
        head_sha="a" * 40,
        payload={},
        planned_at=0.0,
    )


def test_a_slot_is_one_write_and_no_read_once_the_cell_is_known(ddb: Any) -> None:
    calls = Calls(ddb)
    pacer = DynamoPacer(ddb, TABLE)
    assert pacer.acquire(1, now=1000.0) == 0.0
    assert calls.take() == {"UpdateItem": 2}  # never seen: a take that finds no cell, then the cell created
    for i in range(10):
        assert pacer.acquire(1, now=1000.0 + i * 0.1) == 0.0
    assert calls.take() == {"UpdateItem": 10}
    # Another instance (another Lambda) that never saw the cell: one refusal brings it back, then one write.
    other = DynamoPacer(ddb, TABLE)
    assert other.acquire(1, now=1002.0) == 0.0
    assert calls.take() == {"UpdateItem": 2}
    assert int(cell(ddb, 1)["version"]["N"]) == 12  # each write counted: created, ten takes, the other's


class OneRequestAtATime:
    """The client with each request atomic, as DynamoDB makes a conditional write: moto's server evaluates a
    condition and writes without a lock, so two racing requests can both pass it there (never in DynamoDB). The
    callers still interleave between their requests, which is the race under test."""

    def __init__(self, client: Any) -> None:
        self._client, self._lock = client, threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return method(*args, **kwargs)

        return call


def test_workers_racing_on_one_cell_take_exactly_the_burst_and_book_distinct_slots(ddb: Any) -> None:
    rates = (Rate(5, 60.0, burst=3),)  # 4 at once, then one every 12 s
    shared = OneRequestAtATime(ddb)
    workers = [DynamoPacer(shared, TABLE, rates=rates) for _ in range(4)]

    def ask(i: int) -> float:
        return workers[i % 4].acquire("race", now=5000.0, reserve=True)

    with ThreadPoolExecutor(max_workers=12) as pool:
        waits = sorted(pool.map(ask, range(24)))
    assert waits[:4] == [0.0] * 4
    # Every later caller got a slot of its own, one interval after the one before: none shared, none skipped.
    assert waits[4:] == [12.0 * k for k in range(1, 21)]
    assert cell(ddb, "race")["tats"]["L"] == [{"N": str(5000.0 + 24 * 12.0)}]


def test_the_hourly_window_holds_under_takes_in_place(ddb: Any) -> None:
    pacer = DynamoPacer(ddb, TABLE)  # GitHub's budget: 60 a minute + 15, 440 an hour + 50
    sent = [t / 10 for t in range(0, 36_000) if pacer.acquire("hour", now=t / 10) == 0.0]
    per_hour = max(sum(1 for s in sent if start <= s < start + 3600) for start in range(0, 3600, 60))
    assert per_hour <= CONTENT_RATES[1].count + CONTENT_RATES[1].burst
    assert max(sum(1 for s in sent if start <= s < start + 60) for start in range(0, 3600, 5)) <= 75


def test_a_cell_written_by_read_then_put_code_is_honoured_and_stays_versioned(ddb: Any) -> None:
    # As the pacer before this one wrote it (GetItem, then PutItem under the version): ten slots ahead, in use.
    ddb.put_item(
        TableName=TABLE,
        Item={
            "pk": {"S": "PACE#old"},
            "sk": {"S": "CONTENT"},
            "tats": {"L": [{"N": "1025"}, {"N": "1100"}]},
            "version": {"N": "7"},
            "expires_at": {"N": "9999999999"},
        },
    )
    pacer = DynamoPacer(ddb, TABLE)
    assert pacer.acquire("old", now=1000.0) == pytest.approx(10.0)  # 1025 - 15 s of burst: not before 1010
    assert int(cell(ddb, "old")["version"]["N"]) == 7  # asked without booking: nothing written
    assert pacer.acquire("old", now=1010.0) == 0.0
    item = cell(ddb, "old")
    assert [float(v["N"]) for v in item["tats"]["L"]] == [1026.0, pytest.approx(1100 + 3600 / 440)]
    assert int(item["version"]["N"]) == 8  # the old code's version check sees this write


def test_new_rates_start_the_cell_afresh_and_a_wait_past_the_horizon_books_nothing(ddb: Any) -> None:
    DynamoPacer(ddb, TABLE).acquire("rates", now=100.0)
    one_window = DynamoPacer(ddb, TABLE, rates=(Rate(1, 3600.0),))
    assert one_window.acquire("rates", now=100.0) == 0.0
    assert len(cell(ddb, "rates")["tats"]["L"]) == 1
    assert one_window.acquire("rates", now=100.0, reserve=True) == 3600.0  # an hour away: past the horizon
    assert float(cell(ddb, "rates")["tats"]["L"][0]["N"]) == 3700.0  # nothing booked
    assert RESERVE_HORIZON_S < 3600.0


def ticket_claims(delivery: str, dispatch_id: str) -> TicketClaims:
    """The ticket of `message(delivery)`'s dispatch, as the dispatcher signs it."""
    return TicketClaims(
        sub="Org/Backend",
        repo_id=5001,
        delivery_id=delivery,
        upstream="pytorch/pytorch",
        pr=5,
        head_sha="a" * 40,
        level=2,
        iat=100,
        exp=200,
        jti=dispatch_id,
    )


def test_the_claim_refused_brings_the_row_and_the_mark_keeps_what_the_claim_wrote(ddb: Any) -> None:
    state = DynamoLedger(ddb, TABLE, start_timeout_s=3600)
    calls = Calls(ddb)
    first = message("d-claim")
    claim = state.claim(first, "did-1", 100.0, 30.0, "owner-a", 5001, "Org/Backend", row=True)
    assert claim.taken and claim.row is not None and claim.row.unsettled == {"owner-a"}
    held = state.claim(first, "did-1", 110.0, 30.0, "owner-b", 5001, "Org/Backend")
    assert not held.taken and held.row is not None and held.row.lease_until == 130.0  # another's live claim
    assert calls.take() == {"UpdateItem": 2}  # no read before either claim
    claims = ticket_claims("d-claim", "did-1")
    state.mark_dispatched(first, claims, 101.0)
    repeat = state.claim(first, "did-1", 500.0, 30.0, "owner-c", 5001, "Org/Backend")
    assert not repeat.taken and repeat.row is not None and repeat.row.state is LedgerState.DISPATCHED
    row = state.get("d-claim", "org/backend")
    assert row is not None
    # What a callback binds to, written by the claim and kept by the mark.
    assert (row.repo, row.repo_id, row.dispatch_id, row.upstream, row.head_sha, row.pr, row.level) == (
        "Org/Backend",
        5001,
        "did-1",
        "pytorch/pytorch",
        "a" * 40,
        5,
        2,
    )
    assert row.dispatched_at == 101.0 and row.lease_until == 0.0 and row.ci == "github"


def test_a_row_says_whether_the_sweeper_still_waits_for_its_first_job(ddb: Any) -> None:
    # A callback clears the start watch only when the row it read carries one: the first job of a dispatch
    # writes the ledger, the rest of its jobs do not.
    state = DynamoLedger(ddb, TABLE, start_timeout_s=3600)
    first = message("d-watch")
    assert state.claim(first, "did-w", 100.0, 30.0, "owner-a", 5001, "Org/Backend").taken
    claims = ticket_claims("d-watch", "did-w")
    state.mark_dispatched(first, claims, 101.0)
    row = state.get("d-watch", "Org/Backend")
    assert row is not None and row.start_watched
    assert "d-watch" in [r.delivery_id for r in state.due_starts(101.0 + 3600)]
    state.clear_start_watch("d-watch", "Org/Backend")
    row = state.get("d-watch", "Org/Backend")
    assert row is not None and not row.start_watched
    assert "d-watch" not in [r.delivery_id for r in state.due_starts(101.0 + 3600)]
