"""ChecksQueue's `rerun`: a downstream run re-run, paced on the downstream's installation (crcr.app.rerun)."""

from __future__ import annotations

from dataclasses import dataclass

from crcr.app.budget import Budget
from crcr.app.checks_outcome import SyncOutcome, resend
from crcr.app.ports import Clock, Metrics
from crcr.app.ports.pacing import Pacer
from crcr.app.ports.queues import ChecksQueue
from crcr.app.rerun import RerunDeps, RetryDeps, rerun_requested, retry_infra
from crcr.contracts.check_messages import RerunRequest


@dataclass(frozen=True)
class RerunWriterDeps:
    reruns: RerunDeps | None  # None: re-runs off
    retries: RetryDeps | None  # None: the relay's own retries off
    pacer: Pacer
    queue: ChecksQueue
    clock: Clock
    metrics: Metrics


def rerun(message: RerunRequest, deps: RerunWriterDeps, budget: Budget) -> SyncOutcome:
    """One asked for from the Checks tab or a PR comment, or the relay's own retry of an infrastructure failure
    (which waits while the run still runs)."""
    if deps.reruns is None or (message.requested_by == "relay" and deps.retries is None):
        return SyncOutcome(detail="reruns_off")

    def pace(installation: int) -> None:
        budget.spend(deps.pacer, lambda: installation, deps.clock.now())

    if message.requested_by in ("checks_tab", "comment"):
        asked = rerun_requested(message.upstream, message.repo, message.run_id, deps.reruns, pace)
        return SyncOutcome(detail=asked)
    assert deps.retries is not None
    retried = retry_infra(message.job, deps.reruns, deps.retries, pace)
    if retried.wait_s is not None:
        resend(message, deps.queue, deps.clock, retried.wait_s, message.attempt, budget.slot_at)
        deps.metrics.count("RerunRetried", reason=retried.outcome)
        return SyncOutcome(detail=retried.outcome, delay_s=retried.wait_s)
    return SyncOutcome(detail=retried.outcome)
