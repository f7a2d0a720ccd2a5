"""Dispatcher rules with recording fakes: idempotence, supersession, retries, dead letters."""

from __future__ import annotations

import dataclasses

import pytest

from crcr.app.dispatch import DispatchBatch, DispatchDeps, PrHeads, Result, dispatch, dispatch_id
from crcr.app.outbound import Permit
from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable
from crcr.app.ports.ledger import LedgerState
from crcr.contracts.messages import DispatchMessage
from crcr.domain.levels import Level
from crcr.domain.retry import RetryPolicy
from tests.unit.fakes import (
    FakeClock,
    FakeDispatchQueue,
    FakeGitHub,
    FakePacer,
    FakeSigner,
    FakeState,
    RecordingMetrics,
    door,
)

REPO = "Org/Backend"


def message(**changes: object) -> DispatchMessage:
    base = DispatchMessage(
        delivery_id="d-1",
        event_type="pull_request",
        action="synchronize",
        target_repo=REPO,
        level=Level.L4,
        upstream="pytorch/pytorch",
        pr_number=5,
        head_sha="new",
        payload={"action": "synchronize"},
        planned_at=0.0,
    )
    return base.model_copy(update=changes)


@pytest.fixture
def deps() -> DispatchDeps:
    state = FakeState()  # the ledger and the PR heads, as one table holds both
    return DispatchDeps(
        github=FakeGitHub(installed={REPO.lower()}),
        ledger=state,
        prs=state,
        queue=FakeDispatchQueue(),
        pacer=FakePacer(),
        signer=FakeSigner(),
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        callback_url="https://relay.example/callback",
        ticket_ttl_s=3600,
        policy=RetryPolicy(base_s=2, cap_s=900, max_attempts=4),
        rand=lambda: 0.5,
        door=door(),
    )


def sent(deps: DispatchDeps) -> list[tuple[str, str, dict[str, object]]]:
    assert isinstance(deps.github, FakeGitHub)
    return deps.github.sent


def test_dispatch_sends_pytorch_keys_plus_ticket_and_records_the_ledger(deps: DispatchDeps) -> None:
    assert dispatch(message(), deps).result is Result.DISPATCHED
    [(repo, event_type, payload)] = sent(deps)
    assert (repo, event_type) == (REPO, "pull_request")
    assert set(payload) == {"event_type", "delivery_id", "payload", "ticket", "callback_url", "dispatch_id"}
    assert payload["dispatch_id"] == dispatch_id("d-1", REPO)  # for the downstream's run-name
    assert payload["ticket"] == f"ticket-for-{REPO}-{dispatch_id('d-1', REPO)}"
    row = deps.ledger.get("d-1", REPO)
    assert row is not None and row.state is LedgerState.DISPATCHED and row.dispatched_at == FakeClock().t


def test_a_repeated_message_dispatches_once(deps: DispatchDeps) -> None:
    dispatch(message(), deps)
    assert dispatch(message(), deps).result is Result.DUPLICATE
    assert dispatch(message(target_repo=REPO.upper()), deps).result is Result.DUPLICATE
    assert len(sent(deps)) == 1


def test_a_live_claim_by_another_worker_is_not_doubled(deps: DispatchDeps) -> None:
    assert deps.ledger.claim(message(), "x", FakeClock().t, 60, "other-worker", 1, REPO)
    outcome = dispatch(message(), deps)
    assert outcome.result is Result.RESCHEDULED and outcome.reason == "in_flight"
    assert sent(deps) == []


def test_older_commit_is_superseded_by_a_newer_push(deps: DispatchDeps) -> None:
    assert isinstance(deps.ledger, FakeState)
    deps.ledger.heads[("pytorch/pytorch", 5)] = "newer"
    outcome = dispatch(message(head_sha="old"), deps)
    assert outcome.result is Result.SUPERSEDED and sent(deps) == []
    assert deps.ledger.get("d-1", REPO).state is LedgerState.SUPERSEDED  # type: ignore[union-attr]
    # "closed" is still sent: downstreams clean up after it whatever the head.
    assert dispatch(message(head_sha="old", action="closed", delivery_id="d-2"), deps).result is Result.DISPATCHED


def test_server_errors_back_off_then_dead_letter_with_reason(deps: DispatchDeps) -> None:
    assert isinstance(deps.github, FakeGitHub) and isinstance(deps.queue, FakeDispatchQueue)
    deps.github.errors[REPO.lower()] = [GitHubUnavailable("HTTP 502")] * 10
    current = message()
    delays = []
    for _ in range(3):
        outcome = dispatch(current, deps)
        assert outcome.result is Result.RESCHEDULED
        current, delay = deps.queue.rescheduled[-1]
        delays.append(delay)
        deps.clock.t += delay  # type: ignore[misc]
    assert delays == [2.0, 4.0, 8.0]  # 0.5 * 2 * 2**attempt: exponential with jitter
    assert dispatch(current, deps).result is Result.DEAD_LETTERED
    [(dead, reason)] = deps.queue.dead
    assert dead.target_repo == REPO and "HTTP 502" in reason and "gave up after 4 attempts" in reason
    assert deps.ledger.get("d-1", REPO).state is LedgerState.FAILED  # type: ignore[union-attr]
    assert deps.metrics.counts["DispatchDeadLettered"] == 1  # type: ignore[attr-defined]


def test_rate_limits_delay_without_spending_attempts(deps: DispatchDeps) -> None:
    assert isinstance(deps.github, FakeGitHub) and isinstance(deps.queue, FakeDispatchQueue)
    deps.github.errors[REPO.lower()] = [GitHubRateLimited(120, "secondary")] * 20
    current = message()
    for _ in range(20):
        assert dispatch(current, deps).result is Result.RESCHEDULED
        current, delay = deps.queue.rescheduled[-1]
        assert delay == 120 and current.attempt == 0
        deps.clock.t = current.not_before or 0  # type: ignore[misc]
    assert dispatch(current, deps).result is Result.DISPATCHED
    assert deps.queue.dead == []


def test_long_waits_hop_until_due(deps: DispatchDeps) -> None:
    assert isinstance(deps.queue, FakeDispatchQueue)
    later = message(not_before=FakeClock().t + 3000)
    outcome = dispatch(later, deps)
    assert outcome.result is Result.RESCHEDULED and outcome.delay_s == 3000
    assert sent(deps) == []


def test_client_errors_dead_letter_at_once(deps: DispatchDeps) -> None:
    assert isinstance(deps.github, FakeGitHub) and isinstance(deps.queue, FakeDispatchQueue)
    deps.github.errors[REPO.lower()] = [GitHubRejected(422, "client_payload is too large.")]
    assert dispatch(message(), deps).result is Result.DEAD_LETTERED
    assert "client_payload is too large" in deps.queue.dead[0][1]


def test_a_rejected_token_is_forgotten_and_retried(deps: DispatchDeps) -> None:
    assert isinstance(deps.github, FakeGitHub)
    deps.github.errors[REPO.lower()] = [GitHubRejected(401, "Bad credentials")]
    assert dispatch(message(), deps).result is Result.RESCHEDULED
    assert deps.github.forgotten == [REPO]


def test_not_installed_is_recorded_and_dead_lettered(deps: DispatchDeps) -> None:
    assert isinstance(deps.queue, FakeDispatchQueue)
    assert dispatch(message(target_repo="other/repo"), deps).result is Result.DEAD_LETTERED
    assert deps.queue.dead[0][1].startswith("not_installed")


def test_pacing_delays_the_call(deps: DispatchDeps) -> None:
    assert isinstance(deps.pacer, FakePacer) and isinstance(deps.queue, FakeDispatchQueue)
    deps.pacer.waits = [8.0]
    outcome = dispatch(message(), deps)
    assert outcome.result is Result.RESCHEDULED and outcome.reason == "paced"
    assert sent(deps) == []
    deps.clock.t += 8  # type: ignore[misc]
    assert dispatch(deps.queue.rescheduled[-1][0], deps).result is Result.DISPATCHED


def test_a_paced_dispatch_books_its_slot_and_comes_back_once_to_spend_it(deps: DispatchDeps) -> None:
    assert isinstance(deps.pacer, FakePacer) and isinstance(deps.queue, FakeDispatchQueue)
    deps.pacer.waits = [37.0]
    outcome = dispatch(message(), deps)
    assert outcome.result is Result.RESCHEDULED and outcome.reason == "paced" and outcome.delay_s == 37.0
    assert deps.pacer.reserved == [True]  # asked to book the slot it named
    [(later, delay)] = deps.queue.rescheduled
    assert delay == 37.0 and later.slot_at == later.not_before == FakeClock().t + 37
    # Paced after the claim, which it lets go at once (RETRYING, nothing sent): the next attempt may claim.
    assert deps.ledger.get("d-1", REPO).state is LedgerState.RETRYING  # type: ignore[union-attr]
    deps.clock.t += 37.4  # type: ignore[misc]  # SQS brings it back a little after its slot
    assert dispatch(later, deps).result is Result.DISPATCHED
    assert len(deps.pacer.keys) == 1 and len(sent(deps)) == 1  # the booked slot spent: the pacer not asked again
    assert deps.metrics.counts["DispatchRetried.reason=paced"] == 1  # type: ignore[attr-defined]


def test_a_slot_found_stale_is_asked_for_again_and_a_wait_past_the_horizon_books_nothing(deps: DispatchDeps) -> None:
    assert isinstance(deps.pacer, FakePacer) and isinstance(deps.queue, FakeDispatchQueue)
    deps.pacer.waits = [10.0, 1200.0]
    dispatch(message(), deps)
    later, _ = deps.queue.rescheduled[-1]
    deps.clock.t = (later.slot_at or 0) + 30  # type: ignore[misc]  # long after its slot: that moment has passed
    outcome = dispatch(later, deps)
    assert outcome.result is Result.RESCHEDULED and outcome.reason == "paced" and len(deps.pacer.keys) == 2
    # 20 minutes away: nothing is booked that far ahead; it asks again at the horizon (one SQS delay).
    again, delay = deps.queue.rescheduled[-1]
    assert delay == 900 and again.slot_at is None and sent(deps) == []
    deps.clock.t = again.not_before or 0  # type: ignore[misc]
    assert dispatch(again, deps).result is Result.DISPATCHED and deps.pacer.keys == [7, 7, 7]


def test_a_retry_after_a_spent_slot_does_not_carry_it(deps: DispatchDeps) -> None:
    assert isinstance(deps.pacer, FakePacer) and isinstance(deps.github, FakeGitHub)
    assert isinstance(deps.queue, FakeDispatchQueue)
    deps.pacer.waits = [5.0]
    dispatch(message(), deps)
    booked, _ = deps.queue.rescheduled[-1]
    deps.clock.t += 5  # type: ignore[misc]
    deps.github.errors[REPO.lower()] = [GitHubUnavailable("HTTP 502")]
    assert dispatch(booked, deps).result is Result.RESCHEDULED  # the slot was spent on the POST that failed
    retry, delay = deps.queue.rescheduled[-1]
    assert retry.slot_at is None
    deps.clock.t += delay  # type: ignore[misc]
    assert dispatch(retry, deps).result is Result.DISPATCHED and len(deps.pacer.keys) == 2  # a slot of its own


def test_repeats_and_live_claims_are_told_by_the_claim_without_spending_a_slot(deps: DispatchDeps) -> None:
    assert isinstance(deps.pacer, FakePacer) and isinstance(deps.ledger, FakeState)
    dispatch(message(), deps)
    assert dispatch(message(), deps).result is Result.DUPLICATE
    assert deps.ledger.claim(message(delivery_id="d-2"), "x", FakeClock().t, 60, "other-worker", 1, REPO)
    assert dispatch(message(delivery_id="d-2"), deps).reason == "in_flight"
    assert len(deps.pacer.keys) == 1  # only the dispatch that was sent took a slot
    # A repeat of a message sent before a newer push is a repeat, not a supersession.
    deps.ledger.heads[("pytorch/pytorch", 5)] = "newer"
    assert dispatch(message(), deps).result is Result.DUPLICATE
    assert deps.metrics.counts["DispatchSuperseded"] == 0  # type: ignore[attr-defined]


def test_the_records_of_one_batch_share_each_pr_head_read(deps: DispatchDeps) -> None:
    assert isinstance(deps.ledger, FakeState)
    heads = PrHeads(deps.ledger, deps.clock)
    for i in range(5):
        dispatch(message(delivery_id=f"d-{i}"), deps, heads)
    dispatch(message(delivery_id="d-other", pr_number=6), deps, heads)
    dispatch(message(delivery_id="d-push", pr_number=None, event_type="push", action=None), deps, heads)
    assert deps.ledger.head_reads == 2  # PR 5 once, PR 6 once; a push has no PR head
    deps.ledger.heads[("pytorch/pytorch", 5)] = "newer"
    deps.clock.t += 2  # type: ignore[misc]  # a read older than a second is not used: read again
    assert dispatch(message(delivery_id="d-late"), deps, heads).result is Result.SUPERSEDED
    assert deps.ledger.head_reads == 3


def test_a_message_sent_just_after_the_planner_stored_its_head_reads_no_head_and_a_later_one_does(
    deps: DispatchDeps,
) -> None:
    assert isinstance(deps.ledger, FakeState)
    now = deps.clock.now()
    deps.ledger.heads[("pytorch/pytorch", 5)] = "new"
    assert dispatch(message(delivery_id="d-fresh", head_at=now - 0.5), deps).result is Result.DISPATCHED
    assert deps.ledger.head_reads == 0  # the planner's write of the head, half a second ago, is the read
    # A message that waited (paced, retried) past the read's age reads the head: a newer push supersedes it.
    deps.ledger.heads[("pytorch/pytorch", 5)] = "newer"
    assert dispatch(message(delivery_id="d-waited", head_at=now - 30), deps).result is Result.SUPERSEDED
    assert deps.ledger.head_reads == 1
    # A planner whose clock is far ahead of this host's: its write is not taken as fresh either.
    assert dispatch(message(delivery_id="d-ahead", head_at=now + 30), deps).result is Result.SUPERSEDED
    assert deps.ledger.head_reads == 2


def test_a_send_waits_for_a_claim_that_still_covers_it(deps: DispatchDeps) -> None:
    assert isinstance(deps.pacer, FakePacer) and isinstance(deps.queue, FakeDispatchQueue)
    clock = deps.clock

    class SlowPacer(FakePacer):
        def acquire(self, key: int | str, now: float, reserve: bool = False) -> float:
            clock.t += 20  # type: ignore[attr-defined]  # a table that took 20 s to answer
            return super().acquire(key, now, reserve)

    slow = dataclasses.replace(deps, pacer=SlowPacer())
    outcome = dispatch(message(), slow)
    assert outcome.result is Result.RESCHEDULED and outcome.reason == "claim_lapsing" and sent(deps) == []
    assert deps.ledger.get("d-1", REPO).state is LedgerState.RETRYING  # type: ignore[union-attr]
    assert dispatch(deps.queue.rescheduled[-1][0], deps).result is Result.DISPATCHED


def test_a_batchs_counts_with_dimensions_reach_the_metrics_once_summed_when_it_is_done(deps: DispatchDeps) -> None:
    """Each count with dimensions is a CloudWatch document of its own: ten dispatches sent at one level are one
    `DispatchSent level=L4` of 10, not ten of 1; plain counts go through as they happen."""
    calls: list[tuple[str, int, dict[str, str]]] = []

    class Calls(RecordingMetrics):
        def count(self, name: str, value: int = 1, **dimensions: str) -> None:
            calls.append((name, value, dimensions))
            super().count(name, value, **dimensions)

    metrics = Calls()
    batch = DispatchBatch(dataclasses.replace(deps, metrics=metrics))
    for i in range(10):
        batch.dispatch(message(delivery_id=f"d-{i}"))
    batch.dispatch(message(delivery_id="d-0"))  # a repeat: a plain count, at once
    batch.dispatch(message(delivery_id="d-l1", level=Level.L1))
    assert calls == [("DispatchDuplicate", 1, {})]
    batch.flush_metrics()
    assert sorted(calls[1:], key=str) == [("DispatchSent", 1, {"level": "L1"}), ("DispatchSent", 10, {"level": "L4"})]
    assert metrics.counts["DispatchSent"] == 11
    batch.flush_metrics()  # nothing twice
    assert len(calls) == 3


class Workflows:
    """workflow_dispatch as GitHub answers it: the new run's id (or None, GitHub Enterprise Server's 204)."""

    def __init__(self, answers: list[str | Exception | None]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, str, str, dict[str, str]]] = []

    def dispatch_workflow(
        self, repo: str, file: str, ref: str, inputs: dict[str, str], *, permit: Permit
    ) -> str | None:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        self.sent.append((repo, file, ref, inputs))
        return answer


class Recorded:
    def __init__(self) -> None:
        self.runs: list[tuple[str, str, str]] = []

    def record(self, run: object, now: float, watch_until: float | None) -> bool:
        self.runs.append((getattr(run, "repo"), getattr(run, "run_id"), getattr(run, "status")))  # noqa: B009
        return True


def test_a_workflow_dispatch_records_the_run_github_names_and_sends_no_repository_dispatch(
    deps: DispatchDeps,
) -> None:
    from crcr.contracts.messages import WorkflowFile  # noqa: PLC0415

    workflows, recorded = Workflows(["30433642", None]), Recorded()
    ready = dataclasses.replace(deps, workflows=workflows, bound_runs=recorded)
    hints = {"files": 1, "complete": True, "dirs": ["torch"], "paths": ["torch/x.py"], "tests": []}
    wanted = message(workflow=WorkflowFile(file="ci.yml", ref="main"), changes=hints)
    assert dispatch(wanted, ready).result is Result.DISPATCHED
    assert sent(deps) == []  # no repository_dispatch
    [(repo, file, ref, inputs)] = workflows.sent
    assert (repo, file, ref) == (REPO, "ci.yml", "main") and inputs["dispatch_id"] == dispatch_id("d-1", REPO)
    # The documented six inputs only: GitHub refuses an input the workflow does not declare (the change hints).
    assert set(inputs) == {"event_type", "delivery_id", "payload", "ticket", "callback_url", "dispatch_id"}
    assert deps.ledger.get("d-1", REPO).run_id == "30433642"  # type: ignore[union-attr]
    assert recorded.runs == [(REPO, "30433642", "requested")]
    # GitHub Enterprise Server answers 204: dispatched, no run id, counted.
    assert dispatch(wanted.model_copy(update={"delivery_id": "d-2"}), ready).result is Result.DISPATCHED
    assert deps.ledger.get("d-2", REPO).run_id is None  # type: ignore[union-attr]
    assert deps.metrics.counts.get("DispatchRunDetailsMissing") == 1  # type: ignore[attr-defined]


def test_after_a_timed_out_workflow_dispatch_the_run_its_event_bound_is_taken_as_sent(deps: DispatchDeps) -> None:
    from crcr.contracts.messages import WorkflowFile  # noqa: PLC0415

    workflows = Workflows([GitHubUnavailable("POST timed out"), "never"])
    ready = dataclasses.replace(deps, workflows=workflows)
    first = message(workflow=WorkflowFile(file="ci.yml"))
    assert dispatch(first, ready).result is Result.RESCHEDULED
    assert isinstance(deps.ledger, FakeState)
    key = ("d-1", REPO.lower())
    deps.ledger.ledger[key] = dataclasses.replace(deps.ledger.ledger[key], run_id="777", lease_until=0.0)
    [(retry, delay)] = deps.queue.rescheduled  # type: ignore[attr-defined]
    assert delay >= ready.run_settle_s  # GitHub is given time to show the run first
    deps.clock.t += delay  # type: ignore[attr-defined]
    outcome = dispatch(retry, ready)
    assert outcome.result is Result.DISPATCHED and "777" in outcome.reason
    assert workflows.sent == [] and workflows.answers == ["never"]  # not sent again
