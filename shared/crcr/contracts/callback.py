"""The callback API (docs/contracts.md): our body with a ticket, and the body PyTorch's callback action sends."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from crcr.domain.ids import RUN_ID_PATTERN
from crcr.domain.text import control_in

Conclusion = Literal["success", "failure", "cancelled", "skipped", "timed_out", "neutral", "action_required"]
Status = Literal["in_progress", "completed"]


def _timestamp(value: str | None) -> str | None:
    """ISO 8601, normalised to UTC with a Z; a time without a zone is UTC. Empty means not given."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        # OverflowError: 0001-01-01T00:00:00+01:00 is a year before 1 in UTC (was a 500)
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    except (ValueError, OverflowError) as exc:
        raise ValueError("must be an ISO 8601 date and time, e.g. 2026-01-31T12:00:00Z") from exc


# The relay's own check_run_ids, for a job that sends none (crcr.app.torchci.derived_check_run_id). A caller may not
# use the prefix: a derived id is then a job's alone, and its HUD key needs no claim (one write less per job).
DERIVED_CHECK_RUN_PREFIX = "crcr-"


def _check_run_id(value: Any) -> Any:
    """GitHub's job.check_run_id is a number; other CI systems have string ids. Kept as text."""
    if isinstance(value, bool):
        raise ValueError("must be a number or an id string")
    if isinstance(value, int):
        if not 0 < value < 2**63:
            raise ValueError("must be a positive 64-bit number")
        return str(value)
    if isinstance(value, str) and value.startswith(DERIVED_CHECK_RUN_PREFIX):
        raise ValueError(f"must not start with {DERIVED_CHECK_RUN_PREFIX!r}: the relay's ids for jobs that send none")
    return value


def _run_id(value: Any) -> Any:
    """GitHub sends its run id as a number (PyTorch's action as a string of digits); Buildkite a build UUID."""
    if isinstance(value, bool):
        raise ValueError("must be a run id or a build UUID")
    return str(value) if isinstance(value, int) else value


def _name(value: str) -> str:
    """One line a maintainer reads (check run names, the HUD, the PR comment): no control characters."""
    if (found := control_in(value)) is not None:
        raise ValueError(f"must not contain control or bidirectional characters ({found})")
    return value


def _url(value: str) -> str:
    """A link shown and followed (details_url of a check run, the HUD's run link): plain http(s)."""
    if control_in(value) is not None or any(c.isspace() for c in value):
        raise ValueError("must be a URL without spaces or control characters")
    parts = urlsplit(value)  # a malformed [IPv6] host raises ValueError, which is a 400 too
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL")
    try:
        parts.port  # noqa: B018 - a port of 99999 or `abc` raises here; it became the check run's details_url
    except ValueError:
        raise ValueError("must be an http(s) URL with a port from 0 to 65535") from None
    return value


RunId = Annotated[str, BeforeValidator(_run_id), Field(pattern=RUN_ID_PATTERN)]
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_name)]
Url = Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_url)]
# A run's attempt: DynamoDB numbers stop at 38 digits and PyTorch's HUD keeps it as UInt32.
RunAttempt = Annotated[int, Field(ge=1, lt=2**31)]
# Test counts reach the HUD, a JavaScript reader: exact up to 2**53 - 1 (and a UInt64 column).
Count = Annotated[int, Field(ge=0, le=2**53 - 1)]
Timestamp = Annotated[str | None, Field(default=None, max_length=40), AfterValidator(_timestamp)]
# PyTorch's HUD keys rows with it between slashes: no slash, nothing exotic, short.
# The pattern constrains the text only: on `str | None` pydantic applied it to an explicit null too, and
# `"check_run_id": null` (documented: derive one) raised a TypeError, answered 500.
CheckRunId = Annotated[
    Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")] | None,
    BeforeValidator(_check_run_id),
]


class TestResults(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    passed: Count
    failed: Count
    skipped: Count
    total: Count


FailureKind = Literal["infra", "build", "test"]


def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("must be a finite number of seconds")
    return value


class FailedTest(BaseModel):
    """One failing test as PyTorch's HUD keeps it (`failed_tests_detail`): the relay keeps the first 50, each
    message cut to 500 characters, as torchci does."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_name)]
    classname: Annotated[str, Field(max_length=1000), AfterValidator(_name)] | None = None
    message: str | None = None  # cut to 500 characters when recorded
    duration: Annotated[float | None, Field(default=None, ge=0), AfterValidator(_finite)] = None


# Bounded by the body's own cap (256 KiB); only the first MAX_ENTRIES are kept.
FailedTests = Annotated[list[FailedTest], Field(max_length=10_000)]


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
    workflow_name: Name
    job_name: Name
    run_id: RunId
    run_attempt: RunAttempt
    url: Url
    started_at: Timestamp = None
    completed_at: Timestamp = None
    check_run_id: CheckRunId = None
    test_results: TestResults | None = None
    failed_tests_detail: FailedTests | None = None
    artifact_url: Url | None = None
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
    name: Name
    job_name: Name
    run_id: RunId
    run_attempt: RunAttempt = 1
    url: Url
    started_at: Timestamp = None
    completed_at: Timestamp = None
    check_run_id: CheckRunId = None
    test_results: TestResults | None = None
    failed_tests_detail: FailedTests | None = None
    artifact_url: Url | None = None
    summary: str | None = Field(default=None, max_length=65_535)
    failure_kind: FailureKind | None = None
    triage_verdict: Any = None


class PyTorchCallbackBody(BaseModel):
    """PyTorch's callback action: bound through the dispatch ledger by (delivery_id, token repository)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: str | int | None = None
    delivery_id: str = Field(pattern=r"^[A-Za-z0-9._-]{1,100}$")  # as X-GitHub-Delivery
    event_type: str | None = None
    payload: dict[str, Any] | None = None
    # A scheduled report's upstream commit, top level (vLLM's Buildkite nightly reporter sends it there).
    pytorch_head_sha: str | None = Field(default=None, max_length=100)
    workflow: PyTorchWorkflow


class ScheduledBody(_OurReport):
    """A scheduled (nightly/periodic) downstream run reporting on an upstream commit it was not sent."""

    scheduled: Literal[True]
    head_sha: str = Field(pattern=r"^[0-9a-f]{40}$")
    status: Literal["completed"]
    # PyTorch's HUD names both kinds of run no PR dispatched; its callback action says which in `event_type`.
    event_type: Literal["nightly", "periodic"] = "nightly"
