"""No webhook is lost at the edge: the relay's webhook answers 5xx for a window (its events queue refuses every
message), GitHub (the double, as the App's webhook sender) records those deliveries as failed, and the
reconciler on `crcr local` has each redelivered once; every event of the window is dispatched exactly once."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.conftest import LISTED, WEBHOOK_SECRET, Relay, event_body
from tests.doubles.github_double import GitHubDouble
from tests.e2e.test_relay import only_allowed_endpoints

pytestmark = pytest.mark.e2e

UPSTREAM_ID = 65600975


def pr(number: int) -> bytes:
    head = {"ref": f"feature-{number}", "sha": f"{number:040x}"}
    return event_body("pull_request.opened.json", number=number, pr_number=number, pr_head=head)


def push(n: int) -> bytes:
    return event_body("push.main.json", after=f"{0xABC000 + n:040x}", before=f"{0xABC000 + n - 1:040x}")


def set_events_queue_limit(relay: Relay, size: int) -> None:
    """The fault: SQS refuses every message over `size` bytes on EventsQueue (the webhook's enqueue fails: 500)."""
    sqs = relay.stack.client("sqs")
    sqs.set_queue_attributes(
        QueueUrl=relay.stack.queue_urls["EventsQueue"], Attributes={"MaximumMessageSize": str(size)}
    )


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_window_of_failed_webhooks_is_redelivered_once_each_and_dispatched_exactly_once(
    relay_factory: Callable[..., Relay], github: GitHubDouble
) -> None:
    relay = relay_factory(env={"CRCR_RECONCILE_INTERVAL_S": "1"})
    github.install("pytorch/pytorch", installation_id=200, repo_id=UPSTREAM_ID)
    github.set_webhook(f"{relay.url}/webhook", WEBHOOK_SECRET)

    before = github.deliver("pull_request", pr(1))
    assert before.status_code == 202

    set_events_queue_limit(relay, 1024)
    window = [github.deliver("pull_request", pr(n)) for n in (2, 3)] + [github.deliver("push", push(1))]
    assert [d.status_code for d in window] == [500, 500, 500]  # GitHub shows them failed; it never retries
    # The reconciler runs meanwhile (every second here; later on a busy host): the newest delivery failed moments
    # ago, so it asks for nothing.
    wait_for(lambda: relay.metric("WebhookRedeliveryDeferred.reason=edge_failing") >= 1, 30, "a run in the window")
    assert not [r for r in github.requests if r.path.endswith("/attempts")]
    set_events_queue_limit(relay, 262144)

    after = github.deliver("pull_request", pr(4))  # the edge answers again
    assert after.status_code == 202
    wait_for(lambda: all(github.deliveries_of(d.guid)[-1].ok for d in window), 30, "the window's redeliveries")
    relay.wait_dispatches(dict.fromkeys(LISTED, 5), timeout_s=30, settle_s=3)  # and a few more reconciler runs

    # Each missed event was asked for once, redelivered with its guid, queued once (the webhook's claim had been
    # made before SQS refused: `received`, so the redelivery is queued, not a duplicate) and dispatched once.
    asked = sorted(r.path for r in github.requests if r.path.endswith("/attempts"))
    assert asked == sorted(f"/app/hook/deliveries/{d.id}/attempts" for d in window)
    for d in window:
        assert [(x.redelivery, x.status_code) for x in github.deliveries_of(d.guid)] == [(False, 500), (True, 202)]
    assert relay.metric("WebhookRedeliveryRequested") == 3 and relay.metric("WebhookRequeued") == 3
    assert relay.metric("WebhookRedeliveryDeferred.reason=edge_failing") >= 1
    for repo in LISTED:
        delivered = [p["client_payload"]["delivery_id"] for p in github.dispatches(repo)]
        assert sorted(delivered) == sorted(d.guid for d in [before, *window, after]), repo
    only_allowed_endpoints(relay)
