"""The bound runs and the ledger's index by dispatch id, on moto's DynamoDB with the template's state table: a run
only moves forward, each completed attempt's jobs are read once, a watched run is found when due."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from crcr.adapters.ledger import DynamoLedger
from crcr.adapters.runs import DynamoRuns
from crcr.app.ports.runs import BoundRun
from crcr.contracts.messages import DispatchMessage
from crcr.domain.levels import Level
from crcr.domain.runs import run_progress
from crcr.domain.ticket import TicketClaims
from tests.integration.aws import dynamodb

TABLE = "state"


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    with dynamodb(StateTable=TABLE) as client:
        yield client


def run(action: str, attempt: int = 1, run_id: str = "42") -> BoundRun:
    return BoundRun(
        repo="Org/Backend",
        run_id=run_id,
        delivery_id="d-1",
        dispatch_id="a" * 32,
        attempt=attempt,
        status=action,
        progress=run_progress(attempt, action),
    )


def test_a_run_moves_forward_only(ddb: Any) -> None:
    runs = DynamoRuns(ddb, TABLE)
    assert runs.record(run("requested"), 100.0, 200.0)
    assert runs.record(run("completed"), 110.0, None)
    assert not runs.record(run("in_progress"), 120.0, 220.0)  # a late in_progress: stale
    assert not runs.record(run("completed"), 121.0, None)  # a redelivery: the same state
    stored = runs.bound("org/backend", "42")  # names compare case-insensitively
    assert stored is not None and (stored.status, stored.attempt, stored.dispatch_id) == ("completed", 1, "a" * 32)
    assert runs.due_runs(10_000.0) == []  # completed: no longer watched
    assert runs.record(run("requested", attempt=2), 130.0, 300.0)  # a re-run is a later attempt
    assert [r.attempt for r in runs.due_runs(300.0)] == [2]


def test_each_attempt_is_reconciled_once_and_a_released_claim_can_be_taken_again(ddb: Any) -> None:
    runs = DynamoRuns(ddb, TABLE)
    runs.record(run("completed", run_id="77"), 100.0, None)
    assert runs.claim_reconcile("Org/Backend", "77", 1, "w1", 100.0, 60.0)
    assert not runs.claim_reconcile("Org/Backend", "77", 1, "w2", 101.0, 60.0)  # held
    runs.release("Org/Backend", "77", "w1")  # GitHub was unavailable
    assert runs.claim_reconcile("Org/Backend", "77", 1, "w2", 102.0, 60.0)
    runs.reconciled("Org/Backend", "77", 1, "w2")
    assert not runs.claim_reconcile("Org/Backend", "77", 1, "w3", 500.0, 60.0)  # done: never read again
    assert runs.claim_reconcile("Org/Backend", "77", 2, "w3", 500.0, 60.0)  # the next attempt is its own
    assert not runs.claim_reconcile("Org/Backend", "no-such-run", 1, "w3", 500.0, 60.0)
    stored = runs.bound("Org/Backend", "77")
    assert stored is not None and stored.reconciled == {1}


def test_a_dispatch_id_finds_its_ledger_row_and_only_that(ddb: Any) -> None:
    ledger = DynamoLedger(ddb, TABLE, start_timeout_s=3600, run_create_timeout_s=300)
    message = DispatchMessage(
        delivery_id="d-index",
        event_type="pull_request",
        target_repo="Org/Backend",
        level=Level.L2,
        upstream="pytorch/pytorch",
        pr_number=5,
        head_sha="a" * 40,
        payload={},
        planned_at=0.0,
    )
    assert ledger.claim(message, "b" * 32, 100.0, 30.0, "owner", 5001, "Org/Backend").taken
    claims = TicketClaims(
        sub="Org/Backend", repo_id=5001, delivery_id="d-index", upstream="pytorch/pytorch", pr=5,
        head_sha="a" * 40, level=2, iat=100, exp=200, jti="b" * 32,
    )  # fmt: skip
    ledger.mark_dispatched(message, claims, 101.0)
    row = ledger.by_dispatch("b" * 32)
    assert row is not None and (row.delivery_id, row.repo, row.head_sha) == ("d-index", "Org/Backend", "a" * 40)
    assert ledger.by_dispatch("c" * 32) is None
    # A GitHub dispatch is first looked at after the run-create time-out, not the hour-long start time-out.
    assert [r.delivery_id for r in ledger.due_starts(101.0 + 300)] == ["d-index"]
    ledger.rewatch_start("d-index", "Org/Backend", 101.0 + 3600)
    assert ledger.due_starts(101.0 + 300) == []
