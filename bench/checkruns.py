"""Upstream check-run writes per event, `check_runs: per_job` against `per_repo` (see bench/README.md, section 6).

Every write goes through the one upstream installation, whose budget GitHub caps (about 80 content-creating
requests a minute and 500 an hour). For each setting, a fresh stack with `targets` L4 repositories gets
`events` pull requests (one commit each); every dispatched repository reports `jobs` jobs through
POST /callback: each job `in_progress`, then (once ChecksQueue is empty, so those writes have landed, as
they would while a real job runs) `completed`. The bench counts the POSTs and PATCHes the GitHub double
received on the upstream's check-runs endpoints.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from harness import REPO_ID_BASE, UPSTREAM, OutputCapture, Relay, event_body, metrics_delta, relay

from crcr.adapters.observability import TOTALS
from tests.doubles.oidc_issuer import OidcIssuer

AUDIENCE = "crcr"
PYTORCH_PR_EVENTS_PER_DAY = 1000  # the order of magnitude in the issue
HOURLY_BUDGET = 500  # GitHub: content-creating requests per hour for one identity


def _event(n: int) -> tuple[bytes, str]:
    doc = json.loads(event_body())
    head = f"{n + 1:040x}"
    doc["number"] = doc["pull_request"]["number"] = 9000 + n
    doc["pull_request"]["head"]["sha"] = head
    return json.dumps(doc).encode(), head


def _writes(r: Relay) -> list[Any]:
    prefix = f"/repos/{UPSTREAM}/check-runs"
    return [q for q in r.double.requests if q.path.startswith(prefix) and q.method in ("POST", "PATCH")]


def _checks_queue_depth(r: Relay) -> int:
    """Messages waiting, delayed (paced or settling) or in flight on ChecksQueue."""
    attrs = r.stack.client("sqs").get_queue_attributes(
        QueueUrl=r.stack.queue_urls["ChecksQueue"],
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return sum(int(v) for v in attrs.values())


def _wait_idle(r: Relay, timeout_s: float) -> bool:
    """Until the check-run writer has nothing left: its queue empty twice in a row, a second apart."""
    deadline = time.monotonic() + timeout_s
    empty = 0
    while time.monotonic() < deadline:
        empty = empty + 1 if _checks_queue_depth(r) == 0 else 0
        if empty >= 2:
            return True
        time.sleep(1.0)
    return False


def _one_setting(
    key: Any, mode: str, *, events: int, targets: int, jobs: int, settle_s: int, timeout_s: float
) -> dict[str, Any]:
    before = Counter(TOTALS)
    with OidcIssuer() as issuer:
        env = {
            "CRCR_OIDC_ISSUER": issuer.url,
            "CRCR_OIDC_AUDIENCE": AUDIENCE,
            "CRCR_CALLBACK_RATE_PER_MIN": "100000",
            "CRCR_CHECK_SETTLE_S": str(settle_s),
        }
        with relay(
            key, targets, installations=targets, level="L4", extra_env=env, repo_settings=f"check_runs: {mode}"
        ) as r:
            r.double.install(UPSTREAM, installation_id=1, repo_id=65600975)
            t0 = time.perf_counter()
            for n in range(events):
                body, head = _event(n)
                r.double.add_commit(UPSTREAM, head)
                status, _, _ = r.post(body)
                if status != 202:
                    raise RuntimeError(f"webhook answered {status}")
            if not r.wait_for_dispatches(events * targets, timeout_s, settle_s=0.0):
                raise RuntimeError("dispatches did not all land")
            reports = []
            for i, repo in enumerate(r.repos):
                for k, sent in enumerate(r.double.dispatches(repo)):
                    run_id = 100 + k
                    claims = {
                        "repository": repo,
                        "repository_id": REPO_ID_BASE + i,
                        "run_id": run_id,
                        "run_attempt": 1,
                        "job_workflow_ref": f"{repo}/.github/workflows/ci.yml@refs/heads/main",
                    }
                    for j in range(jobs):
                        reports.append((sent["client_payload"]["ticket"], claims, run_id, f"job-{j}"))

            def post(status: str) -> None:
                for ticket, claims, run_id, job in reports:
                    doc: dict[str, Any] = {
                        "schema_version": 1, "ticket": ticket, "status": status, "workflow_name": "CI",
                        "job_name": job, "run_id": run_id, "run_attempt": 1,
                        "url": f"https://github.com/{claims['repository']}/actions/runs/{run_id}",
                    }  # fmt: skip
                    if status == "completed":
                        doc["conclusion"] = "success"
                    code, _, reply = r.callback(json.dumps(doc).encode(), issuer.token(**claims))
                    if code != 200:
                        raise RuntimeError(f"callback answered {code}: {reply[:200]!r}")

            time.sleep(1.0)  # the dispatcher's requests for the repositories' queued runs reach the queue
            post("in_progress")
            time.sleep(1.0)  # the results stream hands the changes to the reporter, which asks the writer
            _wait_idle(r, timeout_s=timeout_s)
            post("completed")
            time.sleep(1.0)
            _wait_idle(r, timeout_s=timeout_s)
            repo_runs = events * targets
            runs = [c for c in r.double.check_runs(UPSTREAM) if c["name"].count("/") == 2]
            finished = len(runs) == repo_runs and all(c["status"] == "completed" for c in runs)
            elapsed = time.perf_counter() - t0
            writes = _writes(r)
            runs = r.double.check_runs(UPSTREAM)
    kinds = Counter(q.method for q in writes)
    per_event = len(writes) / events
    per_repo_commit = len(writes) / (events * targets)
    per_hour = per_event * PYTORCH_PR_EVENTS_PER_DAY / 24
    return {
        "setting": mode,
        "events": events,
        "repositories_per_event": targets,
        "jobs_per_repository": jobs,
        "all_completed": finished,
        "check_runs": len(runs),
        "writes": {"total": len(writes), "create": kinds["POST"], "update": kinds["PATCH"]},
        "refused_writes": sum(1 for q in writes if (q.status or 0) >= 400),
        "writes_per_event": round(per_event, 2),
        "writes_per_repository_per_commit": round(per_repo_commit, 2),
        "writes_per_hour_at_pytorch_volume": round(per_hour, 1),
        "repositories_within_hourly_budget": int(HOURLY_BUDGET / (per_repo_commit * PYTORCH_PR_EVENTS_PER_DAY / 24)),
        "relay_metrics": {k: v for k, v in metrics_delta(before).items() if k.startswith("CheckRun")},
        "elapsed_s": round(elapsed, 1),
    }


def checkrun_bench(
    key: Any, out: OutputCapture, *, events: int, targets: int, jobs: int, settle_s: int, timeout_s: float
) -> dict[str, Any]:
    results = {}
    for mode in ("per_job", "per_repo"):
        out.say(f"   {mode}: {events} events x {targets} L4 repositories x {jobs} jobs")
        results[mode] = _one_setting(
            key, mode, events=events, targets=targets, jobs=jobs, settle_s=settle_s, timeout_s=timeout_s
        )
    results["method"] = (
        f"{events} pull_request events (one commit each) x {targets} L4 repositories x {jobs} jobs; each job "
        "reports in_progress, then completed once the check-run writer's queue is empty (those writes landed); "
        "settle period "
        f"{settle_s} s; writes = POST/PATCH on /repos/{UPSTREAM}/check-runs at the GitHub double. "
        f"Hourly figure: {PYTORCH_PR_EVENTS_PER_DAY} PR events a day; budget {HOURLY_BUDGET} writes an hour."
    )
    return results
