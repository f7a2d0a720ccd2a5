"""Check-run writer: upstream check runs (docs/contracts.md) for L4 and labelled L3 dispatches.

Two kinds, each one per (head SHA, name), created once and then PATCHed forward only:
- the repository's, crcr/<owner>/<repo>: created `queued` when an L4 dispatch is sent, so a required
  check exists before anything reports; in progress while any job runs; completed with the worst
  conclusion once every job finished and nothing changed for the settle period; timed_out when no
  job started. Its summary lists the jobs. With `check_runs: per_repo` it is the only one;
- per job, crcr/<owner>/<repo>/<workflow>/<job> (`check_runs: per_job`).

Every write goes through the upstream installation, whose budget GitHub caps (80 content-creating
requests a minute, 500 an hour): writes are paced per installation, and over the budget a message goes
back to the queue with a delay, never dropped. A message names what to look at; the writer reads the
latest recorded state when it gets there, so waiting merges writes instead of piling them up.

`check_runs: auto` (the default) adapts to that budget write by write (crcr.domain.checks.makes): while the
pacer's hourly window has room, per_job; once it has not, no new per-job run and no `in_progress`, and the
repository's `queued` run only while it would go at once. Runs that exist are always carried to their end.

The PR comment shares the queue and the budget; `comment` messages go to its writer (crcr.app.comment).

Re-runs of downstream runs (kind "rerun", crcr.app.rerun) go through the same writer and pacer, spending
the downstream installation's budget instead: asked for from the Checks tab, or the relay's own retry of
an infrastructure failure.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from crcr.app.budget import Budget, Paced
from crcr.app.comment import CommentDeps, sync_comment
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.checkruns import CheckRunStore
from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable, NotInstalled
from crcr.app.ports.jobs import JobRecord, ResultsStore
from crcr.app.ports.ledger import LedgerReader, LedgerRow, LedgerState
from crcr.app.ports.levels import DemotionReader
from crcr.app.ports.pacing import BudgetGauge, Pacer
from crcr.app.ports.pulls import PrInfos
from crcr.app.ports.queues import ChecksQueue
from crcr.app.rerun import RerunBusy, RerunDeps, RetryDeps, rerun_requested, retry_infra
from crcr.contracts.messages import CheckSyncMessage
from crcr.domain import failed_tests
from crcr.domain.checks import (
    DONE_STATES,
    JobOutcome,
    Known,
    Need,
    Rollup,
    check_run_name,
    job_run_need,
    latest_attempts,
    makes,
    repo_run_need,
    rollup,
    should_write,
    wants_check_run,
)
from crcr.domain.ids import NO_RUN, ascii_lower
from crcr.domain.pacing import WindowLevel
from crcr.domain.planning import NO_MATCHING_FILES
from crcr.domain.retry import RetryPolicy
from crcr.domain.text import shown
from crcr.domain.verdicts import VERDICT_MEANING


class CheckRunApi(Protocol):
    def installation_for(self, upstream: str) -> int:
        """The installation whose budget the writes spend (paced per installation, like dispatches)."""
        ...

    def create_check_run(self, upstream: str, fields: dict[str, Any]) -> int: ...
    def update_check_run(self, upstream: str, check_run_id: int, fields: dict[str, Any]) -> None: ...


class Reactions(Protocol):
    def installation_for(self, upstream: str) -> int: ...
    def react(self, upstream: str, comment_id: int, content: str) -> None:
        """A reaction on an issue comment (`+1`, `rocket`, `confused`, …)."""
        ...


MAX_SUMMARY = 65_535  # GitHub's limit on output.summary
SWEPT = "swept"  # fingerprint of a sweeper write: any genuine report differs from it
SCHEDULED = "scheduled"  # delivery id of scheduled runs: they report on a commit, not on a PR's checks


@dataclass(frozen=True)
class CheckDeps:
    api: CheckRunApi
    store: CheckRunStore
    results: ResultsStore
    ledger: LedgerReader
    prs: PrInfos  # a PR's labels (an L3 run needs its label) and head (a superseded commit shows no queued run)
    queue: ChecksQueue
    pacer: Pacer
    allowlist: AllowlistProvider
    metrics: Metrics
    clock: Clock
    settle_s: float = 60.0
    lease_s: float = 30.0  # one GitHub write with its timeouts: a crashed writer's lock lapses after this
    reruns: RerunDeps | None = None  # kind "rerun": re-runs from the Checks tab and the relay's own retries
    retries: RetryDeps | None = None
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    rand: Callable[[], float] = field(default=random.random)
    comment: CommentDeps | None = None  # the PR comment (CRCR_PR_COMMENT=off: None)
    gauge: BudgetGauge | None = None  # check_runs: auto reads the installation's hourly window (None: always room)
    demotions: DemotionReader | None = None  # L3 repositories with an open demotion PR get no new check runs
    reactions: Reactions | None = None  # answers to PR comment commands
    # Each downstream's share of the upstream installation's write budget (CRCR_DOWNSTREAM_WRITE_SHARE): one whose
    # jobs would take more waits for its own share, never for another's. None: no share (the whole budget).
    share: Pacer | None = None
    share_gauge: BudgetGauge | None = None  # the same shares, read without taking a slot


class CheckRunRace(Exception):
    """Another writer holds or just moved the same check run: look again shortly."""


@dataclass
class SyncOutcome:
    written: list[str] = field(default_factory=list)
    detail: str = "done"
    delay_s: float = 0.0


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts is not None else None


def _tests(body: dict[str, Any]) -> str | None:
    results = body.get("test_results") or (body.get("workflow") or {}).get("test_results")
    if not isinstance(results, dict):
        return None
    return (
        f"{results.get('passed', 0)} passed, {results.get('failed', 0)} failed, "
        f"{results.get('skipped', 0)} skipped of {results.get('total', 0)}"
    )


def _triage_line(job: JobRecord) -> str | None:
    """The downstream's own reading of the failure: advice, shown as theirs."""
    if not job.triage:
        return None
    triage = json.loads(job.triage)
    line = f"The downstream's triage (advice, not a gate): {triage['category']}, {triage['confidence']} confidence"
    suspected = triage.get("suspected_upstream") or {}
    if suspected.get("pr"):
        line += f"; suspects upstream PR #{suspected['pr']}"
    if suspected.get("commit"):
        line += f"; suspects upstream commit {suspected['commit']}"
    return f"{line}. {triage['summary']}"


def _failing_tests(job: JobRecord) -> str | None:
    """The failing tests as the downstream named them (the first 50 kept, messages cut), as a Markdown list."""
    tests = failed_tests.parse(job.failed_tests)
    if not tests:
        return None
    lines = ["Failing tests:"]
    for test in tests[:20]:
        name = f"{test['classname']}.{test['name']}" if test.get("classname") else test["name"]
        line = f"- `{shown(name)[:300].replace('`', '')}`"
        if isinstance(test.get("duration"), int | float):
            line += f" ({test['duration']:.1f} s)"
        if test.get("message"):
            line += ": " + " ".join(shown(str(test["message"])).split())[:500]
        lines.append(line)
    if len(tests) > 20:
        lines.append(f"- … and {len(tests) - 20} more")
    return "\n".join(lines)


def _summary(job: JobRecord) -> str:
    body: dict[str, Any] = json.loads(job.callback_payload)
    lines = [f"**{job.repo}** · {job.workflow_name} / {job.job_name} · {job.conclusion or job.state}"]
    if job.verdict:
        lines.append(f"Verdict: **{job.verdict}** ({VERDICT_MEANING[job.verdict]})")
    if (triage := _triage_line(job)) is not None:
        lines.append(triage)
    tests = _tests(body)
    if tests:
        lines.append(f"Tests: {tests}")
    if (failing := _failing_tests(job)) is not None:
        lines.append(failing)
    if job.started_at is not None:
        lines.append(f"Queue time: {job.started_at - job.dispatched_at:.0f} s")
        if job.completed_at is not None:
            lines.append(f"Execution time: {job.completed_at - job.started_at:.0f} s")
    if job.url:
        lines.append(f"Run: {job.url}")
    artifact = body.get("artifact_url")
    if isinstance(artifact, str):
        lines.append(f"Artifacts: {artifact}")
    summary = body.get("summary")
    if isinstance(summary, str) and summary:
        lines += ["", shown(summary)]  # the downstream's Markdown, without control or bidirectional characters
    return "\n\n".join(lines)[:MAX_SUMMARY]


def _external_id(repo: str, run_id: str, pr: int | None) -> str:
    return f"{repo}:{run_id}:{pr if pr is not None else ''}"


def check_run_fields(job: JobRecord, name: str) -> dict[str, Any]:
    status = "completed" if job.state in DONE_STATES else "in_progress"
    fields: dict[str, Any] = {
        "name": name,
        "head_sha": job.head_sha,
        "status": status,
        "external_id": _external_id(job.repo, job.run_id, job.pr),
        "output": {"title": f"{job.repo}: {job.conclusion or job.state}", "summary": _summary(job)},
    }
    if job.url:
        fields["details_url"] = job.url
    if job.started_at is not None:
        fields["started_at"] = _iso(job.started_at)
    if status == "completed":
        fields["conclusion"] = job.conclusion or "timed_out"
        fields["completed_at"] = _iso(job.completed_at or job.started_at or job.dispatched_at)
    return fields


def _job_line(job: JobRecord) -> str:
    line = f"- {job.workflow_name} / {job.job_name}: **{job.conclusion or job.state}**"
    if job.verdict:
        line += f" ({job.verdict})"
    tests = _tests(json.loads(job.callback_payload))
    if tests:
        line += f" · {tests}"
    if job.url:
        line += f" · [run]({job.url})"
    return line


def repo_check_fields(row: LedgerRow, jobs: list[JobRecord], state: Rollup, name: str) -> dict[str, Any]:
    repo = row.repo
    shown = latest_attempts(jobs)
    word = state.conclusion or ("dispatched" if state.status == "queued" else "running")
    lines = [f"**{repo}** · {word}"]
    if state.status == "queued":
        lines.append("Dispatched; waiting for the first job to start.")
    elif not shown:
        reasons = [j.reason for j in jobs if not j.job_name and j.state == "not_started" and j.reason]
        lines.append(reasons[0] if reasons else "No job of this dispatch started before the start timeout.")
    else:
        lines.append("\n".join(_job_line(j) for j in shown))
    first = shown[0] if shown else None
    fields: dict[str, Any] = {
        "name": name,
        "head_sha": row.head_sha,
        "status": state.status,
        "external_id": _external_id(repo, first.run_id if first else NO_RUN, row.pr),
        "output": {"title": f"{repo}: {word}", "summary": "\n\n".join(lines)[:MAX_SUMMARY]},
    }
    if first is not None and first.url:
        fields["details_url"] = first.url
    starts = [j.started_at for j in shown if j.started_at is not None]
    if starts:
        fields["started_at"] = _iso(min(starts))
    if state.status == "completed":
        fields["conclusion"] = state.conclusion
        ends = [j.completed_at for j in jobs if j.completed_at is not None]
        fields["completed_at"] = _iso(max(ends) if ends else None)
    return fields


@dataclass(frozen=True)
class _Check:
    """One check run as the relay last wrote it (known None: never written), read once per decision."""

    upstream: str
    head_sha: str
    name: str
    known: Known | None
    version: int

    @classmethod
    def read(cls, upstream: str, head_sha: str, name: str, deps: CheckDeps) -> _Check:
        return cls(upstream, head_sha, name, *deps.store.get_check(upstream, head_sha, name))


@dataclass(frozen=True)
class _Why:
    """The repository's `check_runs` setting and what the write is for (crcr.domain.checks.makes)."""

    mode: str = "per_job"
    need: Need = Need.RESULT
    writes: int = 1  # this write and the ones it commits to


def _makes(check: _Check, why: _Why, deps: CheckDeps, budget: Budget) -> bool:
    now = deps.clock.now()
    if why.mode == "auto" and budget.holds(now):
        return True  # decided when this message was paced: its booked slot is spent either way

    def level() -> WindowLevel:
        if deps.gauge is None:
            return WindowLevel(0.0, 1_000_000)
        return deps.gauge.level(deps.api.installation_for(check.upstream), now)

    if makes(why.mode, why.need, why.writes, level):
        return True
    if why.mode == "auto":
        deps.metrics.count("CheckRunSkipped", need=why.need.value)
    return False


SHARE_RECHECK_S = 60.0


def _share_spent(message: CheckSyncMessage, deps: CheckDeps) -> float:
    """When the downstream has spent its share's longest window (the hour): look again in a minute."""
    if deps.share_gauge is None or not message.repo:
        return 0.0
    level = deps.share_gauge.level(share_key(message.upstream, message.repo), deps.clock.now())
    if level.booked <= level.burst:
        return 0.0
    deps.metrics.count("DownstreamThrottled")
    return SHARE_RECHECK_S


def share_key(upstream: str, repo: str) -> str:
    return f"{ascii_lower(upstream)}#{ascii_lower(repo)}"


def _write(
    check: _Check,
    fields: dict[str, Any],
    attempt: int,
    genuine: bool,
    deps: CheckDeps,
    budget: Budget,
    why: _Why = _Why(),
    repo: str = "",
) -> bool:
    """Write one check run if it moves forward and the repository's setting makes it (with `auto`, what the
    budget's hourly window allows). Pace first, then lock the row at the version read (one writer per check
    run, so two PATCHes never land out of order and a stale read never writes), then call GitHub, then record
    what was written."""
    known = check.known
    if not should_write(known, fields["status"], fields.get("conclusion"), attempt, genuine):
        return False
    if not _makes(check, why, deps, budget):
        return False
    if deps.share is not None and repo:
        # The downstream's own share first: over it, the write waits (Paced) without touching the installation's.
        wait = deps.share.acquire(share_key(check.upstream, repo), deps.clock.now())
        if wait > 0:
            deps.metrics.count("DownstreamThrottled")
            raise Paced(wait)
    budget.spend(deps.pacer, lambda: deps.api.installation_for(check.upstream), deps.clock.now())
    key = (check.upstream, check.head_sha, check.name)
    locked = deps.store.lock_check(*key, check.version, deps.clock.now(), deps.lease_s)
    if locked is None:
        raise CheckRunRace(check.name)
    try:
        if known is None:
            check_run_id = deps.api.create_check_run(check.upstream, fields)
            deps.metrics.count("CheckRunCreated")
        else:
            check_run_id = known.check_run_id
            patch = {k: v for k, v in fields.items() if k != "head_sha"}
            deps.api.update_check_run(check.upstream, check_run_id, patch)
            deps.metrics.count("CheckRunUpdated")
    except BaseException:
        deps.store.unlock_check(*key, locked)
        raise
    deps.store.save_check(*key, Known(check_run_id, fields["status"], fields.get("conclusion"), attempt), locked)
    return True


def _mode(repo: str, deps: CheckDeps) -> str:
    entry = deps.allowlist.current().get(repo)
    return entry.settings.check_runs if entry is not None else "auto"


def _wanted(level: int, device: str | None, pr: int | None, upstream: str, deps: CheckDeps) -> bool:
    info = deps.prs.pr_info(upstream, pr) if pr is not None and level == 3 else None
    labels = info.labels if info is not None else ()
    return wants_check_run(level, device, labels)


def _demoted(repo: str, level: int, began: float | None, deps: CheckDeps) -> bool:
    """An L3 repository with an open demotion PR gets no new check run for work that began after the demotion
    started (`began` None: now, a label or a re-run); one shown for work already under way is carried to its end."""
    if level != 3 or deps.demotions is None:
        return False
    since = deps.demotions.since(repo)
    if since is None or (began is not None and began < since):
        return False
    deps.metrics.count("CheckRunSuppressed")
    return True


def sync_job(message: CheckSyncMessage, deps: CheckDeps, written: list[str], budget: Budget) -> None:
    if not message.job_name:
        return  # the dispatch itself (swept): only the repository's check run shows it
    job = deps.results.get_job(message.dispatch_id, message.run_id, message.run_attempt, message.job_name)
    if job is None or job.level < 3:
        return
    mode = _mode(job.repo, deps)
    check = _Check.read(
        job.upstream, job.head_sha, check_run_name(job.repo, job.workflow_name, job.job_name, job.ciflow), deps
    )
    # A check run that exists keeps following its job even if the label is removed or the setting changed
    # later (README): every run the relay created ends.
    if check.known is None and (mode == "per_repo" or not _wanted(job.level, job.device, job.pr, job.upstream, deps)):
        return
    if check.known is None and _demoted(job.repo, job.level, job.started_at or job.dispatched_at, deps):
        return
    fields = check_run_fields(job, check.name)
    need, writes = job_run_need(check.known, fields["status"])
    why = _Why(mode, need, writes)
    if _write(check, fields, job.run_attempt, job.fingerprint != SWEPT, deps, budget, why, repo=job.repo):
        written.append(check.name)


def _outcome(job: JobRecord) -> JobOutcome:
    changed = job.completed_at or job.started_at or job.dispatched_at
    return JobOutcome(
        job.run_id, job.job_name, job.run_attempt, job.state, job.conclusion, job.fingerprint != SWEPT, changed
    )


def sync_repo(message: CheckSyncMessage, deps: CheckDeps, written: list[str], budget: Budget) -> float | None:
    """The repository's check run; returns when to look again if its jobs have not settled yet."""
    row = deps.ledger.get(message.delivery_id, message.repo)
    if row is None or not row.head_sha or not row.upstream or (row.level or 0) < 3:
        return None
    check = _Check.read(row.upstream, row.head_sha, check_run_name(row.repo, "", "", row.ciflow), deps)
    known = check.known
    if known is None and not _wanted(row.level or 0, row.device, row.pr, row.upstream, deps):
        return None
    if known is None and _demoted(row.repo, row.level or 0, row.dispatched_at, deps):
        return None
    jobs = deps.results.jobs_of_dispatch(row.dispatch_id)
    state = rollup([_outcome(j) for j in jobs], deps.clock.now(), deps.settle_s)
    if known is None and state.status == "queued" and _not_to_show(row, deps):
        return None
    # per_repo (and auto when the budget is tight) spends it on what decides a merge: the result.
    why = _Why(_mode(row.repo, deps), *repo_run_need(known, state.status, state.run_attempt))
    fields = repo_check_fields(row, jobs, state, check.name)
    if _write(check, fields, state.run_attempt, state.genuine, deps, budget, why, repo=row.repo):
        written.append(check.name)
    return state.settles_at


def _not_to_show(row: LedgerRow, deps: CheckDeps) -> bool:
    """A queued run is shown only for a dispatch that was sent, on a commit still the PR's head."""
    if row.state is not LedgerState.DISPATCHED:
        return True  # not sent (yet, or ever)
    info = deps.prs.pr_info(row.upstream or "", row.pr) if row.pr is not None else None
    head = info.head_sha if info is not None else None
    return head is not None and head != row.head_sha  # superseded before it was shown


def cancel_superseded(message: CheckSyncMessage, deps: CheckDeps, written: list[str], budget: Budget) -> None:
    """A newer commit was pushed to the PR: the old commit's check runs still queued (nothing started)
    are completed as cancelled, naming the newer commit. Only GitHub itself may set `stale`."""
    newer = message.superseded_by or ""
    for name, known, version in deps.store.checks_of_head(message.upstream, message.head_sha):
        if known.status != "queued":
            continue
        repo = name.removeprefix("crcr/")
        fields = {
            "name": name,
            "status": "completed",
            "conclusion": "cancelled",
            "completed_at": _iso(deps.clock.now()),
            "output": {
                "title": f"{repo}: superseded by {newer[:12]}",
                "summary": f"A newer commit, {newer}, was pushed to the pull request before any job of "
                f"{repo} started on this one. Its results are reported on the newer commit.",
            },
        }
        check = _Check(message.upstream, message.head_sha, name, known, version)
        if _write(check, fields, known.run_attempt, False, deps, budget):
            deps.metrics.count("CheckRunCancelled")
            written.append(name)


def skip_repo(message: CheckSyncMessage, deps: CheckDeps, written: list[str], budget: Budget) -> None:
    """An L4 repository the change did not concern (its path filters): its required check, concluded skipped
    with the reason, so a ruleset requiring it never waits. A run that already exists on the commit (a dispatch
    of the same commit went out) is left as it is."""
    name = check_run_name(message.repo, "", "", message.ciflow)
    check = _Check.read(message.upstream, message.head_sha, name, deps)
    if check.known is not None:
        return
    now = _iso(deps.clock.now())
    why = "no file it watches changed (its paths filter)" if message.reason == NO_MATCHING_FILES else message.reason
    fields = {
        "name": name,
        "head_sha": message.head_sha,
        "status": "completed",
        "conclusion": "skipped",
        "started_at": now,
        "completed_at": now,
        "external_id": _external_id(message.repo, NO_RUN, message.pr),
        "output": {
            "title": f"{message.repo}: skipped, no matching files",
            "summary": f"**{message.repo}** was not dispatched for this commit: {why}.",
        },
    }
    if _write(check, fields, 0, True, deps, budget, _Why(_mode(message.repo, deps), Need.RESULT, 1)):
        deps.metrics.count("CheckRunSkippedByPaths")
        written.append(name)


def _later(message: CheckSyncMessage, deps: CheckDeps, delay: float, attempt: int, budget: Budget) -> None:
    update = {"not_before": deps.clock.now() + delay, "attempt": attempt, "slot_at": budget.slot_at}
    deps.queue.send_checks([message.model_copy(update=update)], delay)


def sync(message: CheckSyncMessage, deps: CheckDeps) -> SyncOutcome:
    """Handle one message. Over the budget, behind another writer, or GitHub asking to wait: back to
    the queue with a delay. 5xx and timeouts: backoff, then the dead-letter queue. 4xx: dead-lettered
    with the reason at once (retrying will not change GitHub's answer); a re-run GitHub refuses is
    counted and dropped (see crcr.app.rerun)."""
    now = deps.clock.now()
    if message.not_before is not None and message.not_before > now + 1:
        delay = message.not_before - now  # SQS delays at most 15 minutes; longer waits hop until due
        deps.queue.send_checks([message], delay)
        return SyncOutcome(detail="not_due", delay_s=delay)
    if message.kind == "comment":
        return _comment(message, deps)
    outcome = SyncOutcome()
    budget = Budget(message.slot_at)
    what = "Rerun" if message.kind == "rerun" else "CheckRun"  # metric names: RerunPaced, CheckRunPaced, ...
    try:
        if message.kind == "rerun":
            return rerun(message, deps, budget)
        if message.kind == "cancel":
            cancel_superseded(message, deps, outcome.written, budget)
            return outcome
        if message.kind == "skip":
            skip_repo(message, deps, outcome.written, budget)
            return outcome
        if message.kind == "react":
            return react(message, deps, budget)
        if message.kind in ("job", "repo") and (wait := _share_spent(message, deps)) > 0:
            raise Paced(wait)  # before reading the dispatch's jobs: a downstream over its share costs no reads
        if message.kind == "job":
            sync_job(message, deps, outcome.written, budget)
        settles_at = sync_repo(message, deps, outcome.written, budget)
    except Paced as exc:
        _later(message, deps, exc.wait_s, message.attempt, budget)
        deps.metrics.count(f"{what}Paced")
        return SyncOutcome(outcome.written, "paced", exc.wait_s)
    except (CheckRunRace, RerunBusy):
        _later(message, deps, 1.0, message.attempt, budget)
        deps.metrics.count(f"{what}Retried", reason="busy")
        return SyncOutcome(outcome.written, "busy", 1.0)
    except GitHubRateLimited as exc:
        _later(message, deps, exc.wait_s, message.attempt, budget)
        deps.metrics.count(f"{what}Retried", reason="rate_limited")
        return SyncOutcome(outcome.written, f"rate_limited: {exc}", exc.wait_s)
    except GitHubUnavailable as exc:
        attempt = message.attempt + 1
        if attempt >= deps.policy.max_attempts:
            return _dead_letter(message, deps, f"unavailable: {exc} (gave up after {attempt} attempts)", outcome)
        delay = deps.policy.backoff(attempt, deps.rand)
        _later(message, deps, delay, attempt, budget)
        deps.metrics.count(f"{what}Retried", reason="unavailable")
        return SyncOutcome(outcome.written, f"unavailable: {exc}", delay)
    except (GitHubRejected, NotInstalled) as exc:
        return _dead_letter(message, deps, f"GitHub rejected the check run: {exc}", outcome)
    if settles_at is not None:
        # Every job is done but only just: look again once the settle period has passed quietly.
        delay = max(1.0, settles_at - now)
        update = {"kind": "repo", "not_before": now + delay, "slot_at": budget.slot_at}
        deps.queue.send_checks([message.model_copy(update=update)], delay)
        outcome.detail, outcome.delay_s = "settling", delay
    return outcome


def _comment(message: CheckSyncMessage, deps: CheckDeps) -> SyncOutcome:
    """The PR comment shares this queue and the installation's budget; its writer is crcr.app.comment."""
    if deps.comment is None:
        deps.metrics.count("PrCommentSkipped", reason="off")
        return SyncOutcome(detail="comment off")
    result = sync_comment(message, deps.comment)
    return SyncOutcome(result.written, result.detail, result.delay_s)


def rerun(message: CheckSyncMessage, deps: CheckDeps, budget: Budget) -> SyncOutcome:
    """A re-run of a downstream run, paced on the downstream's installation: one asked for from the Checks
    tab, or the relay's own retry of an infrastructure failure (which waits while the run still runs)."""
    if deps.reruns is None or (message.requested_by == "relay" and deps.retries is None):
        return SyncOutcome(detail="reruns_off")

    def pace(installation: int) -> None:
        budget.spend(deps.pacer, lambda: installation, deps.clock.now())

    if message.requested_by in ("checks_tab", "comment"):
        return SyncOutcome(detail=rerun_requested(message.repo, message.run_id, deps.reruns, pace))
    assert deps.retries is not None
    retried = retry_infra(message, deps.reruns, deps.retries, pace)
    if retried.wait_s is not None:
        _later(message, deps, retried.wait_s, message.attempt, budget)
        deps.metrics.count("RerunRetried", reason=retried.outcome)
        return SyncOutcome(detail=retried.outcome, delay_s=retried.wait_s)
    return SyncOutcome(detail=retried.outcome)


def react(message: CheckSyncMessage, deps: CheckDeps, budget: Budget) -> SyncOutcome:
    """The answer to a comment command: a reaction, paced on the upstream installation like every write. A 4xx
    (the comment was deleted) is counted and dropped: there is nothing left to answer."""
    if deps.reactions is None or message.comment_id is None or not message.reaction:
        return SyncOutcome(detail="reactions_off")
    reactions = deps.reactions
    budget.spend(deps.pacer, lambda: reactions.installation_for(message.upstream), deps.clock.now())
    try:
        reactions.react(message.upstream, message.comment_id, message.reaction)
    except (GitHubRejected, NotInstalled) as exc:
        deps.metrics.count("CommandReactionRefused")
        return SyncOutcome(detail=f"refused: {exc}")
    deps.metrics.count("CommandReacted", reaction=message.reaction)
    return SyncOutcome(detail=message.reaction)


def _dead_letter(message: CheckSyncMessage, deps: CheckDeps, reason: str, outcome: SyncOutcome) -> SyncOutcome:
    deps.queue.dead_letter(message, reason)
    deps.metrics.count("RerunDeadLettered" if message.kind == "rerun" else "CheckRunDeadLettered")
    return SyncOutcome(outcome.written, reason)


def job_message(job: JobRecord) -> CheckSyncMessage | None:
    """What the reporter asks the writer to look at after a job changed (None: nothing to mirror)."""
    if job.level < 3 or not job.head_sha or job.delivery_id == SCHEDULED:
        return None
    return CheckSyncMessage(
        kind="job",
        upstream=job.upstream,
        head_sha=job.head_sha,
        delivery_id=job.delivery_id,
        repo=job.repo,
        dispatch_id=job.dispatch_id,
        run_id=job.run_id,
        run_attempt=job.run_attempt,
        job_name=job.job_name,
    )


def backfill(jobs: list[JobRecord], device: str) -> list[CheckSyncMessage]:
    """A ciflow/crcr/<device> label added late: mirror the device's L3 jobs already reported on this
    head, as they stand (in progress or finished), without dispatching anything again."""
    return [
        message
        for job in jobs
        if job.level == 3 and ascii_lower(job.device or "") == ascii_lower(device)
        if (message := job_message(job)) is not None
    ]
