"""A pass over every check run of a commit, under the head's lock: its writes taken through the door and the budget."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from crcr.app.budget import Budget, Paced
from crcr.app.checks_outcome import SyncOutcome, dead_letter, resend
from crcr.app.checks_plan import (
    HeadView,
    PassDeps,
    PassRecord,
    PlannedWrite,
    cancel_writes,
    plan,
    skip_writes,
)
from crcr.app.comment import ask_render
from crcr.app.outbound import GITHUB, Write
from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable, NotInstalled
from crcr.app.ports.ledger import LedgerRow
from crcr.contracts.check_messages import HeadPass, HeadSuperseded, RepoSkipped
from crcr.domain.checks import DONE_STATES, Known, downstream_of
from crcr.domain.ids import ascii_lower

PassMessage = HeadPass | HeadSuperseded | RepoSkipped
SHARE_RECHECK_S = 60.0
COMMENT_ASKED_REMEMBERED = 1000  # PRs whose last request this instance remembers


def share_key(upstream: str, repo: str) -> str:
    return f"{ascii_lower(upstream)}#{ascii_lower(repo)}"


def sync_head(message: PassMessage, deps: PassDeps, in_hand: dict[str, LedgerRow] | None = None) -> SyncOutcome:
    """One pass over every check run of a commit, under the head's lock: read its check runs and its jobs once,
    decide every write that moves one forward, take their slots in one booking, make them. A booked pass (`head`,
    its ticket) runs again when something was asked for while it ran, when a repository's jobs settle, or when the
    budget delays some writes; a pass of its own (`cancel`, `skip`) only writes what it was sent for."""
    ticket = message.ticket if isinstance(message, HeadPass) else None
    upstream, head_sha, now = message.upstream, message.head_sha, deps.clock.now()
    locked, row = deps.store.lock_head(
        upstream, head_sha, ticket, now, deps.pass_lease_s, now + 0.5, now - deps.pass_max_wait_s
    )
    if locked is None:
        if ticket is not None and row.pending != ticket:
            deps.metrics.count("CheckPassSkipped", reason="superseded")
            return SyncOutcome(detail="superseded")
        if row.lock_until >= now or row.due_at is None:
            resend(message, deps.queue, deps.clock, 1.0, message.attempt, message.slot_at)
            deps.metrics.count("CheckRunRetried", reason="busy")
            return SyncOutcome(detail="busy", delay_s=1.0)
        until = min(row.due_at, (row.pending_since or now) + deps.pass_max_wait_s)
        resend(message, deps.queue, deps.clock, max(0.5, until - now), message.attempt, message.slot_at)
        return SyncOutcome(detail="settling", delay_s=max(0.5, until - now))
    budget = Budget(message.slot_at)
    done = PassRecord()
    try:
        keep, attempt, failed = _run(message, deps, row.rows, in_hand or {}, budget, done)
    except BaseException:
        deps.store.finish_head(upstream, head_sha, ticket, locked, deps.clock.now(), done.done, True)
        raise  # the booking stays: SQS delivers this pass again once its visibility lapses
    if failed is not None:
        deps.store.finish_head(upstream, head_sha, ticket, locked, deps.clock.now(), done.done, False)
        return dead_letter(message, deps.queue, deps.metrics, failed, done.outcome.written)
    now = deps.clock.now()
    rerun = done.next_at(None) is not None
    # Kept only to wait for a timer of its own (a repository settling, a downstream's share): a request for sooner (a
    # late label, a job that moved) takes the booking over instead of waiting for it (crcr.app.ports.checkruns).
    timer_at = done.again_at if rerun and not keep and done.budget_at is None else None
    asked = deps.store.finish_head(upstream, head_sha, ticket, locked, now, done.done, rerun, timer_at)
    if ticket is None:
        if rerun:  # a write of its own that could not go yet: its message again
            delay = max(1.0, (done.next_at(None) or now) - now)
            resend(message, deps.queue, deps.clock, delay, attempt, budget.slot_at)
            done.outcome.detail, done.outcome.delay_s = "paced", delay
        return done.outcome
    if (at := done.next_at(asked)) is not None:
        # Asked for again while it ran (once more, after that burst), a repository settling, or writes the budget
        # delayed: the same pass, holding the slot booked for it.
        delay = max(0.0, at - now)
        paced = keep or done.budget_at is not None
        resend(message, deps.queue, deps.clock, delay, attempt if keep else 0, budget.slot_at)
        done.outcome.detail, done.outcome.delay_s = ("paced" if paced else "again"), delay
    return done.outcome


def _writes(
    message: PassMessage, head: HeadView, booked: frozenset[str], in_hand: dict[str, LedgerRow], deps: PassDeps,
    done: PassRecord,
) -> list[PlannedWrite]:  # fmt: skip
    """A booked pass's every write, each downstream within its share; a pass of its own's, what it was sent for."""
    if isinstance(message, HeadSuperseded):
        return permitted(cancel_writes(message, head, deps), deps)
    if isinstance(message, RepoSkipped):
        return permitted(skip_writes(message, head, deps), deps)
    return _shares(permitted(plan(head, booked, in_hand, deps, done), deps), deps, done)


def _run(
    message: PassMessage,
    deps: PassDeps,
    booked: frozenset[str],
    in_hand: dict[str, LedgerRow],
    budget: Budget,
    done: PassRecord,
) -> tuple[bool, int, str | None]:
    """The pass under the lock: (keep the booking, the attempt its next message carries, why to dead-letter it)."""
    now = deps.clock.now()
    try:
        head = HeadView(message.upstream, message.head_sha, deps)
        _write_all(_writes(message, head, booked, in_hand, deps, done), deps, budget, done)
        _comment_after(head, deps)
    except Paced as exc:
        done.budget_at = now + exc.wait_s
        deps.metrics.count("CheckRunPaced")
        return True, message.attempt, None
    except GitHubRateLimited as exc:
        done.later(deps.clock.now() + exc.wait_s)
        deps.metrics.count("CheckRunRetried", reason="rate_limited")
        return True, message.attempt, None
    except GitHubUnavailable as exc:
        attempt = message.attempt + 1
        if attempt >= deps.policy.max_attempts:
            return False, attempt, f"unavailable: {exc} (gave up after {attempt} attempts)"
        done.later(deps.clock.now() + deps.policy.backoff(attempt, deps.rand))
        deps.metrics.count("CheckRunRetried", reason="unavailable")
        return True, attempt, None
    except NotInstalled as exc:
        return False, message.attempt, f"GitHub rejected the check run: {exc}"
    return False, message.attempt, None


def _comment_after(head: HeadView, deps: PassDeps) -> None:
    """The PR comment shows finished L3/L4 jobs: a pass that saw one on a PR asks for a render, booked in the PR's row,
    so a burst of passes is one render (crcr.app.comment)."""
    if deps.comment is None:
        return
    finished: dict[int, list[tuple[Any, ...]]] = {}
    for job in head.jobs:
        if job.level >= 3 and job.pr is not None and job.state in DONE_STATES:
            shown = (job.dispatch_id, job.run_id, job.run_attempt, job.job_name, job.state, job.conclusion, job.verdict)
            finished.setdefault(job.pr, []).append(shown)
    for pr, jobs in sorted(finished.items()):
        # What the comment would show of this commit: asked for already (by this instance), nothing to ask again.
        seen = (head.head_sha, *sorted(jobs, key=str))
        if deps.comment_asked.get((head.upstream, pr)) == seen:
            continue
        ask_render(head.upstream, head.head_sha, pr, deps.comment)
        if len(deps.comment_asked) >= COMMENT_ASKED_REMEMBERED:
            deps.comment_asked.pop(next(iter(deps.comment_asked)))
        deps.comment_asked[(head.upstream, pr)] = seen


def _shares(writes: list[PlannedWrite], deps: PassDeps, done: PassRecord) -> list[PlannedWrite]:
    """Each downstream's own share first: one over it waits (its writes are left for a later pass) without touching
    the installation's budget or holding up another downstream's."""
    if deps.share is None:
        return writes
    by_repo: dict[str, list[PlannedWrite]] = {}
    for write in writes:
        if write.repo:
            by_repo.setdefault(write.repo, []).append(write)
    now, within = deps.clock.now(), [w for w in writes if not w.repo]
    for repo, theirs in by_repo.items():
        allowed, wait = deps.share.acquire_many(share_key(theirs[0].check.upstream, repo), now, len(theirs))
        if allowed < len(theirs):
            deps.metrics.count("DownstreamThrottled")
            done.later(now + min(wait, SHARE_RECHECK_S))
        within += theirs[:allowed]
    order = {id(w): i for i, w in enumerate(writes)}
    return sorted(within, key=lambda w: order[id(w)])


def _write_all(writes: list[PlannedWrite], deps: PassDeps, budget: Budget, done: PassRecord) -> None:
    """The writes, their slots taken in one booking of the upstream installation's budget: those it allows now are
    made, the rest wait for the slots booked for them (the pass runs again then, holding them)."""
    if not writes:
        return
    upstream, now = writes[0].check.upstream, deps.clock.now()
    allowed, wait = budget.take(deps.pacer, lambda: deps.api.installation_for(upstream), now, len(writes))
    if wait > 0:
        deps.metrics.count("CheckRunPaced")
        done.budget_at = now + wait
    for write in writes[:allowed]:
        if _write_one(write, deps):
            done.outcome.written.append(write.check.name)
            done.outcome.delivery_of[write.check.name] = write.delivery_id
            if write.counted:
                deps.metrics.count(write.counted)
        if write.row is not None:
            done.done.add(write.row)


def _write_one(write: PlannedWrite, deps: PassDeps) -> bool:
    """One write, under the head's lock (one writer per check run, so two PATCHes never land out of order), then
    recorded at the version the pass read. A 4xx for this check run is dead-lettered with the reason; the rest of
    the pass goes on."""
    check, fields, permit = write.check, write.fields, write.permit
    assert permit is not None  # permitted() let through only the writes the door gave a permit
    try:
        if check.known is None:
            check_run_id = deps.api.create_check_run(check.upstream, fields, permit=permit)
            deps.metrics.count("CheckRunCreated")
        else:
            check_run_id = check.known.check_run_id
            deps.api.update_check_run(
                check.upstream, check_run_id, {k: v for k, v in fields.items() if k != "head_sha"}, permit=permit
            )
            deps.metrics.count("CheckRunUpdated")
    except GitHubRejected as exc:
        failed = HeadPass(upstream=check.upstream, head_sha=check.head_sha, repo=write.repo)
        deps.queue.dead_letter(failed, f"GitHub rejected the check run {check.name}: {exc}")
        deps.metrics.count("CheckRunDeadLettered")
        return False
    known = Known(check_run_id, fields["status"], fields.get("conclusion"), write.attempt)
    if not deps.store.record_check(check.upstream, check.head_sha, check.name, known, check.version, deps.clock.now()):
        deps.metrics.count("CheckRunRecordLost")  # only a pass whose lock lapsed gets here: the next pass reads again
    return True


def permitted(writes: list[PlannedWrite], deps: PassDeps) -> list[PlannedWrite]:
    """The writes the outbound door lets through, each holding its permit; a shadow downstream's check run is recorded
    as a shadow decision instead, and spends no budget."""
    through = []
    for write in writes:
        check, fields = write.check, write.fields
        permit = deps.door.permit(
            Write(
                system=GITHUB,
                action="check_run",
                repo=downstream_of(check.name),
                upstream=check.upstream,
                key=f"{check.head_sha}:{check.name}:{fields.get('status')}:{fields.get('conclusion')}",
                body=fields,
                head_sha=check.head_sha,
            )
        )
        if permit is not None:
            through.append(replace(write, permit=permit))
    return through
