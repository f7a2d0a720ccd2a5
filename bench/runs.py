"""Section 12: GitHub's record of the runs the relay started: what a downstream's run event costs when it is not the
relay's (dropped at the door), and what reconciling one completed run costs (its jobs read once, recorded)."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from typing import Any

import harness as h


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-drops", type=int, default=200, help="non-relay workflow_job/workflow_run deliveries")
    parser.add_argument("--run-jobs", type=int, default=4, help="jobs of each reconciled run")


def _run_event(repo: str, i: int, **run: Any) -> dict[str, Any]:
    return {
        "action": "completed",
        "workflow_run": {"id": 880_000 + i, "name": "CI", "display_title": "a commit", "event": "push"} | run,
        "workflow_job": {"id": 990_000 + i, "run_id": 880_000 + i, "name": "build", "status": "completed"},
        "repository": {"full_name": repo, "id": h.REPO_ID_BASE},
    }


def runs_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """One stack, two L2 targets whose workflow names its runs with the dispatch id (the double plays the runs and
    sends `workflow_run`, as GitHub does)."""
    results: dict[str, Any] = {}
    with h.relay(bench.key, 2, installations=2, level="L2", env={"CRCR_RUN_REPORT_SETTLE_S": "0"}) as r:
        r.github.set_webhook(f"{r.stack.url}/webhook", r.stack.secrets["webhook_secret"])
        jobs = tuple(f"job-{j}" for j in range(args.run_jobs))
        for repo in r.repos:
            r.github.set_dispatch_workflow(repo, h.run_name, jobs=jobs)
        # Dropped at the door: a busy downstream's own runs and jobs (push runs, every job event). Counted on the
        # webhook function's own threads: the sweeper and the pollers keep running beside it.
        for event in ("warm-up", "workflow_job", "workflow_run"):
            work = h.FunctionWork(r.stack, "WebhookFunction", bench.aws)
            for i in range(args.run_drops if event != "warm-up" else 1):
                r.post(json.dumps(_run_event(r.repos[0], i)).encode(), event, keep_alive=True)
            n = max(1, work.invocations)
            if event == "warm-up":  # the function's first build (its cold start) is section 5's
                continue
            results[f"dropped_{event}"] = {
                "deliveries": work.invocations,
                "aws_calls": round(sum(work.calls.values()) / n, 3),
                "cpu_ms": round(work.cpu_s * 1000 / n, 3),
            }
        # Reconciled: each target's run completes with no report at all; its jobs come from GitHub's listing.
        r.post(h.event_body())
        deadline = time.monotonic() + args.timeout
        h.wait_until(lambda: all(r.github.runs_of(repo) for repo in r.repos), args.timeout, 0.1)
        for repo in r.repos:
            r.github.start_run(repo, r.github.runs_of(repo)[0]["id"])
        r.github.wait_webhooks()
        time.sleep(2.0)  # the in_progress events bound (measured apart: only the completion is counted below)
        before, cpu, requests = Counter(bench.aws.counts), h.cpu_seconds(), len(r.github.requests)
        for repo in r.repos:
            r.github.finish_run(repo, r.github.runs_of(repo)[0]["id"], "success")
        want = len(r.repos) * len(jobs)
        ddb, table = r.stack.client("dynamodb"), r.stack.function_env["CRCR_RESULTS_TABLE"]
        h.wait_until(lambda: len(h.scan(ddb, TableName=table)) >= want, deadline - time.monotonic(), 0.2)
        time.sleep(2.0)  # the reporter's pushes and pages of those rows
        recorded = len(h.scan(ddb, TableName=table))
        listings = [q for q in r.github.requests[requests:] if "/attempts/" in q.path and q.path.endswith("/jobs")]
        runs = len(r.repos)
        results["reconciled_run"] = {
            "jobs_per_run": len(jobs),
            "jobs_recorded": recorded,
            "jobs_listings_per_run": round(len(listings) / runs, 3),
            "github_requests_per_run": round(len(r.github.requests[requests:]) / runs, 3),
            "aws_calls_per_run": h.calls_per(before, Counter(bench.aws.counts), runs, "run")["total_per_run"],
            "cpu_ms_per_run": round((h.cpu_seconds() - cpu) * 1000 / runs, 3),
            "note": "from GitHub's completed event to every job recorded, reported to the HUD and its pages",
        }
    d, w, rr = results["dropped_workflow_job"], results["dropped_workflow_run"], results["reconciled_run"]
    bench.out.say(f"  dropped at the door: workflow_job {d['aws_calls']} AWS calls, {d['cpu_ms']} ms CPU;")
    bench.out.say(f"  a push run's workflow_run {w['aws_calls']} AWS calls, {w['cpu_ms']} ms CPU")
    bench.out.say(f"  reconciled run of {rr['jobs_per_run']} jobs: {rr['jobs_listings_per_run']} jobs listing(s)")
    return {"runs": results}
