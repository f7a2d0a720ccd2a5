"""`make soak` at a tiny size: bench/soak.py run as a user runs it (its own moto, GitHub double with faults, two
SIGKILLs of `crcr local`, a dead webhook window, callbacks sent twice and out of order, GitHub's runs played with
their reports partly lost), and its report read.

30 events x 2 downstreams with one GitHub POST in ten carried out and answered only after the relay's timeout, so
duplicate dispatches do happen and each must be put down to the answer that caused it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

EVENTS, TARGETS = 30, 2


def load_soak() -> ModuleType:
    if "bench_soak" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_soak", ROOT / "bench" / "soak.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_soak"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["bench_soak"]


@pytest.fixture(scope="module")
def soak_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("soak") / "soak.json"
    command = [sys.executable, str(ROOT / "bench" / "soak.py"), "--events", str(EVENTS), "--targets", str(TARGETS)]
    command += ["--seed", "3", "--timeouts", "0.1", "--visibility-s", "8", "--reconcile-s", "2", "--timeout-s", "240"]
    proc = subprocess.run(
        [*command, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=420, check=False
    )
    return proc.returncode, json.loads(out.read_text()), proc.stdout + proc.stderr


def test_the_soak_passes_and_says_so(soak_run: tuple[int, dict[str, Any], str]) -> None:
    code, report, output = soak_run
    assert "error" not in report, output
    assert (code, report["verdict"]) == (0, "pass"), output
    assert "lost  " in output and "verdict" in output  # the table is printed


def test_every_dispatch_is_delivered_and_none_is_lost(soak_run: tuple[int, dict[str, Any], str]) -> None:
    _, report, _ = soak_run
    assert report["expected"] == report["delivered"] == EVENTS * TARGETS
    assert report["lost"] == []
    assert report["dead_lettered"] == []


def test_every_duplicate_names_the_ambiguous_answer_that_caused_it(soak_run: tuple[int, dict[str, Any], str]) -> None:
    _, report, _ = soak_run
    assert report["github"]["faults_injected"].get("timeout", 0) >= 1
    assert report["duplicate_count"] >= 1  # with one POST in ten timing out, some dispatches are sent twice
    for duplicate in report["duplicates"]:
        assert duplicate["explained"], duplicate
        assert len(duplicate["causes"]) == duplicate["accepted"] - 1
        assert all("timeout" in c or "killed" in c for c in duplicate["causes"]), duplicate
    assert report["unexplained_duplicates"] == 0
    # Only downstreams whose run-name does not carry the dispatch id are started twice: the others' runs were
    # looked up after the ambiguous answer and found.
    by_kind = report["duplicates_by_kind"]
    assert by_kind["run_name_carries_id"] == 0
    assert by_kind["no_id"] == report["duplicate_count"] >= 1
    assert all(not d["run_name_carries_id"] for d in report["duplicates"])
    assert report["ambiguous_on_id_downstreams"] >= 1  # the soak makes sure of one
    assert report["dispatch_runs_found"] >= 1


def test_every_result_sent_is_recorded_and_reaches_the_hud(soak_run: tuple[int, dict[str, Any], str]) -> None:
    _, report, _ = soak_run
    assert report["jobs"] == EVENTS * TARGETS
    # Every report sent (the runs GitHub played lose some of theirs on purpose) was recorded.
    assert report["results_sent"] == report["results_recorded"] > report["jobs"]
    assert report["results_problems"] == []
    assert report["hud_rows"] == report["jobs"]
    # PyTorch's HUD (the port, write-once after completion) took every push or counted it a duplicate (409).
    assert report["hud_refused"] == 0
    assert set(report["hud_answers"]) <= {"200", "201", "204", "409"}, report["hud_answers"]
    assert report["callbacks"]["posts"] > report["results_sent"]  # some were sent twice


def test_every_job_of_a_run_github_played_shows_githubs_conclusion(soak_run: tuple[int, dict[str, Any], str]) -> None:
    """Reports lost (whole runs', in_progress, completed), runs cancelled, runners lost, `completed` webhooks lost:
    the results table and PyTorch's HUD hold GitHub's conclusion for every job, none timed out, no 409."""
    _, report, _ = soak_run
    runs = report["runs"]
    assert runs["played"] == EVENTS  # every dispatch to the downstream whose run titles carry the dispatch id
    assert set(runs["fates"]) == {"finished", "cancelled", "lost_runner"}, runs["fates"]
    assert all(n >= 1 for n in runs["reports_lost"].values()), runs["reports_lost"]
    assert runs["completed_webhooks_lost"] >= 1
    assert runs["conclusions_not_githubs"] == [] and runs["conclusions_not_githubs_count"] == 0
    assert runs["false_timed_out"] == runs["hud_409"] == 0
    # At most one listing of the jobs per completed attempt (a listing answered 502 is asked again, and not counted
    # here). A run whose `completed` webhook was lost is listed when the sweeper asks about it, which may come after
    # its reports completed every job and the soak stopped: those alone may be missing.
    assert runs["most_jobs_listings_per_attempt"] == 1
    assert runs["played"] - runs["completed_webhooks_lost"] <= runs["jobs_listings"] <= runs["played"]
    assert report["relay_metrics"].get("RunEventDropped.reason=untitled", 0) >= EVENTS  # the other downstream's


def test_every_event_of_the_dead_window_is_dispatched_by_the_reconciler(
    soak_run: tuple[int, dict[str, Any], str],
) -> None:
    _, report, _ = soak_run
    window = [w for w in report["window"] if w["cause"] == "webhook window"]
    assert len(window) == report["webhook_window_events"] == 3
    for event in window:
        first, *later = event["attempts"]
        assert (first["status_code"], first["redelivery"]) == (500, False), event
        # A redelivery the reconciler asked for reached the relay; its answer may be lost to a kill after the relay
        # queued it (then the reconciler sees it queued and asks no more), so a 2xx is not required.
        assert any(a["redelivery"] for a in later), event
        assert event["redeliveries_asked"] >= 1
        assert event["dispatched_targets"] == TARGETS
        assert event["dispatched_by_reconciler"], event
    assert report["reconciler"]["redeliveries_accepted"] >= len(window)


def test_the_relay_was_killed_twice_and_its_costs_are_reported(soak_run: tuple[int, dict[str, Any], str]) -> None:
    _, report, _ = soak_run
    assert len(report["kills"]) == 2
    assert len(report["relay_processes"]) == 3
    assert [p["how"] for p in report["relay_processes"]] == [
        "SIGKILL mid-batch",
        "SIGKILL mid-batch",
        "SIGTERM at the end",
    ]
    assert report["relay_cpu_s"] > 0
    assert report["aws_calls"]["dispatch_phase_per_dispatch"]["per_unit"] > 0
    assert report["requeues_per_dispatch"] == round(report["dispatch_requeues"]["paced"] / report["delivered"], 3)
    assert report["dispatch_requeues"]["by_reason"].get("unavailable", 0) >= 1  # the 502s were retried


def test_the_verdict_fails_a_lost_dispatch_an_unexplained_duplicate_or_a_missed_window_event(
    soak_run: tuple[int, dict[str, Any], str],
) -> None:
    soak = load_soak()
    _, report, _ = soak_run
    assert soak.verdict(json.loads(json.dumps(report))) == 0
    for spoil in (
        lambda r: r.update(lost=["some-delivery -> soak-org-0/repo-0"]),
        lambda r: r.update(unexplained_duplicates=1),
        lambda r: r["duplicates_by_kind"].update(run_name_carries_id=1),
        lambda r: r.update(results_recorded=r["results_sent"] - 1),
        lambda r: r["window"][0].update(dispatched_by_reconciler=False),
        lambda r: r.update(kills=r["kills"][:1]),
        lambda r: r["runs"].update(conclusions_not_githubs_count=1),
        lambda r: r["runs"].update(false_timed_out=1),
        lambda r: r["runs"].update(most_jobs_listings_per_attempt=2),
    ):
        spoiled = json.loads(json.dumps(report))
        spoil(spoiled)
        assert soak.verdict(spoiled) == 1
        assert spoiled["verdict"].startswith("fail: ")


def test_the_soak_size_comes_from_the_environment(tmp_path: Path) -> None:
    """SOAK_EVENTS and SOAK_TARGETS override the 2,000 x 10 default (a run of 0 events is refused at once)."""
    env = {"SOAK_EVENTS": "0", "SOAK_TARGETS": "3", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--out", str(tmp_path / "s.json")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "0 events x 3 downstreams" in proc.stdout + proc.stderr
