"""The relay's own queue messages: strict, versioned, never a raw dict past the handler."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from crcr.contracts.github import RepoName
from crcr.domain.allowlist import Entry
from crcr.domain.identity import Channel, Evidence, id_text
from crcr.domain.ids import is_delivery_id
from crcr.domain.levels import Level


def _delivery_id(value: str) -> str:
    if not is_delivery_id(value):
        raise ValueError("must be a delivery id: 1 to 100 ASCII letters, digits, '.', '_' and '-'")
    return value


DeliveryId = Annotated[str, AfterValidator(_delivery_id)]
# The dispatcher gives up after 8 attempts (crcr.app.dispatch): a message claiming more was not written by the relay.
MAX_ATTEMPT = 100


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EventMessage(_Msg):
    """Webhook -> planner. The body travels inline, or by reference in S3 when over the queue limit."""

    schema_version: Literal[1] = 1
    delivery_id: str
    event: str
    received_at: float
    body: str | None = None
    body_ref: str | None = None
    body_sha256: str


class BuildkiteTarget(_Msg):
    """The pipeline a Buildkite downstream's dispatch creates a build of (`repos.<repo>.buildkite`)."""

    organization: str
    pipeline: str
    branch: str = "main"


class WorkflowFile(_Msg):
    """The workflow a `workflow_dispatch` downstream's dispatch runs (`repos.<repo>.workflow`)."""

    file: str
    ref: str = "main"


class DispatchMessage(_Msg):
    """Planner -> dispatcher: one downstream repository for one delivery."""

    schema_version: Literal[1] = 1
    delivery_id: DeliveryId
    event_type: Literal["pull_request", "push", "bisect"]
    action: str | None = None
    target_repo: RepoName
    level: Level
    device: str | None = None
    upstream: RepoName
    pr_number: int | None = None
    head_sha: str
    ref: str | None = None
    payload: dict[str, Any]
    planned_at: float
    # The planner stored head_sha as the PR's head at this time (this event was the newest it knew of): a
    # dispatch soon after needs no read of the PR's head to know it is not superseded.
    head_at: float | None = None
    attempt: int = Field(default=0, ge=0, le=MAX_ATTEMPT)
    not_before: float | None = None
    slot_at: float | None = None  # a pacing slot booked for this message's send (it was paced)
    # A Buildkite downstream, as the allowlist said when the event was planned: a build of this pipeline
    # instead of a repository_dispatch, and the ticket's repo_id (the allowlist's pin; GitHub's otherwise).
    buildkite: BuildkiteTarget | None = None
    workflow: WorkflowFile | None = None  # GitHub Actions through workflow_dispatch (opt-in), not repository_dispatch
    repository_id: int | None = None
    # A push of refs/tags/ciflow/<name>/<pr_number>: the PR's CI at head_sha (its check runs carry the name).
    ciflow: str | None = None
    # Change hints (crcr.domain.change_hints): client_payload.changes of a repository_dispatch; None: unknown.
    changes: dict[str, Any] | None = None
    # A closed PR's dispatch: merged as far as the relay knows (GitHub's `merged`, the merge bot's label, or a push to
    # the default branch that said it landed the PR); None for every other event.
    merged: bool | None = None
    # Planned but not to be sent (no file the repository's path filters select changed): the ledger records it.
    skip: str | None = None
    # event_type "bisect" (the reporter): the regressed job and the range being bisected, client_payload.bisect.
    bisect: dict[str, Any] | None = None


class RunMessage(_Msg):
    """A downstream run GitHub told the relay about (`workflow_run`), queued by the webhook for the runs worker once
    it looked like one the relay started; the worker binds it to its dispatch or drops it."""

    schema_version: Literal[1] = 1
    delivery_id: str  # GitHub's delivery of the run event
    repo: str  # the signed `repository`
    run_id: int
    run_attempt: int = Field(ge=1)
    action: str  # requested, in_progress, completed
    conclusion: str | None = None
    event: str  # repository_dispatch or workflow_dispatch
    workflow_name: str = ""
    url: str = ""
    dispatch_id: str | None = None  # from the run's title; None: bound by the run id the dispatch recorded
    received_at: float
    # Who ran it, as the signed event says (crcr.domain.identity): the runs worker checks it against the dispatch.
    repository_id: int | None = None
    owner_id: int | None = None
    workflow: str | None = None  # the run's workflow file as a job_workflow_ref (crcr.domain.identity.workflow_ref)
    head_repository_id: int | None = None
    installation_id: int | None = None

    def evidence(self) -> Evidence:
        """What the event says of who ran it, for the inbound door."""
        return Evidence(
            Channel.RUN_EVENT,
            repository=self.repo,
            repository_id=id_text(self.repository_id),
            repository_owner_id=id_text(self.owner_id),
            workflow=self.workflow,
            head_repository_id=id_text(self.head_repository_id),
            installation_id=id_text(self.installation_id),
        )


def downstream_target(entry: Entry) -> dict[str, Any]:
    """How a dispatch reaches the downstream, as the allowlist says when the event is planned: a Buildkite pipeline
    (with the allowlist's repository id pin), a workflow file through workflow_dispatch, or neither
    (repository_dispatch)."""
    settings = entry.settings
    if settings.buildkite is not None:
        pipeline = settings.buildkite
        target = BuildkiteTarget(organization=pipeline.organization, pipeline=pipeline.pipeline, branch=pipeline.branch)
        return {"buildkite": target, "repository_id": settings.repository_id}
    if settings.workflow is not None:
        return {"workflow": WorkflowFile(file=settings.workflow.file, ref=settings.workflow.ref)}
    return {}
