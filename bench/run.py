"""crcr benchmark: ingest acknowledgement latency vs allowlist size, GitHub requests per (event x target),
end-to-end throughput on the local stack, callback latency and OIDC verification cost (with requests to the
issuer's key set), upstream check-run writes, the reporter's cost per recorded change with the HUD summaries
on against off, the dispatcher's AWS calls and CPU per dispatch and its re-queues under a backlog, and cold-start
import time of each function. See bench/README.md.

    .venv/bin/python bench/run.py --out bench/results.json [--build]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import callbacks
import checkbudget
import checkruns
import coldstart
import comment
import dispatch
import pages
import reporter
import summary
from harness import (
    ROOT,
    AppKey,
    AwsCalls,
    OutputCapture,
    Relay,
    breakdown,
    cpu_seconds,
    event_body,
    log_summary,
    metrics_delta,
    relay,
    request_kind,
    summary_ms,
)
from write_units import StreamUnits, table_shapes

from crcr.adapters.observability import TOTALS

TARGET_COUNTS = (1, 10, 100)
METHOD = {
    "aws": "a moto_server process per stack, given to LocalStack as AWS_ENDPOINT_URL",
    "github": "tests/doubles/github_double.GitHubDouble in the bench process, one per stack",
    "stack": "crcr.local.stack.LocalStack(port=0), handlers in the bench process, 2 pollers per queue",
    "webhook": "examples/events/pull_request.opened.json, new X-GitHub-Delivery per POST, one connection per POST",
    "isolated": "pollers_per_queue=0: only the webhook function runs (in Lambda each function is its own process)",
    "with_fanout": "pollers on: planner and dispatcher run in the same process while the timed POSTs go in",
    "callback": "one L2 target dispatched once; tests/doubles/oidc_issuer.OidcIssuer as CRCR_OIDC_ISSUER; "
    "POST /callback with the dispatch's ticket and a fresh RS256 token, one connection per POST",
    "reporter": "functions/reporter/handler.py called by the bench with the records of each setting's own results "
    "table's stream (the changes and the verdicts written back), each batch to every setting in turn (HUD "
    "summaries off, on); no pollers; HUD push and check runs off",
    "dispatch": "warm: functions/dispatch/handler.py called by the bench with the dispatch queue's messages in batches "
    "of up to 10, the GitHub double in its own process, so the bench process's CPU is the relay's; backlog: every "
    "event planned first, then the dispatch queue drained by 2 pollers under CRCR_GITHUB_WRITE_RATES",
}
MAX_INSTALLATIONS = 10  # targets spread round-robin over at most this many App installations (orgs)
WARM_REQUESTS_TARGET = 1.3
REFERENCE_RELAY_REQUESTS = 4


# ---------------------------------------------------------------------------------------------------
# 1. ingest acknowledgement latency
# ---------------------------------------------------------------------------------------------------
def ingest_latency(
    key: AppKey, out: OutputCapture, *, mode: str, samples: int, warmup: int, max_window_s: float
) -> dict[str, Any]:
    body = event_body()
    results: dict[str, Any] = {"samples_per_size": samples, "max_window_s_per_size": max_window_s}
    for n in TARGET_COUNTS:
        start_off = out.offset()
        before = Counter(TOTALS)
        t_stack = time.perf_counter()
        pollers = 0 if mode == "isolated" else 2
        with relay(key, n, installations=MAX_INSTALLATIONS, pollers_per_queue=pollers) as r:
            startup_s = time.perf_counter() - t_stack
            statuses: Counter[int] = Counter()
            for _ in range(warmup):
                status, _, _ = r.post(body)
                statuses[status] += 1
            dispatched_before = r.accepted_dispatch_count()
            timings = []
            t0 = time.perf_counter()
            for _ in range(samples):
                status, elapsed, _ = r.post(body)
                statuses[status] += 1
                if status == 202:
                    timings.append(elapsed)
                if time.perf_counter() - t0 > max_window_s:
                    break
            window_s = time.perf_counter() - t0
            row: dict[str, Any] = {
                "targets": n,
                "installations": min(n, MAX_INSTALLATIONS),
                **summary_ms(timings),
                "non_202": {str(s): c for s, c in statuses.items() if s != 202},
                "window_s": round(window_s, 2),
                "stack_startup_s": round(startup_s, 2),
            }
            if mode == "with_fanout":
                row["dispatches_landed_during_window"] = r.accepted_dispatch_count() - dispatched_before
                row["invocations"] = dict(r.stack.invocations)
                row["relay_metrics"] = metrics_delta(before)
            if mode == "isolated" and n == TARGET_COUNTS[0]:
                # The same POSTs on one kept-alive connection: shows what the local HTTP server adds per reply.
                kept = []
                for _ in range(max(10, samples // 4)):
                    status, elapsed, _ = r.post(body, keep_alive=True)
                    if status == 202:
                        kept.append(elapsed)
                results["keep_alive_probe"] = {"targets": n, **summary_ms(kept)}
            end_off = out.offset()
        row["stack_stop_s"] = r.stop_s
        row["pollers_exited_cleanly"] = r.pollers_exited
        row["relay_log"] = log_summary(out.lines_between(start_off, end_off))
        row["relay_log_at_shutdown"] = log_summary(out.lines_between(end_off))["lines"]
        results[str(n)] = row
        out.say(
            f"  ingest ack [{mode:11}] N={n:<3} p50 {row.get('p50_ms', float('nan')):6.2f} ms"
            f"  p99 {row.get('p99_ms', float('nan')):6.2f} ms  mean {row.get('mean_ms', float('nan')):6.2f} ms"
        )
    p50s = [results[str(n)].get("p50_ms") for n in TARGET_COUNTS]
    p99s = [results[str(n)].get("p99_ms") for n in TARGET_COUNTS]
    results["p50_ratio_100_vs_1"] = round(p50s[-1] / p50s[0], 2) if p50s[0] and p50s[-1] else None
    results["p99_ratio_100_vs_1"] = round(p99s[-1] / p99s[0], 2) if p99s[0] and p99s[-1] else None
    return results


# ---------------------------------------------------------------------------------------------------
# 2 + 3. GitHub requests per (event x target), cold and warm; end-to-end throughput
# ---------------------------------------------------------------------------------------------------
def _per_pair(counts: dict[str, int], pairs: int) -> dict[str, float]:
    per = {k: round(v / pairs, 3) for k, v in counts.items()}
    per["total"] = round(sum(counts.values()) / pairs, 3)
    return per


def _is_polling(operation: str) -> bool:
    """Calls the local pollers make whether or not there is work (SQS receives, DynamoDB stream reads)."""
    return operation.endswith("ReceiveMessage") or operation.startswith("dynamodbstreams.")


def _dispatch_records(r: Relay, requests: list[Any]) -> list[tuple[str, str, float]]:
    """(repo, delivery id, arrival wall time) of each dispatch the double accepted."""
    rows = []
    for rec in requests:
        if request_kind(rec) != "dispatches" or rec.status != 204:
            continue
        payload = (rec.json or {}).get("client_payload") or {}
        repo = "/".join(rec.path.split("/")[2:4]).lower()
        rows.append((repo, str(payload.get("delivery_id")), rec.time))
    return rows


def requests_and_throughput(
    key: AppKey,
    aws: AwsCalls,
    out: OutputCapture,
    *,
    targets: int,
    events: int,
    timeout_s: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    body = event_body()
    start_off = out.offset()
    before = Counter(TOTALS)
    with relay(key, targets, installations=MAX_INSTALLATIONS) as r:
        moto = r.moto
        double = r.double
        # -- cold: the first event after a cold start (no JWT, installation or token cached)
        status, cold_ack, cold_delivery = r.post(body)
        cold_ok = r.wait_for_dispatches(targets, timeout_s)
        cold_requests = double.requests
        calls_after_cold = r.github_calls() or {}
        mark = len(cold_requests)

        # -- warm: `events` more, back to back
        acks, statuses, deliveries = [], Counter(), []
        units = StreamUnits(
            r.stack.client("dynamodb"),
            r.stack.client("dynamodbstreams"),
            r.stack.function_env["CRCR_STATE_TABLE"],
            table_shapes(ROOT / "template.yaml")["StateTable"],
        )
        units.take()  # the cold event's
        aws_before = aws.snapshot()
        cpu_before = (cpu_seconds(), cpu_seconds(moto.pid))
        first_post = time.time()
        for _ in range(events):
            status_w, elapsed, delivery = r.post(body)
            statuses[status_w] += 1
            acks.append(elapsed)
            deliveries.append(delivery)
        last_post = time.time()
        expected_total = targets * (1 + events)
        warm_ok = r.wait_for_dispatches(expected_total, timeout_s, settle_s=0.0)
        drained = time.time()
        cpu_after = (cpu_seconds(), cpu_seconds(moto.pid))
        aws_after = aws.snapshot()
        written = units.take()
        time.sleep(1.5)  # anything beyond the expected count now would be a duplicate
        all_requests = double.requests
        warm_requests = all_requests[mark:]
        calls_total = r.github_calls() or {}

        # -- per-repo verification through the double's own view (dispatches(repo))
        per_repo = {repo: double.dispatches(repo) for repo in r.repos}
        landed = Counter(
            (repo.lower(), str((d.get("client_payload") or {}).get("delivery_id")))
            for repo, ds in per_repo.items()
            for d in ds
        )
        duplicates = sum(c - 1 for c in landed.values() if c > 1)
        wanted = {(repo.lower(), d) for repo in r.repos for d in [cold_delivery, *deliveries]}
        missing = len(wanted - set(landed))
        errors = Counter(rec.status for rec in all_requests if rec.status is None or rec.status >= 400)
        unexpected = len(double.unexpected)
        internal_errors = len(double.internal_errors)
        invocations = dict(r.stack.invocations)
        end_off = out.offset()

    relay_metrics = metrics_delta(before)
    cold_counts = breakdown(cold_requests)
    warm_counts = breakdown(warm_requests)
    cold_calls = {k: v for k, v in calls_after_cold.items() if v}
    warm_calls = {k: v - calls_after_cold.get(k, 0) for k, v in calls_total.items() if v - calls_after_cold.get(k, 0)}
    warm_per_pair = _per_pair(warm_counts, events * targets)
    github = {
        "targets": targets,
        "installations": min(targets, MAX_INSTALLATIONS),
        "cold": {
            "events": 1,
            "all_dispatched": cold_ok,
            "requests": cold_counts,
            "per_event_target": _per_pair(cold_counts, targets),
            "relay_github_calls": cold_calls,
        },
        "warm": {
            "events": events,
            "all_dispatched": warm_ok,
            "requests": warm_counts,
            "per_event_target": warm_per_pair,
            "relay_github_calls": warm_calls,
        },
        "target_warm_per_event_target": WARM_REQUESTS_TARGET,
        "meets_target": warm_per_pair["total"] <= WARM_REQUESTS_TARGET,
        "reference_relay_per_event_target": REFERENCE_RELAY_REQUESTS,
        "error_responses": {str(k): v for k, v in errors.items()},
        "unexpected_endpoints": unexpected,
        "double_internal_errors": internal_errors,
    }

    aws_after.subtract(aws_before)
    aws_ops = {k: v for k, v in sorted(aws_after.items()) if v}
    sent = max(1, events * targets)
    rows = [row for row in _dispatch_records(r, warm_requests) if row[1] in set(deliveries)]
    posted = r.posted
    latencies = [t - posted[d] for _, d, t in rows if d in posted]
    last_dispatch = max((t for _, _, t in rows), default=float("nan"))
    span = last_dispatch - first_post
    throughput = {
        "targets": targets,
        "installations": min(targets, MAX_INSTALLATIONS),
        "events": events,
        "dispatches_expected": events * targets,
        "dispatches_received": len(rows),
        "all_dispatched": warm_ok,
        "first_post_to_last_dispatch_s": round(span, 3),
        "posting_s": round(last_post - first_post, 3),
        "dispatches_per_s": round(len(rows) / span, 1) if span > 0 else None,
        "events_per_s": round(events / span, 2) if span > 0 else None,
        "per_dispatch_latency": summary_ms(latencies),
        "ack_latency_back_to_back": summary_ms(acks),
        "non_202": {str(s): c for s, c in statuses.items() if s != 202},
        "cold_event_ack_ms": round(cold_ack * 1000, 2) if status == 202 else f"HTTP {status}",
        "duplicates": duplicates,
        "missing": missing,
        "invocations": invocations,
        "relay_metrics": relay_metrics,
        "cpu_s_during_window": {
            "wall_s": round(drained - first_post, 2),
            "relay_process": round(cpu_after[0] - cpu_before[0], 2),
            "moto_process": round(cpu_after[1] - cpu_before[1], 2),
            "note": "relay process = handlers, local HTTP server, pollers and the GitHub double",
        },
        "aws_calls": aws_ops,
        "aws_calls_per_dispatch": {k: round(v / sent, 2) for k, v in aws_ops.items() if not _is_polling(k)},
        # The state table's write units in the window (webhook, planner, dispatcher), from its stream
        "write_units_per_dispatch": round(written["write_units"] / sent, 3),
        "write_units_per_dispatch_by_row": {k: round(v / sent, 3) for k, v in sorted(written["by_row"].items())},
        "relay_log": log_summary(out.lines_between(start_off, end_off)),
    }
    return github, throughput


# ---------------------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def git_info() -> dict[str, Any]:
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return proc.stdout.strip()

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(status), "modified": status.splitlines()[:20]}


def print_table(results: dict[str, Any]) -> None:
    print("\n== crcr bench ==")
    print(f"commit {results['git']['commit']}{' (dirty)' if results['git']['dirty'] else ''}  {results['timestamp']}")
    if results["git"].get("commit_changed_during_run"):
        print(
            f"WARNING: HEAD moved to {results['git']['commit_at_end']} during the run; phases measured different code"
        )
    print(f"python {results['machine']['python']}, {results['machine']['cpu_count']} CPUs")
    print("\n1. ingest acknowledgement latency (POST /webhook -> 202), ms")
    print(f"   {'mode':12} {'N':>4} {'p50':>8} {'p99':>8} {'mean':>8} {'samples':>8}")
    for mode, rows in results["ingest_latency"].items():
        for n in TARGET_COUNTS:
            row = rows.get(str(n)) or {}
            print(
                f"   {mode:12} {n:>4} {row.get('p50_ms', 0):8.2f} {row.get('p99_ms', 0):8.2f} "
                f"{row.get('mean_ms', 0):8.2f} {row.get('samples', 0):8}"
            )
    probe = results["ingest_latency"]["isolated"].get("keep_alive_probe")
    if probe:
        print(f"   (kept-alive connection, N={probe['targets']}: p50 {probe['p50_ms']} ms, p99 {probe['p99_ms']} ms)")
    gh = results.get("github_requests")
    if gh:
        print(f"\n2. GitHub requests per (event x target), {gh['targets']} targets")
        for phase in ("cold", "warm"):
            per = gh[phase]["per_event_target"]
            print(
                f"   {phase:5} total {per['total']:.3f}  (access_tokens {per['access_tokens']:.3f}, "
                f"installation {per['installation']:.3f}, dispatches {per['dispatches']:.3f}, other {per['other']:.3f})"
            )
        print(f"   target <= {WARM_REQUESTS_TARGET} warm: {'met' if gh['meets_target'] else 'NOT met'}")
    tp = results.get("throughput")
    if tp:
        lat = tp["per_dispatch_latency"]
        print(f"\n3. throughput: {tp['events']} events x {tp['targets']} targets")
        print(
            f"   {tp['dispatches_received']}/{tp['dispatches_expected']} dispatches in "
            f"{tp['first_post_to_last_dispatch_s']} s -> {tp['dispatches_per_s']} dispatches/s, "
            f"{tp['events_per_s']} events/s; duplicates {tp['duplicates']}, missing {tp['missing']}"
        )
        print(f"   webhook -> dispatch latency p50 {lat.get('p50_ms')} ms, p99 {lat.get('p99_ms')} ms")
        cpu = tp["cpu_s_during_window"]
        print(
            f"   CPU in {cpu['wall_s']} s: relay process {cpu['relay_process']} s, moto {cpu['moto_process']} s; "
            f"AWS calls per dispatch {sum(tp['aws_calls_per_dispatch'].values()):.1f} {tp['aws_calls_per_dispatch']}"
        )
    print_callbacks(results)
    print_checkruns(results)
    print_checkbudget(results)
    print_comment(results)
    reporter.print_section(results.get("reporter"))
    dispatch.print_section(results.get("dispatch"))
    cs = results.get("cold_start", {})
    print("\n5. cold-start import time (median of 7), ms")
    src = cs.get("source", {}).get("functions", {})
    built = cs.get("built", {})
    bf = built.get("functions", {}) if not built.get("skipped") else {}
    print(f"   {'function':10} {'source py' + cs.get('source', {}).get('python', '?'):>14} {'built py3.12':>14}")
    for role in coldstart.ROLES:
        s = (src.get(role) or {}).get("median_ms")
        b = (bf.get(role) or {}).get("median_ms") if bf else None
        print(f"   {role:10} {s if s is not None else '-':>14} {b if b is not None else '-':>14}")
    if cs.get("skipped"):
        print("   skipped (--skip-coldstart)")
    elif built.get("skipped"):
        print(f"   built: skipped ({built.get('reason')})")
    else:
        bc = built.get("bytecode", {})
        print(
            f"   built bytecode shipped: {bc.get('layer_py_with_cpython312_pyc')}/{bc.get('layer_py_files')} layer "
            f"modules, handler .pyc shipped: {bc.get('function_handler_pyc_shipped')}"
        )
    print(f"\ntotal {results['duration_s']} s")


def print_checkruns(results: dict[str, Any]) -> None:
    cw = results.get("check_run_writes")
    if not cw:
        return
    print("\n6. upstream check-run writes (POST + PATCH through the upstream installation)")
    print(
        f"   {'setting':9} {'runs':>5} {'writes':>7} {'/event':>7} {'/repo/commit':>13} {'/hour@PyTorch':>14} "
        f"{'paced':>6} {'elapsed s':>9}  all completed"
    )
    for mode in ("per_job", "per_repo"):
        row = cw[mode]
        print(
            f"   {mode:9} {row['check_runs']:>5} {row['writes']['total']:>7} {row['writes_per_event']:>7} "
            f"{row['writes_per_repository_per_commit']:>13} {row['writes_per_hour_at_pytorch_volume']:>14} "
            f"{row['relay_metrics'].get('CheckRunPaced', 0):>6} {row['elapsed_s']:>9}  {row['all_completed']}"
        )
    print(f"   {cw['method']}")


def print_checkbudget(results: dict[str, Any]) -> None:
    cb = results.get("check_run_budget")
    if not cb:
        return
    print()
    checkbudget.print_rows(cb)
    print(f"   {cb['method']}")


def print_comment(results: dict[str, Any]) -> None:
    pc = results.get("pr_comment")
    if not pc:
        return
    print("\n8. the PR comment (upstream POST + PATCH: check runs and comments)")
    print(f"   {'comment':8} {'writes':>7} {'/event':>7} {'comment /event':>15} {'comments/PR':>12} {'paced':>6}")
    for setting in ("off", "on"):
        row = pc["per_event"][setting]
        writes = sum(row["writes"].values())
        paced = row["relay_metrics"].get("CheckRunPaced", 0) + row["relay_metrics"].get("PrCommentPaced", 0)
        print(
            f"   {setting:8} {writes:>7} {row['writes_per_event']:>7} {row['comment_writes_per_event']:>15} "
            f"{row['comments_per_pr']!s:>12} {paced:>6}"
        )
    for name, run in pc["bursts"].items():
        shown = ", ".join(
            f"{b['callbacks']} callbacks in {b['spread_s']} s -> {b['comment_writes']} {'/'.join(b['kinds'])} "
            f"({b['s_from_last_callback_to_write']} s after the last)"
            for b in run["bursts"]
        )
        print(f"   burst {name}: {shown}")
    print(f"   {pc['method']}")


def print_callbacks(results: dict[str, Any]) -> None:
    cb = results.get("callback_latency")
    if not cb:
        return
    print("\n4. callbacks (POST /callback, one L2 target, new connection per POST), ms")
    print(f"   {'reply':26} {'p50':>8} {'p99':>8} {'mean':>8} {'samples':>8}  outcomes")
    for name in ("cold_first_callback", "recorded", "duplicate", "recorded_after_duplicates"):
        row = cb[name]
        print(
            f"   {name:26} {row.get('p50_ms', 0):8.2f} {row.get('p99_ms', 0):8.2f} {row.get('mean_ms', 0):8.2f} "
            f"{row.get('samples', 0):8}  {row.get('outcomes')}"
        )
    print(
        f"   AWS calls per callback: recorded {cb['recorded']['aws_calls']['total_per_callback']}, "
        f"duplicate {cb['duplicate']['aws_calls']['total_per_callback']}; results rows "
        f"{cb['results_table_rows']}/{cb['results_table_rows_expected']}"
    )
    ov = results.get("oidc_verify")
    if ov:
        w, j = ov["warm"], ov["pyjwt_decode_only"]
        print(
            f"   OidcVerifier.verify warm ({w['samples']} tokens): p50 {w['p50_us']} us, p99 {w['p99_us']} us, "
            f"mean {w['mean_us']} us (PyJWT decode alone p50 {j['p50_us']} us); "
            f"cold first {ov['cold_first_verify_ms']} ms"
        )
    iq = results.get("oidc_issuer_requests")
    if iq:
        warm, hostile = iq["warm"], iq["unknown_kid"]
        print(
            f"   issuer requests: cold first callback {iq['cold_first_callback']}; JWKS fetches per 1,000 warm "
            f"callbacks {warm['jwks_fetches_per_1000_callbacks']} ({warm['callbacks']} sent)"
        )
        print(
            f"   unknown kid: {hostile['forged_callbacks']} forged + "
            f"{hostile['genuine_callbacks_interleaved']} genuine "
            f"in {hostile['seconds']} s -> {hostile['jwks_fetches']} JWKS fetches (bound "
            f"{hostile['bound_one_per_interval']}); forged {hostile['forged_outcomes']}, genuine "
            f"{hostile['genuine_outcomes']}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    parser.add_argument("--samples", type=int, default=200, help="timed webhooks per allowlist size")
    parser.add_argument("--warmup", type=int, default=20, help="untimed webhooks before the timed ones")
    parser.add_argument(
        "--fanout-samples", type=int, default=50, help="timed webhooks per size while the fan-out runs alongside"
    )
    parser.add_argument("--fanout-warmup", type=int, default=5, help="untimed webhooks before those")
    parser.add_argument("--fanout-max-s", type=float, default=25.0, help="time box per size for those")
    parser.add_argument("--events", type=int, default=15, help="events in the throughput run")
    parser.add_argument("--targets", type=int, default=10, help="targets in the throughput run")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for dispatches to land")
    parser.add_argument("--callbacks", type=int, default=300, help="timed callbacks that record a new job")
    parser.add_argument("--callback-duplicates", type=int, default=300, help="timed identical repeats (duplicate)")
    parser.add_argument(
        "--callback-window", type=int, default=1000, help="warm callbacks over which issuer requests are counted"
    )
    parser.add_argument("--callback-hostile", type=int, default=200, help="unknown-kid callbacks, interleaved")
    parser.add_argument("--verify-tokens", type=int, default=2000, help="tokens for the in-process verify timing")
    parser.add_argument("--skip-callbacks", action="store_true", help="leave out the callback figures")
    parser.add_argument("--check-events", type=int, default=2, help="pull requests in the check-run write run")
    parser.add_argument("--check-targets", type=int, default=3, help="L4 repositories in that run")
    parser.add_argument("--check-jobs", type=int, default=2, help="jobs per repository in that run")
    parser.add_argument("--skip-checkruns", action="store_true", help="leave out the check-run write figures")
    parser.add_argument(
        "--checkbudget-loads", default="1,3,10", help="multiples of 1,000 PR events a day in the check-budget run"
    )
    parser.add_argument(
        "--checkbudget-budget-s",
        type=float,
        default=300.0,
        help="wall-time budget of that run per auto setting and 1x of load (per_job: a sixth, whatever the load)",
    )
    parser.add_argument("--checkbudget-drain-hours", type=float, default=72.0, help="simulated hours after the day")
    parser.add_argument("--skip-checkbudget", action="store_true", help="leave out the check-run budget figures")
    parser.add_argument("--comment-events", type=int, default=2, help="pull requests in the PR comment run")
    parser.add_argument("--comment-targets", type=int, default=3, help="L4 repositories in that run")
    parser.add_argument("--comment-jobs", type=int, default=2, help="jobs per repository in that run")
    parser.add_argument("--comment-callbacks", type=int, default=20, help="failing callbacks per burst")
    parser.add_argument("--skip-comment", action="store_true", help="leave out the PR comment figures")
    parser.add_argument("--reporter-commits", type=int, default=40, help="upstream commits in the reporter run")
    parser.add_argument("--reporter-repos", type=int, default=4, help="downstream repositories per commit there")
    parser.add_argument(
        "--reporter-redelivered", type=float, default=0.1, help="share of stream records delivered twice there"
    )
    parser.add_argument("--skip-reporter", action="store_true", help="leave out the reporter's cost per change")
    dispatch.add_arguments(parser, prefix="dispatch-")
    parser.add_argument("--skip-dispatch", action="store_true", help="leave out the dispatcher's cost (section 10)")
    parser.add_argument("--build", action="store_true", help="run `make build` first (about a minute)")
    parser.add_argument("--skip-fanout-latency", action="store_true", help="only the isolated ingest latency")
    parser.add_argument("--skip-coldstart", action="store_true", help="leave out the cold-start import times")
    parser.add_argument("--skip-pages", action="store_true", help="leave out the HUD pages at scale (section 11)")
    parser.add_argument(
        "--full",
        action="store_true",
        help="also the long runs (make bench-full): the check-run budget's simulated days (9), ingest latency with "
        "the fan-out alongside (1), the dispatcher's backlog (10) and the PR comment's bursts (8)",
    )
    parser.add_argument("--verbose", action="store_true", help="every section's table, not the one-screen summary")
    args = parser.parse_args()
    if not args.full:
        args.skip_checkbudget = args.skip_fanout_latency = args.dispatch_skip_backlog = True

    started = time.perf_counter()
    results: dict[str, Any] = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_info(),
        "machine": machine(),
        "config": {
            "target_counts": list(TARGET_COUNTS),
            "max_installations": MAX_INSTALLATIONS,
            "samples": args.samples,
            "warmup": args.warmup,
            "throughput_events": args.events,
            "throughput_targets": args.targets,
            "event": "examples/events/pull_request.opened.json",
            "callbacks": args.callbacks,
            "callback_duplicates": args.callback_duplicates,
            "callback_window": args.callback_window,
            "callback_hostile": args.callback_hostile,
            "verify_tokens": args.verify_tokens,
            "reporter_commits": args.reporter_commits,
            "reporter_repos": args.reporter_repos,
            "reporter_redelivered": args.reporter_redelivered,
        },
    }
    key = AppKey.generate()
    aws = AwsCalls().install()
    phases: dict[str, float] = {}
    with OutputCapture() as out:
        if args.build:
            results["build"] = coldstart.build(out.say)
        t = time.perf_counter()
        out.say("1. ingest acknowledgement latency")
        latency: dict[str, Any] = {
            "isolated": ingest_latency(
                key, out, mode="isolated", samples=args.samples, warmup=args.warmup, max_window_s=120.0
            )
        }
        if not args.skip_fanout_latency:
            latency["with_fanout"] = ingest_latency(
                key,
                out,
                mode="with_fanout",
                samples=args.fanout_samples,
                warmup=args.fanout_warmup,
                max_window_s=args.fanout_max_s,
            )
        results["ingest_latency"] = latency
        phases["ingest_latency"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        out.say(f"2+3. GitHub requests and throughput ({args.events} events x {args.targets} targets)")
        github, throughput = requests_and_throughput(
            key, aws, out, targets=args.targets, events=args.events, timeout_s=args.timeout
        )
        results["github_requests"] = github
        results["throughput"] = throughput
        phases["github_requests_and_throughput"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        if not args.skip_callbacks:
            out.say(f"4. callbacks ({args.callback_window} warm + {args.callback_hostile} unknown-kid) and OIDC verify")
            results["oidc_verify"] = callbacks.verify_cost(args.verify_tokens)
            results["callback_latency"], results["oidc_issuer_requests"] = callbacks.callback_bench(
                key,
                aws,
                out,
                recorded=args.callbacks,
                duplicates=args.callback_duplicates,
                window=args.callback_window,
                hostile=args.callback_hostile,
                timeout_s=args.timeout,
            )
            phases["callbacks"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        if not args.skip_checkruns:
            out.say("6. upstream check-run writes per event, per_job against per_repo")
            results["check_run_writes"] = checkruns.checkrun_bench(
                key,
                out,
                events=args.check_events,
                targets=args.check_targets,
                jobs=args.check_jobs,
                settle_s=2,
                timeout_s=max(args.timeout, 240.0),
            )
            phases["check_run_writes"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        if not args.skip_checkbudget:
            out.say("9. check-run writes an hour under PyTorch's load (1x, 3x, 10x), per_job against auto")
            results["check_run_budget"] = checkbudget.checkbudget_bench(
                key,
                out,
                loads=tuple(int(x) for x in args.checkbudget_loads.split(",")),
                drain_hours=args.checkbudget_drain_hours,
                budget_s=args.checkbudget_budget_s,
            )
            phases["check_run_budget"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        if not args.skip_comment:
            out.say("8. the PR comment: upstream writes per event (off against on), writes per burst of callbacks")
            results["pr_comment"] = comment.comment_bench(
                key,
                aws,
                out,
                events=args.comment_events,
                targets=args.comment_targets,
                jobs=args.comment_jobs,
                callbacks=args.comment_callbacks,
                timeout_s=max(args.timeout, 120.0),
                bursts=args.full,
            )
            phases["pr_comment"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        if not args.skip_reporter:
            out.say("7. reporter cost per recorded change, HUD summaries off against on")
            results["reporter"] = reporter.reporter_bench(
                aws,
                out,
                commits=args.reporter_commits,
                repos=args.reporter_repos,
                redelivered=args.reporter_redelivered,
            )
            phases["reporter"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        if not args.skip_dispatch:
            out.say("10. the dispatcher: AWS calls and CPU per warm dispatch, re-queues under a backlog")
            results["dispatch"] = dispatch.run_section(dispatch.strip_prefix(args, "dispatch-"), out.say)
            phases["dispatch"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        if not args.skip_pages:
            out.say(
                "11. HUD pages at PyTorch's scale: bytes fetched and time to render, 1 and 30 days held, 1x and 10x"
            )
            results["hud_pages"] = pages.run_section([1, 30], [1, 10], 5, out.say)
            phases["hud_pages"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        if args.skip_coldstart:
            results["cold_start"] = {"skipped": True}
        else:
            out.say("5. cold-start import time")
            results["cold_start"] = {
                "source": coldstart.measure_source(out.say),
                "built": coldstart.measure_built(out.say),
            }
            if args.dispatch_baseline:
                results["cold_start"]["baseline"] = coldstart.measure_at(args.dispatch_baseline, out.say)
        phases["cold_start"] = round(time.perf_counter() - t, 1)
        relay_lines = out.lines_between(0)
    results["relay_output"] = log_summary(relay_lines)
    if relay_lines:
        results["relay_output"]["file"] = str(out.path)  # kept for a look; a temporary file
    else:
        out.path.unlink(missing_ok=True)
    results["phase_seconds"] = phases
    end_commit = git_info()["commit"]
    # Others commit while the bench runs: then the phases measured different code (the build, too).
    results["git"]["commit_at_end"] = end_commit
    results["git"]["commit_changed_during_run"] = end_commit != results["git"]["commit"]
    results["method"] = METHOD
    results["duration_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.verbose:
        print_table(results)
    else:
        summary.print_summary(results)
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
