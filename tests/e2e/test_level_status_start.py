"""PyTorch's level-status route on a fresh `crcr local` stack: answered at once with every L2-L4 repository, and
with the figures of a seeded history within the local interval, never `503 not_computed` for a stack that has data."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from crcr.adapters.results import DynamoResults
from tests.conftest import Relay, http
from tests.integration.test_health import job

pytestmark = pytest.mark.e2e
LEVELS = {"org-two/l2-repo": "L2", "org-three/l3-repo": "L3", "org-four/L4-Repo": "L4"}


def level_status(relay: Relay) -> tuple[int, Any]:
    return http("GET", f"{relay.url}/hud/api/crcr/level-status")


def wait_for(check: Callable[[], Any], timeout_s: float) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if found := check():
            return found
        time.sleep(0.2)
    return check()


def test_a_fresh_stack_answers_at_once_and_shows_a_seeded_history_within_its_interval(
    relay_factory: Callable[..., Relay],
) -> None:
    relay = relay_factory(env={"CRCR_LEVEL_INTERVAL_S": "3"})
    # Computed at start: every L2-L4 repository, none with data yet.
    status, body = wait_for(lambda: (answer := level_status(relay))[0] == 200 and answer, 20) or level_status(relay)
    assert status == 200, body
    assert {r["repo"]: r["level"] for r in body["repos"]} == LEVELS
    assert all(r["noData"] for r in body["repos"])
    # A history lands (an L3 downstream failing most of its jobs this week): the next run shows it, no 503 between.
    results = DynamoResults(relay.stack.client("dynamodb"), relay.stack.function_env["CRCR_RESULTS_TABLE"])
    now = time.time()
    for i in range(10):
        record = job("org-three/l3-repo", f"job-{i}", "success" if i < 3 else "failure", now - 3600 - i * 60)
        assert results.put_job(record, None)

    def shown() -> Any:
        status, body = level_status(relay)
        assert status == 200, body
        l3 = next(r for r in body["repos"] if r["repo"] == "org-three/l3-repo")
        return not l3["noData"] and l3

    l3 = wait_for(shown, 20)
    assert l3 and l3["change"] == "demote", l3
    assert {"criterion": "Job Pass Rate", "measured": "30.0%", "target": "≥ 90%", "met": False} in l3["criteria"]
