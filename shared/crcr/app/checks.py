"""ChecksFunction's writer: each ChecksQueue message handed by its kind to a small writer (docs/contracts.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crcr.app.budget import Budget, Paced
from crcr.app.checks_booking import HeadAsk, request_head, row_key
from crcr.app.checks_comment import comment
from crcr.app.checks_notice import notice
from crcr.app.checks_outcome import SyncOutcome, dead_letter, resend
from crcr.app.checks_pass import sync_head
from crcr.app.checks_plan import PassDeps
from crcr.app.checks_reaction import ReactionDeps, Reactions, react
from crcr.app.checks_rerun import RerunWriterDeps, rerun
from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable, NotInstalled
from crcr.app.regression_notices import NoticeBusy, NoticeDeps
from crcr.app.rerun import RerunBusy, RerunDeps, RetryDeps
from crcr.contracts.check_messages import CheckSync, DispatchChanged, JobChanged, Resent


@dataclass(frozen=True)
class CheckDeps(PassDeps):
    """ChecksFunction's wiring: the pass's dependencies, and each other writer's, handed to it alone."""

    reruns: RerunDeps | None = None  # kind "rerun": re-runs from the Checks tab and the relay's own retries
    retries: RetryDeps | None = None
    reactions: Reactions | None = None  # answers to PR comment commands
    notices: NoticeDeps | None = None  # a regression's one notice to its downstream's owners
    pass_settle_s: float = 5.0  # a change waits this long for the rest of its burst before its head's pass runs

    @property
    def ask(self) -> HeadAsk:
        return HeadAsk(self.store, self.queue, self.clock, self.pass_settle_s)

    @property
    def rerun_writer(self) -> RerunWriterDeps:
        return RerunWriterDeps(self.reruns, self.retries, self.pacer, self.queue, self.clock, self.metrics)

    @property
    def reaction_writer(self) -> ReactionDeps:
        return ReactionDeps(self.reactions, self.door, self.pacer, self.clock, self.metrics)


Writer = Callable[[Any, CheckDeps], SyncOutcome]  # a kind's writer, handed only messages of its kind


def sync(message: CheckSync, deps: CheckDeps) -> SyncOutcome:
    """Handle one message. Over the budget, behind another writer, or GitHub asking to wait: back to
    the queue with a delay. 5xx and timeouts: backoff, then the dead-letter queue. 4xx: dead-lettered
    with the reason at once (retrying will not change GitHub's answer); a re-run GitHub refuses is
    counted and dropped (see crcr.app.rerun)."""
    now = deps.clock.now()
    if isinstance(message, Resent) and message.not_before is not None and message.not_before > now + 1:
        delay = message.not_before - now  # SQS delays at most 15 minutes; longer waits hop until due
        deps.queue.send_checks([message], delay)
        return SyncOutcome(detail="not_due", delay_s=delay)
    return WRITERS[message.kind](message, deps)


def _book(message: JobChanged | DispatchChanged, deps: CheckDeps) -> SyncOutcome:
    """A change (a late label's backfill; a release before passes): book the head's pass, naming the dispatch."""
    rows = {row_key(message.delivery_id, message.repo)} if message.delivery_id and message.repo else set()
    request_head(deps.ask, message.upstream, message.head_sha, rows)
    return SyncOutcome(detail="booked")


def _guarded(what: str, write: Callable[[Any, CheckDeps, Budget], SyncOutcome]) -> Writer:
    """A writer of something other than a check run (a re-run, a reaction, a notice), under the queue's rules:
    paced, busy and rate-limited go back later; unavailable backs off, then dead-letters; refused dead-letters.
    `what` names its metrics: RerunPaced, RegressionNoticePaced, CheckRunPaced, ..."""

    def guarded(message: Any, deps: CheckDeps) -> SyncOutcome:
        budget = Budget(message.slot_at)
        try:
            return write(message, deps, budget)
        except Paced as exc:
            resend(message, deps.queue, deps.clock, exc.wait_s, message.attempt, budget.slot_at)
            deps.metrics.count(f"{what}Paced")
            return SyncOutcome(detail="paced", delay_s=exc.wait_s)
        except (RerunBusy, NoticeBusy):
            resend(message, deps.queue, deps.clock, 1.0, message.attempt, budget.slot_at)
            deps.metrics.count(f"{what}Retried", reason="busy")
            return SyncOutcome(detail="busy", delay_s=1.0)
        except GitHubRateLimited as exc:
            resend(message, deps.queue, deps.clock, exc.wait_s, message.attempt, budget.slot_at)
            deps.metrics.count(f"{what}Retried", reason="rate_limited")
            return SyncOutcome(detail=f"rate_limited: {exc}", delay_s=exc.wait_s)
        except GitHubUnavailable as exc:
            attempt = message.attempt + 1
            if attempt >= deps.policy.max_attempts:
                reason = f"unavailable: {exc} (gave up after {attempt} attempts)"
                return dead_letter(message, deps.queue, deps.metrics, reason, [])
            delay = deps.policy.backoff(attempt, deps.rand)
            resend(message, deps.queue, deps.clock, delay, attempt, budget.slot_at)
            deps.metrics.count(f"{what}Retried", reason="unavailable")
            return SyncOutcome(detail=f"unavailable: {exc}", delay_s=delay)
        except (GitHubRejected, NotInstalled) as exc:
            refused = f"GitHub rejected the {'re-run' if what == 'Rerun' else 'reaction'}: {exc}"
            return dead_letter(message, deps.queue, deps.metrics, refused, [])

    return guarded


# Each kind's writer: a pass over the commit's check runs (booked, or of its own), a booking, or a write elsewhere.
WRITERS: dict[str, Writer] = {
    "head": sync_head,
    "cancel": sync_head,
    "skip": sync_head,
    "job": _book,
    "repo": _book,
    "comment": lambda message, deps: comment(message, deps.comment, deps.metrics),
    "rerun": _guarded("Rerun", lambda message, deps, budget: rerun(message, deps.rerun_writer, budget)),
    "react": _guarded("CheckRun", lambda message, deps, budget: react(message, deps.reaction_writer, budget)),
    "notice": _guarded("RegressionNotice", lambda message, deps, budget: notice(message, deps.notices, budget)),
}
