"""The one-screen summary `make bench` prints at the end: each section's key figures; every figure is in the JSON."""

from __future__ import annotations

from typing import Any

FUNCTIONS = ("webhook", "planner", "dispatch", "callback", "reporter", "checks")


def _get(doc: Any, path: str, default: Any = None) -> Any:
    for part in path.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return default
        doc = doc[part]
    return doc


def print_summary(results: dict[str, Any]) -> None:
    git, machine = results["git"], results["machine"]
    print(f"\n== crcr bench: commit {git['commit'][:12]}{' (dirty)' if git['dirty'] else ''}, {results['timestamp']}")
    print(
        f"   python {machine['python']}, {machine['cpu_count']} CPUs, load at start "
        f"{machine.get('load_average_at_start')}, {results['duration_s']} s"
    )
    if git.get("commit_changed_during_run"):
        print(f"   WARNING: HEAD moved to {git['commit_at_end'][:12]} during the run: sections measured different code")
    iso = _get(results, "ingest_latency.isolated", {})
    if sizes := sorted((k for k in iso if k.isdigit()), key=int):
        shown = ", ".join(f"N={n} {iso[n]['p50_ms']:.1f}/{iso[n]['p99_ms']:.1f}" for n in sizes)
        print(f" 1 webhook ack p50/p99 ms by allowlist size: {shown}")
    gh = results.get("github_requests")
    if gh:
        print(
            f" 2 GitHub requests per dispatch: warm {gh['warm']['per_event_target']['total']:.2f} "
            f"(<= 1.3: {'met' if gh['meets_target'] else 'NOT met'}), "
            f"cold {gh['cold']['per_event_target']['total']:.2f}"
        )
    tp = results.get("throughput")
    if tp:
        print(
            f" 3 throughput: {tp['dispatches_received']}/{tp['dispatches_expected']} dispatches in "
            f"{tp['first_post_to_last_dispatch_s']} s, duplicates {tp['duplicates']}, missing {tp['missing']}; "
            f"AWS calls per dispatch (webhook + planner + dispatcher) {sum(tp['aws_calls_per_dispatch'].values()):.2f}"
        )
    cb = results.get("callback_latency")
    if cb:
        wu = cb.get("write_units") or {}
        print(
            f" 4 callbacks: recorded p50 {cb['recorded']['p50_ms']:.1f} ms, AWS calls "
            f"{cb['recorded']['aws_calls']['total_per_callback']} (duplicate "
            f"{cb['duplicate']['aws_calls']['total_per_callback']}); write units per job (its two callbacks) "
            f"{wu.get('both', '-')}; results rows {cb['results_table_rows']}/{cb['results_table_rows_expected']}"
        )
    cw = results.get("check_run_writes")
    if cw:
        print(
            " 6 check-run writes per repository and commit: "
            + ", ".join(f"{m} {cw[m]['writes_per_repository_per_commit']}" for m in ("per_job", "per_repo") if m in cw)
            + f"; all completed: {all(cw[m]['all_completed'] for m in ('per_job', 'per_repo') if m in cw)}"
        )
    pc = _get(results, "pr_comment.per_event.on")
    if pc:
        cf = pc.get("checks_function") or {}
        calls = sum((cf.get("aws_calls_per_record") or {}).values())
        print(
            f" 8 PR comment writes per event {pc['comment_writes_per_event']}, comments per PR "
            f"{pc['comments_per_pr']}; "
            f"ChecksFunction per L4 dispatch: {cf.get('records_per_dispatch')} records, {calls:.2f} AWS calls and "
            f"{cf.get('cpu_ms_per_record')} CPU ms per record, {cf.get('write_units_per_dispatch')} write units"
        )
    cbud = results.get("check_run_budget")
    if cbud:
        rows = [r for r in cbud.get("settings", []) if r.get("setting") == "auto"]
        print(
            " 9 check-run budget, auto: "
            + ", ".join(
                f"{r['load']} {r['repository_runs_completed']}/{r['repository_runs_dispatched']} repository runs, "
                f"at most {r['max_writes_in_any_3600_s']} writes in any hour"
                for r in rows
            )
        )
    rp = results.get("reporter")
    if rp:
        print(
            f" 7 reporter per change: AWS calls {_get(rp, 'on.aws_calls_per_change.total')} (off "
            f"{_get(rp, 'off.aws_calls_per_change.total')}), CPU {_get(rp, 'on.cpu_ms_per_change')} ms; "
            f"verified {rp.get('all_verified')}"
        )
    hp = results.get("hud_pages")
    if hp:
        print(
            "11 HUD pages, documents fetched (bytes) and ready (ms), by load and days held: "
            + "; ".join(
                f"{k.replace('_', ' ')} overview {v['overview']['bytes_documents']:,}/"
                f"{v['overview']['ready_ms_p50']:.0f} PR {v['pr']['bytes_documents']:,}/{v['pr']['ready_ms_p50']:.0f}"
                for k, v in hp.items()
                if k.endswith("d") and isinstance(v, dict)
            )
        )
    _dispatcher(results.get("dispatch"))
    _cold(results.get("cold_start") or {})
    print(f"   phases (s): {results.get('phase_seconds')}")


def _dispatcher(section: dict[str, Any] | None) -> None:
    if not section:
        return
    runs = [("now", section)]
    base = section.get("baseline")
    if isinstance(base, dict) and not base.get("skipped"):
        runs.insert(0, (f"before ({base['commit'][:8]})", base))
    print("10 dispatcher, per warm dispatch:   AWS calls  CPU ms (median of runs)  write units")
    for name, run in runs:
        for key in sorted(k for k in run if k.startswith("warm")):
            w = run[key]["warm"]
            print(
                f"   {name:19} {run[key].get('level', 'L1'):3} {w['aws_calls_per_dispatch_total']:>9}  "
                f"{w['relay_cpu_ms_per_dispatch']:>6} ({min(run[key]['repeats_relay_cpu_ms_per_dispatch'])}-"
                f"{max(run[key]['repeats_relay_cpu_ms_per_dispatch'])})  {w.get('write_units_per_dispatch', '-'):>11}"
            )
    if isinstance(base, dict) and base.get("skipped"):
        print(f"   baseline skipped: {base.get('reason')}")
    for name, run in runs:
        if b := run.get("backlog"):
            print(
                f"   {name:19} backlog: {b['dispatches']}/{b['dispatches_expected']} dispatches, {b['duplicates']} "
                f"duplicates, {b['requeues_per_paced_dispatch']} re-queues per paced dispatch, budget "
                f"{'kept' if b['budget']['within'] else 'EXCEEDED'}, drained in {b['drain_s']} s"
            )


def _cold(cold: dict[str, Any]) -> None:
    src = _get(cold, "source.functions", {})
    if not src:
        return
    base = _get(cold, "baseline.functions", {})
    ref = _get(cold, "baseline.commit", "")[:8]
    print(f" 5 cold start, median ms import + first build (CPU), peak RSS MB{f'; before ({ref})' if base else ''}:")
    cells = []
    for role in FUNCTIONS:
        now = src.get(role) or {}
        if "median_ms" not in now:
            continue
        cell = f"{role} {now['median_ms']:.0f}+{now.get('init_cpu_median_ms', 0):.0f}"
        cell += f" {now.get('rss_init_median_mb', 0):.0f}MB"
        then = base.get(role) or {}
        if "median_ms" in then:
            cell += f" (was {then['median_ms']:.0f}+{then.get('init_cpu_median_ms', 0):.0f})"
        cells.append(cell)
    for i in range(0, len(cells), 3):
        print("   " + "; ".join(cells[i : i + 3]))
