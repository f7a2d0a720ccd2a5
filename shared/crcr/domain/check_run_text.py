"""The upstream check runs' fields as the relay writes them (docs/contracts.md): titles, times and summary Markdown."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from crcr.domain import failed_tests
from crcr.domain.checks import DONE_STATES, Rollup, latest_attempts
from crcr.domain.ids import NO_RUN
from crcr.domain.markdown import known_links
from crcr.domain.planning import NO_MATCHING_FILES
from crcr.domain.text import shown
from crcr.domain.verdicts import VERDICT_MEANING

MAX_SUMMARY = 65_535  # GitHub's limit on output.summary


class Reported(Protocol):
    """What a check run shows of a recorded job (crcr.app.ports.jobs.JobRecord)."""

    @property
    def run_id(self) -> str: ...
    @property
    def run_attempt(self) -> int: ...
    @property
    def job_name(self) -> str: ...
    @property
    def workflow_name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def conclusion(self) -> str | None: ...
    @property
    def url(self) -> str: ...
    @property
    def repo(self) -> str: ...
    @property
    def head_sha(self) -> str: ...
    @property
    def pr(self) -> int | None: ...
    @property
    def dispatched_at(self) -> float: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def completed_at(self) -> float | None: ...
    @property
    def callback_payload(self) -> str: ...
    @property
    def triage(self) -> str: ...
    @property
    def verdict(self) -> str | None: ...
    @property
    def known_issues(self) -> str: ...
    @property
    def failed_tests(self) -> str: ...
    @property
    def reason(self) -> str: ...


class Dispatched(Protocol):
    """What the repository's check run shows of its dispatch (crcr.app.ports.ledger.LedgerRow)."""

    @property
    def repo(self) -> str: ...
    @property
    def head_sha(self) -> str | None: ...
    @property
    def pr(self) -> int | None: ...


def iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts is not None else None


def _tests(body: dict[str, Any]) -> str | None:
    results = body.get("test_results") or (body.get("workflow") or {}).get("test_results")
    if not isinstance(results, dict):
        return None
    return (
        f"{results.get('passed', 0)} passed, {results.get('failed', 0)} failed, "
        f"{results.get('skipped', 0)} skipped of {results.get('total', 0)}"
    )


def _triage_line(job: Reported) -> str | None:
    """The downstream's own reading of the failure: advice, shown as theirs."""
    if not job.triage:
        return None
    triage = json.loads(job.triage)
    line = f"The downstream's triage (advice, not a gate): {triage['category']}, {triage['confidence']} confidence"
    suspected = triage.get("suspected_upstream") or {}
    if suspected.get("pr"):
        line += f"; suspects upstream PR #{suspected['pr']}"
    if suspected.get("commit"):
        line += f"; suspects upstream commit {suspected['commit']}"
    return f"{line}. {triage['summary']}"


def _failing_tests(job: Reported) -> str | None:
    """The failing tests as the downstream named them (the first 50 recorded, messages cut), as a Markdown list."""
    tests = failed_tests.parse(job.failed_tests)
    if not tests:
        return None
    lines = ["Failing tests:"]
    for test in tests[:20]:
        name = f"{test['classname']}.{test['name']}" if test.get("classname") else test["name"]
        line = f"- `{shown(name)[:300].replace('`', '')}`"
        if isinstance(test.get("duration"), int | float):
            line += f" ({test['duration']:.1f} s)"
        if test.get("message"):
            line += ": " + " ".join(shown(str(test["message"])).split())[:500]
        lines.append(line)
    if len(tests) > 20:
        lines.append(f"- … and {len(tests) - 20} more")
    return "\n".join(lines)


def _summary(job: Reported) -> str:
    body: dict[str, Any] = json.loads(job.callback_payload)
    lines = [f"**{job.repo}** · {job.workflow_name} / {job.job_name} · {job.conclusion or job.state}"]
    if job.verdict:
        lines.append(f"Verdict: **{job.verdict}** ({VERDICT_MEANING.get(job.verdict, '')})")
        if job.known_issues:
            lines.append(f"Known upstream: {known_links(job.known_issues)}")
    if (triage := _triage_line(job)) is not None:
        lines.append(triage)
    tests = _tests(body)
    if tests:
        lines.append(f"Tests: {tests}")
    if (failing := _failing_tests(job)) is not None:
        lines.append(failing)
    if job.started_at is not None:
        lines.append(f"Queue time: {job.started_at - job.dispatched_at:.0f} s")
        if job.completed_at is not None:
            lines.append(f"Execution time: {job.completed_at - job.started_at:.0f} s")
    if job.url:
        lines.append(f"Run: {job.url}")
    artifact = body.get("artifact_url")
    if isinstance(artifact, str):
        lines.append(f"Artifacts: {artifact}")
    summary = body.get("summary")
    if isinstance(summary, str) and summary:
        lines += ["", shown(summary)]  # the downstream's Markdown, without control or bidirectional characters
    return "\n\n".join(lines)[:MAX_SUMMARY]


def external_id(repo: str, run_id: str, pr: int | None) -> str:
    return f"{repo}:{run_id}:{pr if pr is not None else ''}"


def check_run_fields(job: Reported, name: str) -> dict[str, Any]:
    """A job's own check run, as its latest recorded attempt stands."""
    status = "completed" if job.state in DONE_STATES else "in_progress"
    fields: dict[str, Any] = {
        "name": name,
        "head_sha": job.head_sha,
        "status": status,
        "external_id": external_id(job.repo, job.run_id, job.pr),
        "output": {"title": f"{job.repo}: {job.conclusion or job.state}", "summary": _summary(job)},
    }
    if job.url:
        fields["details_url"] = job.url
    if job.started_at is not None:
        fields["started_at"] = iso(job.started_at)
    if status == "completed":
        fields["conclusion"] = job.conclusion or "timed_out"
        fields["completed_at"] = iso(job.completed_at or job.started_at or job.dispatched_at)
    return fields


def _job_line(job: Reported) -> str:
    line = f"- {job.workflow_name} / {job.job_name}: **{job.conclusion or job.state}**"
    if job.verdict:
        line += f" ({job.verdict})"
    tests = _tests(json.loads(job.callback_payload))
    if tests:
        line += f" · {tests}"
    if job.url:
        line += f" · [run]({job.url})"
    return line


def repo_check_fields(row: Dispatched, jobs: Sequence[Reported], state: Rollup, name: str) -> dict[str, Any]:
    """The repository's check run for one dispatch, its jobs rolled up."""
    repo = row.repo
    latest = latest_attempts(jobs)
    word = state.conclusion or ("dispatched" if state.status == "queued" else "running")
    lines = [f"**{repo}** · {word}"]
    if state.status == "queued":
        lines.append("Dispatched; waiting for the first job to start.")
    elif not latest:
        reasons = [j.reason for j in jobs if not j.job_name and j.state == "not_started" and j.reason]
        lines.append(reasons[0] if reasons else "No job of this dispatch started before the start timeout.")
    else:
        lines.append("\n".join(_job_line(j) for j in latest))
    first = latest[0] if latest else None
    fields: dict[str, Any] = {
        "name": name,
        "head_sha": row.head_sha,
        "status": state.status,
        "external_id": external_id(repo, first.run_id if first else NO_RUN, row.pr),
        "output": {"title": f"{repo}: {word}", "summary": "\n\n".join(lines)[:MAX_SUMMARY]},
    }
    if first is not None and first.url:
        fields["details_url"] = first.url
    starts = [j.started_at for j in latest if j.started_at is not None]
    if starts:
        fields["started_at"] = iso(min(starts))
    if state.status == "completed":
        fields["conclusion"] = state.conclusion
        ends = [j.completed_at for j in jobs if j.completed_at is not None]
        fields["completed_at"] = iso(max(ends) if ends else None)
    return fields


def cancelled_fields(name: str, newer: str, now: float) -> dict[str, Any]:
    """A check run still queued on a commit the PR moved on from: completed as cancelled, naming the newer commit."""
    repo = name.removeprefix("crcr/")
    return {
        "name": name,
        "status": "completed",
        "conclusion": "cancelled",
        "completed_at": iso(now),
        "output": {
            "title": f"{repo}: superseded by {newer[:12]}",
            "summary": f"A newer commit, {newer}, was pushed to the pull request before any job of "
            f"{repo} started on this one. Its results are reported on the newer commit.",
        },
    }


def skipped_fields(name: str, repo: str, head_sha: str, pr: int | None, reason: str, now: float) -> dict[str, Any]:
    """The required check of a repository the change did not concern, concluded skipped with the reason."""
    at = iso(now)
    why = "no file it watches changed (its paths filter)" if reason == NO_MATCHING_FILES else reason
    return {
        "name": name,
        "head_sha": head_sha,
        "status": "completed",
        "conclusion": "skipped",
        "started_at": at,
        "completed_at": at,
        "external_id": external_id(repo, NO_RUN, pr),
        "output": {
            "title": f"{repo}: skipped, no matching files",
            "summary": f"**{repo}** was not dispatched for this commit: {why}.",
        },
    }
