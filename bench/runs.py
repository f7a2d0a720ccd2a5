"""Sections 12 and 14: GitHub's record of the relay's runs (events dropped, a run reconciled), the inbound door."""

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
    parser.add_argument("--inbound-events", type=int, default=100, help="section 14's callbacks and run events")


def _run_event(repo: str, i: int, **run: Any) -> dict[str, Any]:
    return {
        "action": "completed",
        "workflow_run": {"id": 880_000 + i, "name": "CI", "display_title": "a commit", "event": "push"} | run,
        "workflow_job": {"id": 990_000 + i, "run_id": 880_000 + i, "name": "build", "status": "completed"},
        "repository": {"full_name": repo, "id": h.REPO_ID_BASE},
    }


def runs_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """One stack, two L2 targets whose runs carry the dispatch id (the double plays them and sends `workflow_run`)."""
    results: dict[str, Any] = {}
    with h.relay(bench.key, 2, installations=2, level="L2", env={"CRCR_RUN_REPORT_SETTLE_S": "0"}) as r:
        r.github.set_webhook(f"{r.stack.url}/webhook", r.stack.secrets["webhook_secret"])
        jobs = tuple(f"job-{j}" for j in range(args.run_jobs))
        for repo in r.repos:
            r.github.set_dispatch_workflow(repo, h.run_name, jobs=jobs)
        # Dropped at the door: a downstream's own runs and jobs, counted on the webhook function's own threads.
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


def inbound_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Section 14 in a process of its own, and the same at `--dispatch-baseline` (`baseline`)."""
    argv = [f"--inbound-events={args.inbound_events}"]
    result = {"now": h.in_own_process(__file__, argv)}
    if ref := getattr(args, "dispatch_baseline", None):
        bench.out.say(f"   and at {ref}, in a process of its own")
        result["baseline"] = h.at_baseline(ref, lambda _, code: h.in_own_process(__file__, argv, code))
    for code, row in result.items():
        if not row.get("skipped"):
            cb, ev, out = row["callback"], row["run_event"], row["outsider_run_event"]
            bench.out.say(
                f"  {code}: callback {cb['aws_calls']} AWS calls {cb['cpu_ms']} ms CPU; run event "
                f"{ev['webhook']['cpu_ms'] + ev['runs_worker']['cpu_ms']:.2f} ms CPU; outsider's "
                f"{out['runs_queue_messages']} RunsQueue messages"
            )
    return {"inbound_door": result}


def _per(work: h.FunctionWork, since: tuple[Counter[str], float], n: int) -> dict[str, float]:
    calls = sum((Counter(work.calls) - since[0]).values())
    return {"aws_calls": round(calls / n, 3), "cpu_ms": round((work.cpu_s - since[1]) * 1000 / n, 3)}


def inbound_measure(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """One L2 target dispatched once: `n` warm callbacks, `n` `workflow_run` events of its own titled runs and `n` an
    outsider sends with the same title; each function's AWS calls and CPU per report or event, after a warm-up."""
    n = args.inbound_events
    env = {"CRCR_CALLBACK_RATE_PER_MIN": "100000", "CRCR_RUN_REPORT_SETTLE_S": "0"}
    with h.relay(bench.key, 1, installations=1, level="L2", oidc=True, env=env) as r:
        repo, aws = r.repos[0], bench.aws
        r.github.set_webhook(f"{r.stack.url}/webhook", r.stack.secrets["webhook_secret"])
        r.github.set_dispatch_workflow(repo, h.run_name, jobs=("build",))
        r.post(h.event_body())
        h.wait_until(lambda: r.github.runs_of(repo), 90.0, 0.1)
        [run], ticket = r.github.runs_of(repo), r.github.dispatches(repo)[0]["client_payload"]["ticket"]
        callbacks = h.FunctionWork(r.stack, "CallbackFunction", aws)
        r.report(0, ticket, "warm-up", run["id"], "in_progress")  # builds the function (section 5's cold start)
        since = (Counter(callbacks.calls), callbacks.cpu_s)
        for i in range(n):
            r.report(0, ticket, f"job-{i}", run["id"], "in_progress")
        result: dict[str, Any] = {"callback": _per(callbacks, since, n)}
        hooks, worker = h.FunctionWork(r.stack, "WebhookFunction", aws), h.FunctionWork(r.stack, "RunsFunction", aws)
        outsider = {"id": 66_000, "full_name": "outsider/repo-0", "owner": {"id": 66}}
        for kind, who, installation in (("run_event", run["repository"], 7000), ("outsider_run_event", outsider, 66)):
            start = 990_000 if kind == "run_event" else 660_000
            for i in range(n + 1):  # the first warms the functions up (the door's first allowlist load)
                event = {"action": "in_progress", "repository": who, "installation": {"id": installation}}
                event["workflow_run"] = run | {"id": start + i, "status": "in_progress", "head_repository": who}
                r.post(json.dumps(event).encode(), "workflow_run", keep_alive=True)
                time.sleep(1.0 if i == 0 else 0.0)  # its queue message handled too, if it was queued
                if i == 0:
                    marks = (Counter(hooks.calls), hooks.cpu_s), (Counter(worker.calls), worker.cpu_s), worker.records
            time.sleep(2.0)  # what reached RunsQueue is handled by then (no settle time here)
            result[kind] = {
                "webhook": _per(hooks, marks[0], n),
                "runs_worker": _per(worker, marks[1], n),
                "runs_queue_messages": round((worker.records - marks[2]) / n, 3),
            }
        result["run_events_recorded"] = r.stack.status()["metrics"].get("RunEventRecorded", 0)  # each bound: n + 1
    return result


if __name__ == "__main__":
    raise SystemExit(h.child_main(add_arguments, inbound_measure))
