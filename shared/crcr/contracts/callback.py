"""The callback API (DESIGN §4.3): our body with a ticket, and the body PyTorch's callback action sends."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from crcr.domain.ids import RUN_ID_PATTERN

Conclusion = Literal["success", "failure", "cancelled", "skipped", "timed_out", "neutral", "action_required"]
Status = Literal["in_progress", "completed"]


def _timestamp(value: str | None) -> str | None:
    """ISO 8601, normalised to UTC with a Z; a time without a zone is UTC. Empty means not given."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError("must be an ISO 8601 date and time, e.g. 2026-01-31T12:00:00Z") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _check_run_id(value: Any) -> Any:
    """GitHub's job.check_run_id is a number; other CI systems have string ids. Kept as text."""
    if isinstance(value, bool):
        raise ValueError("must be a number or an id string")
    if isinstance(value, int):
        if not 0 < value < 2**63:
            raise ValueError("must be a positive 64-bit number")
        return str(value)
    return value


def _run_id(value: Any) -> Any:
    """GitHub sends its run id as a number (PyTorch's action as a string of digits); Buildkite a build UUID."""
    if isinstance(value, bool):
        raise ValueError("must be a run id or a build UUID")
    return str(value) if isinstance(value, int) else value


RunId = Annotated[str, BeforeValidator(_run_id), Field(pattern=RUN_ID_PATTERN)]
Timestamp = Annotated[str | None, Field(default=None, max_length=40), AfterValidator(_timestamp)]
# PyTorch's HUD keys rows with it between slashes: no slash, nothing exotic, short.
CheckRunId = Annotated[
    str | None,
    BeforeValidator(_check_run_id),
    Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"),
]


class TestResults(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    passed: int = Field(ge=0)
    failed: int = Field(ge=0)
    skipped: int = Field(ge=0)
    total: int = Field(ge=0)


FailureKind = Literal["infra", "build", "test"]


class _Report(BaseModel):
    @model_validator(mode="after")
    def _conclusion_iff_completed(self) -> _Report:
        status, conclusion = getattr(self, "status"), getattr(self, "conclusion")  # noqa: B009
        if status == "completed" and conclusion is None:
            raise ValueError("conclusion is required when status is completed")
        if status != "completed" and conclusion is not None:
            raise ValueError("conclusion is only allowed when status is completed")
        if getattr(self, "failure_kind", None) is not None and conclusion not in ("failure", "timed_out"):
            raise ValueError("failure_kind only goes with a completed failure or timed_out")
        return self


class _OurReport(_Report):
    """Fields our callback bodies share (the ticket-bound and the scheduled one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    conclusion: Conclusion | None = None
    workflow_name: str = Field(min_length=1, max_length=200)
    job_name: str = Field(min_length=1, max_length=200)
    run_id: RunId
    run_attempt: int = Field(ge=1)
    url: str = Field(min_length=1, max_length=1000)
    started_at: Timestamp = None
    completed_at: Timestamp = None
    check_run_id: CheckRunId = None
    test_results: TestResults | None = None
    artifact_url: str | None = Field(default=None, max_length=1000)
    summary: str | None = Field(default=None, max_length=65_535)
    failure_kind: FailureKind | None = None
    # PyTorch's proposed triage verdict: validated where it is recorded, dropped whole when malformed.
    triage_verdict: Any = None


class CallbackBody(_OurReport):
    """Ours: bound to its dispatch by the relay-signed ticket."""

    ticket: str = Field(min_length=20, max_length=4096)
    status: Status


class PyTorchWorkflow(_Report):
    model_config = ConfigDict(extra="ignore", frozen=True)

    status: Status
    conclusion: Conclusion | None = None
    name: str = Field(min_length=1, max_length=200)
    job_name: str = Field(min_length=1, max_length=200)
    run_id: RunId
    run_attempt: int = Field(default=1, ge=1)
    url: str = Field(min_length=1, max_length=1000)
    started_at: Timestamp = None
    completed_at: Timestamp = None
    check_run_id: CheckRunId = None
    test_results: TestResults | None = None
    artifact_url: str | None = Field(default=None, max_length=1000)
    summary: str | None = Field(default=None, max_length=65_535)
    failure_kind: FailureKind | None = None
    triage_verdict: Any = None


class PyTorchCallbackBody(BaseModel):
    """PyTorch's callback action: bound through the dispatch ledger by (delivery_id, token repository)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: str | int | None = None
    delivery_id: str = Field(min_length=1, max_length=100)
    event_type: str | None = None
    payload: dict[str, Any] | None = None
    workflow: PyTorchWorkflow


class ScheduledBody(_OurReport):
    """A scheduled (nightly/periodic) downstream run reporting on an upstream commit it was not sent."""

    scheduled: Literal[True]
    head_sha: str = Field(pattern=r"^[0-9a-f]{40}$")
    status: Literal["completed"]
