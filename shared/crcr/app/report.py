"""Reporter use case: each recorded job change gets its verdict (failed L3/L4 jobs of PRs), updates the HUD
pages' documents, is pushed to PyTorch's HUD once, in the shape it expects, and asks the check-run writer
for the job's check runs, the PR comment and, for an infrastructure failure, one automatic re-run."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from crcr.app.checks import job_message
from crcr.app.hud import envelope
from crcr.app.ports import ChecksQueue, DeadLetters, Hud, HudRejected, HudUnavailable, JobRecord, Metrics
from crcr.app.summaries import SummaryDeps, update_summaries
from crcr.app.verdicts import VerdictDeps, attempt, flaky_predecessors, judged, verdict_of
from crcr.contracts.messages import CheckSyncMessage


@dataclass(frozen=True)
class ReportDeps:
    hud: Hud | None
    dead_letters: DeadLetters
    metrics: Metrics
    checks: ChecksQueue | None = None  # check runs are written by the check-run writer, paced
    summaries: SummaryDeps | None = None  # the HUD pages' documents
    verdicts: VerdictDeps | None = None  # failure verdicts; None: no verdicts, no comment, no automatic re-run
    attempts: int = 3  # in this invocation; then the stream retries the record, then its DLQ
    base_delay_s: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = field(default=random.random)


def changed(old: JobRecord | None, new: JobRecord) -> bool:
    """A state change (or a new verdict on it), not a rewrite of the same report (duplicates never reach the
    table anyway)."""
    before = (old.state, old.conclusion, old.fingerprint, old.verdict) if old else None
    return before != (new.state, new.conclusion, new.fingerprint, new.verdict)


def judge(old: JobRecord | None, new: JobRecord, deps: ReportDeps) -> bool:
    """Put the verdict on a finished L3/L4 PR job before anyone hears of the change. True: report the
    change now. False: the row just got its verdict (its next image, which carries it, is reported once)
    or it has moved on to a newer state (which will be)."""
    if deps.verdicts is None or not judged(new) or not changed(old, new) or new.state == "in_progress":
        return True
    for earlier in flaky_predecessors(new, deps.verdicts):
        if deps.verdicts.store.set_verdict(earlier, earlier.verdict or ""):
            deps.metrics.count("VerdictRecorded", verdict=earlier.verdict or "")
    verdict = verdict_of(new, deps.verdicts)
    if verdict is None or verdict == new.verdict:
        return True
    if deps.verdicts.store.set_verdict(new, verdict):
        deps.metrics.count("VerdictRecorded", verdict=verdict)
    return False


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
    if deps.checks is not None:
        deps.checks.send_checks(_follow_ups(new, deps))
    if deps.hud is None:
        return
    push = envelope(new)
    for tries in range(deps.attempts):
        try:
            deps.hud.push(push)
        except HudRejected as exc:
            deps.metrics.count("HudRejected")
            deps.dead_letters.send(push, f"HUD rejected the push: {exc}")
            return
        except HudUnavailable:
            deps.metrics.count("HudRetried")
            if tries + 1 == deps.attempts:
                raise
            deps.sleep(deps.rand() * deps.base_delay_s * 2**tries)
            continue
        deps.metrics.count("HudPushed")
        return


def _follow_ups(job: JobRecord, deps: ReportDeps) -> list[CheckSyncMessage]:
    """What the check-run writer should look at again: the job's check runs; on a PR, its comment; and for
    an infrastructure failure of a run's first attempt, one re-run before anyone is told."""
    messages = [message] if (message := job_message(job)) is not None else []
    if deps.verdicts is None or not judged(job):
        return messages
    if attempt(job).retryable_infra and job.verdict is not None:
        rerun = CheckSyncMessage(kind="rerun", upstream=job.upstream, head_sha=job.head_sha, repo=job.repo)
        messages.append(
            rerun.model_copy(
                update={"delivery_id": job.delivery_id, "dispatch_id": job.dispatch_id, "run_id": job.run_id}
                | {"run_attempt": job.run_attempt, "job_name": job.job_name}
            )
        )
    messages.append(CheckSyncMessage(kind="comment", upstream=job.upstream, head_sha=job.head_sha, pr=job.pr))
    return messages
