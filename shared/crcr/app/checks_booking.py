"""A commit's check-run pass booked by whoever saw a change (the reporter, a dispatch sent, a late label)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from crcr.app.ports import Clock
from crcr.app.ports.checkruns import CheckRunStore
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.queues import ChecksQueue
from crcr.contracts.check_messages import HeadPass, JobChanged, JobKey
from crcr.domain.ids import ascii_lower
from crcr.domain.regressions import BISECT

SCHEDULED = "scheduled"  # delivery id of scheduled runs: they report on a commit, not on a PR's checks


@dataclass(frozen=True)
class HeadAsk:
    """What asks for a head's pass: its booking, and the one message that carries it."""

    store: CheckRunStore
    queue: ChecksQueue
    clock: Clock
    settle_s: float = 5.0  # a change waits this long for the rest of its burst before the pass runs
    stale_s: float = 1200.0  # a booked pass not heard of for this long was lost (its message dead-lettered)
    new_ticket: Callable[[], str] = field(default=lambda: uuid.uuid4().hex)


def row_key(delivery_id: str, repo: str) -> str:
    """A dispatch booked for a pass, as the head's row lists it."""
    return f"{delivery_id} {repo}"


def ask_head(
    ask: HeadAsk, upstream: str, head_sha: str, rows: Iterable[str] = (), due_in: float | None = None
) -> str | None:
    """Book a pass over the head (adding the dispatches in `rows`): one write, and a message only when no pass was
    booked yet. Returns the ticket when this call booked it (the caller may run it at once instead of waiting)."""
    now, ticket = ask.clock.now(), ask.new_ticket()
    delay = ask.settle_s if due_in is None else due_in
    booked = ask.store.book_head(upstream, head_sha, ticket, now, now + delay, now - ask.stale_s, set(rows))
    return ticket if booked == ticket else None


def head_message(upstream: str, head_sha: str, ticket: str, delay: float, now: float) -> HeadPass:
    return HeadPass(upstream=upstream, head_sha=head_sha, ticket=ticket, not_before=now + delay)


def request_head(ask: HeadAsk, upstream: str, head_sha: str, rows: Iterable[str] = ()) -> bool:
    """Book a pass over the head and, when this booked it, send its message (delayed by the settle period)."""
    ticket = ask_head(ask, upstream, head_sha, rows)
    if ticket is None:
        return False
    ask.queue.send_checks([head_message(upstream, head_sha, ticket, ask.settle_s, ask.clock.now())], ask.settle_s)
    return True


def job_message(job: JobRecord) -> JobChanged | None:
    """What the reporter asks the writer to look at after a job changed (None: nothing to mirror)."""
    if job.level < 3 or not job.head_sha or job.delivery_id == SCHEDULED or job.event_type == BISECT:
        return None
    return JobChanged(
        upstream=job.upstream,
        head_sha=job.head_sha,
        delivery_id=job.delivery_id,
        repo=job.repo,
        job=JobKey(dispatch_id=job.dispatch_id, run_id=job.run_id, run_attempt=job.run_attempt, job_name=job.job_name),
    )


def backfill(jobs: list[JobRecord], device: str) -> list[JobChanged]:
    """A ciflow/crcr/<device> label added late: mirror the device's L3 jobs already reported on this
    head, as they stand (in progress or finished), without dispatching anything again."""
    return [
        message
        for job in jobs
        if job.level == 3 and ascii_lower(job.device or "") == ascii_lower(device)
        if (message := job_message(job)) is not None
    ]
