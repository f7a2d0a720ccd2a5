"""Reporter use case: each recorded job change gets its verdict (failed L3/L4 jobs of PRs), updates the HUD pages'
documents, is pushed to PyTorch's HUD (once as finished: docs/contracts.md), and asks the check-run writer for its
check runs, the PR comment and, for an infrastructure failure, one automatic re-run."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from crcr.app.checks_booking import HeadAsk, job_message, request_head
from crcr.app.outbound import HUD, Outbound, Permit, Write
from crcr.app.page_entries import job_key
from crcr.app.page_notes import note_refusals
from crcr.app.ports import Metrics
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.queues import ChecksQueue
from crcr.app.ports.torchci import TorchciRejected, TorchciUnavailable
from crcr.app.regressions import RegressionDeps, track
from crcr.app.summaries import SummaryConflict, SummaryDeps, update_summaries
from crcr.app.torchci import envelope
from crcr.app.verdicts import VerdictDeps, attempt, flaky_predecessors, judged, judgement
from crcr.contracts.check_messages import CheckSync, CommentRequest, JobKey, RerunRequest
from crcr.domain.regressions import BISECT


class Torchci(Protocol):
    def push(self, envelope: dict[str, Any], *, permit: Permit) -> None: ...


class DeadLetters(Protocol):
    def send(self, body: dict[str, Any], reason: str) -> None: ...


FINISHED = ("completed", "timed_out", "not_started")
HUD_DUPLICATE = 409  # torchci: the row is completed already


@dataclass(frozen=True)
class ReportDeps:
    torchci: Torchci | None
    dead_letters: DeadLetters
    metrics: Metrics
    door: Outbound  # a shadow downstream's rows are recorded, never pushed (crcr.app.outbound)
    checks: ChecksQueue | None = None  # check runs are written by the check-run writer, paced
    # Each changed commit's check-run pass, booked (one message per burst); None: a message per change, as before
    # passes existed (the writer books the pass itself).
    heads: HeadAsk | None = None
    summaries: SummaryDeps | None = None  # the HUD pages' documents
    verdicts: VerdictDeps | None = None  # failure verdicts; None: no verdicts, no comment, no automatic re-run
    regressions: RegressionDeps | None = None  # regression ranges of branch jobs; None: not tracked
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
    judged_now = judgement(new, deps.verdicts)
    verdict = judged_now.verdict
    if verdict is None or verdict == new.verdict:
        return True
    if deps.verdicts.store.set_verdict(new, verdict, judged_now.baseline_sha, judged_now.known_issues):
        deps.metrics.count("VerdictRecorded", verdict=verdict)
    return False


def _awaiting_verdict(job: JobRecord, deps: ReportDeps) -> bool:
    """A finished job the reporter judges, without its verdict: an image judge held back while it wrote one (a
    failure, or a pass after failed attempts), or one that needs none (then no later image brings one)."""
    return deps.verdicts is not None and judged(job) and job.verdict is None


def hud_due(old: JobRecord | None, new: JobRecord, deps: ReportDeps) -> bool:
    """Whether PyTorch's HUD hears of this change: every change until the job's one push as finished. That push
    is the first finished image, or for a judged failure the one that brought its verdict."""
    if new.state not in FINISHED or old is None or old.state not in FINISHED:
        return True
    return _awaiting_verdict(old, deps) and new.verdict is not None


def summarise(changes: Sequence[tuple[JobRecord | None, JobRecord]], deps: ReportDeps) -> None:
    """The HUD pages' documents take a whole stream batch at once: one write per document touched.
    Idempotent, so a batch the stream retries rewrites nothing."""
    if deps.summaries is not None:
        update_summaries([new for old, new in changes if changed(old, new)], deps.summaries)


def track_regressions(
    changes: Sequence[tuple[JobRecord | None, JobRecord]], deps: ReportDeps
) -> list[tuple[JobRecord, Exception]]:
    """Each job a batch brought a branch result of looks at its regressions again (advisory: never fails the batch);
    returns the jobs whose look failed, with why."""
    if deps.regressions is None:
        return []
    return track([new for old, new in changes if changed(old, new)], deps.regressions)


def ask_passes(changes: Sequence[tuple[JobRecord | None, JobRecord]], deps: ReportDeps) -> None:
    """Each commit a batch changed L3/L4 jobs of gets its check-run pass booked once (one write; a message only when
    none was booked yet), however many of its jobs changed. Before the batch's HUD pushes: a batch the stream retries
    books again, which is harmless."""
    if deps.heads is None or deps.checks is None:
        return
    heads = {(new.upstream, new.head_sha) for old, new in changes if changed(old, new) and job_message(new)}
    for upstream, head_sha in sorted(heads):
        booked = request_head(deps.heads, upstream, head_sha)
        deps.metrics.count("CheckPassRequested", booked="new" if booked else "joined")


def report_change(old: JobRecord | None, new: JobRecord, deps: ReportDeps) -> str | None:
    """Push the change to the HUD and ask the check-run writer to look at the job. Raise when it should
    be retried later (the stream then retries this record); 4xx are dead-lettered with the reason. Returns what
    became of the HUD push (`pushed`, `duplicate`, `rejected`, `withheld`, `off`), None for no change."""
    if not changed(old, new):
        return None
    if deps.checks is not None and (follow_ups := _follow_ups(new, deps)):
        deps.checks.send_checks(follow_ups)
    if deps.torchci is None:
        return "off"
    if new.event_type == BISECT:
        deps.metrics.count("HudPushWithheld")  # a bisection run is the relay's own question, not a row of PyTorch's
        return "withheld"
    if not hud_due(old, new, deps):
        deps.metrics.count("HudPushWithheld")  # the HUD has this job as finished already: its rows are final
        return "withheld"
    push = envelope(new)
    permit = deps.door.permit(_write(new, push))
    if permit is None:
        return "withheld"  # a shadow downstream's row: kept as a shadow decision, and on crcr's own pages
    for tries in range(deps.attempts):
        try:
            deps.torchci.push(push, permit=permit)
        except TorchciRejected as exc:
            if exc.status == HUD_DUPLICATE:
                deps.metrics.count("HudDuplicate")
                return "duplicate"
            deps.metrics.count("TorchciRejected")
            deps.dead_letters.send(push, f"HUD rejected the push: {exc}")
            _count_refusal(new, exc, deps)
            return "rejected"
        except TorchciUnavailable:
            deps.metrics.count("HudRetried")
            if tries + 1 == deps.attempts:
                raise
            deps.sleep(deps.rand() * deps.base_delay_s * 2**tries)
            continue
        deps.metrics.count("HudPushed")
        return "pushed"
    return None


def _write(job: JobRecord, push: dict[str, Any]) -> Write:
    return Write(
        system=HUD,
        action="hud_push",
        repo=job.repo,
        upstream=job.upstream,
        key=f"{job_key(job)}:{job.version}",
        body=push,
        pr=job.pr,
        head_sha=job.head_sha,
        level=job.level,
    )


def _count_refusal(job: JobRecord, exc: TorchciRejected, deps: ReportDeps) -> None:
    """The repository page counts what the HUD refused, with the reason, and keeps the repository on the grid.
    Best effort: the dead letter is the record; a page that cannot be written is counted, never retried."""
    if deps.summaries is None:
        return
    try:
        note_refusals(
            job.repo,
            {f"HUD push refused (HTTP {exc.status})": 1},
            deps.summaries,
            key=f"hud:{job_key(job)}:{job.version}",
        )
    except SummaryConflict:
        deps.metrics.count("HudSummaryFailed")


def _follow_ups(job: JobRecord, deps: ReportDeps) -> list[CheckSync]:
    """What the check-run writer should look at again: the job's check runs (its commit's pass, which also asks for
    the PR's comment); and for an infrastructure failure of a run's first attempt, one re-run before anyone is told."""
    message = job_message(job)
    messages: list[CheckSync] = [message] if message is not None and deps.heads is None else []  # else: ask_passes
    if deps.verdicts is None or not judged(job):
        return messages
    if attempt(job).retryable_infra and job.verdict is not None:
        failed = JobKey(
            dispatch_id=job.dispatch_id, run_id=job.run_id, run_attempt=job.run_attempt, job_name=job.job_name
        )
        messages.append(
            RerunRequest(
                upstream=job.upstream, head_sha=job.head_sha, delivery_id=job.delivery_id, repo=job.repo, job=failed
            )
        )
    if deps.heads is None:
        messages.append(CommentRequest(upstream=job.upstream, head_sha=job.head_sha, pr=job.pr))
    return messages
