"""Dispatcher rules with recording fakes: idempotence, supersession, retries, dead letters."""

from __future__ import annotations

import pytest

from crcr.app.dispatch import DispatchDeps, Result, dispatch, dispatch_id
from crcr.app.ports import GitHubRateLimited, GitHubRejected, GitHubUnavailable, LedgerState
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
    return DispatchDeps(
        github=FakeGitHub(installed={REPO.lower()}),
        ledger=FakeState(),
        queue=FakeDispatchQueue(),
        pacer=FakePacer(),
        signer=FakeSigner(),
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        callback_url="https://relay.example/callback",
        ticket_ttl_s=3600,
        policy=RetryPolicy(base_s=2, cap_s=900, max_attempts=4),
        rand=lambda: 0.5,
    )


def sent(deps: DispatchDeps) -> list[tuple[str, str, dict[str, object]]]:
    assert isinstance(deps.github, FakeGitHub)
    return deps.github.sent


def test_dispatch_sends_pytorch_keys_plus_ticket_and_records_the_ledger(deps: DispatchDeps) -> None:
    assert dispatch(message(), deps).result is Result.DISPATCHED
    [(repo, event_type, payload)] = sent(deps)
    assert (repo, event_type) == (REPO, "pull_request")
    assert set(payload) == {"event_type", "delivery_id", "payload", "ticket", "callback_url"}
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
