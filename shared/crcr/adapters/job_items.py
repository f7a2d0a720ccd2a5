"""Job records as items of the results table, and back: the one place that knows an item's attributes and indexes."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import RESULTS_TTL_S, job_key
from crcr.app.ports.jobs import JobRecord
from crcr.domain.ids import repo_key

BY_REPO_INDEX = "by_repo"  # (repo_key, dispatched_at): every row, for a repository's history and health


def to_item(record: JobRecord) -> dict[str, Any]:
    """The item, with no attribute for a value the job does not have: an item past 1 KB bills twice in the table and
    in each index that projects it whole (a dozen empty attributes took a job's row there)."""
    return job_key(record.dispatch_id, record.run_id, record.run_attempt, record.job_name) | to_dynamo(
        {name: value for name, value in _values(record).items() if value is not None}
    )


def _values(record: JobRecord) -> dict[str, Any]:
    """The item's attributes but its key: None for one the job does not have (an optional text left empty too)."""
    return {
        "dispatch_id": record.dispatch_id,
        "run_id": record.run_id,
        "run_attempt": record.run_attempt,
        "job_name": record.job_name,
        "workflow_name": record.workflow_name,
        "state": record.state,
        "conclusion": record.conclusion or None,
        "fingerprint": record.fingerprint,
        "url": record.url,
        "repo": record.repo,
        "repo_id": record.repo_id,
        "level": record.level,
        "delivery_id": record.delivery_id,
        "upstream": record.upstream,
        "head_sha": record.head_sha,
        "pr": record.pr,
        "device": record.device or None,
        "dispatched_at": record.dispatched_at,
        "started_at": record.started_at,
        "completed_at": record.completed_at,
        "callback_payload": record.callback_payload,
        "event_type": record.event_type or None,
        "check_run_id": record.check_run_id or None,
        "reported_started_at": record.reported_started_at or None,
        "failure_kind": record.failure_kind or None,
        "triage": record.triage or None,
        "verdict": record.verdict or None,
        "verdict_baseline": record.verdict_baseline or None,
        "known_issues": record.known_issues or None,
        "ciflow": record.ciflow or None,
        "failed_tests": record.failed_tests or None,
        "source": record.source or None,
        "reported_conclusion": record.reported_conclusion or None,
        "reason": record.reason or None,
        "recheck_at": record.recheck_at,
        "head_key": f"{repo_key(record.upstream)}#{record.head_sha}",
        "baseline_key": _baseline_key(record),
        "repo_key": repo_key(record.repo),
        "version": record.version,
        "expires_at": int(record.completed_at or record.started_at or record.dispatched_at) + RESULTS_TTL_S,
        "unanswered": record.unanswered or None,
    }


# What judging a job reads of its attempts: every attribute a JobRecord holds but the body as sent (up to the stored
# cap per job) and its fingerprint.
JUDGED_ATTRIBUTES = (
    "dispatch_id", "run_id", "run_attempt", "job_name", "workflow_name", "state", "conclusion", "url", "repo",
    "repo_id", "level", "delivery_id", "upstream", "head_sha", "pr", "device", "dispatched_at", "started_at",
    "completed_at", "version", "event_type", "check_run_id", "reported_started_at", "failure_kind", "triage",
    "verdict", "verdict_baseline", "known_issues", "ciflow", "failed_tests", "source", "reported_conclusion",
    "reason",
)  # fmt: skip


BY_BASELINE_INDEX = "by_baseline"  # (baseline_key, dispatched_at): a job's results on the branch (sparse)


# Branch results: a push's, a scheduled run's, and a bisection run's on a commit of the branch.
BASELINE_EVENTS = frozenset({"push", "nightly", "bisect"})


def baseline_key(repo: str, workflow_name: str, job_name: str) -> str:
    return json.dumps([repo_key(repo), workflow_name, job_name], separators=(",", ":"))


def _baseline_key(record: JobRecord) -> str | None:
    """Only a branch result (a push or a scheduled run, no PR) can be a baseline: only those carry the index's key."""
    if record.event_type not in BASELINE_EVENTS or record.pr is not None:
        return None
    return baseline_key(record.repo, record.workflow_name, record.job_name)


def is_job_item(item: dict[str, Any]) -> bool:
    """Whether an item (as DynamoDB holds it) is a job's: the results table's other rows have other sort keys."""
    try:
        sk = from_dynamo({"sk": item["sk"]})["sk"]
    except (KeyError, ValueError):
        return False
    return isinstance(sk, str) and sk.startswith("JOB#")


def from_item(stored: dict[str, Any]) -> JobRecord:
    item = from_dynamo(stored)

    def num(name: str) -> float | None:
        value = item.get(name)
        return float(value) if isinstance(value, Decimal) else None

    def text(name: str) -> str | None:
        value = item.get(name)
        return value if isinstance(value, str) else None

    pr = num("pr")
    return JobRecord(
        dispatch_id=item["dispatch_id"],
        run_id=str(item["run_id"]),  # rows from before Buildkite hold a number
        run_attempt=int(item["run_attempt"]),
        job_name=item["job_name"],
        workflow_name=item["workflow_name"],
        state=item["state"],
        conclusion=text("conclusion"),
        fingerprint=text("fingerprint") or "",  # not projected into by_repo
        url=item["url"],
        repo=item["repo"],
        repo_id=int(item["repo_id"]),
        level=int(item["level"]),
        delivery_id=item["delivery_id"],
        upstream=item["upstream"],
        head_sha=item["head_sha"],
        pr=int(pr) if pr is not None else None,
        device=text("device"),
        dispatched_at=float(item["dispatched_at"]),
        started_at=num("started_at"),
        completed_at=num("completed_at"),
        callback_payload=text("callback_payload") or "",  # not projected into by_repo (up to 256 KiB)
        version=int(item["version"]),
        event_type=text("event_type") or "",
        check_run_id=text("check_run_id") or "",
        reported_started_at=text("reported_started_at") or "",
        failure_kind=text("failure_kind"),
        triage=text("triage") or "",
        verdict=text("verdict"),
        verdict_baseline=text("verdict_baseline"),
        known_issues=text("known_issues") or "",
        ciflow=text("ciflow"),
        failed_tests=text("failed_tests") or "",
        source=text("source") or "",
        reported_conclusion=text("reported_conclusion"),
        reason=text("reason") or "",
        recheck_at=num("recheck_at"),
        unanswered=int(num("unanswered") or 0),
    )
