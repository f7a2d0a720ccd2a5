"""Dispatch use case: one DispatchMessage -> at most one repository_dispatch, workflow_dispatch or Buildkite build,
idempotent on (delivery, repository) through the ledger, whatever GitHub, Buildkite or SQS do."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from typing import Any

from crcr.app.dispatch_buildkite import dispatch_build, new_build
from crcr.app.dispatch_deps import BuildkiteDeps, DispatchDeps, DispatchOutcome, Result
from crcr.app.dispatch_steps import (
    PrHeads,
    dead_letter,
    dispatch_id,
    newer_head,
    paced,
    refused,
    reschedule,
    slot,
    superseded,
    ticket_claims,
    transient,
)
from crcr.app.outbound import BUILDKITE, GITHUB, Permit, Write
from crcr.app.ports import Metrics
from crcr.app.ports.github import (
    GitHubRateLimited,
    GitHubRejected,
    GitHubUnavailable,
    NotInstalled,
    RepoToken,
)
from crcr.app.ports.ledger import LedgerRow, LedgerState
from crcr.app.ports.runs import BoundRun
from crcr.contracts.messages import DispatchMessage
from crcr.domain.payload import as_inputs
from crcr.domain.runs import run_progress

__all__ = ["BuildkiteDeps", "DispatchDeps", "DispatchOutcome", "PrHeads", "Result", "dispatch_id", "new_build"]


WORKFLOW_INPUTS = frozenset({"event_type", "delivery_id", "payload", "ticket", "callback_url", "dispatch_id"})


def client_payload(message: DispatchMessage, ticket: str, callback_url: str, did: str = "") -> dict[str, Any]:
    payload: dict[str, Any] = {
        "event_type": message.event_type,
        "delivery_id": message.delivery_id,
        "payload": message.payload,
        "ticket": ticket,
        "callback_url": callback_url,
    }
    if did:
        payload["dispatch_id"] = did  # for the downstream's run-name: a repeated send finds its run by it
    if message.merged is not None:
        payload["merged"] = message.merged  # a closed PR: GitHub's `merged` is false for what PyTorch's bot merged
    if message.changes is not None:
        payload["changes"] = message.changes  # advice for a downstream's own test selection, never a filter
    if message.bisect is not None:
        payload["bisect"] = message.bisect  # a bisection run: which job regressed, and the range it narrows
    return payload


class _Tally:
    """The Metrics port for one invocation's dispatches: a count with dimensions (a document of its own when it is
    emitted) is summed by name and dimensions and handed on once, when the batch is done (`flush`), so ten
    dispatches sent at one level are one document, not ten. Plain counts go straight through."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._sums: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self._lock = threading.Lock()

    def count(self, name: str, value: int = 1, **dimensions: str) -> None:
        if not dimensions:
            self.metrics.count(name, value)
            return
        key = (name, tuple(sorted(dimensions.items())))
        with self._lock:
            self._sums[key] = self._sums.get(key, 0) + value

    def flush(self) -> None:
        with self._lock:
            sums, self._sums = self._sums, {}
        for (name, dimensions), value in sums.items():
            self.metrics.count(name, value, **dict(dimensions))


class DispatchBatch:
    """One invocation's records: they start together, side by side, so they share each PR's head read and one
    metrics document per count. An L3/L4 dispatch's check run is asked for by its ledger row itself: marking it
    sent is a change on the state table's stream, which feeds the check-run writer (nothing to send here)."""

    def __init__(self, deps: DispatchDeps) -> None:
        self.heads = PrHeads(deps.prs, deps.clock)
        self._tally = _Tally(deps.metrics)
        self.deps = replace(deps, metrics=self._tally)

    def dispatch(self, message: DispatchMessage) -> DispatchOutcome:
        return dispatch(message, self.deps, self.heads)

    def flush_metrics(self) -> None:
        """Hand the batch's counts with dimensions to the Metrics port (once the batch is done)."""
        self._tally.flush()


def dispatch(message: DispatchMessage, deps: DispatchDeps, heads: PrHeads | None = None) -> DispatchOutcome:
    now = deps.clock.now()
    if message.not_before is not None and message.not_before > now + 1:
        # SQS delays at most 15 minutes; longer waits (an hourly rate limit) hop until due.
        delay = message.not_before - now
        deps.queue.reschedule(message, delay)
        return DispatchOutcome(Result.RESCHEDULED, "not_due", delay)

    if message.skip:
        # The planner found nothing for it in the change: recorded, never sent (a sent one is never overwritten).
        deps.ledger.mark(message, LedgerState.SKIPPED, message.skip, now, settled=True)
        deps.metrics.count("DispatchSkipped", reason=message.skip)
        return DispatchOutcome(Result.SKIPPED, message.skip)
    heads = heads or PrHeads(deps.prs, deps.clock)
    did = dispatch_id(message.delivery_id, message.target_repo)
    permit = deps.door.permit(_write(message, did))
    if permit is None:
        # A shadow downstream (now: its mode is read when the message is sent, whatever it was when planned): no
        # claim, no ledger row, nothing for the sweeper or the check runs to follow.
        return DispatchOutcome(Result.WITHHELD, "shadow")
    owner = uuid.uuid4().hex  # this attempt's claim: only it may release the claim early
    if message.buildkite is not None:
        return dispatch_build(message, deps, did, owner, heads, permit)
    try:
        # The installation and its token (cached while valid) before the claim, which writes the repository's
        # id: a run may report before its dispatch is marked sent.
        installation = deps.github.installation_for(message.target_repo)
        token = deps.github.repo_token(installation, message.target_repo)
        # The claim first: a repeat (sent already, or in another worker's hands) is told by the refusal itself,
        # before it could spend a pacing slot. FAILED is not final: an operator's redrive may try again.
        now = deps.clock.now()
        wants_row = deps.runs is not None or message.workflow is not None
        claim = deps.ledger.claim(message, did, now, deps.lease_s, owner, token.repo_id, token.full_name, row=wants_row)
        if not claim:
            return refused(message, deps, claim.row, now)
        if (latest := newer_head(message, heads)) is not None:
            return superseded(message, deps, latest, owner)
        if claim.row is not None and claim.row.unsettled - {owner}:
            found = _earlier_run(message, deps, claim.row, token, did)
            if found is not None:
                return found
        asked_at = deps.clock.now()
        wait = slot(message, deps.pacer, installation, asked_at)
        if wait > 0:
            return paced(message, deps, wait, asked_at, owner)
        if deps.clock.now() + deps.send_s > now + deps.lease_s:
            # Pacing took so long that the claim could lapse mid-POST (a slow table): let it go, try again.
            return reschedule(message, deps, 1.0, "claim_lapsing", attempt=message.attempt, owner=owner, settled=True)
        claims = ticket_claims(message, token.full_name, token.repo_id, did, int(deps.clock.now()), deps)
        ticket = deps.signer.sign(claims)
        run_id = _send(message, deps, token, client_payload(message, ticket, deps.callback_url, did), permit)
    except NotInstalled as exc:
        return dead_letter(message, deps, f"not_installed: {exc}", owner)
    except GitHubRateLimited as exc:
        return reschedule(
            message, deps, exc.wait_s, f"rate_limited: {exc}", attempt=message.attempt, owner=owner, settled=True
        )
    except GitHubUnavailable as exc:
        # A timeout or 5xx may have started a run: the next attempt gives GitHub time to show it, then looks.
        settle = deps.run_settle_s if deps.runs is not None or message.workflow is not None else 0.0
        return transient(message, deps, f"unavailable: {exc}", owner, min_delay=settle)
    except GitHubRejected as exc:
        if exc.status == 401:
            # A revoked or expired installation token: mint a new one on the next attempt.
            deps.github.forget_token(message.target_repo)
            return transient(message, deps, f"token_rejected: {exc}", owner, settled=True)
        return dead_letter(message, deps, f"rejected: {exc}", owner, settled=True)

    deps.ledger.mark_dispatched(message, claims, deps.clock.now(), run_id=run_id)
    if run_id is not None and deps.bound_runs is not None:
        # Known before the run starts: its events bind by this id even when its title carries no dispatch id.
        now = deps.clock.now()
        bound = BoundRun(
            repo=token.full_name,
            run_id=run_id,
            delivery_id=message.delivery_id,
            dispatch_id=did,
            attempt=1,
            status="requested",
            progress=run_progress(1, "requested"),
        )
        deps.bound_runs.record(bound, now, now + deps.run_timeout_s)
    deps.metrics.count("DispatchSent", level=message.level.name)
    return DispatchOutcome(Result.DISPATCHED)


def _write(message: DispatchMessage, did: str) -> Write:
    """What the door is asked about: this dispatch, as it would be sent but for the ticket and callback URL."""
    sent = {k: v for k, v in client_payload(message, "", "").items() if k not in ("ticket", "callback_url")}
    target = {"buildkite": message.buildkite.model_dump()} if message.buildkite is not None else {}
    if message.workflow is not None:
        target = {"workflow": message.workflow.model_dump()}
    return Write(
        system=BUILDKITE if message.buildkite is not None else GITHUB,
        action="dispatch",
        repo=message.target_repo,
        upstream=message.upstream,
        key=did,
        body={"event_type": message.event_type, "client_payload": sent} | target,
        pr=message.pr_number,
        head_sha=message.head_sha,
        level=int(message.level),
    )


def _send(
    message: DispatchMessage, deps: DispatchDeps, token: RepoToken, sent: dict[str, Any], permit: Permit
) -> str | None:
    """repository_dispatch, or workflow_dispatch of the allowlist's workflow file: the run GitHub said it started."""
    if message.workflow is None or deps.workflows is None:
        deps.github.dispatch(message.target_repo, token, message.event_type, sent, permit=permit)
        return None
    # A workflow declares each input it takes (GitHub refuses any other): only the documented six are sent.
    inputs = as_inputs({k: v for k, v in sent.items() if k in WORKFLOW_INPUTS})
    workflow = message.workflow
    run_id = deps.workflows.dispatch_workflow(message.target_repo, workflow.file, workflow.ref, inputs, permit=permit)
    if run_id is None:
        deps.metrics.count("DispatchRunDetailsMissing")  # GitHub Enterprise Server without the parameter
    return run_id


def _earlier_run(
    message: DispatchMessage, deps: DispatchDeps, row: LedgerRow, token: RepoToken, did: str
) -> DispatchOutcome | None:
    """An earlier attempt may have sent (GitHub has no idempotency key): the run it started, if any, is found
    instead of sending again. A workflow_dispatch's run is the one its `workflow_run` event bound to this dispatch
    (no runs list is read); a repository_dispatch's is looked for by the dispatch id in the runs' titles."""
    run: str | None = None
    if message.workflow is not None:
        run = row.run_id
    elif deps.runs is not None:
        try:
            run = deps.runs.find(message.target_repo, did, message.planned_at - RUN_LOOKBACK_S)
        except GitHubRejected:  # no actions:read on the installation: send again, as before the lookup
            deps.metrics.count("DispatchRunLookupRefused")
    else:
        return None
    if run is None:
        deps.metrics.count("DispatchRunNotFound")
        return None
    deps.metrics.count("DispatchRunFound")
    found = ticket_claims(message, token.full_name, token.repo_id, did, int(deps.clock.now()), deps)
    deps.ledger.mark_dispatched(message, found, deps.clock.now(), run_id=run if message.workflow else None)
    deps.metrics.count("DispatchSent", level=message.level.name)
    return DispatchOutcome(Result.DISPATCHED, f"run {run} found")


RUN_LOOKBACK_S = 60.0  # runs created this long before the event was planned cannot be this dispatch's (clock skew)
