"""Job records as items of the results table, and back: the one place that knows an item's attributes and indexes."""

from __future__ import annotations

import json
from typing import Any

from crcr.adapters.table import RESULTS_TTL_S, attr_n, job_key
from crcr.app.ports.jobs import JobRecord
from crcr.domain.ids import repo_key

BY_REPO_INDEX = "by_repo"  # (repo_key, dispatched_at): every row, for a repository's history and health


def _opt_n(value: float | int | None) -> dict[str, Any]:
    return attr_n(value) if value is not None else {"NULL": True}


def _opt_s(value: str | None) -> dict[str, Any]:
    return {"S": value} if value else {"NULL": True}


def to_item(record: JobRecord) -> dict[str, Any]:
    """The item, with no attribute for a value the job does not have: an item past 1 KB bills twice in the table and
    in each index that projects it whole (a dozen empty attributes took a job's row there)."""
    item = _item(record)
    return {name: value for name, value in item.items() if value != {"NULL": True}}


def _item(record: JobRecord) -> dict[str, Any]:
    return (
        job_key(record.dispatch_id, record.run_id, record.run_attempt, record.job_name)
        | {
            "dispatch_id": {"S": record.dispatch_id},
            "run_id": {"S": record.run_id},
            "run_attempt": attr_n(record.run_attempt),
            "job_name": {"S": record.job_name},
            "workflow_name": {"S": record.workflow_name},
            "state": {"S": record.state},
            "conclusion": _opt_s(record.conclusion),
            "fingerprint": {"S": record.fingerprint},
            "url": {"S": record.url},
            "repo": {"S": record.repo},
            "repo_id": attr_n(record.repo_id),
            "level": attr_n(record.level),
            "delivery_id": {"S": record.delivery_id},
            "upstream": {"S": record.upstream},
            "head_sha": {"S": record.head_sha},
            "pr": _opt_n(record.pr),
            "device": _opt_s(record.device),
            "dispatched_at": attr_n(record.dispatched_at),
            "started_at": _opt_n(record.started_at),
            "completed_at": _opt_n(record.completed_at),
            "callback_payload": {"S": record.callback_payload},
            "event_type": _opt_s(record.event_type),
            "check_run_id": _opt_s(record.check_run_id),
            "reported_started_at": _opt_s(record.reported_started_at),
            "failure_kind": _opt_s(record.failure_kind),
            "triage": _opt_s(record.triage),
            "verdict": _opt_s(record.verdict),
            "verdict_baseline": _opt_s(record.verdict_baseline),
            "known_issues": _opt_s(record.known_issues),
            "ciflow": _opt_s(record.ciflow),
            "failed_tests": _opt_s(record.failed_tests),
            "source": _opt_s(record.source),
            "reported_conclusion": _opt_s(record.reported_conclusion),
            "reason": _opt_s(record.reason),
            "recheck_at": _opt_n(record.recheck_at),
            "head_key": {"S": f"{repo_key(record.upstream)}#{record.head_sha}"},
            **_baseline_key(record),
            "repo_key": {"S": repo_key(record.repo)},
            "version": attr_n(record.version),
            "expires_at": attr_n(int(record.completed_at or record.started_at or record.dispatched_at) + RESULTS_TTL_S),
        }
        | ({"unanswered": attr_n(record.unanswered)} if record.unanswered else {})
    )


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


def _baseline_key(record: JobRecord) -> dict[str, Any]:
    """Only a branch result (a push or a scheduled run, no PR) can be a baseline: only those carry the index's key."""
    if record.event_type not in BASELINE_EVENTS or record.pr is not None:
        return {}
    return {"baseline_key": {"S": baseline_key(record.repo, record.workflow_name, record.job_name)}}


def is_job_item(item: dict[str, Any]) -> bool:
    return str(item.get("sk", {}).get("S", "")).startswith("JOB#")


def from_item(item: dict[str, Any]) -> JobRecord:
    def num(name: str) -> float | None:
        return float(item[name]["N"]) if "N" in item.get(name, {}) else None

    def text(name: str) -> str | None:
        return item[name]["S"] if "S" in item.get(name, {}) else None

    pr = num("pr")
    return JobRecord(
        dispatch_id=item["dispatch_id"]["S"],
        run_id=item["run_id"].get("S") or item["run_id"]["N"],  # rows from before Buildkite hold a number
        run_attempt=int(item["run_attempt"]["N"]),
        job_name=item["job_name"]["S"],
        workflow_name=item["workflow_name"]["S"],
        state=item["state"]["S"],
        conclusion=text("conclusion"),
        fingerprint=text("fingerprint") or "",  # not projected into by_repo
        url=item["url"]["S"],
        repo=item["repo"]["S"],
        repo_id=int(item["repo_id"]["N"]),
        level=int(item["level"]["N"]),
        delivery_id=item["delivery_id"]["S"],
        upstream=item["upstream"]["S"],
        head_sha=item["head_sha"]["S"],
        pr=int(pr) if pr is not None else None,
        device=text("device"),
        dispatched_at=float(item["dispatched_at"]["N"]),
        started_at=num("started_at"),
        completed_at=num("completed_at"),
        callback_payload=text("callback_payload") or "",  # not projected into by_repo (up to 256 KiB)
        version=int(item["version"]["N"]),
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
