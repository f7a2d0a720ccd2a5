"""docs/local-stack.md run as written on the local stack: its `crcr local` command starts a relay, each `crcr send`
it shows is taken, and its `crcr follow` commands show the steps of what was sent (only the port differs: a free
one instead of 8787, so a stack the reader keeps running is left alone)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from crcr.local.stack import free_port
from tests.conftest import ROOT
from tests.test_doc_commands import blocks

pytestmark = pytest.mark.e2e
DOC = ROOT / "docs" / "local-stack.md"


def doc_lines() -> list[list[str]]:
    """Each shell block of the page as its command lines (comments and continuations dropped)."""
    return [
        [line for line in b.text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        for b in blocks()
        if b.source == DOC
    ]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_", "POWERTOOLS_"))}


def on_port(line: str, port: int) -> str:
    return line.replace("--port 8787", f"--port {port}").replace("127.0.0.1:8787", f"127.0.0.1:{port}")


def bash(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env(), capture_output=True, text=True, timeout=120, check=False
    )


def test_the_local_stack_page_runs_as_written(tmp_path: Path) -> None:
    start, sends, follow = doc_lines()[:3]
    [local] = [line for line in start if " crcr local " in f" {line} " or "/crcr local" in line]
    port = free_port()
    stack = subprocess.Popen(
        ["bash", "-c", on_port(local, port)],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # bash and the relay it starts, stopped together
    )
    try:
        assert stack.stdout is not None
        ready = json.loads(stack.stdout.readline())
        assert ready["url"] == f"http://127.0.0.1:{port}" and ready["app_id"] == "424242"
        assert all("crcr send" in line for line in sends) and len(sends) >= 7
        for line in sends:
            done = bash(on_port(line, port), ROOT)
            assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
            assert re.search(r": 202 accepted \(delivery [0-9a-f-]+\): queued", done.stdout), done.stdout
        # --follow: the steps of what was sent, one line each.
        seen = []
        deadline = time.time() + 60
        while time.time() < deadline and not any("report    riscv/pytorch-riscv-ci" in s for s in seen):
            seen.append(stack.stdout.readline())
        assert any(re.search(r"  webhook   accepted$", s.rstrip()) for s in seen), seen
        assert any("dispatch  dispatched to riscv/pytorch-riscv-ci" in s for s in seen), seen
    finally:
        if stack.stdout is not None:  # the relay must not block on a full pipe while it stops
            threading.Thread(target=stack.stdout.read, daemon=True).start()
        os.killpg(stack.pid, signal.SIGTERM)
        stack.wait(timeout=60)

    # The follow block: a stack logging at INFO into relay.log, read back by `crcr follow`.
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    logged, by_file, by_delivery = follow
    port = free_port()
    background = subprocess.Popen(
        ["bash", "-c", on_port(logged.rstrip(" &"), port)], cwd=tmp_path, env=env(), start_new_session=True
    )
    try:
        log = tmp_path / "relay.log"
        deadline = time.time() + 60
        while time.time() < deadline and '"event": "ready"' not in (log.read_text() if log.exists() else ""):
            time.sleep(0.2)
        secret = json.loads(log.read_text().splitlines()[0])["webhook_secret"]
        sent = subprocess.run(
            [str(ROOT / ".venv/bin/crcr"), "send", "push", "--url", f"http://127.0.0.1:{port}", "--json"],
            env=env() | {"CRCR_WEBHOOK_SECRET": secret},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        delivery = json.loads(sent.stdout)["delivery_id"]
        deadline = time.time() + 60
        while time.time() < deadline and '"message":"reported"' not in log.read_text():
            time.sleep(0.3)
    finally:
        os.killpg(background.pid, signal.SIGTERM)
        background.wait(timeout=60)
    human = bash(by_file, tmp_path)
    assert human.returncode == 0, human.stderr
    assert f"{delivery[:8]}  webhook   accepted" in human.stdout, human.stdout
    words = shlex.split(by_delivery)
    assert words[2] == "0d41087e-5f7f-4642-a419-d099948f2f55"  # the page's example id, replaced by the real one
    raw = bash(by_delivery.replace(words[2], delivery), tmp_path)
    assert raw.returncode == 0, raw.stderr
    records = [json.loads(line) for line in raw.stdout.splitlines()]
    assert records and {r.get("delivery_id") or r.get("correlation_id") for r in records} == {delivery}
    assert "webhook handled" in {r["message"] for r in records}
