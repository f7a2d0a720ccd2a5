"""Section 10: the dispatcher's AWS calls, CPU and write units per warm dispatch, and its re-queues under a backlog."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from typing import Any

import harness as h

DISPATCH = "DispatchFunction"
# GitHub.com's budget (CONTENT_RATES) four times faster: the budget, not the local stack, still sets the pace.
BACKLOG_RATES = "60/15+15,440/900+50"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dispatch-events", type=int, default=14, help="warm events (after one cold one)")
    parser.add_argument("--dispatch-targets", type=int, default=10, help="repositories per warm event")
    parser.add_argument("--dispatch-levels", default="L1", help="warm run levels, comma-separated (L3/L4: checks)")
    parser.add_argument("--dispatch-repeats", type=int, default=3, help="warm runs per level; the median is reported")
    parser.add_argument("--dispatch-backlog-events", type=int, default=120, help="events in the backlog run (--full)")
    parser.add_argument("--dispatch-backlog-repos", type=int, default=5, help="repositories (installations) there")
    parser.add_argument("--dispatch-backlog-rates", default=BACKLOG_RATES, help="CRCR_GITHUB_WRITE_RATES there")
    parser.add_argument("--dispatch-backlog-timeout", type=float, default=600.0, help="seconds to drain the backlog")
    parser.add_argument("--dispatch-baseline", default=None, help="also measure the code at this git ref, same run")


class Window:
    """AWS calls, CPU, wall time and state-table write units of this process during the handler calls only."""

    def __init__(self, aws: h.AwsCalls) -> None:
        self._aws = aws
        self.calls: Counter[str] = Counter()
        self.cpu_s = self.wall_s = 0.0
        self.batch_sizes: list[int] = []
        self.units = {key: Counter[str]() for key in ("writes", "by_destination", "by_row")}  # as StreamUnits takes

    def add_units(self, taken: dict[str, Any]) -> None:
        for key, counts in self.units.items():
            counts.update(taken[key])

    def handle(self, r: h.Relay, messages: list[dict[str, Any]]) -> Any:
        """The dispatcher's handler called with `messages`, its AWS calls, CPU and wall time counted."""
        before, cpu, wall = self._aws.snapshot(), time.process_time(), time.perf_counter()
        result = r.invoke(DISPATCH, "DispatchQueue", messages)
        self.cpu_s += time.process_time() - cpu
        self.wall_s += time.perf_counter() - wall
        self.calls.update(self._aws.snapshot() - before)
        self.batch_sizes.append(len(messages))
        return result

    def report(self, dispatches: int) -> dict[str, Any]:
        n = max(1, dispatches)

        def per(counts: Counter[str], digits: int = 3) -> dict[str, float]:
            return {k: round(v / n, digits) for k, v in sorted(counts.items())}

        return {
            "dispatches": dispatches,
            "batches": len(self.batch_sizes),
            "mean_batch_size": round(sum(self.batch_sizes) / max(1, len(self.batch_sizes)), 2),
            "aws_calls": dict(sorted(self.calls.items())),
            "aws_calls_per_dispatch": per(self.calls),
            "aws_calls_per_dispatch_total": round(sum(self.calls.values()) / n, 3),
            "relay_cpu_ms_per_dispatch": round(self.cpu_s * 1000 / n, 3),
            "handler_wall_ms_per_dispatch": round(self.wall_s * 1000 / n, 3),
            "state_writes_per_dispatch": per(self.units["writes"]),
            "write_units_per_dispatch": round(sum(self.units["by_destination"].values()) / n, 3),
            "write_units_per_dispatch_by_destination": per(self.units["by_destination"]),
            "write_units_per_dispatch_by_row": per(self.units["by_row"]),
        }


def _drain(r: h.Relay, window: Window, expected: int, timeout_s: float, units: h.StreamUnits) -> int:
    """The dispatch queue to the handler in batches of up to 10 until `expected` were handled, counted in `window`."""
    units.take()  # what the webhook and the planner wrote before
    handled = 0
    deadline = time.monotonic() + timeout_s
    while handled < expected and time.monotonic() < deadline:
        messages = r.receive("DispatchQueue", wait_s=1)
        if not messages:
            continue
        failed = {f["itemIdentifier"] for f in (window.handle(r, messages) or {}).get("batchItemFailures") or []}
        if done := [m for m in messages if m["MessageId"] not in failed]:
            r.delete("DispatchQueue", done)
        handled += len(done)
    window.add_units(units.take())
    return handled


def warm_cost(bench: h.Bench, args: argparse.Namespace, level: str) -> dict[str, Any]:
    """One cold event, then warm ones, each planned and its dispatches handed over before the next (steady state)."""
    body, events, targets, timeout_s = h.event_body(), args.dispatch_events, args.dispatch_targets, 120.0
    before = Counter(h.TOTALS)
    start_off = bench.out.offset()
    with h.relay(bench.key, targets, level=level, pollers=None, github="process", as_lambda=True) as r:
        r.post(body)
        r.plan_all(1)
        units = r.units("StateTable")["StateTable"]
        cold = Window(bench.aws)
        cold_handled = _drain(r, cold, targets, timeout_s, units)
        warm = Window(bench.aws)
        warm_handled = 0
        for _ in range(events):
            r.post(body)
            r.plan_all(1)
            warm_handled += _drain(r, warm, targets, timeout_s, units)
        time.sleep(1.0)  # a duplicate, if any, would land now
        seen = r.github.ask()
    return {
        "events": events,
        "targets": targets,
        "level": level,
        "cold": cold.report(cold_handled),
        "warm": warm.report(warm_handled),
        "dispatches_landed": seen["dispatches"],
        "dispatches_expected": (1 + events) * targets,
        "duplicates": seen["duplicates"],
        "github_requests": seen["requests"],
        "refused": seen["refused"],
        "relay_metrics": h.metrics_delta(before, ("Dispatch",)),
        "relay_errors": h.errors_in(bench.out.lines_between(start_off)),
    }


class Outcomes:
    """Every dispatch outcome, recorded around the use case the handler calls, and the AWS calls made inside it."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str]] = []  # (delivery, repo, result, reason head)
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._inside = threading.local()

    def wrap(self) -> None:
        """The use case where the handler's batch object reaches it: crcr.app.dispatch's module-level `dispatch`."""
        module = sys.modules["crcr.app.dispatch"]
        inner = module.dispatch

        def dispatch(message: Any, *args: Any, **kwargs: Any) -> Any:
            self._inside.on = True
            try:
                outcome = inner(message, *args, **kwargs)
            finally:
                self._inside.on = False
            with self._lock:
                reason = str(outcome.reason).split(":", 1)[0]
                self.rows.append((message.delivery_id, message.target_repo.lower(), outcome.result.value, reason))
            return outcome

        module.dispatch = dispatch

    def count(self, name: str) -> None:
        if getattr(self._inside, "on", False):
            with self._lock:
                self.calls[name] += 1


def _within_budget(times_by_repo: dict[str, list[float]], rates: str) -> dict[str, Any]:
    """The most calls any installation made in any window of each rate's period, against count + burst."""
    windows = []
    for rate in h.parse_rates(rates):
        most = max((h.most_in_any(times, rate.period_s) for times in times_by_repo.values()), default=0)
        windows.append({"period_s": rate.period_s, "allowed": rate.count + rate.burst, "most_in_any_window": most})
    return {"windows": windows, "within": all(w["most_in_any_window"] <= w["allowed"] for w in windows)}


def backlog(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Events all planned before the dispatch queue's pollers start (as after an outage), then drained by them."""
    events, repos, rates = args.dispatch_backlog_events, args.dispatch_backlog_repos, args.dispatch_backlog_rates
    before = Counter(h.TOTALS)
    start_off = bench.out.offset()
    outcomes = Outcomes()
    unhook = h.on_every_call(lambda model, **_: outcomes.count(f"{model.service_model.service_name}.{model.name}"))
    try:
        env = {"CRCR_GITHUB_WRITE_RATES": rates}
        with h.relay(
            bench.key, repos, installations=repos, pollers=None, github="process", as_lambda=True, env=env
        ) as r:
            outcomes.wrap()
            for _ in range(events):
                r.post(h.event_body())
            r.plan_all(events)
            t0 = time.time()
            r.stack.start_pollers(DISPATCH)
            h.wait_until(lambda: r.github.ask()["dispatches"] >= events * repos, args.dispatch_backlog_timeout, 1.0)
            drained_s = time.time() - t0
            time.sleep(2.0)  # a duplicate, if any, would land now
            seen = r.github.ask(times=True)
            invocations = r.stack.invocations.get(DISPATCH, 0)
    finally:
        unhook()
    reasons = Counter(reason for _, _, result, reason in outcomes.rows if result == "rescheduled")
    paced = {(d, r) for d, r, result, reason in outcomes.rows if result == "rescheduled" and reason == "paced"}
    landed = max(1, seen["dispatches"])
    return {
        "events": events,
        "repositories": repos,
        "rates": rates,
        "dispatches_expected": events * repos,
        "dispatches": seen["dispatches"],
        "duplicates": seen["duplicates"],
        "refused": seen["refused"],
        "paced_requeues": reasons.get("paced", 0),
        "paced_dispatches": len(paced),
        "requeues_per_paced_dispatch": round(reasons.get("paced", 0) / len(paced), 3) if paced else 0.0,
        "requeues_by_reason": dict(reasons),
        "dispatch_invocations_per_dispatch": round(invocations / landed, 2),
        "sqs_sends_per_dispatch": round(
            sum(v for k, v in outcomes.calls.items() if k.startswith("sqs.Send")) / landed, 2
        ),
        "aws_calls_per_dispatch": round(sum(outcomes.calls.values()) / landed, 2),
        "aws_calls_by_operation": dict(sorted(outcomes.calls.items())),
        "budget": _within_budget(seen.get("times_by_repo") or {}, rates),
        "drain_s": round(drained_s, 1),
        "relay_metrics": h.metrics_delta(before, ("Dispatch",)),
        "relay_errors": h.errors_in(bench.out.lines_between(start_off)),
    }


def measure(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Both runs in this process; the first level's warm run is `warm`, the others `warm_<level>`."""
    levels = [level.strip() for level in args.dispatch_levels.split(",") if level.strip()]
    result: dict[str, Any] = {}
    for level in levels:
        bench.out.say(
            f"   warm: {args.dispatch_events} events x {args.dispatch_targets} {level} repositories, "
            f"{args.dispatch_repeats} times"
        )
        # The machine's speed drifts: each level is measured `repeats` times on fresh stacks, the median CPU's run kept.
        runs = sorted(
            (warm_cost(bench, args, level) for _ in range(max(1, args.dispatch_repeats))),
            key=lambda run: float(run["warm"]["relay_cpu_ms_per_dispatch"]),
        )
        run = runs[len(runs) // 2]
        run["repeats_relay_cpu_ms_per_dispatch"] = [r["warm"]["relay_cpu_ms_per_dispatch"] for r in runs]
        result["warm" if level == levels[0] else f"warm_{level}"] = run
    if args.full:
        bench.out.say(f"   backlog: {args.dispatch_backlog_events} events x {args.dispatch_backlog_repos} repositories")
        result["backlog"] = backlog(bench, args)
    return result


def dispatch_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """This checkout, then the baseline if asked, each in a process of its own."""
    passed = {k: v for k, v in vars(args).items() if k.startswith("dispatch_") and k != "dispatch_baseline"}
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in passed.items()]
    argv += ["--full"] if args.full else []
    result = h.in_own_process(__file__, argv)
    if result.get("skipped"):
        raise RuntimeError(f"section 10: {result['reason']}")
    if ref := args.dispatch_baseline:
        bench.out.say(f"   baseline {ref}, in a process of its own")
        result["baseline"] = h.at_baseline(ref, lambda _, code: h.in_own_process(__file__, argv, code))
    return {"dispatch": result}


if __name__ == "__main__":
    raise SystemExit(h.child_main(add_arguments, measure))
