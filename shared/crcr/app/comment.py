"""The PR comment writer, on ChecksQueue: a `comment` message asks for a render, which the PR's row books and coalesces,
then one write of a changed body on the upstream installation's budget (docs/contracts.md, "The PR comment")."""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from crcr.app.budget import Budget, Paced
from crcr.app.outbound import GITHUB, Outbound, Permit, Write
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.comment import CommentRow, IssueComment
from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable, NotInstalled
from crcr.app.ports.jobs import JobsByHead
from crcr.app.ports.pacing import Pacer
from crcr.app.ports.pulls import PrInfos
from crcr.app.ports.queues import ChecksQueue
from crcr.app.ports.reruns import RerunMarks
from crcr.contracts.check_messages import CommentRequest
from crcr.domain.comment import Posted, marker, recover, render, select
from crcr.domain.retry import RetryPolicy


class IssueComments(Protocol):
    """The upstream PR's conversation, written with the App's installation token for the upstream alone
    (issues: write, pull_requests: write). Writes spend the installation's budget, like check runs."""

    def installation_for(self, upstream: str) -> int: ...
    def create_comment(self, upstream: str, pr: int, body: str, *, permit: Permit) -> int:
        """POST /repos/{o}/{r}/issues/{n}/comments; the new comment's id."""
        ...

    def update_comment(self, upstream: str, comment_id: int, body: str, *, permit: Permit) -> None:
        """PATCH /repos/{o}/{r}/issues/comments/{id}."""
        ...

    def list_comments(self, upstream: str, pr: int) -> list[IssueComment]:
        """GET /repos/{o}/{r}/issues/{n}/comments, every page, oldest first."""
        ...


class CommentStore(Protocol):
    def get_comment(self, upstream: str, pr: int) -> CommentRow: ...

    def book_render(self, upstream: str, pr: int, ticket: str, now: float, due_at: float, stale_before: float) -> str:
        """Ask for a render of the PR's comment no earlier than `due_at`. Returns the ticket of the render
        that will do it: `ticket` when none was pending (or the pending one was booked before `stale_before`
        and is presumed lost), else the pending render's, whose due time moves to `due_at`."""
        ...

    def lock_comment(self, upstream: str, pr: int, ticket: str, version: int, now: float, lease_s: float) -> int | None:
        """Take the comment for one render, if `ticket` is the render booked, the row still at `version` and no
        live lock holds it; what was asked for so far is now being rendered (`due_at` cleared). The locked
        version, or None."""
        ...

    def release_comment(self, upstream: str, pr: int, locked: int, now: float, posted: Posted | None = None) -> bool:
        """Release the lock, recording what was written (`posted`; any `posted` also marks the conversation
        searched). False: the lock had lapsed and another render took the row."""
        ...

    def end_render(self, upstream: str, pr: int, ticket: str, now: float, keep: bool = False) -> float | None:
        """After a render: None when the booking is over (nothing asked for meanwhile), else when the same
        render must run again (a change asked for meanwhile, or `keep`: it could not write yet)."""
        ...

    def drop_render(self, upstream: str, pr: int, ticket: str) -> None:
        """End the booking whatever was asked for meanwhile (the render was dead-lettered)."""
        ...


BUSY_RETRY_S = 1.0


class CommentGone(Exception):
    """The comment the relay knew was deleted (404 on its PATCH): forget it, and look again."""

    def __init__(self, forgotten: Posted) -> None:
        super().__init__("the PR comment was deleted")
        self.forgotten = forgotten


@dataclass(frozen=True)
class CommentDeps:
    api: IssueComments
    store: CommentStore
    prs: PrInfos
    jobs: JobsByHead
    reruns: RerunMarks
    queue: ChecksQueue
    pacer: Pacer
    allowlist: AllowlistProvider
    metrics: Metrics
    clock: Clock
    door: Outbound  # the comment shows live downstreams only, and is written only with its permit
    settle_s: float = 5.0  # a request waits this long for the rest of its burst before the comment renders
    max_wait_s: float = 60.0  # a steady stream of changes still shows at least this often
    lease_s: float = 30.0  # one render with its GitHub calls: a crashed writer's lock lapses after this
    stale_s: float = 1200.0  # a booked render not heard of for this long was lost (its message dead-lettered)
    # An infrastructure failure waits this long at most for the relay's re-run of it to report before it is shown
    # (the re-run itself waits up to CRCR_RUN_TIMEOUT_S for the rest of its run; then it must start).
    retry_hold_s: float = 43_200.0 + 3_600.0
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    rand: Callable[[], float] = field(default=random.random)
    new_ticket: Callable[[], str] = field(default=lambda: uuid.uuid4().hex)


@dataclass
class CommentOutcome:
    detail: str
    delay_s: float = 0.0
    written: list[str] = field(default_factory=list)
    recheck_at: float | None = None  # a failure left out while its re-run is pending: look again then


def _skip(deps: CommentDeps, reason: str) -> CommentOutcome:
    deps.metrics.count("PrCommentSkipped", reason=reason)
    return CommentOutcome(reason)


def sync_comment(message: CommentRequest, deps: CommentDeps) -> CommentOutcome:
    """A request books (or joins) a render; a render writes the comment. GitHub's 4xx dead-letter the render
    with the reason; 5xx and timeouts back off; rate limits and the pacer delay it, never dropped."""
    if message.pr is None:
        return _skip(deps, "no_pr")
    if message.ticket is None:
        return _request(message, message.pr, deps)
    return _render(message, message.pr, message.ticket, deps)


def _request(message: CommentRequest, pr: int, deps: CommentDeps) -> CommentOutcome:
    now = deps.clock.now()
    info = deps.prs.pr_info(message.upstream, pr)
    if info is None:
        return _skip(deps, "unknown_pr")
    if info.closed:
        return _skip(deps, "closed")
    ticket = deps.new_ticket()
    due = now + deps.settle_s
    booked = deps.store.book_render(message.upstream, pr, ticket, now, due, now - deps.stale_s)
    if booked != ticket:
        return _skip(deps, "coalesced")  # the render already booked will show this change too
    _send(message, deps, ticket, deps.settle_s, attempt=0, slot_at=None)
    return CommentOutcome("booked", deps.settle_s)


def ask_render(upstream: str, head_sha: str, pr: int, deps: CommentDeps) -> bool:
    """A render asked for by a check-run pass (which read the PR's jobs already): booked without reading the PR, whose
    render looks at it anyway. True when this booked it (and sent its message)."""
    now, ticket = deps.clock.now(), deps.new_ticket()
    booked = deps.store.book_render(upstream, pr, ticket, now, now + deps.settle_s, now - deps.stale_s)
    if booked != ticket:
        deps.metrics.count("PrCommentSkipped", reason="coalesced")
        return False
    message = CommentRequest(upstream=upstream, head_sha=head_sha, pr=pr)
    _send(message, deps, ticket, deps.settle_s, attempt=0, slot_at=None)
    return True


def _send(
    message: CommentRequest, deps: CommentDeps, ticket: str, delay: float, attempt: int, slot_at: float | None
) -> None:
    update = {"ticket": ticket, "not_before": deps.clock.now() + delay, "attempt": attempt, "slot_at": slot_at}
    deps.queue.send_checks([message.model_copy(update=update)], delay)


def _render(message: CommentRequest, pr: int, ticket: str, deps: CommentDeps) -> CommentOutcome:
    upstream, now = message.upstream, deps.clock.now()
    row = deps.store.get_comment(upstream, pr)
    if row.pending != ticket:
        return _skip(deps, "superseded")  # a redelivered render that already ran, or one presumed lost
    if row.due_at is not None and row.due_at > now + 0.5:
        until = min(row.due_at, (row.pending_since or now) + deps.max_wait_s)
        if until > now + 0.5:
            _send(message, deps, ticket, until - now, message.attempt, message.slot_at)
            return CommentOutcome("settling", until - now)  # the burst is still coming in
    locked = deps.store.lock_comment(upstream, pr, ticket, row.version, now, deps.lease_s)
    if locked is None:
        _send(message, deps, ticket, BUSY_RETRY_S, message.attempt, message.slot_at)
        deps.metrics.count("PrCommentRetried", reason="busy")
        return CommentOutcome("busy", BUSY_RETRY_S)
    budget = Budget(message.slot_at)
    try:
        outcome = _write(message, pr, row, locked, budget, deps)
    except Paced as exc:
        return _again(message, deps, ticket, locked, exc.wait_s, message.attempt, budget, "paced")
    except CommentGone as exc:
        return _again(message, deps, ticket, locked, BUSY_RETRY_S, message.attempt, budget, "gone", exc.forgotten)
    except GitHubRateLimited as exc:
        return _again(message, deps, ticket, locked, exc.wait_s, message.attempt, budget, "rate_limited")
    except GitHubUnavailable as exc:
        attempt = message.attempt + 1
        if attempt >= deps.policy.max_attempts:
            return _dead_letter(message, deps, ticket, locked, f"unavailable: {exc} (gave up after {attempt} attempts)")
        delay = deps.policy.backoff(attempt, deps.rand)
        return _again(message, deps, ticket, locked, delay, attempt, budget, "unavailable")
    except (GitHubRejected, NotInstalled) as exc:
        return _dead_letter(message, deps, ticket, locked, f"GitHub rejected the PR comment: {exc}")
    except BaseException:
        # Keep the booking: SQS delivers this render again once its visibility lapses.
        deps.store.release_comment(upstream, pr, locked, now)
        deps.store.end_render(upstream, pr, ticket, now, keep=True)
        raise
    now = deps.clock.now()
    again_at = deps.store.end_render(upstream, pr, ticket, now)
    if again_at is not None:  # asked for again while it rendered: render once more, after that burst
        _send(message, deps, ticket, max(0.0, again_at - now), 0, budget.slot_at)
        outcome.detail += "; again"
    elif outcome.recheck_at is not None:
        # Nothing asks for the comment when a pending re-run is decided (or never reports): ask then.
        update = {"ticket": None, "not_before": outcome.recheck_at, "attempt": 0, "slot_at": None}
        deps.queue.send_checks([message.model_copy(update=update)], max(1.0, outcome.recheck_at - now))
        outcome.detail += "; recheck"
    return outcome


def _write(
    message: CommentRequest, pr: int, row: CommentRow, locked: int, budget: Budget, deps: CommentDeps
) -> CommentOutcome:
    """Under the lock: render from the latest recorded state and write it if it differs from the last body."""
    upstream, now = message.upstream, deps.clock.now()
    info = deps.prs.pr_info(upstream, pr)
    if info is None or info.closed:
        deps.store.release_comment(upstream, pr, locked, now)
        return _skip(deps, "closed" if info is not None else "unknown_pr")
    # A shadow downstream's jobs are never told upstream (crcr.app.outbound): the comment shows the live ones.
    jobs = [j for j in deps.jobs.jobs_for_head(upstream, info.head_sha) if deps.door.live(j.repo)]
    view = select(jobs, pr, info.head_sha, info.labels, deps.reruns.rerun_state, now, deps.retry_hold_s)
    owners = {entry.key: entry.oncalls for entry in deps.allowlist.current().entries}
    posted = row.posted
    if posted.comment_id is None and not row.searched:
        # No comment known, and the conversation not looked through since the row was (re)created: a cold
        # start that lost the row must find the comment it made, never make a second one.
        found = _find(deps, upstream, pr)
        if found is not None:
            posted = replace(recover(found[1]), comment_id=found[0], body_hash=_digest(found[1]))
    rendered = render(view, upstream=upstream, pr=pr, owners=owners, posted=posted, now=now)
    digest = _digest(rendered.body)
    if posted.comment_id is None and not rendered.worth_creating:
        deps.store.release_comment(upstream, pr, locked, now, posted)
        # Never a comment that only says green.
        return replace(_skip(deps, "nothing_failed"), recheck_at=view.recheck_at)
    if posted.comment_id is not None and digest == posted.body_hash:
        deps.store.release_comment(upstream, pr, locked, now, posted)
        return replace(_skip(deps, "unchanged"), recheck_at=view.recheck_at)
    speaks_for = next((j.repo for j in jobs), None)  # every job shown is a live downstream's; None: the relay's own
    permit = deps.door.permit(
        Write(GITHUB, "comment", speaks_for, upstream, f"{pr}:{digest}", {"body": rendered.body}, pr, info.head_sha)
    )
    if permit is None:
        deps.store.release_comment(upstream, pr, locked, now, posted)
        return _skip(deps, "withheld")
    budget.spend(deps.pacer, lambda: deps.api.installation_for(upstream), now)
    if posted.comment_id is None:
        comment_id = deps.api.create_comment(upstream, pr, rendered.body, permit=permit)
        deps.metrics.count("PrCommentCreated")
        detail = "created"
    else:
        comment_id = posted.comment_id
        try:
            deps.api.update_comment(upstream, comment_id, rendered.body, permit=permit)
        except GitHubRejected as exc:
            if exc.status != 404:
                raise
            # Deleted by someone: the next pass (the booking is kept) makes a new one, mentioning nobody again.
            raise CommentGone(Posted(mentioned=posted.mentioned, history=posted.history)) from exc
        deps.metrics.count("PrCommentUpdated")
        detail = "updated"
    saved = Posted(comment_id, digest, rendered.mentioned, rendered.live, rendered.history)
    deps.store.release_comment(upstream, pr, locked, deps.clock.now(), saved)
    return CommentOutcome(detail, written=[f"comment {comment_id}"], recheck_at=view.recheck_at)


def _find(deps: CommentDeps, upstream: str, pr: int) -> tuple[int, str] | None:
    """The oldest comment this App wrote on the PR carrying the marker (a human's copy of the marker is not ours)."""
    mark = marker(upstream, pr)
    for comment in deps.api.list_comments(upstream, pr):
        if comment.ours and mark in comment.body:
            return comment.id, comment.body
    return None


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def _again(
    message: CommentRequest,
    deps: CommentDeps,
    ticket: str,
    locked: int,
    delay: float,
    attempt: int,
    budget: Budget,
    reason: str,
    posted: Posted | None = None,
) -> CommentOutcome:
    """The render could not write yet: release the row, keep the booking, and come back after `delay`."""
    upstream, pr, now = message.upstream, message.pr or 0, deps.clock.now()
    deps.store.release_comment(upstream, pr, locked, now, posted)
    if deps.store.end_render(upstream, pr, ticket, now, keep=True) is None:
        return _skip(deps, "superseded")
    _send(message, deps, ticket, delay, attempt, budget.slot_at)
    if reason == "paced":
        deps.metrics.count("PrCommentPaced")
    else:
        deps.metrics.count("PrCommentRetried", reason=reason)
    return CommentOutcome(reason, delay)


def _dead_letter(message: CommentRequest, deps: CommentDeps, ticket: str, locked: int, reason: str) -> CommentOutcome:
    upstream, pr, now = message.upstream, message.pr or 0, deps.clock.now()
    deps.store.release_comment(upstream, pr, locked, now)
    deps.store.drop_render(upstream, pr, ticket)  # the next change books a new render
    deps.queue.dead_letter(message, reason)
    deps.metrics.count("PrCommentDeadLettered")
    return CommentOutcome(reason)
