"""A callback body in one shape (`Report`), whichever of the three shapes it came in, and what is kept of it."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from crcr.contracts.callback import CallbackBody, FailedTest, PyTorchCallbackBody, ScheduledBody
from crcr.domain.errors import (
    BadRequest,
    invalid_field,
)
from crcr.domain.jsondoc import MAX_DEPTH, dumps, loads


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


def parse_report(body: bytes) -> tuple[CallbackBody | PyTorchCallbackBody | ScheduledBody, Report]:
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


# Kept in their own form (the triage as validated, the failing tests as capped) or not read at all (the dispatch
# payload PyTorch's body echoes: the ledger says what was dispatched): not stored a second time.
_NOT_STORED = frozenset({"ticket", "payload", "triage_verdict", "failed_tests_detail"})


def stored_payload(raw: dict[str, Any]) -> str:
    """The body as sent, minus the ticket (a credential has no place in the table or on the HUD) and what the relay
    keeps in its own form or drops (an oversize triage verdict is not stored anywhere)."""
    kept = {k: v for k, v in raw.items() if k not in _NOT_STORED}
    if isinstance(kept.get("workflow"), dict):  # PyTorch's body: the report is under `workflow`
        kept["workflow"] = {k: v for k, v in kept["workflow"].items() if k not in _NOT_STORED}
    return dumps(kept)


def fingerprint_of(raw: dict[str, Any]) -> str:
    """What makes two reports the same report: everything the downstream sent but its credentials."""
    content = {k: v for k, v in raw.items() if k != "ticket"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()
