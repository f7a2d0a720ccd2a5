"""Sections 1 to 3: webhook acknowledgement latency by allowlist size, GitHub requests per dispatch, throughput."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

import harness as h

TARGET_COUNTS = (1, 10, 100)
WARM_REQUESTS_TARGET = 1.3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=200, help="timed webhooks per allowlist size")
    parser.add_argument("--warmup", type=int, default=20, help="untimed webhooks before the timed ones")
    parser.add_argument("--events", type=int, default=15, help="events in the throughput run")
    parser.add_argument("--targets", type=int, default=10, help="targets in the throughput run")


def ingest_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Section 1: POST /webhook -> 202 with only the webhook function running (no poller), as in Lambda."""
    body, out, samples, warmup, max_window_s = h.event_body(), bench.out, args.samples, args.warmup, 120.0
    results: dict[str, Any] = {"samples_per_size": samples, "max_window_s_per_size": max_window_s}
    for n in TARGET_COUNTS:
        start_off = out.offset()
        t_stack = time.perf_counter()
        with h.relay(bench.key, n, pollers=0) as r:
            startup_s = time.perf_counter() - t_stack
            statuses: Counter[int] = Counter(r.post(body)[0] for _ in range(warmup))
            timings = []
            t0 = time.perf_counter()
            for _ in range(samples):
                status, elapsed, _ = r.post(body)
                statuses[status] += 1
                if status == 202:
                    timings.append(elapsed)
                if time.perf_counter() - t0 > max_window_s:
                    break
            row: dict[str, Any] = {
                "targets": n,
                "installations": min(n, h.MAX_INSTALLATIONS),
                **h.summary_ms(timings),
                "non_202": {str(s): c for s, c in statuses.items() if s != 202},
                "window_s": round(time.perf_counter() - t0, 2),
                "stack_startup_s": round(startup_s, 2),
            }
            if n == TARGET_COUNTS[0]:
                # The same POSTs on one kept-alive connection: what the local HTTP server adds per reply.
                kept = [r.post(body, keep_alive=True) for _ in range(max(10, samples // 4))]
                results["keep_alive_probe"] = {"targets": n, **h.summary_ms([e for s, e, _ in kept if s == 202])}
            end_off = out.offset()
        row["stack_stop_s"] = r.stop_s
        row["pollers_exited_cleanly"] = r.pollers_exited
        row["relay_log"] = h.log_summary(out.lines_between(start_off, end_off))
        row["relay_log_at_shutdown"] = h.log_summary(out.lines_between(end_off))["lines"]
        results[str(n)] = row
        bench.out.say(f"  ingest ack N={n:<3} p50 {row.get('p50_ms')} ms  p99 {row.get('p99_ms')} ms")
    for q in ("p50", "p99"):
        first, last = (results[str(n)].get(f"{q}_ms") for n in (TARGET_COUNTS[0], TARGET_COUNTS[-1]))
        results[f"{q}_ratio_100_vs_1"] = round(last / first, 2) if first and last else None
    return {"ingest_latency": {"isolated": results}}


def _phase(events: int, ok: bool, counts: dict[str, int], pairs: int) -> dict[str, Any]:
    """The cold or the warm events' GitHub requests, by kind and per (event x target)."""
    return {"events": events, "all_dispatched": ok, "requests": counts, "per_event_target": h.per_unit(counts, pairs)}


def throughput_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Sections 2 and 3 on one stack: the cold event, then `events` more back to back."""
    body, out, targets, events = h.event_body(), bench.out, args.targets, args.events
    start_off = out.offset()
    before = Counter(h.TOTALS)
    with h.relay(bench.key, targets) as r:
        double = r.github
        status, cold_ack, cold_delivery = r.post(body)  # cold: no JWT, installation or token cached yet
        cold_ok = r.wait_for_dispatches(targets, args.timeout)
        cold_requests = double.requests
        units = r.units("StateTable")["StateTable"]
        units.take()  # the cold event's
        aws_before = bench.aws.snapshot()
        cpu_before = (h.cpu_seconds(), h.cpu_seconds(r.moto.pid))
        first_post = time.time()
        statuses, acks, deliveries = zip(*(r.post(body) for _ in range(events)), strict=True)
        warm_ok = r.wait_for_dispatches(targets * (1 + events), args.timeout, settle_s=0.0)
        drained = time.time()
        cpu_after = (h.cpu_seconds(), h.cpu_seconds(r.moto.pid))
        aws_after = bench.aws.snapshot()
        written = units.take()
        time.sleep(1.5)  # anything beyond the expected count now would be a duplicate
        all_requests = double.requests
        warm_requests = all_requests[len(cold_requests) :]
        accepted = [q for q in all_requests if h.request_kind(q) == "dispatches" and q.status == 204]
        landed = Counter((h.repo_of(q), h.delivery_of(q)) for q in accepted)
        wanted = {(repo.lower(), d) for repo in r.repos for d in (cold_delivery, *deliveries)}
        errors = Counter(q.status for q in all_requests if q.status is None or q.status >= 400)
        unexpected, internal_errors = len(double.unexpected), len(double.internal_errors)
        invocations = dict(r.stack.invocations)
        end_off = out.offset()
    cold_counts, warm_counts = h.breakdown(cold_requests), h.breakdown(warm_requests)
    github = {
        "targets": targets,
        "installations": min(targets, h.MAX_INSTALLATIONS),
        "cold": _phase(1, cold_ok, cold_counts, targets),
        "warm": _phase(events, warm_ok, warm_counts, events * targets),
        "meets_target": h.per_unit(warm_counts, events * targets)["total"] <= WARM_REQUESTS_TARGET,
        "error_responses": {str(k): v for k, v in errors.items()},
        "unexpected_endpoints": unexpected,
        "double_internal_errors": internal_errors,
    }
    aws_ops = dict(sorted((aws_after - aws_before).items()))
    sent = max(1, events * targets)
    # Each warm dispatch the double accepted: (delivery id, arrival time), matched to its webhook's POST.
    rows = [(h.delivery_of(q), q.time) for q in accepted if h.delivery_of(q) in deliveries]
    span = max((t for _, t in rows), default=float("nan")) - first_post
    throughput = {
        "targets": targets,
        "installations": min(targets, h.MAX_INSTALLATIONS),
        "events": events,
        "dispatches_expected": events * targets,
        "dispatches_received": len(rows),
        "first_post_to_last_dispatch_s": round(span, 3),
        "dispatches_per_s": round(len(rows) / span, 1) if span > 0 else None,
        "events_per_s": round(events / span, 2) if span > 0 else None,
        "per_dispatch_latency": h.summary_ms([t - r.posted[d] for d, t in rows if d in r.posted]),
        "ack_latency_back_to_back": h.summary_ms(list(acks)),
        "non_202": {str(s): c for s, c in Counter(statuses).items() if s != 202},
        "cold_event_ack_ms": round(cold_ack * 1000, 2) if status == 202 else f"HTTP {status}",
        "duplicates": sum(c - 1 for c in landed.values() if c > 1),
        "missing": len(wanted - set(landed)),
        "invocations": invocations,
        "relay_metrics": h.metrics_delta(before),
        "cpu_s_during_window": {
            "wall_s": round(drained - first_post, 2),
            "relay_process": round(cpu_after[0] - cpu_before[0], 2),
            "moto_process": round(cpu_after[1] - cpu_before[1], 2),
        },
        "aws_calls": aws_ops,
        # Polling (SQS receives, stream reads) left out: the pollers make those whether or not there is work.
        "aws_calls_per_dispatch": {k: round(v / sent, 2) for k, v in aws_ops.items() if not h.is_polling(k)},
        "write_units_per_dispatch": round(written["write_units"] / sent, 3),  # the state table's, from its stream
        "write_units_per_dispatch_by_row": {k: round(v / sent, 3) for k, v in sorted(written["by_row"].items())},
        "relay_log": h.log_summary(out.lines_between(start_off, end_off)),
    }
    return {"github_requests": github, "throughput": throughput}
