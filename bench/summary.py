"""The one-screen summary `make bench` prints at the end: each section's key figures; every figure is in the JSON."""

from __future__ import annotations

from typing import Any

FUNCTIONS = ("webhook", "planner", "dispatch", "callback", "reporter", "checks", "dispatched")


def _get(doc: Any, path: str, default: Any = None) -> Any:
    for part in path.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return default
        doc = doc[part]
    return doc


def print_summary(results: dict[str, Any]) -> None:
    git, m = results["git"], results["machine"]
    print(f"\n== crcr bench: commit {git['commit'][:12]}{' (dirty)' if git['dirty'] else ''}, {results['timestamp']}")
    print(f"   python {m['python']}, {m['cpu_count']} CPUs, load at start {m['load_average_at_start']}")
    if git.get("commit_changed_during_run"):
        print(f"   WARNING: HEAD moved to {git['commit_at_end'][:12]} during the run: sections measured different code")
    if iso := _get(results, "ingest_latency.isolated"):
        sizes = sorted((k for k in iso if k.isdigit()), key=int)
        shown = ", ".join(f"N={n} {iso[n]['p50_ms']:.1f}/{iso[n]['p99_ms']:.1f}" for n in sizes)
        print(f" 1 webhook ack p50/p99 ms by allowlist size: {shown}")
    if gh := results.get("github_requests"):
        warm, cold = gh["warm"]["per_event_target"]["total"], gh["cold"]["per_event_target"]["total"]
        print(f" 2 GitHub requests per dispatch: warm {warm:.2f} (<= 1.3: {gh['meets_target']}), cold {cold:.2f}")
    if tp := results.get("throughput"):
        print(
            f" 3 throughput: {tp['dispatches_received']}/{tp['dispatches_expected']} dispatches in "
            f"{tp['first_post_to_last_dispatch_s']} s, duplicates {tp['duplicates']}, missing {tp['missing']}; "
            f"AWS calls per dispatch (webhook + planner + dispatcher) {sum(tp['aws_calls_per_dispatch'].values()):.2f}"
        )
    if cb := results.get("callback_latency"):
        print(
            f" 4 callbacks: recorded p50 {cb['recorded']['p50_ms']:.1f} ms, AWS calls "
            f"{cb['recorded']['aws_calls']['total_per_callback']} (duplicate "
            f"{cb['duplicate']['aws_calls']['total_per_callback']}); write units per job (its two callbacks) "
            f"{cb['write_units']['both']}; results rows {cb['results_table_rows']}/{cb['results_table_rows_expected']}"
        )
    if cw := results.get("check_run_writes"):
        modes = [m for m in ("per_job", "per_repo") if m in cw]
        writes = ", ".join(f"{m} {cw[m]['writes_per_repository_per_commit']}" for m in modes)
        done = all(cw[m]["all_completed"] for m in modes)
        print(f" 6 check-run writes per repository and commit: {writes}; all completed: {done}")
    if pc := _get(results, "pr_comment.per_event.on"):
        cf = pc["checks_function"]
        print(
            f" 8 PR comment writes per event {pc['comment_writes_per_event']}, comments per PR "
            f"{pc['comments_per_pr']}; ChecksFunction per L4 dispatch: {cf['records_per_dispatch']} records, "
            f"{sum(cf['aws_calls_per_record'].values()):.2f} AWS calls and {cf['cpu_ms_per_record']} CPU ms per "
            f"record, {cf['write_units_per_dispatch']} write units"
        )
        for label, f in (("   now", cf), (f"   at {_get(results, 'pr_comment.baseline.ref')}", _get(
                results, "pr_comment.baseline.per_event.on.checks_function", {}))):  # fmt: skip
            if "aws_calls_per_upstream_write" in f:
                print(f"{label}: per upstream write {f['aws_calls_per_upstream_write']} AWS calls, "
                      f"{f['checks_queue_messages_per_upstream_write']} ChecksQueue messages")  # fmt: skip
    if (late := results.get("late_label")) is not None:
        then = _get(late, "baseline.mirrored_s")
        print(f" 8 a late ciflow label's check runs (an L4 run settling): {late['mirrored_s']} s"
              + (f" (at {late['baseline']['ref']}: {then} s)" if then is not None else ""))  # fmt: skip
    if cbud := results.get("check_run_budget"):
        shown = ", ".join(
            f"{r['load']} {r['repository_runs_completed']}/{r['repository_runs_dispatched']} repository runs, "
            f"at most {r['max_writes_in_any_3600_s']} writes in any hour"
            for r in cbud["settings"]
            if r["setting"] == "auto"
        )
        print(f" 9 check-run budget, auto: {shown}")
    if rp := results.get("reporter"):
        print(
            f" 7 reporter per change: AWS calls {rp['on']['aws_calls_per_change']['total']} (off "
            f"{rp['off']['aws_calls_per_change']['total']}), CPU {rp['on']['cpu_ms_per_change']} ms; "
            f"verified {rp['all_verified']}"
        )
    if rg := results.get("regressions"):
        print(
            f"13 regression tracking per branch result: +{rg['aws_calls_per_branch_result_added']} AWS calls, "
            f"+{rg['cpu_ms_per_branch_result_added']} CPU ms; {rg['compare_calls']} compare calls for "
            f"{rg['regressions_opened']} regressions; verified {rg['verification']['ok']}"
        )
    if hp := results.get("hud_pages"):
        shown = "; ".join(
            f"{k.replace('_', ' ')} overview {v['overview']['bytes_documents']:,}/{v['overview']['ready_ms_p50']:.0f} "
            f"PR {v['pr']['bytes_documents']:,}/{v['pr']['ready_ms_p50']:.0f}"
            for k, v in hp.items()
            if k.endswith("d") and isinstance(v, dict)
        )
        print(f"11 HUD pages, documents fetched (bytes) and ready (ms), by load and days held: {shown}")
    _dispatcher(results.get("dispatch"))
    _cold(results.get("cold_start") or {})
    print(f"   phases (s): {results.get('phase_seconds')}, {results['duration_s']} s")


def _dispatcher(section: dict[str, Any] | None) -> None:
    if not section:
        return
    base = section.get("baseline") or {}
    runs = ([(f"before ({base['commit'][:8]})", base)] if "commit" in base else []) + [("now", section)]
    print("10 dispatcher, per warm dispatch:   AWS calls  CPU ms (median of runs)  write units")
    for name, run in runs:
        for key in sorted(k for k in run if k.startswith("warm")):
            w, spread = run[key]["warm"], run[key]["repeats_relay_cpu_ms_per_dispatch"]
            cpu = f"{w['relay_cpu_ms_per_dispatch']:>6} ({min(spread)}-{max(spread)})"
            print(
                f"   {name:19} {run[key]['level']:3} {w['aws_calls_per_dispatch_total']:>9}  {cpu}  "
                f"{w['write_units_per_dispatch']:>11}"
            )
        if b := run.get("backlog"):
            print(
                f"   {name:19} backlog: {b['dispatches']}/{b['dispatches_expected']} dispatches, {b['duplicates']} "
                f"duplicates, {b['requeues_per_paced_dispatch']} re-queues per paced dispatch, budget "
                f"{'kept' if b['budget']['within'] else 'EXCEEDED'}, drained in {b['drain_s']} s"
            )
    if base.get("skipped"):
        print(f"   baseline skipped: {base.get('reason')}")


def _cold(cold: dict[str, Any]) -> None:
    if not (src := _get(cold, "source.functions", {})):
        return
    base, ref = _get(cold, "baseline.functions", {}), _get(cold, "baseline.commit", "")[:8]
    print(f" 5 cold start, median ms import + first build (CPU), peak RSS MB{f'; before ({ref})' if base else ''}:")
    cells = []
    for role in (r for r in FUNCTIONS if "median_ms" in (src.get(r) or {})):
        now, then = src[role], base.get(role) or {}
        cell = f"{role} {now['median_ms']:.0f}+{now.get('init_cpu_median_ms', 0):.0f}"
        cell += f" {now.get('rss_init_median_mb', 0):.0f}MB"
        if "median_ms" in then:
            cell += f" (was {then['median_ms']:.0f}+{then.get('init_cpu_median_ms', 0):.0f})"
        cells.append(cell)
    for i in range(0, len(cells), 3):
        print("   " + "; ".join(cells[i : i + 3]))
