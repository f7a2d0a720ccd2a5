"""The missed-webhook reconciler: which deliveries are missed, each failed attempt asked for once (at most three
per event, then given up), pacing within a run's budget, GitHub's refusals and outages, and the window."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable
from crcr.app.reconcile import PACER_KEY, ReconcileDeps, reconcile, relay_acts_on
from crcr.domain.redelivery import MAX_ASKS_PER_EVENT, OVERLAP_S, Attempt, edge_failing, missed, window_start
from tests.unit.fakes import FakeClock, FakeHookDeliveries, FakePacer, FakeRedeliveries, RecordingMetrics, door

T0 = 1_800_000_000.0
UPSTREAM_ID = 65600975


def att(
    id: int,
    guid: str,
    status: int,
    at: float,
    event: str = "pull_request",
    action: str | None = "opened",
    repo: int | None = UPSTREAM_ID,
) -> Attempt:
    return Attempt(
        id=id, guid=guid, delivered_at=at, status_code=status, event=event, action=action, repository_id=repo
    )


@dataclass
class World:
    hooks: FakeHookDeliveries = field(default_factory=FakeHookDeliveries)
    store: FakeRedeliveries = field(default_factory=FakeRedeliveries)
    pacer: FakePacer = field(default_factory=FakePacer)
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0 + 600))
    slept: list[float] = field(default_factory=list)

    def deps(self, **kw: float) -> ReconcileDeps:
        def sleep(s: float) -> None:
            self.slept.append(s)
            self.clock.t += s

        return ReconcileDeps(
            hooks=self.hooks,
            store=self.store,
            pacer=self.pacer,
            metrics=self.metrics,
            clock=self.clock,
            sleep=sleep,
            **kw,
            door=door(),
        )  # type: ignore[arg-type]

    def run(self, **kw: float):  # type: ignore[no-untyped-def]
        return reconcile(self.deps(**kw))


# ----------------------------------------------------------------------------- the rules


def test_missed_are_events_with_no_2xx_attempt_that_the_relay_acts_on_newest_attempt_first_oldest_event_first() -> None:
    attempts = [
        att(1, "ok", 202, T0),
        att(2, "failed-then-ok", 500, T0 + 1),
        att(3, "failed-then-ok", 200, T0 + 2),  # a redelivery that worked: nothing missed
        att(4, "twice", 502, T0 + 3),
        att(9, "twice", 0, T0 + 9),  # its redelivery timed out: ask for this one
        att(5, "timed-out", 0, T0 + 4, event="push", action=None),
        att(6, "not-acted-on", 500, T0 + 5, event="issues"),
        att(7, "edited", 500, T0 + 6, action="edited"),
        att(8, "too-large", 413, T0 + 7),
        att(10, "bad-body", 400, T0 + 8),
        att(11, "downstream's", 500, T0 + 10, repo=999),
        att(12, "throttled", 429, T0 + 11, event="check_run", action="rerequested"),
    ]
    got = missed(attempts, relay_acts_on, UPSTREAM_ID)
    assert [(a.guid, a.id) for a in got] == [("timed-out", 5), ("twice", 9), ("throttled", 12)]
    # Without the upstream's id, another repository's event is considered too (the webhook would ignore it).
    assert "downstream's" in [a.guid for a in missed(attempts, relay_acts_on, None)]


def test_relay_acts_on_what_the_webhook_queues() -> None:
    assert relay_acts_on("push", None) and relay_acts_on("pull_request", "synchronize")
    assert relay_acts_on("pull_request", "labeled") and relay_acts_on("check_suite", "rerequested")
    assert not relay_acts_on("pull_request", "edited") and not relay_acts_on("check_run", "completed")
    assert not relay_acts_on("ping", None) and not relay_acts_on("installation", "created")


def test_window_starts_at_the_lookback_then_a_little_before_the_last_run() -> None:
    now = T0 + 10_000
    assert window_start(now, None, 3600) == now - 3600
    assert window_start(now, now - 120, 3600) == now - 120 - OVERLAP_S
    assert window_start(now, now - 86_400, 3600) == now - 3600  # a long gap: never more than the lookback
    assert window_start(now, now + 50, 3600) == now - OVERLAP_S  # a clock ahead does not skip anything


def test_edge_failing_when_the_newest_delivery_failed_recently() -> None:
    now = T0 + 100
    assert edge_failing([att(1, "a", 202, T0), att(2, "b", 500, now - 5)], now)
    assert not edge_failing([att(1, "a", 500, T0), att(2, "b", 202, now - 5)], now)
    assert not edge_failing([att(2, "b", 500, now - 61)], now)
    assert not edge_failing([], now)


# ----------------------------------------------------------------------------- the use case


def test_only_failed_deliveries_the_relay_never_queued_are_redelivered_once() -> None:
    w = World()
    w.hooks.upstream = UPSTREAM_ID
    w.hooks.attempts = [
        att(1, "never-reached", 502, T0),
        att(2, "enqueue-failed", 500, T0 + 1),  # the webhook claimed it, then SQS refused: `received`
        att(3, "queued-but-slow", 0, T0 + 2),  # GitHub gave up after 10 s; the relay did queue it
        att(4, "fine", 202, T0 + 3),
    ]
    w.store.states = {"enqueue-failed": "received", "queued-but-slow": "queued", "fine": "queued"}
    summary = w.run()
    assert w.hooks.asked == [1, 2]
    assert summary.requested == ["never-reached", "enqueue-failed"] and summary.missed == summary.requested
    assert w.metrics.counts["WebhookRedeliveryRequested"] == 2 and w.pacer.keys == [PACER_KEY, PACER_KEY]
    # The next run sees the same failed attempts (GitHub's redeliveries are not listed yet): nothing asked again.
    w.clock.t += 300
    again = w.run()
    assert w.hooks.asked == [1, 2] and again.requested == []
    assert w.metrics.counts["WebhookRedeliveryRequested"] == 2


def test_a_redelivery_that_fails_too_is_asked_for_again_up_to_three_times_then_given_up_once() -> None:
    w = World()
    w.hooks.attempts = [att(1, "g", 500, T0)]
    for n in range(2, MAX_ASKS_PER_EVENT + 3):
        w.run()
        w.hooks.attempts.append(att(n, "g", 503, w.clock.t + 1))  # GitHub's redelivery failed as well
        w.clock.t += 300
    assert w.hooks.asked == [1, 2, 3]
    assert w.metrics.counts["WebhookRedeliveryAbandoned"] == 1  # counted (and alarmed) once, not every run
    assert w.store.rows["g"].state == "abandoned"


def test_pacing_waits_for_a_booked_slot_within_the_budget_and_leaves_the_rest_for_the_next_run() -> None:
    w = World()
    w.hooks.attempts = [att(i, f"g{i}", 500, T0 + i) for i in range(1, 5)]
    w.pacer.waits = [0.0, 2.0, 100.0]  # the third is past the run's budget
    summary = w.run(budget_s=60.0)
    assert w.hooks.asked == [1, 2] and w.slept == [2.0]
    assert summary.deferred == ["g3", "g4"] and w.metrics.counts["WebhookRedeliveryDeferred.reason=paced"] == 1
    assert w.store.cursor == T0 + 3  # the next run's window reaches back to the oldest delivery left
    w.clock.t += 300
    w.run()
    assert w.hooks.asked == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("error", "reason"),
    [(GitHubUnavailable("POST: HTTP 502"), "unavailable"), (GitHubRateLimited(60, "429"), "rate_limited")],
)
def test_github_unavailable_or_limiting_stops_the_run_and_the_same_attempt_is_asked_next_time(
    error: Exception, reason: str
) -> None:
    w = World()
    w.hooks.attempts = [att(1, "a", 500, T0), att(2, "b", 500, T0 + 1)]
    w.hooks.errors = [error]  # type: ignore[list-item]
    summary = w.run()
    assert w.hooks.asked == [] and summary.deferred == ["a", "b"]
    assert w.metrics.counts[f"WebhookRedeliveryRetried.reason={reason}"] == 1
    w.clock.t += 300
    w.run()
    assert w.hooks.asked == [1, 2]
    assert w.store.rows["a"].asks == 1  # the retry of the same attempt is not a second ask


def test_a_redelivery_github_refuses_is_given_up_and_never_asked_again() -> None:
    w = World()
    w.hooks.attempts = [att(1, "old", 500, T0), att(2, "b", 500, T0 + 1)]
    w.hooks.errors = [GitHubRejected(422, "POST /app/hook/deliveries/1/attempts: too old")]
    summary = w.run()
    assert w.hooks.asked == [2] and list(summary.abandoned) == ["old"]
    assert w.metrics.counts["WebhookRedeliveryAbandoned"] == 1
    w.clock.t += 300
    w.run()
    assert w.hooks.asked == [2]


def test_nothing_is_asked_while_the_edge_is_still_failing_and_the_window_is_kept() -> None:
    w = World()
    w.store.cursor = T0 - 100
    w.hooks.attempts = [att(1, "a", 500, T0), att(2, "b", 500, w.clock.t - 10)]
    summary = w.run()
    assert summary.edge_failing and w.hooks.asked == []
    assert w.store.cursor == T0 - 100 and w.metrics.counts["WebhookRedeliveryDeferred.reason=edge_failing"] == 1
    w.hooks.attempts.append(att(3, "c", 202, w.clock.t))  # the edge answers again
    w.clock.t += 5
    w.run()
    assert w.hooks.asked == [1, 2]


def test_the_window_follows_the_cursor_and_a_truncated_list_is_counted() -> None:
    w = World()
    w.run(lookback_s=3600)
    assert w.hooks.listed == [w.clock.t - 3600] and w.store.cursor == w.clock.t
    w.clock.t += 300
    w.hooks.truncated = True
    w.run()
    assert w.hooks.listed[-1] == w.clock.t - 300 - OVERLAP_S
    assert w.metrics.counts["WebhookReconcileTruncated"] == 1


def test_an_incomplete_listing_asks_for_what_it_read_and_keeps_the_window_for_the_next_run() -> None:
    w = World()
    w.store.cursor = T0 - 100
    w.hooks.attempts = [att(1, "a", 500, T0)]
    w.hooks.incomplete = True  # a later page could not be read
    w.run()
    assert w.hooks.asked == [1] and w.store.cursor == T0 - 100
    assert w.metrics.counts["WebhookReconcileIncomplete"] == 1
    w.hooks.incomplete = False
    w.clock.t += 300
    w.run()
    assert w.hooks.listed[-1] == w.hooks.listed[0]  # the same window again
    assert w.store.cursor == w.clock.t


def test_another_run_holding_the_claim_is_left_alone() -> None:
    w = World()
    w.hooks.attempts = [att(1, "a", 500, T0)]
    assert w.store.claim_redelivery("a", 1, "other-run", w.clock.t, 30.0, 3).value == "claimed"
    w.run()
    assert w.hooks.asked == []
    w.clock.t += 31  # its lease lapsed: it died or could not reach GitHub
    w.run()
    assert w.hooks.asked == [1]
