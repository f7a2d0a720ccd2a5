"""Every section of `make bench` at a tiny size, run as `make bench` runs it (bench/run.py in a process of its own):
each writes what bench/summary.py and docs/cost_model.py read, and its own checks hold. Its figures are not asserted:
they are the bench's to measure. The soak has its own small run (tests/e2e/test_soak_small.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

# Each section's run: what `make bench` measures, at the smallest size that still takes every path once.
SMALL = {
    "ingest": "--samples 5 --warmup 1",
    "throughput": "--events 2 --targets 2",
    "callbacks": "--callbacks 5 --callback-duplicates 5 --callback-window 12",
    "checkruns": "--check-events 1 --check-targets 1 --check-jobs 1",
    "comment": "--comment-events 1 --comment-targets 1 --comment-jobs 1",
    "reporter": "--reporter-commits 6 --reporter-repos 2",
    "checkbudget": "--full --checkbudget-loads 1 --checkbudget-budget-s 3 --checkbudget-drain-hours 1",
    "dispatch": "--dispatch-events 2 --dispatch-targets 2 --dispatch-repeats 1 --dispatch-levels L1,L4 --full "
    "--dispatch-baseline HEAD --dispatch-backlog-events 3 --dispatch-backlog-repos 2",
    "pages": "--pages-days 1 --pages-loads 1 --pages-runs 1",
    "regressions": "--regression-pushes 16 --regression-repos 2 --regression-missed 2",
    "runs": "--run-drops 5 --run-jobs 2",
    "inbound": "--inbound-events 3 --dispatch-baseline HEAD",
    "coldstart": "--coldstart-runs 1",
}
# The seeds the sections draw from (fixed in bench/): a failure names them, so a run can be repeated as it was.
SEEDS = {
    "reporter": "sequence seed 7, stream retries seed 11",
    "regressions": "branch and results seed 31",
    "checkbudget": "arrivals seed 12, jobs seed 13",
}


@cache
def section(name: str) -> tuple[dict[str, Any], str]:
    """The section's JSON and what the run printed (one run per section and test session)."""
    out = Path(tempfile.mkdtemp(prefix=f"crcr-bench-{name}-")) / "results.json"
    command = [sys.executable, str(ROOT / "bench" / "run.py"), "--only", name, "--out", str(out), *SMALL[name].split()]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    printed = f"$ {' '.join(command[1:])}\n{SEEDS.get(name, '')}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    assert proc.returncode == 0, printed
    return json.loads(out.read_text()), printed


def check_ingest(r: dict[str, Any]) -> None:
    for n in ("1", "10", "100"):
        row = r["ingest_latency"]["isolated"][n]
        assert row["samples"] == 5 and row["non_202"] == {} and row["pollers_exited_cleanly"]


def check_throughput(r: dict[str, Any]) -> None:
    tp, gh = r["throughput"], r["github_requests"]
    assert (tp["dispatches_received"], tp["duplicates"], tp["missing"]) == (4, 0, 0)
    assert gh["meets_target"] and gh["unexpected_endpoints"] == gh["double_internal_errors"] == 0
    assert tp["write_units_per_dispatch"] > 0 and tp["aws_calls_per_dispatch"]


def check_callbacks(r: dict[str, Any]) -> None:
    cb, issuer = r["callback_latency"], r["oidc_issuer_requests"]
    assert cb["recorded"]["outcomes"] == {"200 recorded": 5} and cb["duplicate"]["outcomes"] == {"200 duplicate": 5}
    assert cb["results_table_rows"] == cb["results_table_rows_expected"]
    assert cb["github_requests_during_callbacks"] == 0 and cb["write_units"]["both"] > 0
    assert issuer["cold_first_callback"]["jwks"] == 1 and issuer["warm"]["requests"]["jwks"] == 0


def check_checkruns(r: dict[str, Any]) -> None:
    for mode in ("per_job", "per_repo"):
        row = r["check_run_writes"][mode]
        assert row["all_completed"] and row["refused_writes"] == 0 and row["writes_per_repository_per_commit"] > 0


def check_comment(r: dict[str, Any]) -> None:
    on = r["pr_comment"]["per_event"]["on"]
    assert on["comments_per_pr"] == [1] and on["comment_writes_per_event"] == 1
    assert on["checks_function"]["records_per_dispatch"] > 0 and on["checks_function"]["write_units_per_dispatch"] > 0
    assert set(r["late_label"]["seconds_to_check_run"]) == {
        "crcr/bench-org-0/repo-0",
        "crcr/bench-org-0/repo-0/CI/build",
    }


def check_reporter(r: dict[str, Any]) -> None:
    rep = r["reporter"]
    problems = {k: rep[k]["verification"]["problems"] for k in ("off", "on", "on_health")}
    assert rep["all_verified"], problems
    assert rep["health_adds"]["computations"] > 0


def check_checkbudget(r: dict[str, Any]) -> None:
    for row in r["check_run_budget"]["settings"]:
        assert row["writes"]["total"] > 0 and row["writes"]["refused"] == 0 and row["dead_lettered"] == 0
        assert row["max_writes_in_any_3600_s"] <= 500


def check_dispatch(r: dict[str, Any]) -> None:
    for code in (r["dispatch"], r["dispatch"]["baseline"]):
        for run in (code["warm"], code["warm_L4"]):
            assert (run["dispatches_landed"], run["duplicates"], run["refused"]) == (6, 0, 0), run
            assert run["warm"]["aws_calls_per_dispatch_total"] > 0 and run["relay_errors"] == 0
        backlog = code["backlog"]
        assert (backlog["dispatches"], backlog["duplicates"], backlog["budget"]["within"]) == (6, 0, True)


def check_pages(r: dict[str, Any]) -> None:
    for page in ("overview", "pr"):
        assert r["hud_pages"]["1x_1d"][page]["bytes_documents"] > 0


def check_regressions(r: dict[str, Any]) -> None:
    rg = r["regressions"]
    # The kept ranges are those the results call for, blamelists over every commit (missed pushes compared once).
    assert rg["verification"]["ok"], rg["verification"]
    assert rg["regressions_opened"] > 0 and rg["compare_calls"] == rg["ranges_over_missed_pushes"] > 0, rg
    assert rg["aws_calls_per_branch_result_added"] > 0 and rg["branch_log_aws_calls_per_push"], rg


def check_runs(r: dict[str, Any]) -> None:
    runs = r["runs"]
    # A non-relay run or job event costs no AWS call at all; a completed run is one jobs listing, every job recorded.
    assert runs["dropped_workflow_job"]["aws_calls"] == runs["dropped_workflow_run"]["aws_calls"] == 0, runs
    assert runs["reconciled_run"]["jobs_listings_per_run"] == 1.0, runs
    assert runs["reconciled_run"]["jobs_recorded"] == 2 * runs["reconciled_run"]["jobs_per_run"], runs


def check_inbound(r: dict[str, Any]) -> None:
    for code in ("now", "baseline"):  # HEAD: the door itself, on both sides
        row = r["inbound_door"][code]
        assert row["callback"]["aws_calls"] > 0 and row["run_events_recorded"] == 3 + 1, row  # and the warm-up
        assert row["run_event"]["runs_queue_messages"] == 1.0, row
        # An outsider's run event: dropped at the webhook, nothing queued, nothing asked of AWS.
        outsider = row["outsider_run_event"]
        assert outsider["runs_queue_messages"] == outsider["webhook"]["aws_calls"] == 0, row


def check_coldstart(r: dict[str, Any]) -> None:
    functions = r["cold_start"]["source"]["functions"]
    assert all("median_ms" in row for row in functions.values()), functions
    assert all("rss_init_median_mb" in functions[role] for role in ("webhook", "dispatch", "callback", "reporter"))


def load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", list(SMALL))
def test_each_section_runs_small_and_its_checks_hold(name: str) -> None:
    results, printed = section(name)
    try:
        globals()[f"check_{name}"](results)
    except (AssertionError, KeyError) as exc:
        raise AssertionError(f"{name}: {exc!r}\n{printed}") from exc


def test_the_summary_and_the_cost_model_read_every_section() -> None:
    """bench/summary.py prints, and docs/cost_model.py finds every key it reads, in the sections' JSON together."""
    merged: dict[str, Any] = {}
    for name in SMALL:
        merged |= section(name)[0]
    figures = load("cost_model", ROOT / "docs" / "cost_model.py").figures_from_bench(merged)
    assert figures.reporter_verified and figures.dispatch.aws_calls
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        load("bench_summary", ROOT / "bench" / "summary.py").print_summary(
            merged | {"phase_seconds": {}, "duration_s": 0}
        )
    assert "10 dispatcher" in printed.getvalue() and " 5 cold start" in printed.getvalue()
