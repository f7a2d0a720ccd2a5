"""Check-run use case: mirror a recorded job as a check run on the upstream commit (L3 with label, L4).

One check run per (head SHA, name): created once, then PATCHed forward, never back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from crcr.app.ports import CheckRunApi, CheckRunStore, JobRecord, Metrics, ResultsStore
from crcr.domain.checks import Known, check_run_name, should_write, wants_check_run

MAX_SUMMARY = 65_535  # GitHub's limit on output.summary


@dataclass(frozen=True)
class CheckDeps:
    api: CheckRunApi
    store: CheckRunStore
    metrics: Metrics
    results: ResultsStore | None = None  # to write the job's latest state, not the one in the stream record


class CheckRunRace(Exception):
    """Another writer updated the same check run meanwhile: process the record again."""


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts is not None else None


def _summary(job: JobRecord) -> str:
    body: dict[str, Any] = json.loads(job.callback_payload)
    lines = [f"**{job.repo}** · {job.workflow_name} / {job.job_name} · {job.conclusion or job.state}"]
    results = body.get("test_results") or (body.get("workflow") or {}).get("test_results")
    if isinstance(results, dict):
        lines.append(
            f"Tests: {results.get('passed', 0)} passed, {results.get('failed', 0)} failed, "
            f"{results.get('skipped', 0)} skipped of {results.get('total', 0)}"
        )
    if job.started_at is not None:
        lines.append(f"Queue time: {job.started_at - job.dispatched_at:.0f} s")
        if job.completed_at is not None:
            lines.append(f"Execution time: {job.completed_at - job.started_at:.0f} s")
    if job.url:
        lines.append(f"Run: {job.url}")
    elif job.state == "timed_out":
        lines.append("No job of this dispatch started before the start timeout.")
    artifact = body.get("artifact_url")
    if isinstance(artifact, str):
        lines.append(f"Artifacts: {artifact}")
    summary = body.get("summary")
    if isinstance(summary, str) and summary:
        lines += ["", summary]
    return "\n\n".join(lines)[:MAX_SUMMARY]


def check_run_fields(job: JobRecord, name: str) -> dict[str, Any]:
    status = "completed" if job.state in ("completed", "timed_out") else "in_progress"
    fields: dict[str, Any] = {
        "name": name,
        "head_sha": job.head_sha,
        "status": status,
        "external_id": f"{job.repo}:{job.run_id}:{job.pr if job.pr is not None else ''}",
        "output": {"title": f"{job.repo}: {job.conclusion or job.state}", "summary": _summary(job)},
    }
    if job.url:
        fields["details_url"] = job.url
    if job.started_at is not None:
        fields["started_at"] = _iso(job.started_at)
    if status == "completed":
        fields["conclusion"] = job.conclusion or "timed_out"
        fields["completed_at"] = _iso(job.completed_at or job.started_at or job.dispatched_at)
    return fields


def backfill(jobs: list[JobRecord], device: str, deps: CheckDeps) -> int:
    """A ciflow/crcr/<device> label added late: mirror the device's L3 jobs already reported on this head,
    as they stand (in progress or finished), without dispatching anything again."""
    count = 0
    for job in jobs:
        if job.level == 3 and (job.device or "").lower() == device.lower():
            sync_check_run(job, deps)
            count += 1
    return count


def sync_check_run(job: JobRecord, deps: CheckDeps) -> None:
    if not job.head_sha or job.delivery_id == "scheduled":
        return  # scheduled runs report on a commit, not on a PR's checks
    if job.level < 3:
        return
    if deps.results is not None:
        # Stream records can lag the table: a job that completed before its in_progress record is handled
        # is written once, as completed, and the completed record then finds nothing left to write.
        job = deps.results.get_job(job.dispatch_id, job.run_id, job.run_attempt, job.job_name) or job
    name = check_run_name(job.repo, job.workflow_name, job.job_name)
    known, version = deps.store.get_check(job.upstream, job.head_sha, name)
    if known is None:
        # A check run that exists keeps following its job even if the label is removed later (README).
        labels = deps.store.pr_labels(job.upstream, job.pr) if job.pr is not None and job.level == 3 else ()
        if not wants_check_run(job.level, job.device, labels):
            return
    fields = check_run_fields(job, name)
    if not should_write(known, fields["status"], fields.get("conclusion"), job.run_attempt):
        return
    if known is None:
        check_run_id = deps.api.create_check_run(job.upstream, fields)
        deps.metrics.count("CheckRunCreated")
    else:
        check_run_id = known.check_run_id
        deps.api.update_check_run(job.upstream, check_run_id, {k: v for k, v in fields.items() if k != "head_sha"})
        deps.metrics.count("CheckRunUpdated")
    if not deps.store.save_check(
        job.upstream,
        job.head_sha,
        name,
        Known(check_run_id, fields["status"], fields.get("conclusion"), job.run_attempt),
        version,
    ):
        raise CheckRunRace(name)
