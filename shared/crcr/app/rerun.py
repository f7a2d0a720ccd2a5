"""Re-runs from the upstream Checks tab: rerun-failed-jobs of the downstream run behind a crcr check run.

Only check runs the relay itself wrote (the id it stored for that commit and name), only L3+
repositories, each downstream run once per request, and a run still running is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from crcr.app.ports import AllowlistProvider, CheckRunStore, Metrics, Reruns
from crcr.domain.checks import parse_external_id
from crcr.domain.ids import NO_RUN, is_github_run
from crcr.domain.levels import Level


@dataclass(frozen=True)
class RerunDeps:
    github: Reruns
    store: CheckRunStore
    allowlist: AllowlistProvider
    metrics: Metrics


def _ours(upstream: str, head_sha: str, check_run_id: int, name: str, deps: RerunDeps) -> bool:
    known, _ = deps.store.get_check(upstream, head_sha, name)
    return known is not None and known.check_run_id == check_run_id


def _rerun(repo: str, run_id: str, deps: RerunDeps) -> str:
    entry = deps.allowlist.current().get(repo)
    if entry is None or entry.level < Level.L3:
        return "not_l3"
    if run_id == NO_RUN:
        return "never_started"  # a dispatch the sweeper timed out has no run to re-run
    if not is_github_run(run_id):
        return "not_github"  # a Buildkite build: the Actions API cannot re-run it
    if deps.github.run_status(repo, run_id) != "completed":
        return "running"
    return "requested" if deps.github.rerun_failed_jobs(repo, run_id) else "not_retryable"


def rerun_check_run(upstream: str, head_sha: str, check_run_id: int, name: str, external_id: str | None,
                    deps: RerunDeps) -> str:  # fmt: skip
    target = parse_external_id(external_id)
    if target is None or not name.startswith("crcr/") or not _ours(upstream, head_sha, check_run_id, name, deps):
        deps.metrics.count("RerunIgnored", reason="not_ours")
        return "not_ours"
    outcome = _rerun(*target, deps)
    deps.metrics.count("RerunRequested" if outcome == "requested" else "RerunIgnored", reason=outcome)
    return outcome


def rerun_check_suite(upstream: str, head_sha: str, suite_id: int, deps: RerunDeps) -> dict[str, str]:
    """Each distinct downstream run behind the suite's crcr check runs, once."""
    runs: dict[tuple[str, str], str] = {}
    for check_run_id, name, external_id in deps.github.suite_check_runs(upstream, suite_id):
        target = parse_external_id(external_id)
        if target is None or target in runs or not name.startswith("crcr/"):
            continue
        if _ours(upstream, head_sha, check_run_id, name, deps):
            runs[target] = ""
    outcomes = {}
    for repo, run_id in runs:
        outcome = _rerun(repo, run_id, deps)
        deps.metrics.count("RerunRequested" if outcome == "requested" else "RerunIgnored", reason=outcome)
        outcomes[f"{repo}:{run_id}"] = outcome
    return outcomes
