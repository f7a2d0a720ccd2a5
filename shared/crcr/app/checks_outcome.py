"""What handling one ChecksQueue message came to, and its two ways back: to the queue later, or to the dead letters."""

from __future__ import annotations

from dataclasses import dataclass, field

from crcr.app.ports import Clock, Metrics
from crcr.app.ports.queues import ChecksQueue
from crcr.contracts.check_messages import CheckSync, Waiting


@dataclass
class SyncOutcome:
    written: list[str] = field(default_factory=list)
    detail: str = "done"
    delay_s: float = 0.0
    delivery_of: dict[str, str] = field(default_factory=dict)  # a pass's writes: check run -> its dispatch's delivery


def resend(
    message: Waiting, queue: ChecksQueue, clock: Clock, delay: float, attempt: int, slot_at: float | None
) -> None:
    """The message back to the queue `delay` seconds on, with its attempts and the pacing slot it holds."""
    update = {"not_before": clock.now() + delay, "attempt": attempt, "slot_at": slot_at}
    queue.send_checks([message.model_copy(update=update)], delay)


def dead_letter(
    message: CheckSync, queue: ChecksQueue, metrics: Metrics, reason: str, written: list[str]
) -> SyncOutcome:
    queue.dead_letter(message, reason)
    metrics.count("RerunDeadLettered" if message.kind == "rerun" else "CheckRunDeadLettered")
    return SyncOutcome(written, reason)
