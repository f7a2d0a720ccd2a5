"""Reporter use case: each recorded job change updates the HUD pages' documents and is pushed to PyTorch's HUD
once, in the shape it expects."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from crcr.app.checks import job_message
from crcr.app.hud import envelope
from crcr.app.ports import ChecksQueue, DeadLetters, Hud, HudRejected, HudUnavailable, JobRecord, Metrics
from crcr.app.summaries import SummaryDeps, update_summaries


@dataclass(frozen=True)
class ReportDeps:
    hud: Hud | None
    dead_letters: DeadLetters
    metrics: Metrics
    checks: ChecksQueue | None = None  # check runs are written by the check-run writer, paced
    summaries: SummaryDeps | None = None  # the HUD pages' documents
    attempts: int = 3  # in this invocation; then the stream retries the record, then its DLQ
    base_delay_s: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = field(default=random.random)


def changed(old: JobRecord | None, new: JobRecord) -> bool:
    """A state change (or a new verdict on it), not a rewrite of the same report (duplicates never reach the
    table anyway)."""
    before = (old.state, old.conclusion, old.fingerprint, old.verdict) if old else None
    return before != (new.state, new.conclusion, new.fingerprint, new.verdict)


def summarise(changes: Sequence[tuple[JobRecord | None, JobRecord]], deps: ReportDeps) -> None:
    """The HUD pages' documents take a whole stream batch at once: one write per document touched.
    Idempotent, so a batch the stream retries rewrites nothing."""
    if deps.summaries is not None:
        update_summaries([new for old, new in changes if changed(old, new)], deps.summaries)


def report_change(old: JobRecord | None, new: JobRecord, deps: ReportDeps) -> None:
    """Push the change to the HUD and ask the check-run writer to look at the job. Raise when it should
    be retried later (the stream then retries this record); 4xx are dead-lettered with the reason."""
    if not changed(old, new):
        return
    if deps.checks is not None and (message := job_message(new)) is not None:
        deps.checks.send_checks([message])
    if deps.hud is None:
        return
    push = envelope(new)
    for attempt in range(deps.attempts):
        try:
            deps.hud.push(push)
        except HudRejected as exc:
            deps.metrics.count("HudRejected")
            deps.dead_letters.send(push, f"HUD rejected the push: {exc}")
            return
        except HudUnavailable:
            deps.metrics.count("HudRetried")
            if attempt + 1 == deps.attempts:
                raise
            deps.sleep(deps.rand() * deps.base_delay_s * 2**attempt)
            continue
        deps.metrics.count("HudPushed")
        return
