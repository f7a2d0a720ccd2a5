"""PR comment commands (the planner, on `issue_comment`): `@<app-slug> rerun <owner/repo|all> [failed]`, from those
GitHub says may give them (docs/contracts.md, "Re-runs from a PR comment")."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from crcr.app.outbound import Outbound
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.github import GitHubRejected, NotInstalled
from crcr.app.ports.jobs import JobRecord, JobsByHead
from crcr.app.ports.pulls import PrInfos
from crcr.app.ports.queues import ChecksQueue, DispatchQueue
from crcr.contracts.check_messages import CommentRequest, JobKey, Reaction, RerunRequest
from crcr.contracts.github import IssueCommentEvent
from crcr.contracts.messages import DispatchMessage, EventMessage, downstream_target
from crcr.domain.allowlist import Entry
from crcr.domain.checks import Known, check_run_name, latest_attempts, wants_check_run
from crcr.domain.commands import may_rerun, parse_command, stranger
from crcr.domain.errors import BadRequest
from crcr.domain.ids import is_github_run, repo_key
from crcr.domain.levels import Level
from crcr.domain.verdicts import Attempt


class Collaborators(Protocol):
    def role(self, upstream: str, login: str) -> str | None:
        """The person's role on the upstream as GitHub gives it (admin, maintain, write, triage, read), or None."""
        ...


COMMANDS_PER_AUTHOR_HOUR = 20
COMMANDS_PER_PR_HOUR = 30


class RateLimiter(Protocol):
    def hit(self, key: str, now: float) -> float: ...


class CheckRunReader(Protocol):
    def get_check(self, upstream: str, head_sha: str, name: str) -> tuple[Known | None, int]: ...


class Releases(Protocol):
    def mark_released(self, upstream: str, pr: int, head_sha: str, repo: str, delivery_id: str, now: float) -> bool:
        """True for the first dispatch of this head to this repository by a label or a command (and for retries of
        that same delivery)."""
        ...


@dataclass(frozen=True)
class CommandDeps:
    slug: str  # the App's slug: commands are addressed to @<slug>
    collaborators: Collaborators
    check_runs: CheckRunReader  # the repository's check run on the head: is its dispatch still running, or skipped?
    releases: Releases  # one dispatch again per head and repository, however many comments ask
    # Commands acted on an hour, per author (anyone's, before their permission is asked) and per PR (of those who may
    # give them): their reads, re-runs and reactions spend the upstream installation's budget. `hit` is 0 under it.
    per_author: RateLimiter | None = None
    per_pr: RateLimiter | None = None


@dataclass(frozen=True)
class CommandContext:
    """What a command reaches through the planner: the PR as the relay knows it, its jobs, and the two queues."""

    upstream: str
    allowlist: AllowlistProvider
    prs: PrInfos
    jobs: JobsByHead
    checks: ChecksQueue
    dispatches: DispatchQueue
    metrics: Metrics
    clock: Clock
    door: Outbound  # a command acts on live downstreams only (crcr.app.outbound)


@dataclass
class CommandOutcome:
    """What the planner reports of a command: the repositories dispatched again, and what was skipped and why."""

    dispatched: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _failed_runs(jobs: Iterable[JobRecord]) -> list[tuple[str, str]]:
    """(dispatch id, run id) of each GitHub run whose latest attempt of some job failed."""
    runs: dict[tuple[str, str], None] = {}
    for job in latest_attempts(list(jobs)):
        if is_github_run(job.run_id) and Attempt(job.run_attempt, job.state, job.conclusion, job.failure_kind).failed:
            runs[(job.dispatch_id, job.run_id)] = None
    return list(runs)


def plan_command(
    message: EventMessage, doc: dict[str, Any], commands: CommandDeps | None, deps: CommandContext | None
) -> CommandOutcome:
    summary = CommandOutcome()
    if commands is None or deps is None:
        summary.skipped["*"] = "commands_off"
        return summary
    try:
        event = IssueCommentEvent.model_validate(doc)
    except ValidationError as exc:
        raise BadRequest("issue_comment payload is malformed", field="body") from exc
    command = parse_command(event.comment.body, commands.slug)
    login = event.comment.user.login if event.comment.user else ""
    if command is None or event.issue.pull_request is None:
        return _ignored(summary, deps, "not_a_command")
    if (unasked := _unasked(event)) is not None:
        return _ignored(summary, deps, unasked)  # free: no permission read, no budget spent, no reaction
    if commands.per_author and commands.per_author.hit(login, deps.clock.now()):
        return _ignored(summary, deps, "over_budget")  # before any GitHub request: nothing read, no reaction
    try:
        role = commands.collaborators.role(deps.upstream, login)
    except (GitHubRejected, NotInstalled):
        role = None  # GitHub does not know the person as a collaborator: no access
    if not may_rerun(role):
        return _ignored(summary, deps, "not_allowed")  # never answered: an outsider's comment changes nothing
    # A PR's budget counts only commands of people who may give them: an outsider cannot spend it for them.
    if commands.per_pr and commands.per_pr.hit(f"{deps.upstream}#{event.issue.number}", deps.clock.now()):
        return _ignored(summary, deps, "over_budget")
    pr = event.issue.number
    info = deps.prs.pr_info(deps.upstream, pr)
    react = Reaction(upstream=deps.upstream, head_sha=info.head_sha if info else "", pr=pr, comment_id=event.comment.id,
                     delivery_id=message.delivery_id)  # fmt: skip
    live = [e for e in deps.allowlist.current().entries if deps.door.live(e.repo)]
    if not live:
        return _ignored(summary, deps, "shadow")  # nothing is ever sent to a shadow downstream: no reaction either
    entries = _targets(command.repos, live, info.labels if info else ())
    if info is None or entries is None:
        deps.checks.send_checks([react.model_copy(update={"reaction": "confused"})])
        return _ignored(summary, deps, "unknown_pr" if info is None else "unknown_repo")
    jobs = [j for j in deps.jobs.jobs_for_head(deps.upstream, info.head_sha) if j.pr == pr]
    reruns: list[RerunRequest] = []
    again: list[Entry] = []
    for entry in entries:
        mine = [j for j in jobs if repo_key(j.repo) == entry.key and j.job_name]
        failed = _failed_runs(mine)
        reruns += [
            RerunRequest(requested_by="comment", upstream=deps.upstream, head_sha=info.head_sha,
                         delivery_id=message.delivery_id, repo=entry.repo, job=JobKey(dispatch_id=dispatch, run_id=run),
                         pr=pr)
            for dispatch, run in failed
        ]  # fmt: skip
        if not mine and not command.failed_only:
            why = _not_again(entry, info.head_sha, pr, message.delivery_id, commands, deps)
            if why is None:
                again.append(entry)
            else:
                summary.skipped[entry.repo] = why
                deps.metrics.count("CommandSkipped", reason=why)
    dispatches = [_again(message, entry, event, info.head_sha, info.base_sha, info.labels, deps) for entry in again]
    if dispatches:
        deps.dispatches.send_dispatches(dispatches)
    asked = bool(reruns or dispatches)
    deps.checks.send_checks(
        [
            *reruns,
            react.model_copy(update={"reaction": "rocket" if asked else "confused"}),
            *([CommentRequest(upstream=deps.upstream, head_sha=info.head_sha, pr=pr)] if asked else []),
        ]
    )
    if asked:
        deps.metrics.count("CommandAccepted")
    else:
        deps.metrics.count("CommandIgnored", reason="nothing_to_rerun")
    summary.dispatched = [m.target_repo for m in dispatches]
    summary.skipped.update({f"{m.repo}:{m.run_id}": "rerun_queued" for m in reruns})
    return summary


def _unasked(event: IssueCommentEvent) -> str | None:
    """Why a command is ignored before GitHub is asked anything: a bot's, or a stranger's by the comment's
    `author_association`."""
    if event.comment.user is None or (event.comment.user.type or "").lower() == "bot":
        return "bot"
    return "stranger" if stranger(event.comment.author_association) else None


def _ignored(summary: CommandOutcome, deps: CommandContext, reason: str) -> CommandOutcome:
    deps.metrics.count("CommandIgnored", reason=reason)
    summary.skipped["*"] = reason
    return summary


def _targets(named: tuple[str, ...] | None, entries: Iterable[Entry], labels: tuple[str, ...]) -> list[Entry] | None:
    """The downstreams a command names: L3/L4 ones whose results show on the PR (L3 while labelled), not nightly-only;
    None when a named one is not such a downstream."""
    shown = [
        e
        for e in entries
        if e.level >= Level.L3 and not e.settings.nightly_only and wants_check_run(e.level, e.device, labels)
    ]
    if named is None:
        return shown
    wanted = {repo_key(r) for r in named}
    found = [e for e in shown if e.key in wanted]
    return found if len(found) == len(wanted) else None


def _not_again(
    entry: Entry, head: str, pr: int, delivery_id: str, commands: CommandDeps, deps: CommandContext
) -> str | None:
    """Why a downstream with no job on the head is not dispatched again, or None: its dispatch is still pending or
    running (its check run not completed), its path filters skipped the head, or a label or an earlier command
    already dispatched this head to it."""
    known, version = commands.check_runs.get_check(deps.upstream, head, check_run_name(entry.repo, "", ""))
    if (known is None and version) or (known is not None and known.status != "completed"):
        return "still_running"
    if known is not None and known.conclusion == "skipped":
        return "skipped_on_head"
    if not commands.releases.mark_released(deps.upstream, pr, head, entry.repo, delivery_id, deps.clock.now()):
        return "already_dispatched"
    return None


def _again(
    message: EventMessage, entry: Entry, event: IssueCommentEvent, head: str, base: str, labels: tuple[str, ...],
    deps: CommandContext,
) -> DispatchMessage:  # fmt: skip
    """A new dispatch of the PR's current head (nothing ran there): the PR as the relay knows it, in the shape of
    a `synchronize` webhook's payload, with who asked."""
    payload = {
        "action": "synchronize",
        "number": event.issue.number,
        "pull_request": {
            "number": event.issue.number,
            "head": {"sha": head},
            "base": {"sha": base},
            "labels": [{"name": label} for label in labels],
        },
        "repository": {"full_name": deps.upstream},
        "sender": {"login": event.comment.user.login if event.comment.user else ""},
        "crcr_rerun": {"comment_id": event.comment.id},
    }
    return DispatchMessage(
        delivery_id=message.delivery_id,
        event_type="pull_request",
        action="synchronize",
        target_repo=entry.repo,
        level=entry.level,
        device=entry.device,
        upstream=deps.upstream,
        pr_number=event.issue.number,
        head_sha=head,
        payload=payload,
        planned_at=deps.clock.now(),
        **downstream_target(entry),
    )
