"""Reconciler adapters over the wire: the redelivery rows and cursor on moto server, the App's delivery list and
redeliveries on the GitHub double (cursor pages, the window, the App's JWT), and the use case on both."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from crcr.adapters.deliveries import DynamoDeliveries
from crcr.adapters.github import GitHubApp, GitHubHookDeliveries
from crcr.adapters.pacer import DynamoPacer
from crcr.adapters.redeliveries import DynamoRedeliveries
from crcr.app.ports.deliveries import RedeliveryClaim
from crcr.app.ports.github import GitHubRejected, GitHubUnavailable
from crcr.app.reconcile import ReconcileDeps, reconcile
from crcr.domain.pacing import REDELIVERY_RATES
from crcr.local.stack import free_port
from tests.conftest import APP_ID
from tests.doubles.github_double import GitHubDouble, Reply
from tests.integration.aws import dynamodb
from tests.unit.fakes import RecordingMetrics, door, permit

TABLE = "state"
UPSTREAM = "pytorch/pytorch"
EVENT = {"action": "opened", "installation": {"id": 100}, "repository": {"id": 65600975, "full_name": UPSTREAM}}


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    with dynamodb(StateTable="state") as client:
        yield client


def test_each_failed_attempt_is_claimed_once_at_most_three_per_event(ddb: Any) -> None:
    a, b = DynamoRedeliveries(ddb, TABLE), DynamoRedeliveries(ddb, TABLE)
    assert a.claim_redelivery("g1", 11, "a", 100.0, 30.0, 3) is RedeliveryClaim.CLAIMED
    assert b.claim_redelivery("g1", 11, "b", 101.0, 30.0, 3) is RedeliveryClaim.BUSY
    b.finish_redelivery("g1", 11, "b", "requested", 102.0)  # not b's claim: nothing changes
    a.release_redelivery("g1", 11, "a")  # GitHub was unavailable: the same attempt may be asked again
    assert b.claim_redelivery("g1", 11, "b", 103.0, 30.0, 3) is RedeliveryClaim.CLAIMED
    b.finish_redelivery("g1", 11, "b", "requested", 104.0)
    assert a.claim_redelivery("g1", 11, "a", 105.0, 30.0, 3) is RedeliveryClaim.ASKED
    # GitHub's redelivery failed too: its attempt is a new one, asked for again; then a third.
    assert a.claim_redelivery("g1", 12, "a", 200.0, 30.0, 3) is RedeliveryClaim.CLAIMED
    a.finish_redelivery("g1", 12, "a", "requested", 201.0)
    assert a.claim_redelivery("g1", 13, "a", 300.0, 30.0, 3) is RedeliveryClaim.CLAIMED
    a.finish_redelivery("g1", 13, "a", "requested", 301.0)
    assert a.claim_redelivery("g1", 14, "a", 400.0, 30.0, 3) is RedeliveryClaim.EXHAUSTED
    assert b.claim_redelivery("g1", 15, "b", 500.0, 30.0, 3) is RedeliveryClaim.ABANDONED
    row = ddb.get_item(TableName=TABLE, Key={"pk": {"S": "DLV#g1"}, "sk": {"S": "REDELIVERY"}})["Item"]
    assert (row["asks"]["N"], row["state"]["S"], row["last_id"]["N"]) == ("3", "abandoned", "13")
    with pytest.raises(ValueError, match="unknown redelivery status"):
        a.finish_redelivery("g1", 13, "a", "maybe", 1.0)


def test_the_webhooks_own_record_and_the_cursor(ddb: Any) -> None:
    store, webhook = DynamoRedeliveries(ddb, TABLE), DynamoDeliveries(ddb, TABLE)
    assert store.delivery_state("g2") is None
    webhook.claim_delivery("g2", "push", 100.0, "b" * 64)
    assert store.delivery_state("g2") == "received"  # the enqueue has not happened (or failed)
    webhook.mark_queued("g2", 101.0)
    assert store.delivery_state("g2") == "queued"
    assert store.reconcile_cursor() is None
    store.save_reconcile_cursor(1234.5)
    assert store.reconcile_cursor() == 1234.5


@pytest.fixture
def sender(github: GitHubDouble) -> Iterator[GitHubDouble]:
    """The double delivering to a port nothing listens on: every delivery fails (no connection)."""
    github.set_webhook(f"http://127.0.0.1:{free_port()}/webhook", "s3cret")
    github.install(UPSTREAM, installation_id=100, repo_id=65600975)
    yield github


def test_deliveries_are_read_back_to_the_window_through_cursor_pages(sender: GitHubDouble, app_key_pem: str) -> None:
    app = GitHubApp(sender.url, APP_ID, app_key_pem, time.time)
    made = [sender.deliver("pull_request", EVENT | {"n": i}) for i in range(250)]
    hooks = GitHubHookDeliveries(app, UPSTREAM)
    since = float(int(made[0].delivered_at))  # GitHub lists whole seconds
    listing = hooks.list_deliveries(since, max_pages=10)
    assert sorted(a.id for a in listing.attempts) == [d.id for d in made] and not listing.truncated
    assert {(a.status_code, a.event, a.action, a.repository_id) for a in listing.attempts} == {
        (0, "pull_request", "opened", 65600975)
    }
    pages = [r for r in sender.requests if r.path == "/app/hook/deliveries"]
    assert len(pages) == 3 and [r.query.get("cursor") is None for r in pages] == [True, False, False]
    assert all(r.headers["authorization"].startswith("Bearer ey") for r in pages)  # the App's JWT
    # A page cap shorter than the window: what was read, and the listing says it stopped early.
    short = hooks.list_deliveries(since, max_pages=1)
    assert len(short.attempts) == 100 and short.truncated
    # A window that starts after the older deliveries stops at the first page reaching past it.
    sender.reset_requests()
    assert hooks.list_deliveries(time.time() + 60, max_pages=10).attempts == []
    assert len([r for r in sender.requests if r.path == "/app/hook/deliveries"]) == 1
    assert hooks.upstream_id() == 65600975


def test_a_page_github_fails_is_asked_again_and_one_it_keeps_failing_ends_the_listing_incomplete(
    sender: GitHubDouble, app_key_pem: str
) -> None:
    app = GitHubApp(sender.url, APP_ID, app_key_pem, time.time)
    made = [sender.deliver("pull_request", EVENT | {"n": i}) for i in range(250)]
    waits: list[float] = []
    hooks = GitHubHookDeliveries(app, UPSTREAM, sleep=waits.append)
    since = float(int(made[0].delivered_at))
    # The second page fails twice (502, then 503), then answers: read after waits of 0.5 s and 1 s.
    sender.script("GET", r"/app/hook/deliveries", [Reply.normal(), Reply(502), Reply(503)])
    listing = hooks.list_deliveries(since, max_pages=10)
    assert len(listing.attempts) == 250 and not listing.incomplete and waits == [0.5, 1.0]
    # Three failures in a row on the third page: the two pages read are kept, and the listing says it is incomplete.
    sender.script("GET", r"/app/hook/deliveries", [Reply.normal(), Reply.normal(), *[Reply(502)] * 3])
    partial = hooks.list_deliveries(since, max_pages=10)
    assert len(partial.attempts) == 200 and partial.incomplete and not partial.truncated
    # A rate limit on a later page waits as GitHub asks (when it asks for seconds), then reads on.
    waits.clear()
    sender.script("GET", r"/app/hook/deliveries", [Reply.normal(), Reply.too_many_requests(retry_after=2)])
    assert len(hooks.list_deliveries(since, max_pages=10).attempts) == 250 and len(waits) == 1 and waits[0] >= 2
    # A longer wait ends the listing there, incomplete.
    sender.script("GET", r"/app/hook/deliveries", [Reply.normal(), Reply.too_many_requests(retry_after=600)])
    assert hooks.list_deliveries(since, max_pages=10).incomplete
    # The first page failing leaves nothing to go on: the run fails.
    sender.script("GET", r"/app/hook/deliveries", [Reply(502)] * 3)
    with pytest.raises(GitHubUnavailable):
        hooks.list_deliveries(since, max_pages=10)


def test_a_redelivery_is_asked_with_the_apps_jwt(sender: GitHubDouble, app_key_pem: str) -> None:
    app = GitHubApp(sender.url, APP_ID, app_key_pem, time.time)
    hooks = GitHubHookDeliveries(app, UPSTREAM)
    failed = sender.deliver("push", {"ref": "refs/heads/main"})
    hooks.redeliver(failed.id, permit=permit(action="redelivery"))
    assert sender.wait_redeliveries()
    assert [d.redelivery for d in sender.deliveries_of(failed.guid)] == [False, True]
    with pytest.raises(GitHubRejected) as refused:
        hooks.redeliver(1, permit=permit(action="redelivery"))
    assert refused.value.status == 404
    sender.script("POST", r"/app/hook/deliveries/\d+/attempts", [Reply(502)])
    with pytest.raises(GitHubUnavailable):
        hooks.redeliver(failed.id, permit=permit(action="redelivery"))


def test_the_use_case_on_both_asks_once_per_failed_attempt(sender: GitHubDouble, app_key_pem: str, ddb: Any) -> None:
    app = GitHubApp(sender.url, APP_ID, app_key_pem, time.time)
    failed = [sender.deliver("pull_request", EVENT | {"n": i}) for i in range(3)]
    metrics = RecordingMetrics()
    deps = ReconcileDeps(
        hooks=GitHubHookDeliveries(app, UPSTREAM),
        store=DynamoRedeliveries(ddb, TABLE),
        pacer=DynamoPacer(ddb, TABLE, rates=REDELIVERY_RATES, cell="REDELIVER"),
        metrics=metrics,
        clock=type("Clock", (), {"now": staticmethod(time.time)})(),
        sleep=time.sleep,
        edge_settle_s=0.0,
        door=door(),  # every delivery here fails: the test does not wait for the edge to answer again
    )
    summary = reconcile(deps)
    assert sender.wait_redeliveries()
    assert sorted(summary.requested) == sorted(d.guid for d in failed)
    asked = [r.path for r in sender.requests if r.path.endswith("/attempts")]
    assert sorted(asked) == sorted(f"/app/hook/deliveries/{d.id}/attempts" for d in failed)
    # The redeliveries failed too (nothing listens): each is one more ask for its event, once.
    reconcile(deps)
    assert sender.wait_redeliveries()
    assert len([r for r in sender.requests if r.path.endswith("/attempts")]) == 6
    assert metrics.counts["WebhookRedeliveryRequested"] == 6
