"""GitHub's own record of the runs the relay started: how a run is told to be the relay's, and how its jobs'
states read. Pure rules; the use case is crcr.app.runs."""

from __future__ import annotations

import re
from datetime import datetime

# A dispatch id (crcr.app.dispatch.dispatch_id: 32 lower-case hex) as the downstream's run-name carries it
# (`run-name: crcr ${{ github.event.action }} ${{ github.event.client_payload.dispatch_id }}`).
_DISPATCH_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
# The events of runs the relay can have started: the rest (push, schedule, pull_request...) are never its own.
RELAY_EVENTS = frozenset({"repository_dispatch", "workflow_dispatch"})
# GitHub's run actions, in the order a run attempt goes through them.
RUN_ACTIONS = ("requested", "in_progress", "completed")
# Who a job record's state comes from (JobRecord.source): "" the downstream's reports alone.
GITHUB = "github"  # GitHub's record of the run (its jobs listing) alone
BUILDKITE = "buildkite"  # Buildkite's record of the build (one read of it, by the sweeper) alone
# Jobs whose name starts so are report steps (examples/workflows/downstream.yml): GitHub lists them among the run's
# jobs, and the relay never records them as jobs of the downstream.
REPORT_JOB_PREFIX = "crcr report"


def with_report(source: str) -> str:
    """The source of a record the CI made and a report added its words to: `github+report`, `buildkite+report`."""
    return f"{source}+report"


def from_ci(source: str, fingerprint: str) -> bool:
    """A record the CI's own word made (GitHub's listing, Buildkite's build) and no completed report has added to."""
    return source in (GITHUB, BUILDKITE, with_report(GITHUB), with_report(BUILDKITE)) and fingerprint.startswith(
        (f"{GITHUB}:", f"{BUILDKITE}:")
    )


def is_report_job(name: str) -> bool:
    return name.strip().lower().startswith(REPORT_JOB_PREFIX)


# The relay's state for a dispatch GitHub started no run for: not a time-out, a configuration to fix.
NOT_STARTED = "not_started"


def dispatch_id_in(title: str | None) -> str | None:
    """The dispatch id a run's title carries, if exactly one: a title naming two ids binds to neither."""
    found = set(_DISPATCH_ID.findall(title or ""))
    return found.pop() if len(found) == 1 else None


def run_progress(attempt: int, action: str) -> int:
    """Orders a run's events: a later attempt, then requested < in_progress < completed. An event that does not
    move the run forward (a late in_progress after completed, a redelivery) changes nothing."""
    rank = RUN_ACTIONS.index(action) if action in RUN_ACTIONS else 0
    return attempt * len(RUN_ACTIONS) + rank


def timestamp(text: str | None) -> float | None:
    """GitHub's ISO 8601 time (`2026-02-01T10:00:00Z`) as epoch seconds; None for none or a malformed one."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def not_started_reason(repo: str, event_type: str, minutes: int, ci_event: str = "repository_dispatch") -> str:
    """What a maintainer reads when GitHub created no run for a dispatch: what to look at, in order."""
    return (
        f"GitHub started no run in {repo} within {minutes} min of the dispatch: no workflow on its default branch "
        f"listens to `{ci_event}` type `{event_type}` (check `on: {ci_event}: types:`), or that workflow is "
        "disabled, or its file was removed"
    )


# A Buildkite job's final state as a job conclusion (buildkite.com/docs/apis/rest-api/builds: the jobs' `state`);
# a state not here is not final.
_BUILDKITE_FINAL = {
    "passed": "success",
    "failed": "failure",
    "timed_out": "timed_out",
    "canceled": "cancelled",
    "expired": "cancelled",  # no agent took it before its expiry
    "skipped": "skipped",
    "broken": "skipped",  # its step's condition kept it from running
    "not_run": "skipped",
}
# Build states after which nothing in the build changes any more.
BUILDKITE_BUILD_FINAL = frozenset({"passed", "failed", "canceled", "skipped", "not_run"})


def buildkite_conclusion(state: str, soft_failed: bool = False) -> str | None:
    """None while the job may still change; a soft failure (allowed to fail) is `neutral`."""
    conclusion = _BUILDKITE_FINAL.get(state)
    return "neutral" if conclusion == "failure" and soft_failed else conclusion
