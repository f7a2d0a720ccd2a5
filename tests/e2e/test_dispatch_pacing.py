"""A backlog of dispatches to one installation, on `crcr local`: each waits for a slot it booked, comes back once,
and is sent once, within the installation's budget."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import Relay, event_body

pytestmark = pytest.mark.e2e

REPO = "org-one/l1-repo"
EVENTS = 10


def test_a_backlog_on_one_installation_comes_back_once_per_dispatch(relay_factory: Callable[..., Relay]) -> None:
    # One write a second, two at once: 10 dispatches need 8 seconds of pacing.
    relay = relay_factory("L1:\n  - org-one/l1-repo\n", env={"CRCR_GITHUB_WRITE_RATES": "1/1+1"})
    deliveries = [f"backlog-{i}" for i in range(EVENTS)]

    def post(i: int) -> int:
        # Ten events of their own (the same bytes under a new delivery id would be a replayed duplicate).
        body = event_body("pull_request.opened.json", pr_title=f"backlog {i}")
        return relay.post("pull_request", body, delivery=deliveries[i])[0]

    with ThreadPoolExecutor(EVENTS) as pool:  # all at once: a backlog, however long each post takes on a busy host
        assert list(pool.map(post, range(EVENTS))) == [202] * EVENTS
    relay.wait_dispatches({REPO: EVENTS}, timeout_s=90, settle_s=2)

    sent = relay.github.dispatches(REPO)
    assert sorted(d["client_payload"]["delivery_id"] for d in sent) == deliveries  # each once
    paced = relay.metric("DispatchRetried.reason=paced")
    # Those that found the budget spent waited (at most the eight beyond the burst: fewer when a busy host spreads
    # the events' planning over more than a second); each came back for the slot it booked, not once a second until
    # a slot happened to be free (which was 1 + 2 + ... + 8 = 36 re-queues).
    assert 1 <= paced <= 1.5 * (EVENTS - 2)
    assert relay.metric("DispatchDuplicate") == 0 and relay.metric("DispatchSent") == EVENTS
