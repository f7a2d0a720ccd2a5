"""The callback API (DESIGN §4.3): our body with a ticket, and the body PyTorch's callback action sends."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Conclusion = Literal["success", "failure", "cancelled", "skipped", "timed_out", "neutral", "action_required"]
Status = Literal["in_progress", "completed"]


class TestResults(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    passed: int = Field(ge=0)
    failed: int = Field(ge=0)
    skipped: int = Field(ge=0)
    total: int = Field(ge=0)


class _Report(BaseModel):
    @model_validator(mode="after")
    def _conclusion_iff_completed(self) -> _Report:
        status, conclusion = getattr(self, "status"), getattr(self, "conclusion")  # noqa: B009
        if status == "completed" and conclusion is None:
            raise ValueError("conclusion is required when status is completed")
        if status != "completed" and conclusion is not None:
            raise ValueError("conclusion is only allowed when status is completed")
        return self


class _OurReport(_Report):
    """Fields our callback bodies share (the ticket-bound and the scheduled one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    conclusion: Conclusion | None = None
    workflow_name: str = Field(min_length=1, max_length=200)
    job_name: str = Field(min_length=1, max_length=200)
    run_id: int = Field(gt=0)
    run_attempt: int = Field(ge=1)
    url: str = Field(min_length=1, max_length=1000)
    started_at: str | None = Field(default=None, max_length=40)
    completed_at: str | None = Field(default=None, max_length=40)
    test_results: TestResults | None = None
    artifact_url: str | None = Field(default=None, max_length=1000)
    summary: str | None = Field(default=None, max_length=65_535)


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
    run_id: int = Field(gt=0)  # PyTorch's action sends it as a string of digits
    run_attempt: int = Field(default=1, ge=1)
    url: str = Field(min_length=1, max_length=1000)
    started_at: str | None = Field(default=None, max_length=40)
    completed_at: str | None = Field(default=None, max_length=40)
    test_results: TestResults | None = None
    artifact_url: str | None = Field(default=None, max_length=1000)
    summary: str | None = Field(default=None, max_length=65_535)


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
