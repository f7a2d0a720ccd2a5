"""`bench/reporter.py` (bench section 7) run as `make bench` runs it, at a small size: it starts its own stack, feeds
the reporter, and checks its own results (the verdicts, the HUD documents' cells, reads flat in a dispatch's jobs).
Its figures are not asserted here; that it runs and that its checks hold is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e


def test_the_reporter_bench_runs_and_its_checks_hold(tmp_path: Path) -> None:
    out = tmp_path / "reporter.json"
    command = [sys.executable, str(ROOT / "bench" / "reporter.py"), "--commits", "6", "--repos", "2", "--out", str(out)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())["reporter"]
    assert report["all_verified"] is True
    assert report["jobs_per_dispatch"]["flat"] is True
    assert "NOT VERIFIED" not in proc.stdout
