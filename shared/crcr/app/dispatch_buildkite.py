"""A Buildkite downstream's dispatch: one build of its pipeline, with the claim, lease and outcomes of any dispatch."""

from __future__ import annotations

import json

from crcr.app.dispatch_deps import DispatchDeps, DispatchOutcome, Result
from crcr.app.dispatch_steps import (
    PrHeads,
    dead_letter,
    newer_head,
    paced,
    refused,
    reschedule,
    slot,
    superseded,
    ticket_claims,
    transient,
)
from crcr.app.outbound import Permit
from crcr.app.ports.buildkite import (
    DELIVERY_META_KEY,
    DISPATCH_META_KEY,
    BuildkiteRateLimited,
    BuildkiteRejected,
    BuildkiteUnavailable,
    NewBuild,
)
from crcr.app.ports.ledger import BuildRef
from crcr.contracts.messages import DispatchMessage
from crcr.domain.ticket import TicketClaims


def new_build(message: DispatchMessage, ticket: str, callback_url: str, did: str) -> NewBuild:
    """A Buildkite build for one dispatch: the downstream branch's HEAD, the upstream change in env (a build
    has no client_payload), and meta_data that finds the build again."""
    assert message.buildkite is not None
    pr = message.pr_number
    if pr is not None:
        about = f"{message.upstream}#{pr} ({message.action or message.event_type})"
    elif message.bisect is not None:
        about = f"{message.upstream} bisecting {message.bisect.get('workflow')}/{message.bisect.get('job')}"
    else:
        about = f"{message.upstream} push to {message.ref or 'a branch'}"
    env = {
        "CRCR_TICKET": ticket,
        "CRCR_CALLBACK_URL": callback_url,
        "CRCR_DELIVERY_ID": message.delivery_id,
        "CRCR_EVENT_TYPE": message.event_type,
        "CRCR_UPSTREAM_REPO": message.upstream,
        "CRCR_UPSTREAM_SHA": message.head_sha,
        "CRCR_UPSTREAM_PR": str(pr) if pr is not None else "",
    }
    if message.bisect is not None:  # the job that regressed and the range this build narrows (client_payload.bisect)
        env["CRCR_BISECT"] = json.dumps(message.bisect, sort_keys=True)
    return NewBuild(
        branch=message.buildkite.branch,
        message=f"crcr: {about} at {message.head_sha}",
        env=env,
        meta_data={DISPATCH_META_KEY: did, DELIVERY_META_KEY: message.delivery_id},
    )


BUILDKITE_NOT_CONFIGURED = (
    "not_configured: Buildkite dispatches need an API token with write_builds and read_builds: "
    "set CRCR_BUILDKITE_API_TOKEN (or key buildkite_api_token in CRCR_SECRETS_ARN)"
)


def dispatch_build(
    message: DispatchMessage, deps: DispatchDeps, did: str, owner: str, heads: PrHeads, permit: Permit
) -> DispatchOutcome:
    """A Buildkite downstream: create one build of its pipeline, under the same claim, lease and outcomes
    as a repository_dispatch. Buildkite has no idempotency key, so an attempt that follows one whose send
    may have reached Buildkite first looks for that attempt's build (by dispatch id) and records it."""
    assert message.buildkite is not None
    bk, target = deps.buildkite, message.buildkite
    if bk is None:
        return dead_letter(message, deps, BUILDKITE_NOT_CONFIGURED, owner)
    # No GitHub installation or token: the allowlist's pin (or 0) is the ticket's repository id.
    repo_id, full_name = message.repository_id or 0, message.target_repo
    now = deps.clock.now()
    # The claim brings the row as claimed: every earlier attempt has recorded its outcome or lost its lease by
    # now, so its `unsettled` set is final for this attempt.
    claim = deps.ledger.claim(message, did, now, bk.lease_s, owner, repo_id, full_name, row=True)
    if not claim:
        return refused(message, deps, claim.row, now)
    if (latest := newer_head(message, heads)) is not None:
        return superseded(message, deps, latest, owner)
    asked_at = deps.clock.now()
    wait = slot(message, bk.pacer, target.organization, asked_at)
    if wait > 0:
        return paced(message, deps, wait, asked_at, owner)
    if deps.clock.now() + 2 * bk.call_s > now + bk.lease_s:  # a lookup and a create must fit in the claim
        return reschedule(message, deps, 1.0, "claim_lapsing", attempt=message.attempt, owner=owner, settled=True)
    claims = ticket_claims(message, full_name, repo_id, did, int(deps.clock.now()), deps, ci="buildkite")
    where = f"{target.organization}/{target.pipeline}"

    row = claim.row
    if row is not None and row.unsettled - {owner}:
        wait = bk.pacer.acquire(target.organization, deps.clock.now())
        if wait > 0:
            return reschedule(message, deps, wait, "paced", attempt=message.attempt, owner=owner, settled=True)
        try:
            found = bk.builds.find(target.organization, target.pipeline, did)
        except BuildkiteRateLimited as exc:
            reason = f"rate_limited: {exc}"
            return reschedule(message, deps, exc.wait_s, reason, attempt=message.attempt, owner=owner, settled=True)
        except BuildkiteUnavailable as exc:
            reason = f"unavailable: looking for an earlier build: {exc}"
            return transient(message, deps, reason, owner, settled=True)
        except BuildkiteRejected as exc:
            scope = " (the token needs read_builds)" if exc.status in (401, 403) else ""
            reason = f"rejected: looking for an earlier build of {where}{scope}: {exc}"
            return dead_letter(message, deps, reason, owner, settled=True)
        if found:
            deps.metrics.count("BuildkiteBuildFound")
            if len(found) > 1:
                deps.metrics.count("BuildkiteBuildDuplicated", len(found) - 1)
            return _sent(message, deps, claims, found[0], "found")

    try:
        ticket = deps.signer.sign(claims)
        build = bk.builds.create(
            target.organization, target.pipeline, new_build(message, ticket, deps.callback_url, did), permit=permit
        )
    except BuildkiteRateLimited as exc:
        reason = f"rate_limited: {exc}"
        return reschedule(message, deps, exc.wait_s, reason, attempt=message.attempt, owner=owner, settled=True)
    except BuildkiteUnavailable as exc:
        if not exc.maybe_sent:
            return transient(message, deps, f"unavailable: {exc}", owner, settled=True)
        # A timeout or 5xx may have created the build, or Buildkite may still be creating it: this attempt
        # stays unsettled, and the next one waits until Buildkite must have finished, then looks first.
        return transient(message, deps, f"unavailable: {exc}", owner, min_delay=bk.settle_s)
    except BuildkiteRejected as exc:
        return dead_letter(message, deps, f"rejected: {where}: {exc}", owner, settled=True)
    deps.metrics.count("BuildkiteBuildCreated")
    return _sent(message, deps, claims, build, "created")


def _sent(
    message: DispatchMessage, deps: DispatchDeps, claims: TicketClaims, build: BuildRef, how: str
) -> DispatchOutcome:
    deps.ledger.mark_dispatched(message, claims, deps.clock.now(), build=build)
    deps.metrics.count("DispatchSent", level=message.level.name)
    return DispatchOutcome(Result.DISPATCHED, f"build {build.number} {how}", build=build)
