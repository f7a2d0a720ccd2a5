"""docs/cost_model.py: the cost page is what the script makes of the bench's figures, the bench's JSON is read
through one mapping that names a missing key, and the model scales as its inputs say."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "docs" / "cost_model.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cost_model", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["cost_model"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


cost = load()


def bench() -> dict[str, Any]:
    """The parts of `make bench`'s JSON the model reads, shaped as bench/run.py writes them, with round numbers."""
    return {
        "timestamp": "2026-12-01T00:00:00+00:00",
        "git": {"commit": "0" * 40, "dirty": False},
        "ingest_latency": {"isolated": {"1": {"mean_ms": 9.0}, "100": {"mean_ms": 10.0}, "p50_ratio_100_vs_1": 1.1}},
        "github_requests": {"warm": {"per_event_target": {"total": 1.0}}},
        "throughput": {
            "targets": 10,
            "events": 15,
            "dispatches_received": 150,
            "cpu_s_during_window": {"relay_process": 1.5},
            "invocations": {"WebhookFunction": 16, "PlannerFunction": 16, "DispatchFunction": 32},
            "aws_calls_per_dispatch": {"dynamodb.GetItem": 1.0, "dynamodb.UpdateItem": 1.0, "sqs.SendMessage": 0.5},
            "write_units_per_dispatch": 3.0,
        },
        "dispatch": {
            "warm": {"warm": {"write_units_per_dispatch": 3.0}},
            "warm_L4": {"warm": {"write_units_per_dispatch": 4.0}},
        },
        "callback_latency": {
            "recorded": {
                "aws_calls": {"per_callback": {"dynamodb.GetItem": 2.0, "dynamodb.PutItem": 1.0, "s3.PutObject": 0.5}}
            },
            "warm_window": {"callbacks": 1000, "cpu_s": {"relay_process": 5.0}},
            "write_units": {"both": 10.0},
        },
        "reporter": {
            "on": {
                "aws_calls_per_change": {"s3.PutObject": 1.0, "s3.GetObject": 0.5, "total": 1.5},
                "cpu_ms_per_change": 2.0,
                "records_delivered": 100,
                "batches": 10,
            },
            "health_adds": {"aws_calls_per_change_at_stream_pace": 0.25},
            "all_verified": True,
        },
        "check_run_writes": {
            "per_job": {
                "events": 2,
                "repositories_per_event": 3,
                "writes_per_repository_per_commit": 7.0,
                "relay_metrics": {"CheckRunPaced": 12},
            }
        },
        "pr_comment": {
            "per_event": {
                "on": {
                    "comment_writes_per_event": 1.0,
                    "writes_per_event": 12.0,
                    "repositories_per_event": 3,
                    "checks_function": {
                        "records_per_dispatch": 8.0,
                        "records_by_source_per_dispatch": {"aws:sqs": 6.0, "aws:dynamodb": 2.0},
                        "invocations_per_dispatch": 4.0,
                        "aws_calls_per_record": {"dynamodb.GetItem": 2.0, "dynamodb.UpdateItem": 0.5},
                        "cpu_ms_per_record": 1.5,
                        "write_units_per_dispatch": 5.0,
                    },
                }
            }
        },
        "cold_start": {"source": {"functions": {"dispatch": {"rss_init_median_mb": 70.0}, "hud": {"error": "x"}}}},
        "runs": {
            "dropped_workflow_job": {"aws_calls": 0.0, "cpu_ms": 0.3},
            "dropped_workflow_run": {"aws_calls": 0.0, "cpu_ms": 0.4},
            "reconciled_run": {"jobs_per_run": 4, "jobs_listings_per_run": 1.0, "github_requests_per_run": 2.0}
            | {"aws_calls_per_run": 26.5, "cpu_ms_per_run": 165.0},
        },
        "regressions": {
            "sequence": {"pushes": 60, "pushes_missed": 12},
            "on": {"aws_calls": {"dynamodb.Query": 2.0, "dynamodb.PutItem": 0.5, "s3.PutObject": 1.5, "total": 4.0}},
            "off": {"aws_calls": {"s3.PutObject": 1.0, "total": 1.0}},
            "cpu_ms_per_branch_result_added": 20.0,
            "write_units_per_branch_result_added": 1.5,
            "branch_log_aws_calls_per_push": {"dynamodb.BatchWriteItem": 1.0},
            "branch_log_write_units_per_push": 4.0,
            "regressions_opened": 9,
            "ranges_over_missed_pushes": 2,
            "compare_calls": 2,
        },
    }


def test_the_cost_page_and_the_summary_are_what_the_script_makes() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    page = (ROOT / "docs" / "cost.md").read_text(encoding="utf-8")
    for row in ("Lambda GB-seconds", "SQS requests", "DynamoDB write request units", "S3 PUT requests",
                "API Gateway requests", "**total**"):  # fmt: skip
        assert row in page
    assert "10 repositories" in page and "100 repositories" in page


def test_check_fails_on_a_stale_page_and_names_it(tmp_path: Path) -> None:
    doc, operations = tmp_path / "cost.md", tmp_path / "operations.md"
    doc.write_text((ROOT / "docs" / "cost.md").read_text(encoding="utf-8").replace("$", "€", 1))
    operations.write_text((ROOT / "docs" / "operations.md").read_text(encoding="utf-8"))
    args = ["--check", "--doc", str(doc), "--operations", str(operations)]
    assert cost.main(args) == 1
    assert cost.main([*args[:1], "--doc", str(ROOT / "docs" / "cost.md"), "--operations", str(operations)]) == 0


def test_the_mapping_reads_the_bench_and_leaves_out_what_belongs_elsewhere() -> None:
    f = cost.figures_from_bench(bench())
    assert f.measured_targets == 10
    assert f.dispatch.cpu_ms == pytest.approx(10.0)  # 1.5 s over 150 dispatches
    assert f.dispatch.invocations == {"DispatchFunction": pytest.approx(32 / 160)}  # cold event included
    assert f.invocations_per_event == {"WebhookFunction": 1.0, "PlannerFunction": 1.0}
    assert "s3.PutObject" not in f.callback.aws_calls  # the reporter's, in the same window
    assert f.callback.cpu_ms == pytest.approx(5.0)
    assert f.reporter.aws_calls == {"s3.PutObject": 1.0, "s3.GetObject": 0.5, "dynamodb.Query": 0.25}
    assert f.reporter.invocations == {"ReporterFunction": pytest.approx(0.1)}
    assert f.check_paced_per_dispatch == pytest.approx(2.0)
    assert f.webhook_ack_ms == 10.0  # the largest allowlist
    assert f.dispatch.write_units == pytest.approx(4.0)  # 3 in the throughput run at L1, and L4's start watch
    assert f.callback.write_units == pytest.approx(5.0)  # a job's two callbacks, 10 units
    assert f.checks.aws_calls == {"dynamodb.GetItem": 16.0, "dynamodb.UpdateItem": 4.0}  # per dispatch: 8 records
    assert f.checks.cpu_ms == pytest.approx(12.0) and f.checks.github_requests == pytest.approx(4.0)
    assert (f.checks.write_units, f.checks_sqs_records) == (5.0, 6.0)
    assert f.peak_rss_mb == {"DispatchFunction": 70.0}  # a function whose probe failed has none
    assert "throughput.aws_calls_per_dispatch" in f.keys_read
    # what is kept in docs/cost_inputs.json reads back the same
    kept = json.loads(json.dumps(cost.asdict(f)))
    assert cost.figures_from_inputs(kept) == f


def test_a_missing_bench_key_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = bench()
    del results["throughput"]["aws_calls_per_dispatch"]
    with pytest.raises(cost.BenchKeyMissing, match=r"throughput\.aws_calls_per_dispatch"):
        cost.figures_from_bench(results)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    assert cost.main(["--results", str(path), "--check"]) == 2
    assert "throughput.aws_calls_per_dispatch" in capsys.readouterr().err


def test_costs_follow_the_measured_calls_and_the_repositories() -> None:
    memory = cost.memory_gb()
    assert memory["DispatchFunction"] == 0.25 and memory["LevelFunction"] == 0.5  # template.yaml's MemorySize
    base = cost.figures_from_bench(bench())
    at10, at100 = (cost.total(cost.per_event(base, n, memory)) for n in (10, 100))
    # one webhook per event, one HTTP request per callback: 1 + n x jobs x callbacks
    per_dispatch = cost.JOBS_PER_DISPATCH * cost.CALLBACKS_PER_JOB * cost.REPORTING_SHARE
    assert at10.http_api == pytest.approx(1 + 10 * per_dispatch)
    assert at100.http_api == pytest.approx(1 + 100 * per_dispatch)
    # Everything else grows with the dispatches, but for the branch log: once per push, whatever the downstreams.
    log = cost.PUSH_SHARE * 4.0
    assert at100.wru - log == pytest.approx(10 * (at10.wru - log))
    more = copy.deepcopy(bench())
    more["throughput"]["aws_calls_per_dispatch"]["dynamodb.UpdateItem"] = 2.0  # one write more per dispatch
    more["throughput"]["write_units_per_dispatch"] = 5.0  # of two units
    heavier = cost.total(cost.per_event(cost.figures_from_bench(more), 100, memory))
    assert heavier.wru - at100.wru == pytest.approx(100 * 2.0)  # the measured units, not the call count
    assert heavier.lambda_gb_s - at100.lambda_gb_s == pytest.approx(100 * cost.AWS_CALL_MS / 1000 * 0.25)
    costs = at100.costs()
    assert costs["S3 PUT requests"] == pytest.approx(at100.s3_put * 0.005 / 1000)
    assert costs["DynamoDB write request units"] == pytest.approx(at100.wru * 0.625 / 1e6)


def test_regression_tracking_is_priced_for_the_pushes_share_of_events() -> None:
    f = cost.figures_from_bench(bench())
    # What tracking adds over the same reporter without it, per branch job result.
    assert f.regressions is not None and f.branch_log is not None
    assert f.regressions.aws_calls == {"dynamodb.Query": 2.0, "dynamodb.PutItem": 0.5, "s3.PutObject": 0.5}
    flows = cost.per_event(f, 10, cost.memory_gb())
    tracking = flows[cost.REGRESSIONS_FLOW]
    results = cost.PUSH_SHARE * 10 * cost.REPORTING_SHARE * cost.JOBS_PER_DISPATCH
    assert tracking.rru == pytest.approx(results * 2.0 * cost.RRU_PER_READ)
    assert tracking.wru == pytest.approx(results * 1.5 + cost.PUSH_SHARE * 4.0)  # measured units, branch log too
    assert tracking.s3_put == pytest.approx(results * 0.5)
    assert tracking.lambda_requests == 0  # the reporter's and planner's own invocations, already counted
    page, _ = cost.render(f)
    assert "regression tracking on minus off" in page and "2 for 9 regressions opened" in page


def test_an_unknown_call_is_shown_not_dropped() -> None:
    usage = cost.calls_usage({"dynamodb.TransactGetItems": 1.0, "secretsmanager.GetSecretValue": 1.0}, 5)
    assert usage.other_calls == {"dynamodb.TransactGetItems": 5.0}


def test_a_transaction_bills_its_two_items_twice() -> None:
    # Measured flows count each item once from the streams: a transaction adds the second unit of each.
    measured = cost.calls_usage({"dynamodb.TransactWriteItems": 1.0}, 5, write_units=3.0)
    assert (measured.wru, measured.other_calls) == (5 * 3.0 + 5 * 2.0, {})
    assert cost.calls_usage({"dynamodb.TransactWriteItems": 1.0}, 5).wru == 5 * 4.0


def test_arm64_and_a_smaller_memory_are_priced_as_lambda_bills_them() -> None:
    f = cost.figures_from_bench(bench())
    usage = cost.total(cost.per_event(f, 10, cost.memory_gb()))
    assert usage.costs("arm64")["Lambda GB-seconds"] == pytest.approx(usage.lambda_gb_s * 0.0000133334)
    assert usage.costs("x86_64")["Lambda GB-seconds"] == pytest.approx(usage.lambda_gb_s * 0.0000166667)
    # Below 1,769 MB the CPU stretches and the waits do not: at a quarter of a vCPU the dispatch's 10 ms of CPU
    # bill about 4 times over, its AWS calls and GitHub request once.
    waits = sum(f.dispatch.aws_calls.values()) * cost.AWS_CALL_MS + f.dispatch.github_requests * cost.GITHUB_CALL_MS
    assert cost.billed_ms(f.dispatch, 0.25) == pytest.approx(10.0 * 1769 / 256 + waits)
    assert cost.billed_ms(f.dispatch, 2.0) == pytest.approx(10.0 + waits)
    rows = cost.levers(f)
    configured, *others = rows
    assert configured[1] == cost.architecture() == "arm64"
    assert all(row[2][n] > configured[2][n] for row in others for n in cost.REPOSITORIES)  # each lever saves
