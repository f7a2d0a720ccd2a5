"""Callback use case: a downstream job reports its state; only the dispatched run of the dispatched
repository may, and what is recorded about it (repository, commit, PR, level) comes from the ledger."""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

from crcr.app.callback_body import Report, parse_report
from crcr.app.callback_deps import CallbackDeps, Reply
from crcr.app.callback_record import record_report, refused
from crcr.app.ports.github import GitHubError
from crcr.app.ports.identity import VerifiedToken
from crcr.app.ports.ledger import LedgerRow, LedgerState
from crcr.contracts.callback import CallbackBody, PyTorchCallbackBody, ScheduledBody
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
    CrcrError,
    Forbidden,
    PayloadTooLarge,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)
from crcr.domain.identity import Channel, Evidence, Known, Refused, admit
from crcr.domain.ids import is_repo_name, repo_key
from crcr.domain.levels import Level

__all__ = ["CallbackDeps", "Reply", "handle_callback"]


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
    parsed, report = parse_report(body)
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
        raise refused(
            row.repo,
            "callbacks_per_minute",
            TooManyRequests(f"too many callbacks from {row.repo}", retry_after_s=math.ceil(wait)),
            deps,
        )
    return record_report(row, report, deps)


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
        raise refused(
            entry.repo,
            "callbacks_per_minute",
            TooManyRequests(f"too many callbacks from {entry.repo}", retry_after_s=math.ceil(wait)),
            deps,
        )
    if not _upstream_commit(body.head_sha, entry.repo, deps):
        raise refused(
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
    return record_report(row, report, deps)


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
        raise refused(
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
