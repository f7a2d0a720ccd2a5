"""What PyTorch's HUD records about a job: the push it accepts (torchci `POST /api/crcr/results`) and the
`crcr_workflow_job` row it builds, identity from the ledger whatever body the downstream sent."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from crcr.app.ports.jobs import JobRecord
from crcr.domain import failed_tests

NO_JOB_NAME = "(no job started)"  # the sweeper's row for a dispatch no job ever reported on
NO_WORKFLOW_NAME = "(none)"

# default.crcr_workflow_job, in its column order, with its ClickHouse types.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("dynamoKey", "String"),
    ("status", "String"),
    ("downstream_repo", "String"),
    ("upstream_repo", "String"),
    ("pr_number", "UInt64"),
    ("pytorch_head_sha", "String"),
    ("delivery_id", "String"),
    ("workflow_run_url", "String"),
    ("workflow_name", "String"),
    ("job_name", "String"),
    ("check_run_id", "String"),
    ("run_id", "String"),
    ("run_attempt", "UInt32"),
    ("conclusion", "String"),
    ("queue_time", "Nullable(Float64)"),
    ("execution_time", "Nullable(Float64)"),
    ("started_at", "DateTime64(9)"),
    ("completed_at", "DateTime64(9)"),
    ("total_tests", "UInt64"),
    ("passed_tests", "UInt64"),
    ("failed_tests", "UInt64"),
    ("skipped_tests", "UInt64"),
    ("failed_tests_json", "String"),
    ("artifact_url", "String"),
    ("environment", "String"),
    ("downstream_repo_level", "String"),
    ("event_type", "String"),
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # ClickHouse's DateTime64 default: "never"
# What DateTime64(9) holds (int64 nanoseconds, from 1900): ClickHouse refuses a whole insert over one
# time outside it, so such a time is no time at all here.
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC)


def derived_check_run_id(run_id: str, run_attempt: int) -> str:
    """For a downstream that sent no job.check_run_id: stable for the attempt, distinct across attempts
    (the row key already holds the job and workflow names)."""
    return f"crcr-{run_id}-{run_attempt}"


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seconds(start: float | None, end: float | None) -> float | None:
    return round(end - start, 3) if start is not None and end is not None else None


def reported(job: JobRecord) -> dict[str, Any]:
    """The downstream's own words from its latest report, in either body shape (validated at the callback)."""
    try:
        doc = json.loads(job.callback_payload)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    inner = doc.get("workflow")
    return inner if isinstance(inner, dict) else doc


def _status(job: JobRecord) -> tuple[str, str | None]:
    if job.state == "timed_out":  # written by the sweeper: a finished job as far as any reader goes
        return "completed", "timed_out"
    if job.state == "not_started":  # GitHub started no run: the downstream's workflow needs action
        return "completed", job.conclusion or "action_required"
    return job.state, job.conclusion if job.state == "completed" else None


def workflow(job: JobRecord) -> dict[str, Any]:
    """`callback_payload.workflow` as PyTorch's HUD reads it."""
    words = reported(job)
    status, conclusion = _status(job)
    fields: dict[str, Any] = {
        "name": job.workflow_name or NO_WORKFLOW_NAME,
        "status": status,
        "conclusion": conclusion,
        "url": job.url,
        "job_name": job.job_name or NO_JOB_NAME,
        "check_run_id": job.check_run_id or derived_check_run_id(job.run_id, job.run_attempt),
        "run_id": str(job.run_id),
        "run_attempt": job.run_attempt,
        # The downstream's clock when it said (its first word on the start stays); else the relay's,
        # which measured the same moments.
        "started_at": job.reported_started_at or words.get("started_at") or _iso(job.started_at),
        "completed_at": (words.get("completed_at") or _iso(job.completed_at)) if status == "completed" else None,
    }
    tests = words.get("test_results")
    if isinstance(tests, dict):
        fields["test_results"] = {k: tests[k] for k in ("passed", "failed", "skipped", "total") if k in tests}
    if status == "completed" and job.failed_tests:
        fields["failed_tests_detail"] = failed_tests.parse(job.failed_tests)
    if isinstance(words.get("artifact_url"), str) and words["artifact_url"]:
        fields["artifact_url"] = words["artifact_url"]
    return {k: v for k, v in fields.items() if v is not None}


def envelope(job: JobRecord) -> dict[str, Any]:
    """The push: relay-established facts in `trusted`, the job's report in PyTorch's callback shape."""
    payload: dict[str, Any] = {"repository": {"full_name": job.upstream}, "head_sha": job.head_sha}
    if job.pr is not None:
        payload["pull_request"] = {"number": job.pr, "head": {"sha": job.head_sha}}
    if job.ciflow and job.pr is not None:
        # The push as PyTorch's relay forwards it: torchci files a ciflow/trunk push under its PR from these.
        payload |= {"ref": f"refs/tags/ciflow/{job.ciflow}/{job.pr}", "after": job.head_sha}
    return {
        "trusted": {
            "verified_repo": job.repo,
            "downstream_repo_level": f"L{job.level}",
            "ci_metrics": {
                "queue_time": _seconds(job.dispatched_at, job.started_at),
                "execution_time": _seconds(job.started_at, job.completed_at),
            },
            "pr_number": job.pr,
            "head_sha": job.head_sha,
            "delivery_id": job.delivery_id,
            "upstream_repo": job.upstream,
            "event_type": job.event_type,
            "state": job.state,
            # Failed L3/L4 PR jobs: new, pre-existing, infra, flaky or no baseline (docs/contracts.md).
            "verdict": job.verdict,
            # The downstream's own reading of its failure, validated and capped: advice, never a gate.
            "triage_verdict": json.loads(job.triage) if job.triage else None,
        },
        "untrusted": {
            "callback_payload": {
                "event_type": job.event_type,
                "delivery_id": job.delivery_id,
                "payload": payload,
                "workflow": workflow(job),
            }
        },
    }


def _moment(text: Any) -> datetime:
    if not isinstance(text, str) or not text:
        return EPOCH
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return EPOCH
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment if EARLIEST <= moment <= LATEST else EPOCH


def row(job: JobRecord) -> dict[str, Any]:
    """The `crcr_workflow_job` row PyTorch's HUD builds from this job's pushes (ClickHouse defaults for
    what it never sets); times as aware datetimes, EPOCH for none."""
    wf = workflow(job)
    metrics = envelope(job)["trusted"]["ci_metrics"]
    completed = wf["status"] == "completed"
    tests = wf.get("test_results") if completed else None
    counts = {
        k: int(tests[k]) if isinstance(tests, dict) and k in tests else 0 for k in ("passed", "failed", "skipped")
    }
    total = tests.get("total") if isinstance(tests, dict) else None
    return {
        "dynamoKey": f"{job.repo}/{job.delivery_id}/{wf['name']}/{wf['job_name']}/{wf['check_run_id']}",
        "status": wf["status"],
        "downstream_repo": job.repo,
        "upstream_repo": job.upstream,
        "pr_number": job.pr or 0,
        "pytorch_head_sha": job.head_sha,
        "delivery_id": job.delivery_id,
        "workflow_run_url": wf["url"],
        "workflow_name": wf["name"],
        "job_name": wf["job_name"],
        "check_run_id": wf["check_run_id"],
        "run_id": wf["run_id"],
        "run_attempt": wf["run_attempt"] or 1,  # as the HUD reads it: Number(run_attempt) || 1
        "conclusion": (wf.get("conclusion") or "") if completed else "",
        "queue_time": metrics["queue_time"],
        "execution_time": metrics["execution_time"],
        "started_at": _moment(wf.get("started_at")),
        "completed_at": _moment(wf.get("completed_at")) if completed else EPOCH,
        "total_tests": int(total) if isinstance(total, int) else (sum(counts.values()) if tests else 0),
        "passed_tests": counts["passed"],
        "failed_tests": counts["failed"],
        "skipped_tests": counts["skipped"],
        "failed_tests_json": job.failed_tests if completed else "",
        "artifact_url": wf.get("artifact_url", ""),
        "environment": "",
        "downstream_repo_level": f"L{job.level}",
        "event_type": job.event_type or "pull_request",  # the HUD sets only a non-empty one: the column's DEFAULT
    }
