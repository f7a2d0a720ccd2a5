"""Sections 6 and 8: the upstream installation's check-run and PR comment writes, setting against setting."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from typing import Any

import harness as h

UPSTREAM_INSTALLATION = 1
COMMENT_PERMISSIONS = {
    "actions": "write", "checks": "write", "contents": "write", "issues": "write", "pull_requests": "write",
    "metadata": "read",
}  # fmt: skip
ENV = {"CRCR_CALLBACK_RATE_PER_MIN": "100000", "CRCR_CHECK_SETTLE_S": "2", "CRCR_PR_COMMENT": "on"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check-events", type=int, default=2, help="pull requests in the check-run write run")
    parser.add_argument("--check-targets", type=int, default=3, help="L4 repositories in that run")
    parser.add_argument("--check-jobs", type=int, default=2, help="jobs per repository in that run")
    parser.add_argument("--comment-events", type=int, default=2, help="pull requests in the PR comment run")
    parser.add_argument("--comment-targets", type=int, default=3, help="L4 repositories in that run")
    parser.add_argument("--comment-jobs", type=int, default=2, help="jobs per repository in that run")


def _open_prs(r: h.Relay, events: int, timeout_s: float, *, comments: bool) -> list[int]:
    """`events` PRs, one commit each, dispatched to every target (the comment's permissions for `comments`)."""
    permissions = {"permissions": COMMENT_PERMISSIONS} if comments else {}
    r.github.install(h.UPSTREAM, installation_id=UPSTREAM_INSTALLATION, repo_id=h.UPSTREAM_ID, **permissions)
    prs = []
    for n in range(events):
        body, pr, head = h.pr_event(n)
        r.github.add_commit(h.UPSTREAM, head)
        if comments:
            r.github.add_issue(h.UPSTREAM, pr)
        status, _, _ = r.post(body)
        if status != 202:
            raise RuntimeError(f"webhook answered {status}")
        prs.append(pr)
    if not r.wait_for_dispatches(events * len(r.repos), timeout_s, settle_s=0.0):
        raise RuntimeError("dispatches did not all land")
    return prs


def _jobs_report(r: h.Relay, jobs: int, timeout_s: float, conclusion: Any) -> int:
    """Every dispatched job reports `in_progress`, then (ChecksQueue empty) `completed` with `conclusion(job)`."""
    reports = [(i, ticket, f"job-{j}", 100 + k) for i, k, ticket in r.tickets() for j in range(jobs)]
    time.sleep(1.0)  # the dispatcher's requests for the repositories' queued runs reach the queue
    for i, ticket, job, run_id in reports:
        r.report(i, ticket, job, run_id, "in_progress")
    time.sleep(1.0)  # the results stream hands the changes to the reporter, which asks the writer
    r.wait_idle(timeout_s)
    for i, ticket, job, run_id in reports:
        r.report(i, ticket, job, run_id, "completed", conclusion(job))
    time.sleep(1.0)
    r.wait_idle(timeout_s)
    return 2 * len(reports)


def checkruns_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Section 6: `check_runs: per_job` against `per_repo`, each on a fresh stack, every job passing."""
    events, targets, jobs, timeout_s = args.check_events, args.check_targets, args.check_jobs, max(args.timeout, 240)
    results: dict[str, Any] = {}
    for mode in ("per_job", "per_repo"):
        bench.out.say(f"   {mode}: {events} events x {targets} L4 repositories x {jobs} jobs")
        before = Counter(h.TOTALS)
        settings = f"check_runs: {mode}"
        with h.relay(
            bench.key, targets, installations=targets, level="L4", repo_settings=settings, oidc=True, env=ENV
        ) as r:
            t0 = time.perf_counter()
            _open_prs(r, events, timeout_s, comments=False)
            _jobs_report(r, jobs, timeout_s, lambda job: "success")
            runs = [c for c in r.github.check_runs(h.UPSTREAM) if c["name"].count("/") == 2]
            finished = len(runs) == events * targets and all(c["status"] == "completed" for c in runs)
            elapsed = time.perf_counter() - t0
            writes = h.upstream_writes(r.github, "check-runs")
            runs = r.github.check_runs(h.UPSTREAM)
        kinds = Counter(q.method for q in writes)
        results[mode] = {
            "setting": mode, "events": events, "repositories_per_event": targets, "jobs_per_repository": jobs,
            "all_completed": finished, "check_runs": len(runs),
            "writes": {"total": len(writes), "create": kinds["POST"], "update": kinds["PATCH"]},
            "refused_writes": sum(1 for q in writes if (q.status or 0) >= 400),
            "writes_per_event": round(len(writes) / events, 2),
            "writes_per_repository_per_commit": round(len(writes) / (events * targets), 2),
            "relay_metrics": h.metrics_delta(before, ("CheckRun",)), "elapsed_s": round(elapsed, 1),
        }  # fmt: skip
    results["method"] = f"{events} PR events x {targets} L4 repositories x {jobs} jobs, as in section 8, all passing"
    return {"check_run_writes": results}


def _checks_row(image: dict[str, Any]) -> str:
    """Whose row a write was: the check-run flow's (check run or pass, comment, pacing, a share) or another's."""
    pk, sk = str((image.get("pk") or {}).get("S", "")), str((image.get("sk") or {}).get("S", ""))
    if pk.startswith("CHECK#"):
        return "check_run"
    if pk.startswith("PACE#"):
        return (
            "upstream_pacing" if pk == f"PACE#{UPSTREAM_INSTALLATION}" else "shares" if sk == "SHARE" else "other.PACE"
        )
    return "comment" if pk.startswith("PR#") and sk == "COMMENT" else "other." + pk.split("#", 1)[0]


def _checks_function(work: h.FunctionWork, taken: dict[str, Any], dispatches: int, writes: int, asks: int) -> dict:
    """The check-run writer's own work per L4 dispatch (ChecksFunction's and DispatchedFunction's) and the write units
    of the flow's rows, whoever wrote them; per upstream write, its AWS calls with the reporter's `asks` for a pass,
    and the ChecksQueue messages it handled."""
    calls = work.calls
    mine = {row: n for row, n in taken["by_row"].items() if not row.startswith("other.")}
    written = sum(v for row, v in taken["writes"].items() if not row.startswith("other."))
    records, n = max(1, work.records), max(1, dispatches)
    # Every write ChecksFunction asks for bills its units, those its condition refuses too (which leave no stream
    # record): the flow's units are at least its write calls at the units a write of these rows costs.
    write_calls = sum(v for op, v in calls.items() if op.split(".")[-1] in ("PutItem", "UpdateItem", "DeleteItem"))
    units = max(sum(mine.values()), write_calls * sum(mine.values()) / max(1, written))
    return {
        "invocations": work.invocations, "records": work.records, "records_per_dispatch": round(work.records / n, 3),
        "records_by_source_per_dispatch": {k: round(v / n, 3) for k, v in sorted(work.records_by_source.items())},
        "invocations_per_dispatch": round(work.invocations / n, 3),
        "aws_calls": dict(sorted((k, v) for k, v in calls.items() if v)),
        "aws_calls_per_record": {k: round(v / records, 3) for k, v in sorted(calls.items()) if v},
        "cpu_ms_per_record": round(work.cpu_s * 1000 / records, 2),
        "wall_ms_per_invocation": round(work.wall_s * 1000 / max(1, work.invocations), 1),
        "write_units_in_stream": mine, "write_calls_per_dispatch": round(write_calls / n, 3),
        "write_units_per_dispatch": round(units / n, 3), "upstream_writes_per_dispatch": round(writes / n, 3),
        "reporter_asks_per_dispatch": round(asks / n, 3),
        "aws_calls_per_upstream_write": round((sum(calls.values()) + asks) / max(1, writes), 2),
        "checks_queue_messages_per_upstream_write": round(work.records_by_source.get("aws:sqs", 0) / max(1, writes), 2),
    }  # fmt: skip


def comment_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Section 8 and the late label in a process of their own, and side by side the same at `--dispatch-baseline`."""
    argv = [f"--comment-{k}={getattr(args, f'comment_{k}')}" for k in ("events", "targets", "jobs")]
    result = h.in_own_process(__file__, argv)
    if result.get("skipped"):
        raise RuntimeError(f"section 8: {result['reason']}")
    if ref := getattr(args, "dispatch_baseline", None):
        bench.out.say(f"   and at {ref}, in a process of its own")
        at = h.at_baseline(ref, lambda _, code: h.in_own_process(__file__, argv, code))
        for part in ("pr_comment", "late_label"):
            result[part]["baseline"] = {k: v for k, v in at.items() if k not in result} | at.get(part, {})
    return result


def late_label(bench: h.Bench, timeout_s: float) -> dict[str, Any]:
    """A `ciflow/crcr/gpu` label added after the L3 job finished, while the commit's L4 run settles (the default 60 s):
    seconds from the label's webhook to each of the L3 repository's check runs on GitHub."""
    l3, l4 = "bench-org-0/repo-0", "bench-org-1/repo-1"  # h.relay's two targets
    allowlist = f"L3:\n  gpu:\n    {l3}: [oncall]\nL4:\n  - {l4}\n"
    env = {"CRCR_CALLBACK_RATE_PER_MIN": "100000"}
    bench.out.say("   a late label: one PR dispatched to an L3 and an L4 repository, labelled once both jobs finished")
    with h.relay(bench.key, 2, installations=2, allowlist=allowlist, oidc=True, env=env) as r:
        _open_prs(r, 1, timeout_s, comments=False)
        for i, _, ticket in r.tickets():
            r.report(i, ticket, "build", 100 + i, "in_progress")
            r.report(i, ticket, "build", 100 + i, "completed", "success")

        def runs(prefix: str) -> dict[str, str]:
            return {c["name"]: c["status"] for c in r.github.check_runs(h.UPSTREAM) if c["name"].startswith(prefix)}

        h.wait_until(lambda: runs(f"crcr/{l4}/").get(f"crcr/{l4}/CI/build") == "completed", timeout_s)
        time.sleep(2.0)  # that pass has gone: it waits for the L4 run to settle
        doc = json.loads(h.pr_event(0)[0]) | {"action": "labeled", "label": {"name": "ciflow/crcr/gpu"}}
        doc["pull_request"] |= {"labels": [{"name": "ciflow/crcr/gpu"}], "updated_at": "2026-11-29T18:30:00Z"}
        t0, seen = time.perf_counter(), {}
        r.post(json.dumps(doc).encode())

        def mirrored() -> bool:
            for name in runs(f"crcr/{l3}"):
                seen.setdefault(name, round(time.perf_counter() - t0, 1))
            return len(seen) == 2

        h.wait_until(mirrored, 120.0, every_s=0.1)
    return {
        "seconds_to_check_run": seen, "mirrored_s": max(seen.values()) if len(seen) == 2 else None,
        "method": f"{l3} (L3, gpu) and {l4} (L4) dispatched for one PR, each job in_progress then completed; once the "
        "L4 job's check run completed (its repository's run settling 60 s), the PR labelled ciflow/crcr/gpu: seconds "
        "from that webhook's POST to each L3 check run's first appearance on the GitHub double",
    }  # fmt: skip


def comment_measure(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """The upstream's writes per PR event with the PR comment on (job 0 of every repository fails, so every PR gets a
    comment), and ChecksFunction's own cost per L4 dispatch; with the comment off, the writes are section 6's."""
    events, targets, jobs = args.comment_events, args.comment_targets, args.comment_jobs
    timeout_s = max(getattr(args, "timeout", 0), 120)
    bench.out.say(f"   {events} events x {targets} L4 repositories x {jobs} jobs, one failing")
    before = Counter(h.TOTALS)
    with h.relay(bench.key, targets, installations=targets, level="L4", oidc=True, env=ENV) as r:
        work = h.FunctionWork(r.stack, ("ChecksFunction", "DispatchedFunction"), bench.aws)
        units = r.units("StateTable", row_of=_checks_row)["StateTable"]
        units.take()
        t0 = time.perf_counter()
        prs = _open_prs(r, events, timeout_s, comments=True)
        callbacks = _jobs_report(r, jobs, timeout_s, lambda job: "failure" if job == "job-0" else "success")
        kinds = Counter(
            f"{'check_run' if '/check-runs' in q.path else 'comment'}_{q.method}"
            for q in h.upstream_writes(r.github)
            if "/check-runs" in q.path or "/comments" in q.path
        )
        comments = [len([c for c in r.github.comments(h.UPSTREAM, pr) if c["performed_via_github_app"]]) for pr in prs]
        elapsed = time.perf_counter() - t0
        asks = h.metrics_delta(before, ("CheckPassRequested",)).get("CheckPassRequested", 0)  # the reporter's bookings
        flow = _checks_function(work, units.take(), events * targets, sum(kinds.values()), asks)
    on = {
        "setting": "on", "events": events, "repositories_per_event": targets, "jobs_per_repository": jobs,
        "callbacks": callbacks, "writes": dict(sorted(kinds.items())),
        "writes_per_event": round(sum(kinds.values()) / events, 2),
        "comment_writes_per_event": round((kinds["comment_POST"] + kinds["comment_PATCH"]) / events, 2),
        "comments_per_pr": sorted(set(comments)), "relay_metrics": h.metrics_delta(before, ("PrComment", "CheckRun")),
        "elapsed_s": round(elapsed, 1), "checks_function": flow,
    }  # fmt: skip
    method = f"{events} PR events x {targets} L4 repositories x {jobs} jobs, job-0 failing: as section 6, comment on"
    return {"pr_comment": {"per_event": {"on": on}, "method": method}, "late_label": late_label(bench, timeout_s)}


if __name__ == "__main__":
    raise SystemExit(h.child_main(add_arguments, comment_measure))
