"""Callback use case: a downstream job reports its state; only the dispatched run of the dispatched
repository may, and what is recorded about it (repository, commit, PR, level) comes from the ledger."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Protocol

from pydantic import ValidationError

from crcr.app.hud import derived_check_run_id
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.github import GitHubError
from crcr.app.ports.identity import TicketVerifier, TokenVerifier, VerifiedToken
from crcr.app.ports.jobs import HudKeys, JobLimitReached, JobRecord, ResultsStore
from crcr.app.ports.ledger import LedgerRow, LedgerState
from crcr.app.summaries import SummaryDeps, note_refusals
from crcr.contracts.callback import CallbackBody, FailedTest, PyTorchCallbackBody, ScheduledBody
from crcr.domain.allowlist import Allowlist
from crcr.domain.callback_rules import (
    SCHEDULED_EVENTS,
    buildkite_pipeline,
    check_buildkite_build,
    check_buildkite_scheduled,
    check_identity,
    claim_text,
)
from crcr.domain.errors import (
    AllowlistError,
    BadRequest,
    Conflict,
    CrcrError,
    Forbidden,
    OverLimit,
    PayloadTooLarge,
    TooManyRequests,
    Unauthorized,
    Unavailable,
    invalid_field,
)
from crcr.domain.failed_tests import cap, to_json
from crcr.domain.identity import Channel, Evidence, Known, Refused, admit
from crcr.domain.ids import is_repo_name, repo_key
from crcr.domain.jobs import Current, Decision, JobState, decide
from crcr.domain.jsondoc import MAX_DEPTH, dumps, loads
from crcr.domain.levels import Level
from crcr.domain.limits import MAX_JOBS_PER_DISPATCH, MAX_RUN_ATTEMPT, MAX_STORED_BYTES_PER_JOB
from crcr.domain.providers import Providers
from crcr.domain.runs import GITHUB, from_ci, with_report
from crcr.domain.triage import Dropped as TriageDropped
from crcr.domain.triage import validate as validate_triage


class CallbackLedger(Protocol):
    """What a callback reads of the dispatch it reports on, and the start watch its first job ends."""

    def get(self, delivery_id: str, repo: str) -> LedgerRow | None: ...
    def clear_start_watch(self, delivery_id: str, repo: str) -> None: ...


class RateLimiter(Protocol):
    def hit(self, key: str, now: float) -> float:
        """0 when under the limit; otherwise seconds until the window frees up."""
        ...


class RefusalLog(Protocol):
    def count(self, repo: str, reason: str, now: float) -> int:
        """Count one refused report of `repo` for `reason`: how many this hour, this one included."""
        ...


class CommitMemory(Protocol):
    def commit_seen(self, upstream: str, sha: str, now: float, repo: str) -> bool | None:
        """What the relay knows of an upstream commit without asking GitHub: True when it saw it pushed to the default
        branch or GitHub found it before (for anyone), False when GitHub said it has no such commit when `repo`'s own
        report asked (remembered ten minutes), None when it never asked for `repo` or its answer is past its time."""
        ...

    def remember_commit(self, upstream: str, sha: str, found: bool, now: float, repo: str) -> None:
        """GitHub's answer to `repo`'s report: found is kept for everyone, not found for `repo` alone (a commit not
        pushed yet when one downstream asked may be there when another does)."""
        ...


class UpstreamCommits(Protocol):
    def exists(self, sha: str) -> bool: ...
    def repo_id(self, repo: str) -> int:
        """GitHub's numeric id of a repository the App is installed on."""
        ...


class ProvidersSource(Protocol):
    """PyTorch's ci_providers.yml: which Buildkite pipeline reports as which repository (last good version)."""

    def current(self) -> Providers: ...


MAX_CALLBACK_BYTES = 256 * 1024


class Reply(Enum):
    RECORDED = "recorded"
    DUPLICATE = "duplicate"
    IGNORED = "ignored"


@dataclass(frozen=True)
class CallbackDeps:
    tokens: TokenVerifier
    tickets: TicketVerifier
    ledger: CallbackLedger
    allowlist: AllowlistProvider
    results: ResultsStore
    hud_keys: HudKeys
    limiter: RateLimiter
    metrics: Metrics
    clock: Clock
    upstream: str = ""
    commits: UpstreamCommits | None = None
    providers: ProvidersSource | None = None  # Buildkite pipelines -> repositories; None: Buildkite cannot report
    max_body_bytes: int = MAX_CALLBACK_BYTES
    max_jobs_per_dispatch: int = MAX_JOBS_PER_DISPATCH
    # Scheduled reports: commits the relay saw pushed or looked up (answers, found or not, remembered), and each
    # downstream's budget of GitHub lookups for the others (a lookup spends the upstream installation's requests).
    known_commits: CommitMemory | None = None
    lookups: RateLimiter | None = None
    # A downstream over a quota or limit is counted and named on its HUD repository page (`refused`).
    refusals: RefusalLog | None = None
    pages: SummaryDeps | None = None


@dataclass(frozen=True)
class Report:
    """A callback body in one shape, whichever shape it arrived in."""

    status: str
    conclusion: str | None
    workflow_name: str
    job_name: str
    run_id: str
    run_attempt: int
    url: str
    check_run_id: str | None
    started_at: str | None  # as the downstream reported it (ISO 8601, UTC)
    raw: dict[str, Any]
    failure_kind: str | None = None
    triage_verdict: Any = None
    failed_tests: tuple[FailedTest, ...] = ()


# PyTorch's body echoes the dispatch's payload (at most MAX_DEPTH deep, as ingest took it) under `payload`.
CALLBACK_MAX_DEPTH = MAX_DEPTH + 1


def _parse(body: bytes) -> tuple[CallbackBody | PyTorchCallbackBody | ScheduledBody, Report]:
    # Nesting, NaN/Infinity (recorded, they would reach the HUD as JSON no JavaScript reader parses), numbers
    # out of range and lone surrogates are refused here, naming where.
    doc = loads(body, max_depth=CALLBACK_MAX_DEPTH)
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object", field="body")
    try:
        if doc.get("scheduled") is True:
            sched = ScheduledBody.model_validate(doc)
            return sched, Report(
                sched.status, sched.conclusion, sched.workflow_name, sched.job_name, sched.run_id, sched.run_attempt,
                sched.url, sched.check_run_id, sched.started_at, doc, sched.failure_kind, sched.triage_verdict,
                tuple(sched.failed_tests_detail or ()),
            )  # fmt: skip
        if "ticket" not in doc and str(doc.get("event_type")) in SCHEDULED_EVENT_TYPES:
            sched = _pytorch_scheduled(doc)
            return sched, Report(
                sched.status, sched.conclusion, sched.workflow_name, sched.job_name, sched.run_id, sched.run_attempt,
                sched.url, sched.check_run_id, sched.started_at, doc, sched.failure_kind, sched.triage_verdict,
                tuple(sched.failed_tests_detail or ()),
            )  # fmt: skip
        if "ticket" in doc:
            ours = CallbackBody.model_validate(doc)
            return ours, Report(
                ours.status, ours.conclusion, ours.workflow_name, ours.job_name, ours.run_id, ours.run_attempt,
                ours.url, ours.check_run_id, ours.started_at, doc, ours.failure_kind, ours.triage_verdict,
                tuple(ours.failed_tests_detail or ()),
            )  # fmt: skip
        theirs = PyTorchCallbackBody.model_validate(doc)
    except ValidationError as exc:
        raise BadRequest(f"invalid callback: {exc.errors()[0]['msg']}", field=invalid_field(exc)) from exc
    wf = theirs.workflow
    return theirs, Report(
        wf.status,
        wf.conclusion,
        wf.name,
        wf.job_name,
        wf.run_id,
        wf.run_attempt,
        wf.url,
        wf.check_run_id,
        wf.started_at,
        doc,
        wf.failure_kind,
        wf.triage_verdict,
        tuple(wf.failed_tests_detail or ()),
    )


# PyTorch's callback action reports a run no dispatch started (a cron on the downstream) in one `completed`
# callback whose `event_type` says so; its commit is `pytorch_head_sha` (top level, as vLLM's Buildkite nightly
# reporter sends it), `payload.head_sha`, `payload.after` or the delivery id: every one of them that is a SHA must
# name the same commit.
SCHEDULED_EVENT_TYPES = frozenset({"nightly", "periodic"})
SHA = re.compile(r"[0-9a-fA-F]{40}")


def _pytorch_scheduled(doc: dict[str, Any]) -> ScheduledBody:
    """PyTorch's body for a nightly or periodic run, read as our scheduled report (which rules it follows)."""
    theirs = PyTorchCallbackBody.model_validate(doc)
    if theirs.workflow.status != "completed":
        raise BadRequest(
            f"a {theirs.event_type} report is one completed callback, not {theirs.workflow.status}",
            field="workflow.status",
        )
    payload = theirs.payload or {}
    named = {
        "pytorch_head_sha": theirs.pytorch_head_sha,
        "payload.head_sha": payload.get("head_sha"),
        "payload.after": payload.get("after"),
        "delivery_id": theirs.delivery_id,
    }
    if theirs.pytorch_head_sha is not None and not SHA.fullmatch(theirs.pytorch_head_sha):
        raise BadRequest("pytorch_head_sha must be a commit SHA (40 hex)", field="pytorch_head_sha")
    shas = {name: value.lower() for name, value in named.items() if isinstance(value, str) and SHA.fullmatch(value)}
    head_sha = next(iter(shas.values()), None)
    if head_sha is None:
        raise BadRequest(
            f"a {theirs.event_type} report names its upstream commit (40 hex) in pytorch_head_sha, payload.head_sha "
            "or delivery_id",
            field="payload.head_sha",
        )
    for name, sha in shas.items():
        if sha != head_sha:
            first = next(iter(shas))
            raise BadRequest(f"{name} names commit {sha}, {first} names {head_sha}: one report, one commit", field=name)
    wf = doc["workflow"]
    keys = (
        *("conclusion", "job_name", "run_id", "url", "started_at", "completed_at", "check_run_id", "test_results"),
        *("failed_tests_detail", "artifact_url", "summary", "failure_kind", "triage_verdict"),
    )
    return ScheduledBody.model_validate(
        {k: wf[k] for k in keys if wf.get(k) is not None}
        | {"schema_version": 1, "scheduled": True, "head_sha": head_sha.lower(), "status": "completed"}
        | {"workflow_name": wf["name"], "run_attempt": theirs.workflow.run_attempt, "event_type": theirs.event_type}
    )


def _bearer(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "missing Authorization: Bearer <OIDC token of GitHub Actions or Buildkite>", field="Authorization"
        )
    return token.strip()


def _caller(identity: VerifiedToken, deps: CallbackDeps) -> str:
    """The repository the token speaks for: GitHub's `repository` claim, or the Buildkite pipeline's map entry."""
    if identity.ci != "buildkite":
        repository = claim_text(identity.claims, "repository") or ""
        # ASCII owner/name only: a look-alike (Cyrillic, the Kelvin sign) is no repository, whatever it folds to.
        if repository and not is_repo_name(repository):
            raise Forbidden("the token's repository claim is not an owner/name", field="repository")
        return repository
    if deps.providers is None:
        raise Forbidden(
            "this relay has no ci_providers map (CRCR_CI_PROVIDERS): Buildkite cannot report", field="Authorization"
        )
    try:
        providers = deps.providers.current()
    except AllowlistError as exc:  # the relay's problem, not the caller's: let it retry
        raise Unavailable("the relay has no valid ci_providers map loaded", retry_after_s=30) from exc
    return buildkite_pipeline(identity.claims, providers).repo


def _dispatch_of(
    parsed: CallbackBody | PyTorchCallbackBody, identity: VerifiedToken, caller: str, deps: CallbackDeps
) -> LedgerRow:
    """The dispatch this report belongs to, from the ticket or (PyTorch's body) the delivery id."""
    if isinstance(parsed, CallbackBody):
        ticket = deps.tickets.verify(parsed.ticket, deps.clock.now())
        if ticket.ci != identity.ci:
            raise Forbidden(f"this ticket is for a {ticket.ci} dispatch, not a {identity.ci} run", field="ticket")
        if repo_key(caller) != repo_key(ticket.sub):
            raise Forbidden(f"this ticket was issued to {ticket.sub}", field="ticket")
        row = deps.ledger.get(ticket.delivery_id, ticket.sub)
        # Any state will do when the ids match: the relay signs a ticket only just before sending it, so a
        # run may report while its row still says SENDING/RETRYING (a POST that timed out but was accepted).
        if row is None or row.dispatch_id != ticket.jti:
            raise Unauthorized("the ticket's dispatch is not in the ledger", field="ticket")
        return row
    row = deps.ledger.get(parsed.delivery_id, caller)
    if row is None or not row.dispatch_id or row.state is LedgerState.SUPERSEDED:
        raise Forbidden("this delivery was never dispatched to the calling repository", field="delivery_id")
    if row.ci != identity.ci:
        raise Forbidden(f"this delivery went to {row.ci}, not to a {identity.ci} run", field="delivery_id")
    return row


# Kept in their own form (the triage as validated, the failing tests as capped) or not read at all (the dispatch
# payload PyTorch's body echoes: the ledger says what was dispatched): not stored a second time.
_NOT_STORED = frozenset({"ticket", "payload", "triage_verdict", "failed_tests_detail"})


def _stored_payload(raw: dict[str, Any]) -> str:
    """The body as sent, minus the ticket (a credential has no place in the table or on the HUD) and what the relay
    keeps in its own form or drops (an oversize triage verdict is not stored anywhere)."""
    kept = {k: v for k, v in raw.items() if k not in _NOT_STORED}
    if isinstance(kept.get("workflow"), dict):  # PyTorch's body: the report is under `workflow`
        kept["workflow"] = {k: v for k, v in kept["workflow"].items() if k not in _NOT_STORED}
    return dumps(kept)


def _check_stored_size(record: JobRecord) -> None:
    stored = sum(len(text.encode()) for text in (record.callback_payload, record.triage, record.failed_tests))
    if stored > MAX_STORED_BYTES_PER_JOB:
        raise PayloadTooLarge(
            f"the report would store {stored} bytes; the limit is {MAX_STORED_BYTES_PER_JOB} bytes per job: "
            "shorten its summary",
            field="summary",
            limit="stored_bytes_per_job",
        )


def _fingerprint(raw: dict[str, Any]) -> str:
    """What makes two reports the same report: everything the downstream sent but its credentials."""
    content = {k: v for k, v in raw.items() if k != "ticket"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def handle_callback(body: bytes, authorization: str | None, deps: CallbackDeps) -> Reply:
    try:
        reply = _handle(body, authorization, deps)
    except CrcrError as exc:
        deps.metrics.count("CallbackRejected", reason=exc.reason)
        if isinstance(exc, Refused):
            deps.metrics.count("IdentityRefused", channel=exc.channel, reason=exc.check)
        raise
    deps.metrics.count(f"Callback{reply.value.capitalize()}")
    return reply


def _handle(body: bytes, authorization: str | None, deps: CallbackDeps) -> Reply:
    if len(body) > deps.max_body_bytes:
        raise PayloadTooLarge(f"body is {len(body)} bytes; the limit is {deps.max_body_bytes}", field="body")
    identity = deps.tokens.verify(_bearer(authorization))
    parsed, report = _parse(body)
    caller = _caller(identity, deps)
    if isinstance(parsed, ScheduledBody):
        return _scheduled(parsed, report, identity, caller, deps)
    row = _dispatch_of(parsed, identity, caller, deps)
    # The inbound door (crcr.domain.identity), against the dispatched repository's entry and what its row says.
    entry = _allowlist(deps).get(row.repo)
    if identity.ci == "buildkite":
        entry, job_id = check_buildkite_build(
            identity.claims,
            entry=entry,
            repo=caller,
            build_number=row.build_number,
            build_id=row.build_id,
            run_id=report.run_id,
            check_run_id=report.check_run_id,
        )
        report = replace(report, check_run_id=job_id)
    else:
        known = Known(repository_id=row.repo_id or 0)
        entry = check_identity(
            identity.claims, entry=entry, known=known, run_id=report.run_id, run_attempt=report.run_attempt
        )
    if not Level(row.level or entry.level).records_results:
        return Reply.IGNORED  # L1: dispatch only; results are not recorded
    wait = deps.limiter.hit(row.repo, deps.clock.now())
    if wait > 0:
        raise _refused(
            row.repo,
            "callbacks_per_minute",
            TooManyRequests(f"too many callbacks from {row.repo}", retry_after_s=math.ceil(wait)),
            deps,
        )
    return _record(row, report, deps)


def _allowlist(deps: CallbackDeps) -> Allowlist:
    try:
        return deps.allowlist.current()
    except AllowlistError as exc:  # the relay's problem, not the caller's: let the action retry
        raise Unavailable("the relay has no valid allowlist loaded", retry_after_s=30) from exc


def _scheduled(body: ScheduledBody, report: Report, identity: VerifiedToken, caller: str, deps: CallbackDeps) -> Reply:
    """A nightly run on an upstream commit: L2+ only, completed only, and the commit must be upstream's."""
    entry = _allowlist(deps).get(caller)
    if identity.ci == "buildkite":
        # The pipeline's map entry is the identity; a Buildkite downstream need not have the App installed.
        entry = admit(entry, Evidence(Channel.BUILDKITE_OIDC, repository=caller))
        repo_id = entry.settings.repository_id or 0
        job_id = check_buildkite_scheduled(identity.claims, run_id=report.run_id, check_run_id=report.check_run_id)
        report = replace(report, check_run_id=job_id)
    else:
        try:
            # No dispatch to bind to: bind to GitHub's id of the allowlisted name, so a deleted and recreated
            # repository of the same name cannot report as the old one (a name not listed: the door refuses it).
            repo_id = deps.commits.repo_id(entry.repo) if deps.commits is not None and entry is not None else 0
        except GitHubError as exc:
            raise Unavailable(f"cannot ask GitHub about {caller} now: {exc}", retry_after_s=30) from exc
        entry = check_identity(
            identity.claims,
            entry=entry,
            known=Known(repository_id=repo_id),
            events=SCHEDULED_EVENTS,
            run_id=report.run_id,
            run_attempt=report.run_attempt,
        )
    if not entry.level.records_results:
        return Reply.IGNORED
    wait = deps.limiter.hit(entry.repo, deps.clock.now())
    if wait > 0:
        raise _refused(
            entry.repo,
            "callbacks_per_minute",
            TooManyRequests(f"too many callbacks from {entry.repo}", retry_after_s=math.ceil(wait)),
            deps,
        )
    if not _upstream_commit(body.head_sha, entry.repo, deps):
        raise _refused(
            entry.repo,
            "unknown_commit",
            Forbidden(f"{body.head_sha} is not a commit of {deps.upstream}", field="head_sha"),
            deps,
        )
    digest = hashlib.sha256(f"{entry.key}\n{body.head_sha}".encode()).hexdigest()[:32]
    row = LedgerRow(
        delivery_id="scheduled",
        repo=caller if identity.ci != "buildkite" else entry.repo,
        state=LedgerState.DISPATCHED,
        dispatch_id=f"sched-{digest}",
        repo_id=repo_id,
        upstream=deps.upstream,
        head_sha=body.head_sha,
        pr=None,
        level=int(entry.level),
        device=entry.device,
        event_type=body.event_type,  # PyTorch's HUD name for a run no PR dispatched
        ci=identity.ci,
    )
    return _record(row, report, deps)


def _record(row: LedgerRow, report: Report, deps: CallbackDeps) -> Reply:
    try:
        return _record_within_limits(row, report, deps)
    except (OverLimit, PayloadTooLarge) as exc:
        raise _refused(row.repo, exc.limit or exc.reason, exc, deps) from None


def _record_within_limits(row: LedgerRow, report: Report, deps: CallbackDeps) -> Reply:
    if report.run_attempt > MAX_RUN_ATTEMPT:
        raise OverLimit(
            f"run_attempt {report.run_attempt} is past the limit of {MAX_RUN_ATTEMPT} attempts per job "
            "(GitHub re-runs a run at most 50 times)",
            field="run_attempt",
            limit="attempts_per_job",
        )
    fingerprint = _fingerprint(report.raw)
    triage = _triage(report, deps)
    for _ in range(5):
        now = deps.clock.now()
        current = deps.results.get_job(row.dispatch_id, report.run_id, report.run_attempt, report.job_name)
        if current is None and report.status == "completed" and report.check_run_id:
            current = _github_twin(row, report, deps)
        if current is not None and _github_only(current):
            if report.status != "completed" or current.fingerprint == fingerprint:
                return Reply.DUPLICATE  # GitHub's record says it finished: a start adds nothing
            enriched = _enriched(row, report, current, fingerprint, now, triage)
            _check_stored_size(enriched)
            if deps.results.put_job(enriched, current.version):
                if enriched.reported_conclusion is not None:
                    deps.metrics.count("ResultDisagreed")
                return Reply.RECORDED
            continue
        decision = decide(
            Current(JobState(current.state), current.fingerprint) if current else None, report.status, fingerprint
        )
        if decision is Decision.CONFLICT:
            raise Conflict(f"job {report.job_name} already reported {current.state if current else ''} differently")
        if decision in (Decision.DUPLICATE, Decision.STALE):
            return Reply.DUPLICATE
        record = _next_record(row, report, current, fingerprint, now, triage)
        _check_stored_size(record)  # before a new job takes one of the dispatch's places
        if current is None:
            _check_hud_key_free(row, report, deps, now)
        if deps.results.put_job(record, current.version if current else None):
            if current is None and row.start_watched:
                # The dispatch's first job: no start timeout (the row as read says whether one is still set,
                # so later jobs write nothing there).
                deps.ledger.clear_start_watch(row.delivery_id, row.repo)
            return Reply.RECORDED
        # Another callback for the same job won the conditional write: read it and decide again.
    # Not a conflict of content: retrying will settle it, so say so (the action retries 503).
    raise Unavailable(f"job {report.job_name} is being reported concurrently; retry", retry_after_s=1)


# A refused downstream's page is rewritten when its count this hour reaches one of these: a flood of refusals costs a
# handful of document writes an hour, never one each.
PAGE_AT_COUNTS = frozenset({1, 10, 100, 1_000, 10_000})
NOT_A_QUOTA = frozenset({"unknown_commit"})


def _refused(repo: str, reason: str, exc: CrcrError, deps: CallbackDeps) -> CrcrError:
    """Count a report refused for a quota or limit (or an unknown commit) of a repository whose identity the token
    proved, and name the repository on its HUD page; returns the error to raise."""
    if reason not in NOT_A_QUOTA:
        deps.metrics.count("DownstreamThrottled")
    if deps.refusals is None:
        return exc
    now = deps.clock.now()
    count = deps.refusals.count(repo, reason, now)
    if deps.pages is not None and count in PAGE_AT_COUNTS:
        since = max((c for c in PAGE_AT_COUNTS if c < count), default=0)  # counted on the page already
        hour = int(now // 3600)
        try:
            note_refusals(
                repo, {reason: count - since}, deps.pages, key=f"{reason}:{hour}:{count}", message=exc.message
            )
        except Exception:  # the page is a courtesy: the refusal stands, answered as it is
            deps.metrics.count("RefusalNotShown")
    return exc


def _upstream_commit(sha: str, repo: str, deps: CallbackDeps) -> bool:
    """Whether a scheduled report's commit is the upstream's: known from a push or an earlier lookup at no cost;
    otherwise one GitHub lookup from the reporting repository's hourly budget, its answer remembered either way."""
    now = deps.clock.now()
    known = deps.known_commits.commit_seen(deps.upstream, sha, now, repo) if deps.known_commits is not None else None
    if known is not None:
        deps.metrics.count("CommitLookupSaved")
        return known
    if deps.commits is None:
        return False
    if deps.lookups is not None and (wait := deps.lookups.hit(repo, deps.clock.now())) > 0:
        raise _refused(
            repo,
            "commit_lookups_per_hour",
            TooManyRequests(
                f"{repo} has used its budget of GitHub lookups of unknown upstream commits this hour; "
                "report on commits pushed upstream, or retry later",
                retry_after_s=math.ceil(wait),
                field="head_sha",
                limit="commit_lookups_per_hour",
            ),
            deps,
        )
    try:
        found = deps.commits.exists(sha)
    except GitHubError as exc:
        raise Unavailable(f"cannot ask GitHub about {sha} now: {exc}", retry_after_s=30) from exc
    deps.metrics.count("CommitLookedUp")
    if deps.known_commits is not None:
        deps.known_commits.remember_commit(deps.upstream, sha, found, deps.clock.now(), repo)
    return found


def _check_hud_key_free(row: LedgerRow, report: Report, deps: CallbackDeps, now: float) -> None:
    """A new job must not take the HUD row of another job of the same dispatch, nor a place beyond the dispatch's
    limit of jobs. PyTorch's HUD keys a row by workflow name, job name and check-run id (not by run or attempt): a
    check-run id the downstream reuses for another run or attempt would make two jobs overwrite one row, and lose
    one of them. The first job to report a key holds it (one transaction with the dispatch's count of jobs,
    whatever the dispatch's size). A job that sent no check-run id gets one derived from its own run and attempt,
    in a namespace callers may not use: no other job can hold that key, so only the count is written."""
    check_run_id = report.check_run_id
    hud_key = json.dumps([report.workflow_name, report.job_name, check_run_id]) if check_run_id else None
    owner = f"run {report.run_id} attempt {report.run_attempt}"
    try:
        holder = deps.hud_keys.claim(row.dispatch_id, hud_key, owner, now, deps.max_jobs_per_dispatch)
    except JobLimitReached:
        raise OverLimit(
            f"this dispatch already holds {deps.max_jobs_per_dispatch} jobs, the limit per dispatch; "
            f"job {report.job_name} was not recorded",
            field="job_name",
            limit="jobs_per_dispatch",
        ) from None
    if holder is not None:
        raise Conflict(
            f"check run {check_run_id} of job {report.job_name} was already reported by {holder}; "
            "each job attempt has its own check_run_id",
            field="check_run_id",
        )


def _github_only(record: JobRecord) -> bool:
    """A job recorded from its CI's own word (GitHub's jobs listing, Buildkite's build) that no completed report
    has added its words to yet."""
    return from_ci(record.source, record.fingerprint)


def _github_twin(row: LedgerRow, report: Report, deps: CallbackDeps) -> JobRecord | None:
    """The record GitHub's listing made of this job under GitHub's name for it (the report names its job by another,
    e.g. the job's key): found by the job's id, which the report sends as its check_run_id."""
    for record in deps.results.jobs_of_dispatch(row.dispatch_id):
        if (
            record.run_id == report.run_id
            and record.run_attempt == report.run_attempt
            and record.check_run_id == report.check_run_id
            and _github_only(record)
        ):
            return record
    return None


def _enriched(
    row: LedgerRow, report: Report, current: JobRecord, fingerprint: str, now: float, triage: str
) -> JobRecord:
    """A report on a job GitHub's record has finished: its words (test counts, failing tests, triage) are added,
    GitHub's conclusion and times stand; a report that says otherwise is kept as `reported_conclusion`."""
    words = _next_record(row, report, current, fingerprint, now, triage)
    failed = current.conclusion in ("failure", "timed_out")
    return replace(
        words,
        job_name=current.job_name,
        workflow_name=current.workflow_name,
        check_run_id=current.check_run_id,
        conclusion=current.conclusion,
        started_at=current.started_at,
        completed_at=current.completed_at,
        url=current.url or words.url,
        failure_kind=report.failure_kind if failed else None,
        failed_tests=words.failed_tests,
        source=with_report(current.source.removesuffix("+report") or GITHUB),
        reported_conclusion=report.conclusion if report.conclusion != current.conclusion else None,
        version=current.version + 1,
    )


def _triage(report: Report, deps: CallbackDeps) -> str:
    """The downstream's triage verdict, normalised; a malformed one is dropped whole, the result still records."""
    try:
        verdict = validate_triage(report.triage_verdict)
    except TriageDropped:
        deps.metrics.count("TriageDropped")
        return ""
    return dumps(verdict) if verdict else ""


def _next_record(
    row: LedgerRow, report: Report, current: JobRecord | None, fingerprint: str, now: float, triage: str = ""
) -> JobRecord:
    completed = report.status == "completed"
    # Queue and execution times are measured on the relay's clock: start is when in_progress arrived.
    started_at = current.started_at if current and current.started_at else (None if completed else now)
    return JobRecord.of_dispatch(
        row,
        now,
        run_id=report.run_id,
        run_attempt=report.run_attempt,
        job_name=report.job_name,
        # The HUD keys a job's row by its workflow name: the first one recorded stays, so a later report under
        # another name updates that row instead of leaving it in progress beside a new one.
        workflow_name=(current.workflow_name if current else "") or report.workflow_name,
        state=report.status,
        conclusion=report.conclusion,
        fingerprint=fingerprint,
        url=report.url,
        started_at=started_at,
        completed_at=now if completed else None,
        callback_payload=_stored_payload(report.raw),
        version=(current.version + 1) if current else 1,
        # The first id recorded for the attempt stays, so the HUD keeps one row per job attempt.
        check_run_id=(current.check_run_id if current else "")
        or report.check_run_id
        or derived_check_run_id(report.run_id, report.run_attempt),
        reported_started_at=(current.reported_started_at if current else "") or report.started_at or "",
        failure_kind=report.failure_kind,
        triage=triage,
        # Kept as PyTorch's HUD keeps them (the first 50, messages cut): what the pages and the HUD show agree.
        failed_tests=_failed_tests(report) if completed else "",
    )


def _failed_tests(report: Report) -> str:
    capped = cap(t.model_dump(exclude_none=True) for t in report.failed_tests)
    return to_json(capped) if capped else ""
