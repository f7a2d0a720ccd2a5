"""What the relay remembers of upstream commits a scheduled report named, on moto's DynamoDB with the template's
state table: a commit GitHub did not have is refused from memory for minutes only, so one downstream's early report
cannot get every downstream's reports on that commit refused for days."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from crcr.adapters.branch import DynamoBranch
from tests.integration.aws import dynamodb

UPSTREAM, SHA, T0 = "pytorch/pytorch", "c" * 40, 1_800_000_000.0


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    with dynamodb(StateTable="state") as client:
        yield client


def test_a_commit_github_did_not_have_is_forgotten_after_ten_minutes_and_one_it_had_is_kept(ddb: Any) -> None:
    branch = DynamoBranch(ddb, "state")
    assert branch.commit_seen(UPSTREAM, SHA, T0) is None  # never asked
    branch.remember_commit(UPSTREAM, SHA, False, T0)
    assert branch.commit_seen(UPSTREAM, SHA, T0 + 60) is False  # a report a minute later: no second lookup
    # Ten minutes on, the item may still be in the table (DynamoDB's TTL deletes within days), and is no answer:
    # the next report on that commit asks GitHub again, which by then may have it.
    assert branch.commit_seen(UPSTREAM, SHA, T0 + 601) is None
    branch.remember_commit(UPSTREAM, SHA, True, T0 + 601)
    assert branch.commit_seen(UPSTREAM, SHA, T0 + 30 * 86_400) is True
    # A commit seen pushed to the default branch needs no lookup at all.
    branch.record_commits(UPSTREAM, [("d" * 40, T0)])
    assert branch.commit_seen(UPSTREAM, "d" * 40, T0 + 86_400) is True
