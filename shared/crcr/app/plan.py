"""Planner use case: one accepted event -> one DispatchMessage per allowlisted target that wants it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pydantic import ValidationError

from crcr.app.checks_booking import backfill
from crcr.app.commands import CommandContext, CommandDeps, plan_command
from crcr.app.dispatch import client_payload
from crcr.app.outbound import Outbound
from crcr.app.page_notes import PlanNote, note_plan
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.github import GitHubRejected, NotInstalled
from crcr.app.ports.jobs import JobsByHead
from crcr.app.ports.pulls import HeadRecord, PrInfo
from crcr.app.ports.queues import BlobStore, ChecksQueue, DispatchQueue
from crcr.app.rerun import RerunDeps, check_run_target, check_suite_targets
from crcr.app.summaries import SummaryDeps
from crcr.app.upstream_event import MAX_COMPARED_FILES, load_body, pushed_by_payload, to_upstream_event
from crcr.contracts.check_messages import (
    CheckSync,
    CommentRequest,
    HeadSuperseded,
    JobKey,
    RepoSkipped,
    RerunRequest,
)
from crcr.contracts.github import CheckRunEvent, CheckSuiteEvent
from crcr.contracts.messages import DispatchMessage, EventMessage, downstream_target
from crcr.domain.allowlist import Entry
from crcr.domain.change_hints import change_hints
from crcr.domain.checks import CIFLOW_DEVICE_PREFIX
from crcr.domain.errors import BadRequest
from crcr.domain.ids import ascii_lower
from crcr.domain.levels import Level
from crcr.domain.payload import fit_payload
from crcr.domain.planning import (
    MERGED_LABEL,
    NO_MATCHING_FILES,
    Decision,
    UpstreamEvent,
    Verdict,
    filter_paths,
    needs_files,
    plan,
)
from crcr.domain.regressions import BranchCommit
from crcr.domain.shadow import DISPATCH, HOLD, SKIP, ShadowDecision


class PullRequestLog(Protocol):
    def record_pr_head(
        self,
        upstream: str,
        pr: int,
        head_sha: str,
        updated_at: str,
        labels: tuple[str, ...] = (),
        base_sha: str = "",
        closed: bool = False,
    ) -> HeadRecord:
        """Store the head of the newest event (GitHub's updated_at): an older event, delivered late, stores
        nothing."""
        ...

    def mark_released(self, upstream: str, pr: int, head_sha: str, repo: str, delivery_id: str, now: float) -> bool:
        """True for the first release of this head to this repository, and for retries of that same delivery."""
        ...

    def pr_info(self, upstream: str, pr: int) -> PrInfo | None: ...

    def mark_merged(self, upstream: str, pr: int, sha: str, now: float) -> None:
        """A push to the default branch landed the PR as `sha` (kept apart from its head, which events replace)."""
        ...

    def merged_commit(self, upstream: str, pr: int) -> str | None:
        """The default-branch commit a push said landed the PR, if the relay saw one."""
        ...


class BranchLog(Protocol):
    def record_commits(self, upstream: str, commits: list[BranchCommit]) -> None:
        """Commits pushed to the upstream's default branch with their order (the commit time) and what a blamelist
        shows of them."""
        ...


class ChangedFiles(Protocol):
    def change_files(self, upstream: str, base_sha: str, head_sha: str) -> tuple[str, ...] | None:
        """The files a PR head changes from its base, by SHA (renamed ones under both names); None when they cannot
        all be known (too many for one comparison, no base, a failed read): then every filtered downstream gets it."""
        ...


# client_payload must stay under 64 KB; the ticket, URL and ids need ~2 KB of it.
PAYLOAD_BUDGET_BYTES = 60_000


@dataclass(frozen=True)
class PlannerDeps:
    upstream: str
    allowlist: AllowlistProvider
    blobs: BlobStore
    prs: PullRequestLog
    branch: BranchLog
    dispatches: DispatchQueue
    metrics: Metrics
    clock: Clock
    door: Outbound  # each downstream's mode (shadow: planned and kept, never sent), and where its decisions go
    checks: ChecksQueue | None = None
    jobs: JobsByHead | None = None
    reruns: RerunDeps | None = None
    files: ChangedFiles | None = None  # path filters: a PR's files (None: unknown, so filtered repositories get it)
    commands: CommandDeps | None = None  # `@<app> rerun …` comments (None: comments are not acted on)
    pages: SummaryDeps | None = None  # the HUD pages' documents (None: the stack has no HUD bucket)


@dataclass
class PlanSummary:
    dispatched: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    shadowed: dict[str, str] = field(default_factory=dict)  # repository -> what a shadow downstream was decided
    skipped: dict[str, str] = field(default_factory=dict)
    page_note: str = "off"  # the HUD pages told what was planned: noted, nothing, off, or failed: <why>


def _changed_files(event: UpstreamEvent, deps: PlannerDeps) -> tuple[str, ...] | None:
    """The change's files for path filters: a push's from its payload, a PR head's (or a ciflow tag's PR head's)
    from one comparison with its base, by SHA; None (dispatch) when they cannot all be known."""
    if event.kind == "push" and event.ciflow is None:
        return event.pushed_files
    if event.pr_number is None or deps.files is None:
        return None
    if event.changed_files is not None and event.changed_files >= MAX_COMPARED_FILES:
        deps.metrics.count("ChangedFilesUnknown")  # more than one comparison names: not worth a request
        return None
    base = event.base_sha
    if not base:  # a ciflow tag push: its PR's base, as the PR's newest event gave it
        info = deps.prs.pr_info(deps.upstream, event.pr_number)
        base = info.base_sha if info is not None else ""
    files = deps.files.change_files(deps.upstream, base, event.head_sha)
    deps.metrics.count("ChangedFilesListed" if files is not None else "ChangedFilesUnknown")
    return files


def plan_rerun(message: EventMessage, doc: dict[str, Any], deps: PlannerDeps) -> PlanSummary:
    """A re-run asked for from the Checks tab: find the downstream runs behind the relay's own check runs and
    hand each to the check-run writer, which re-runs it paced on the downstream's installation."""
    summary = PlanSummary()
    if deps.reruns is None or deps.checks is None:
        summary.skipped["*"] = "reruns_off"
        return summary
    try:
        if message.event == "check_run":
            run = CheckRunEvent.model_validate(doc).check_run
            head_sha = run.head_sha
            target = check_run_target(deps.upstream, head_sha, run.id, run.name, run.external_id, deps.reruns)
            targets = [target] if target is not None else []
            if target is None:
                summary.skipped[run.name] = "not_ours"
        else:
            suite = CheckSuiteEvent.model_validate(doc).check_suite
            head_sha = suite.head_sha
            targets = check_suite_targets(deps.upstream, head_sha, suite.id, deps.reruns)
    except ValidationError as exc:
        raise BadRequest(f"{message.event} payload is malformed", field="body") from exc
    except (GitHubRejected, NotInstalled) as exc:
        # A 4xx will not change on retry (5xx and rate limits do: those propagate and SQS retries).
        deps.metrics.count("RerunIgnored", reason="github_rejected")
        summary.skipped["*"] = f"github_rejected: {exc}"
        return summary
    reruns = [
        RerunRequest(
            requested_by="checks_tab",
            upstream=deps.upstream,
            head_sha=head_sha,
            delivery_id=message.delivery_id,
            repo=repo,
            job=JobKey(run_id=run_id),
        )
        for repo, run_id in targets
    ]
    deps.checks.send_checks(reruns)
    summary.skipped.update({f"{m.repo}:{m.run_id}": "rerun_queued" for m in reruns})
    return summary


def _record_head(event: UpstreamEvent, deps: PlannerDeps, now: float) -> tuple[float | None, str | None]:
    """Store a PR event's head; a new head cancels the old one's queued runs. Returns `now` when this event's
    commit is the PR's head (the newest event the relay knows of), for the dispatches to carry, and the head it
    replaced."""
    if event.pr_number is None or event.kind != "pull_request":
        return None, None  # a ciflow tag push names its PR but says nothing of the PR's head
    recorded = deps.prs.record_pr_head(
        deps.upstream, event.pr_number, event.head_sha, event.updated_at, event.labels, event.base_sha, event.closed
    )
    if recorded.replaced is not None and deps.checks is not None:
        # The old commit's check runs still queued are cancelled, naming this one (never left hanging).
        cancel = HeadSuperseded(
            upstream=deps.upstream,
            head_sha=recorded.replaced,
            superseded_by=event.head_sha,
            pr=event.pr_number,  # the pass reads the PR's head: a commit it went back to meanwhile stays
        )
        # The PR's comment follows the new head at once (not when its first job reports, which may be hours).
        comment = CommentRequest(upstream=deps.upstream, head_sha=event.head_sha, pr=event.pr_number)
        deps.checks.send_checks([cancel, comment])
        deps.metrics.count("HeadSuperseded")
    return (now if recorded.newest else None), recorded.replaced


def plan_event(message: EventMessage, deps: PlannerDeps) -> PlanSummary:
    doc = load_body(message, deps.blobs)
    if message.event in ("check_run", "check_suite"):
        return plan_rerun(message, doc, deps)
    if message.event == "issue_comment":
        return _command(message, doc, deps)
    event = _with_merge(to_upstream_event(message.event, doc), deps)
    decisions = plan(event, deps.allowlist.current())
    filtered = needs_files(decisions, event)
    # The change's files: listed for path filters only; a push's are in its payload at no cost.
    files = _changed_files(event, deps) if filtered else pushed_by_payload(event)
    if filtered:
        decisions = filter_paths(decisions, event, files)
    hints = None if event.action == "closed" else change_hints(files, event.changed_files)
    now = deps.clock.now()
    summary = PlanSummary()

    head_at, replaced = _record_head(event, deps, now)

    if event.kind == "push" and event.commits and event.ref == f"refs/heads/{event.default_branch}":
        # The default branch's commit order: each commit's baseline results are compared in this order.
        deps.branch.record_commits(deps.upstream, list(event.commits))
    if event.resolved_prs:
        _landed(event, deps, now, summary)

    label = event.added_label or ""
    if event.action == "labeled" and ascii_lower(label).startswith(CIFLOW_DEVICE_PREFIX) and deps.checks and deps.jobs:
        device = label[len(CIFLOW_DEVICE_PREFIX) :]
        mirrored: list[CheckSync] = [*backfill(deps.jobs.jobs_for_head(deps.upstream, event.head_sha), device)]
        deps.metrics.count("CheckRunsBackfilled", len(mirrored))
        if mirrored and event.pr_number is not None:  # the device's jobs count in the PR's comment from now on
            mirrored.append(CommentRequest(upstream=deps.upstream, head_sha=event.head_sha, pr=event.pr_number))
        deps.checks.send_checks(mirrored)

    targets, skipped, shadowed = _sorted(message, event, decisions, now, deps, summary)
    planned = Planned(message, event, doc, head_at, hints, now)
    if targets or skipped:
        _send(planned, targets, skipped, deps, summary)
    if shadowed:
        _shadow(planned, shadowed, deps, summary)
    live = [d for d in decisions if deps.door.live(d.entry.repo)]  # the pages show live plans only
    summary.page_note = _note_plan(event, live, replaced, deps)
    return summary


def _sorted(
    message: EventMessage,
    event: UpstreamEvent,
    decisions: list[Decision],
    now: float,
    deps: PlannerDeps,
    summary: PlanSummary,
) -> tuple[list[Entry], list[Entry], list[tuple[Entry, str, str]]]:
    """The downstreams to send to, those path filters skipped (recorded, not sent), and the shadow downstreams'
    decisions (entry, decision, reason): never sent."""
    targets: list[Entry] = []
    skipped: list[Entry] = []
    shadowed: list[tuple[Entry, str, str]] = []
    for decided in decisions:
        repo, verdict, reason = decided.entry.repo, decided.verdict, decided.reason
        shadow = not deps.door.live(repo)
        if verdict is Verdict.RELEASE:
            assert event.pr_number is not None
            if not deps.prs.mark_released(
                deps.upstream, event.pr_number, event.head_sha, repo, message.delivery_id, now
            ):
                verdict, reason = Verdict.SKIP, "already_released"
        if shadow:
            shadowed.append((decided.entry, {Verdict.HOLD: HOLD, Verdict.SKIP: SKIP}.get(verdict, DISPATCH), reason))
        elif verdict is Verdict.HOLD:
            summary.held.append(repo)  # released by a ciflow/ label (RELEASE above): nothing to store
            deps.metrics.count("TargetHeld")
        elif verdict is Verdict.SKIP:
            summary.skipped[repo] = reason
            deps.metrics.count("TargetSkipped", reason=reason)
            if reason == NO_MATCHING_FILES:
                skipped.append(decided.entry)
        else:
            targets.append(decided.entry)
    return targets, skipped, shadowed


def _with_merge(event: UpstreamEvent, deps: PlannerDeps) -> UpstreamEvent:
    """A PR closed without GitHub's `merged` (PyTorch's merge bot pushes the commit itself) is merged when a push to
    the default branch already said it landed it (the label, read with the event, is the other sign)."""
    if event.action != "closed" or event.merged or event.pr_number is None:
        return event
    return replace(event, merged=deps.prs.merged_commit(deps.upstream, event.pr_number) is not None)


def _landed(event: UpstreamEvent, deps: PlannerDeps, now: float, summary: PlanSummary) -> None:
    """Remember each PR the push landed; one already closed shows as merged on the pages from now on."""
    for pr in event.resolved_prs:
        deps.prs.mark_merged(deps.upstream, pr, event.head_sha, now)
        deps.metrics.count("PullRequestLanded")
        info = deps.prs.pr_info(deps.upstream, pr)
        if info is not None and info.closed and deps.pages is not None:
            note = PlanNote(deps.upstream, info.head_sha, "pull_request", pr=pr, meta={"pr_state": "merged"})
            summary.page_note = _noted(note, deps)


@dataclass(frozen=True)
class Planned:
    """One event as the planner turns it into dispatch messages."""

    message: EventMessage
    event: UpstreamEvent
    doc: dict[str, Any]
    head_at: float | None  # when head_sha was stored as the PR's head
    hints: dict[str, Any] | None  # the change hints
    now: float


def _send(
    planned: Planned, targets: list[Entry], skipped: list[Entry], deps: PlannerDeps, summary: PlanSummary
) -> None:
    messages = _messages(planned, targets + skipped, skipped, deps)
    deps.dispatches.send_dispatches(messages)
    deps.metrics.count("DispatchPlanned", len(targets))
    summary.dispatched = [m.target_repo for m in messages if m.skip is None]
    _skip_checks([m for m in messages if m.skip is not None and m.level >= Level.L4], deps)


def _shadow(planned: Planned, shadowed: list[tuple[Entry, str, str]], deps: PlannerDeps, summary: PlanSummary) -> None:
    """Keep what each shadow downstream was decided: the dispatch it would have been sent (its client_payload but the
    ticket and callback URL, minted when sent), or why it was held or skipped. Nothing is sent."""
    would = [entry for entry, decided, _ in shadowed if decided == DISPATCH]
    message, event = planned.message, planned.event
    sent = {m.target_repo: m for m in _messages(planned, would, [], deps)} if would else {}
    decisions = []
    for entry, decided, reason in shadowed:
        m = sent.get(entry.repo)
        payload = None
        if m is not None:
            payload = {k: v for k, v in client_payload(m, "", "").items() if k not in ("ticket", "callback_url")}
        decisions.append(
            ShadowDecision(
                delivery_id=message.delivery_id, received_at=message.received_at, event=_event_type(event),
                action=event.action, upstream=deps.upstream, pr=event.pr_number, head_sha=event.head_sha,
                repo=entry.repo, level=int(entry.level), decision=decided, reason=reason, payload=payload,
                target=_target(m) if m is not None else {},
            )
        )  # fmt: skip
        summary.shadowed[entry.repo] = f"{decided}: {reason}" if reason else decided
        deps.metrics.count("ShadowDecided", decision=decided)
    deps.door.record(decisions)


def _target(m: DispatchMessage) -> dict[str, Any]:
    if m.buildkite is not None:
        return {"buildkite": m.buildkite.model_dump()}
    if m.workflow is not None:
        return {"workflow": m.workflow.model_dump()}
    return {}


def _event_type(event: UpstreamEvent) -> str:
    return "push" if event.kind == "push" else "pull_request"


def _messages(planned: Planned, entries: list[Entry], skipped: list[Entry], deps: PlannerDeps) -> list[DispatchMessage]:
    message, event, now = planned.message, planned.event, planned.now
    payload, trimmed = fit_payload(planned.doc, PAYLOAD_BUDGET_BYTES)
    if trimmed:
        deps.metrics.count("PayloadTrimmed")
    return [
        DispatchMessage(
            delivery_id=message.delivery_id,
            event_type=_event_type(event),
            action=event.action,
            target_repo=entry.repo,
            level=entry.level,
            device=entry.device,
            upstream=deps.upstream,
            pr_number=event.pr_number,
            head_sha=event.head_sha,
            ref=event.ref,
            payload=payload,
            planned_at=now,
            head_at=planned.head_at,
            ciflow=event.ciflow,
            changes=planned.hints,
            merged=event.merged if event.action == "closed" else None,
            skip=NO_MATCHING_FILES if entry in skipped else None,
            **downstream_target(entry),
        )
        for entry in entries
    ]


# Skips that say nothing about the commit (this event changes nothing for the repository): not noted.
NO_NEWS = frozenset({"label_only", "action_ignored", "already_released", "tag_deleted", "branch_deleted"})


def _planned(decision: Decision, closed: bool) -> dict[str, Any] | None:
    """One repository's decision as the HUD pages show it on the commit (None: nothing to show)."""
    entry, verdict = decision.entry, decision.verdict
    base = {"level": int(entry.level)}
    if closed:
        return None  # a closed PR's dispatch lets downstreams clean up: not a run anyone waits for
    if verdict in (Verdict.DISPATCH, Verdict.RELEASE):
        # L1 records no results: nothing will ever start there as far as the relay knows, so never "pending".
        return base | ({"state": "pending"} if entry.level >= Level.L2 else {"state": "dispatched", "reason": "l1"})
    if verdict is Verdict.HOLD:
        return base | {"state": "held", "reason": decision.reason}
    if decision.reason == NO_MATCHING_FILES:
        return base | {"state": "skipped", "reason": decision.reason}
    if decision.reason in NO_NEWS:
        return None
    return base | {"state": "not_targeted", "reason": decision.reason}


def _note_plan(event: UpstreamEvent, decisions: list[Decision], replaced: str | None, deps: PlannerDeps) -> str:
    """Tell the HUD pages what was decided for the commit: pending, held, skipped or not targeted per downstream,
    with the commit's title, author, time and PR state. Only an event that dispatched, held or skipped something,
    closed a PR or replaced its head is noted (a push to a branch nobody builds is not a commit anyone looks for).
    Best effort: the pages are not worth re-planning an event for. Returns what became of the note."""
    if deps.pages is None:
        return "off"
    closed = event.action == "closed"
    planned = {d.entry.repo: p for d in decisions if (p := _planned(d, closed)) is not None}
    # The merge bot's label on a PR it closed earlier: the pages learn it was merged.
    merged_label = event.closed and event.merged and event.added_label == MERGED_LABEL
    if not (closed or replaced or merged_label or any(p["state"] != "not_targeted" for p in planned.values())):
        return "nothing"
    meta: dict[str, Any] = {}
    if event.ciflow is None:
        meta = {"title": event.title, "author": event.author, "at": event.at}
    if event.kind == "pull_request":
        state = ("merged" if event.merged else "closed") if event.closed else ("draft" if event.draft else "open")
        meta |= {"pr_state": state, "base_sha": event.base_sha or None}
    note = PlanNote(
        upstream=deps.upstream,
        sha=event.head_sha,
        event_type=event.kind,
        pr=event.pr_number,
        ciflow=event.ciflow,
        meta=meta,
        planned=planned,
        replaced=replaced,
        nightly_only=tuple(sorted(d.entry.repo for d in decisions if d.entry.settings.nightly_only)),
    )
    return _noted(note, deps)


def _noted(note: PlanNote, deps: PlannerDeps) -> str:
    assert deps.pages is not None
    try:
        note_plan(note, deps.pages)
    except Exception as exc:  # S3 unavailable, or a document that kept changing: counted, and the handler logs it
        deps.metrics.count("PlanNoteFailed")
        return f"failed: {type(exc).__name__}: {exc}"
    return "noted"


def _skip_checks(messages: list[DispatchMessage], deps: PlannerDeps) -> None:
    """A required (L4) check still comes for a skipped repository, concluded skipped, so a ruleset never waits."""
    if not messages or deps.checks is None:
        return
    deps.checks.send_checks(
        [
            RepoSkipped(
                upstream=m.upstream,
                head_sha=m.head_sha,
                delivery_id=m.delivery_id,
                repo=m.target_repo,
                pr=m.pr_number,
                reason=m.skip or "",
                ciflow=m.ciflow,
            )
            for m in messages
        ]
    )


def _command(message: EventMessage, doc: dict[str, Any], deps: PlannerDeps) -> PlanSummary:
    context = None
    if deps.checks is not None and deps.jobs is not None:
        context = CommandContext(upstream=deps.upstream, allowlist=deps.allowlist, prs=deps.prs, jobs=deps.jobs,
                                 checks=deps.checks, dispatches=deps.dispatches, metrics=deps.metrics,
                                 clock=deps.clock, door=deps.door)  # fmt: skip
    outcome = plan_command(message, doc, deps.commands, context)
    return PlanSummary(dispatched=outcome.dispatched, skipped=outcome.skipped)
