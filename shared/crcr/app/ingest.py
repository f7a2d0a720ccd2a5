"""Webhook ingest use case: verify, deduplicate, park oversize bodies, enqueue; never fan out here."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from pydantic import ValidationError

from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.deliveries import Claim
from crcr.app.ports.queues import BlobStore, RunQueue
from crcr.contracts.github import (
    AnyEvent,
    CheckRunEvent,
    CheckSuiteEvent,
    IssueCommentEvent,
    PullRequestEvent,
    PushEvent,
    WorkflowRunEvent,
)
from crcr.contracts.messages import EventMessage, RunMessage
from crcr.domain.commands import looks_like_command
from crcr.domain.errors import AllowlistError, BadRequest, BadSignature, CrcrError, PayloadTooLarge, invalid_field
from crcr.domain.identity import Refused, admit, workflow_ref
from crcr.domain.ids import is_delivery_id, repo_key
from crcr.domain.jsondoc import loads
from crcr.domain.planning import PR_ACTIONS_READ
from crcr.domain.runs import RELAY_EVENTS, RUN_ACTIONS, dispatch_id_in
from crcr.domain.signature import verify_signature


class DeliveryStore(Protocol):
    def claim_delivery(self, delivery_id: str, event: str, now: float, body_sha256: str) -> Claim:
        """Claim the delivery id and the body's digest (GitHub's signature covers the body, not the id)."""
        ...

    def mark_queued(self, delivery_id: str, now: float) -> None: ...


class BoundRuns(Protocol):
    def bound(self, repo: str, run_id: str) -> object | None: ...


class EventQueue(Protocol):
    def send_event(self, message: EventMessage) -> None: ...


ACTED_ON: dict[str, type[PullRequestEvent | PushEvent | CheckRunEvent | CheckSuiteEvent | IssueCommentEvent]] = {
    "pull_request": PullRequestEvent,
    "push": PushEvent,
    "check_run": CheckRunEvent,  # rerequested from the Checks tab
    "check_suite": CheckSuiteEvent,
    "issue_comment": IssueCommentEvent,  # `@<app> rerun …` on a PR
}
ACTIONS_READ = {
    "pull_request": PR_ACTIONS_READ,
    "check_run": {"rerequested"},
    "check_suite": {"rerequested"},
    "issue_comment": {"created"},
}


class Outcome(Enum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    IGNORED = "ignored"
    PONG = "pong"


@dataclass(frozen=True)
class IngestResult:
    outcome: Outcome
    delivery_id: str | None
    reason: str = ""


@dataclass(frozen=True)
class IngestDeps:
    secrets: tuple[bytes, ...]
    upstream: str
    deliveries: DeliveryStore
    events: EventQueue
    blobs: BlobStore
    metrics: Metrics
    clock: Clock
    max_body_bytes: int
    inline_body_bytes: int  # above this the body travels through S3 (queue message limit minus envelope)
    # Secrets kept in Secrets Manager, read through its cache (force: read now, at most once per few seconds);
    # None: `secrets` are fixed for the life of the instance.
    secret_source: Callable[[bool], tuple[bytes, ...]] | None = None
    # Downstream `workflow_run` events (GitHub's record of the runs the relay started); None: not taken.
    runs: RunQueue | None = None
    run_settle_s: float = 30.0  # a completed run waits this long for late reports before GitHub's record is read
    bound_runs: BoundRuns | None = None  # a workflow_dispatch run without the dispatch id in its title: by run id
    # The allowlist, loaded when the first downstream run event asks for it (an upstream event never does); None:
    # run events are not taken.
    allowlist: AllowlistProvider | None = None


_OUTCOME_METRIC = {
    Outcome.ACCEPTED: "WebhookAccepted",
    Outcome.DUPLICATE: "WebhookDuplicate",
    Outcome.IGNORED: "WebhookIgnored",
    Outcome.PONG: "WebhookPinged",
}


def ingest(body: bytes, headers: Mapping[str, str], deps: IngestDeps) -> IngestResult:
    """`headers` must have lower-case names. Raises BadSignature, BadRequest, PayloadTooLarge."""
    try:
        result = _ingest(body, headers, deps)
    except CrcrError as exc:
        deps.metrics.count("WebhookRejected", reason=exc.reason)
        raise
    deps.metrics.count(_OUTCOME_METRIC[result.outcome])
    return result


def _verify(body: bytes, header: str | None, deps: IngestDeps) -> None:
    """The body must be signed by the current or the previous secret. A mismatch reads the secret again first: a
    rotated secret is taken at once by warm functions, with no redeploy (the re-read is rate-limited)."""
    if deps.secret_source is None:
        verify_signature(deps.secrets, body, header)
        return
    secrets = deps.secret_source(False)
    try:
        verify_signature(secrets, body, header)
    except BadSignature:
        fresh = deps.secret_source(True)
        if fresh == secrets:
            raise
        verify_signature(fresh, body, header)
        deps.metrics.count("WebhookSecretReread")


def _ingest(body: bytes, headers: Mapping[str, str], deps: IngestDeps) -> IngestResult:
    if len(body) > deps.max_body_bytes:
        raise PayloadTooLarge(f"body is {len(body)} bytes; the limit is {deps.max_body_bytes}", field="body")
    _verify(body, headers.get("x-hub-signature-256"), deps)

    event = headers.get("x-github-event", "")
    delivery_id = headers.get("x-github-delivery", "")
    if not event:
        raise BadRequest("missing X-GitHub-Event header", field="X-GitHub-Event")
    if not is_delivery_id(delivery_id):
        raise BadRequest("missing or malformed X-GitHub-Delivery header", field="X-GitHub-Delivery")
    if event == "ping":
        return IngestResult(Outcome.PONG, delivery_id)
    if event in DOWNSTREAM_EVENTS:
        return _downstream_run(event, body, delivery_id, deps)
    model = ACTED_ON.get(event)
    if model is None:
        return IngestResult(Outcome.IGNORED, delivery_id, f"event {event} is not acted on")

    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"body is not UTF-8 JSON: {exc}", field="body") from exc
    # Whatever is answered 202 must reach every target: a body the planner, a queue or a downstream could not
    # carry (too deep, numbers out of range, NaN, lone surrogates) is refused here, naming where.
    doc = loads(text)
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object", field="body")
    try:
        head = AnyEvent.model_validate(doc)
        if head.repository is None or repo_key(head.repository.full_name) != repo_key(deps.upstream):
            return IngestResult(Outcome.IGNORED, delivery_id, "not the upstream repository")
        if event in ACTIONS_READ and head.action not in ACTIONS_READ[event]:
            return IngestResult(Outcome.IGNORED, delivery_id, f"{event} action {head.action} is not acted on")
        parsed = model.model_validate(doc)
        if isinstance(parsed, IssueCommentEvent) and (
            parsed.issue.pull_request is None or not looks_like_command(parsed.comment.body)
        ):
            return IngestResult(Outcome.IGNORED, delivery_id, "not a command on a pull request")
    except ValidationError as exc:
        where = invalid_field(exc)
        raise BadRequest(f"{event} payload is malformed at {where}: {exc.errors()[0]['msg']}", field=where) from exc

    now = deps.clock.now()
    digest = hashlib.sha256(body).hexdigest()
    claim = deps.deliveries.claim_delivery(delivery_id, event, now, digest)
    if claim is Claim.QUEUED:
        return IngestResult(Outcome.DUPLICATE, delivery_id, "delivery already accepted")
    if claim is Claim.REPLAYED:
        deps.metrics.count("WebhookReplayed")
        return IngestResult(Outcome.DUPLICATE, delivery_id, "this body was already accepted under another delivery id")
    if claim is Claim.REUSED:
        deps.metrics.count("WebhookIdReused")
        return IngestResult(Outcome.DUPLICATE, delivery_id, "this delivery id was already accepted with another body")
    if claim is Claim.PENDING:
        deps.metrics.count("WebhookRequeued")

    message = EventMessage(delivery_id=delivery_id, event=event, received_at=now, body=text, body_sha256=digest)
    # Measure what travels: the body as a JSON string inside the message, escapes included.
    if len(message.model_dump_json().encode()) > deps.inline_body_bytes:
        key = f"bodies/{delivery_id}.json"
        deps.blobs.put(key, body)
        message = EventMessage(delivery_id=delivery_id, event=event, received_at=now, body_ref=key, body_sha256=digest)
        deps.metrics.count("WebhookBodyOffloaded")
    deps.events.send_event(message)
    deps.deliveries.mark_queued(delivery_id, deps.clock.now())
    return IngestResult(Outcome.ACCEPTED, delivery_id)


# Events of downstream repositories: GitHub's record of their runs. `workflow_job` is answered and dropped (the jobs
# listing of a completed attempt has every job's times), so subscribing to it costs a signature check.
DOWNSTREAM_EVENTS = frozenset({"workflow_run", "workflow_job"})


def _downstream_run(event: str, body: bytes, delivery_id: str, deps: IngestDeps) -> IngestResult:
    """A downstream's run event, dropped at the door unless it can be one the relay started by an allowlisted
    downstream: no state written, no GitHub call, at most one read (a workflow_dispatch run whose title carries no
    dispatch id) besides the allowlist's first load."""
    if event != "workflow_run" or deps.runs is None or deps.allowlist is None:
        return _dropped(deps, delivery_id, "not_taken", f"{event} is not acted on")
    try:
        parsed = WorkflowRunEvent.model_validate(loads(body.decode("utf-8")))
    except (ValidationError, UnicodeDecodeError) as exc:
        where = invalid_field(exc) if isinstance(exc, ValidationError) else "body"
        raise BadRequest(f"workflow_run payload is malformed at {where}", field=where) from exc
    run, repo = parsed.workflow_run, parsed.repository
    if repo_key(repo.full_name) == repo_key(deps.upstream):
        return _dropped(deps, delivery_id, "upstream", "the upstream's own runs are not the relay's")
    if parsed.action not in RUN_ACTIONS:
        return _dropped(deps, delivery_id, "action", f"workflow_run action {parsed.action} is not acted on")
    if run.event not in RELAY_EVENTS:
        return _dropped(deps, delivery_id, "event", f"a {run.event} run is not one the relay started")
    dispatch_id = dispatch_id_in(run.display_title)
    if dispatch_id is None and (run.event != "workflow_dispatch" or deps.bound_runs is None):
        return _dropped(deps, delivery_id, "untitled", "the run's title carries no dispatch id")
    head = run.head_repository
    message = RunMessage(
        delivery_id=delivery_id,
        repo=repo.full_name,
        run_id=run.id,
        run_attempt=run.run_attempt,
        action=parsed.action,
        conclusion=run.conclusion,
        event=run.event,
        workflow_name=run.name or "",
        url=run.html_url,
        dispatch_id=dispatch_id,
        received_at=deps.clock.now(),
        repository_id=repo.id,
        owner_id=repo.owner.id if repo.owner else None,
        workflow=workflow_ref(repo.full_name, run.path, run.head_branch),
        head_repository_id=head.id if head else None,
        installation_id=parsed.installation.id if parsed.installation else None,
    )
    # The inbound door, with what the allowlist pins (the runs worker checks the dispatch's row too): a run of a
    # repository the allowlist does not serve, or of another id, owner, workflow or fork, costs no read or message.
    try:
        admit(deps.allowlist.current().get(repo.full_name), message.evidence())
    except Refused as exc:
        deps.metrics.count("IdentityRefused", channel=exc.channel, reason=exc.check)
        return _dropped(deps, delivery_id, exc.check, exc.message)
    except AllowlistError:  # none loaded yet: GitHub's record is read by the sweeper instead (its start watch)
        return _dropped(deps, delivery_id, "allowlist_unavailable", "the relay has no valid allowlist loaded")
    if dispatch_id is None and (deps.bound_runs is None or deps.bound_runs.bound(repo.full_name, str(run.id)) is None):
        return _dropped(deps, delivery_id, "unbound", "no dispatch of the relay started this run")
    deps.runs.send_run(message, deps.run_settle_s if parsed.action == "completed" else 0.0)
    deps.metrics.count("RunEventAccepted", action=parsed.action)
    return IngestResult(Outcome.ACCEPTED, delivery_id)


def _dropped(deps: IngestDeps, delivery_id: str, reason: str, detail: str) -> IngestResult:
    deps.metrics.count("RunEventDropped", reason=reason)
    return IngestResult(Outcome.IGNORED, delivery_id, detail)
