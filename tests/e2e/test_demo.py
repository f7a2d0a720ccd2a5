"""`crcr demo`, as `make demo` runs it on a fresh clone: each job's transitions as they happen, then a PR whose
downstreams fail in the ways that matter, its comment and check runs, a dead letter and its redrive, and the HUD
pages to open."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e


def test_the_demo_shows_live_transitions_failures_their_verdicts_a_dead_letter_and_the_hud() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_", "POWERTOOLS_"))}
    done = subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "demo", "--keep", "0"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert out.rstrip().endswith("Demo passed.")
    assert [line for line in out.splitlines() if line.startswith("{")] == []  # words, not the functions' JSON logs
    # Live: each job's dispatched -> in_progress and in_progress -> completed, with its times, as it happens.
    assert re.search(r"riscv/pytorch-riscv-ci +L4 +build-and-test +dispatched -> in_progress +\(queued \d", out)
    assert re.search(r"riscv/pytorch-riscv-ci +L4 +build-and-test +in_progress -> completed success +\(ran ", out)
    # The failing PR: a new failure, one the branch broke first (rocm passed on the first push, fails on the PR's base:
    # a regression of the branch, so "broken trunk", not "pre-existing"), an infrastructure failure retried once, and a
    # job whose runner vanished: GitHub's record of the run fails it (no report comes), so it is not left to time out.
    # A verdict shows as its own line, or with the completion when both were recorded between two looks.
    judged = r"(judged: |in_progress -> completed failure, )verdict"
    assert re.search(rf"riscv/pytorch-riscv-ci +L4 +build-and-test +{judged} new", out)
    assert re.search(rf"rocm/pytorch-rocm-ci +L3 +build-and-test +{judged} broken trunk", out)
    assert re.search(r"apple/pytorch-mps-ci +L3 +build-and-test \(attempt 2\) +in_progress -> completed failure", out)
    assert re.search(r"riscv/pytorch-riscv-ci +L4 +distributed +in_progress -> completed failure", out)
    assert "timed_out" not in out
    comment = out[out.index("The PR comment on #170002") : out.index("check run on ")]
    plain = comment.replace("\\", "").replace("**", "")
    assert "failing: test/test_nn.py::TestNN.test_conv2d_riscv, test/test_nn.py::TestNN.test_gelu" in plain
    for verdict in ("| new |", "| broken trunk |", "| infra |", "| no baseline |"):
        assert verdict in plain, comment
    assert "Owners: @riscv-oncall" in comment  # mentioned for the new failure only
    assert re.search(r"crcr/riscv/pytorch-riscv-ci +completed +failure", out)
    assert "Automatic re-runs the relay asked for (rerun-failed-jobs): 1" in out
    assert "intel/torch-xpu-ops          rejected: 403: POST /repos/intel/torch-xpu-ops/dispatches" in out
    assert re.search(r"redrove 1 messages to \S+/crcr-local-DispatchQueue; intel/torch-xpu-ops dispatched: True", out)
    pages = out[out.index("Open the HUD pages:") :]
    assert re.search(r"http://127\.0\.0\.1:\d+/hud/pr/170002 ", pages)
    assert re.search(r"http://127\.0\.0\.1:\d+/hud/commit/(fa11){10} ", pages)
