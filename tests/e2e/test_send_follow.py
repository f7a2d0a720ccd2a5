"""`crcr send` and `crcr local --follow` as a maintainer uses them on a fresh clone: the command in
docs/local-stack.md, then events sent to it, each answered in words and each step shown as it happens."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e
SECRET = "dev-secret"
SHA = "ab" * 20


@dataclass
class Local:
    url: str
    lines: queue.Queue[str]
    seen: list[str]

    def wait_for(self, *parts: str, timeout_s: float = 60.0) -> str:
        """The first line (seen before or arriving) that holds every part."""
        deadline = time.time() + timeout_s
        while True:
            found = next((line for line in self.seen if all(p in line for p in parts)), None)
            if found is not None:
                return found
            remaining = deadline - time.time()
            if remaining <= 0:
                raise AssertionError(f"no line with {parts} in:\n" + "\n".join(self.seen))
            try:
                self.seen.append(self.lines.get(timeout=min(remaining, 1.0)))
            except queue.Empty:
                continue


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_", "POWERTOOLS_"))}


@pytest.fixture(scope="module")
def local() -> Iterator[Local]:
    env = base_env() | {
        "CRCR_WEBHOOK_SECRET": SECRET,
        "CRCR_ALLOWLIST": "examples/allowlist.yaml",
        "CRCR_CI_PROVIDERS": "examples/ci_providers.yml",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "crcr.ops.cli", "local", "--port", "0", "--follow"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline())
    assert ready["event"] == "ready", ready
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in proc.stdout], daemon=True)
    reader.start()
    try:
        yield Local(ready["url"], lines, [])
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def send(url: str, *args: str, secret: str | None = SECRET) -> subprocess.CompletedProcess[str]:
    env = base_env() | ({"CRCR_WEBHOOK_SECRET": secret} if secret else {})
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "send", *args, "--url", url],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_pr_sent_with_a_sha_is_answered_in_words_and_followed_step_by_step(local: Local) -> None:
    done = send(local.url, "pull_request.synchronize", "--sha", SHA, "--pr", "4242", "--json")

    assert done.returncode == 0, done.stderr
    sent = json.loads(done.stdout)
    assert (sent["status"], sent["reply"]["status"], sent["sha"], sent["pr"]) == (202, "accepted", SHA, 4242)
    assert sent["meaning"] == "queued: the planner dispatches it to the allowlisted repositories"
    short = sent["delivery_id"][:8]
    # Each step of this delivery, as it happens: accepted, planned, one dispatch per repository, the reports.
    local.wait_for(short, "webhook   accepted")
    local.wait_for(short, "planned   7 dispatches, 0 held, 0 skipped")
    for repo in ("intel/torch-xpu-ops", "riscv/pytorch-riscv-ci", "pytorch-fdn/oota-stub"):
        local.wait_for(short, f"dispatch  dispatched to {repo}")
    local.wait_for(short, "dispatch  dispatched to vllm-project/vllm build #")
    local.wait_for(short, "report    riscv/pytorch-riscv-ci crcr sandbox/build-and-test: completed success; HUD push")
    local.wait_for(short, "report    vllm-project/vllm ci/test: completed success; HUD push accepted")
    local.wait_for(short, "checks    wrote crcr/riscv/pytorch-riscv-ci")
    assert not any(line.lstrip().startswith("{") for line in local.seen), "raw JSON in the follow view"


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["push", "--sha", SHA], "202 accepted"),
        (["ciflow", "--pr", "4242", "--sha", SHA], "202 accepted"),
        (["pull_request.labeled", "--label", "ciflow/crcr/rocm", "--pr", "4243"], "202 accepted"),
        (["check_run.rerequested", "--external-id", "riscv/pytorch-riscv-ci:9000000001:4242"], "202 accepted"),
        (["--file", "examples/events/pull_request.opened.json", "--event", "pull_request"], "202 accepted"),
    ],
    ids=["push", "ciflow", "label", "rerequest", "file"],
)
def test_every_kind_of_event_is_taken_by_the_relay(local: Local, args: list[str], status: str) -> None:
    done = send(local.url, *args)

    assert done.returncode == 0, done.stderr
    assert f": {status} (delivery " in done.stdout, done.stdout


def test_a_redelivery_and_a_wrong_secret_are_said_so(local: Local) -> None:
    first = send(local.url, "push", "--json")
    delivery = json.loads(first.stdout)["delivery_id"]

    again = send(local.url, "push", "--delivery", delivery)
    wrong = send(local.url, "push", secret="not-the-secret")

    assert again.returncode == 0 and "200 duplicate" in again.stdout
    assert again.stdout.rstrip().endswith("a delivery id the relay has seen: not processed again")
    assert wrong.returncode == 1
    assert wrong.stdout.rstrip().endswith(
        "the signature was refused: CRCR_WEBHOOK_SECRET is not the relay's webhook secret"
    )
    local.wait_for("webhook   REFUSED bad_signature")


@pytest.mark.parametrize(
    ("args", "secret", "code", "line"),
    [
        (["push"], None, 2, "crcr send: CRCR_WEBHOOK_SECRET is not set: the relay's webhook secret signs the event"),
        (["push", "--url", "relay.example.com"], SECRET, 2, "crcr send: --url must be the relay's http(s) URL"),
        (["--file", "examples/events/push.main.json"], SECRET, 2, "crcr send: --file needs --event"),
        (["pull_request.labeled"], SECRET, 2, "crcr send: pull_request.labeled needs --label"),
        (["ciflow"], SECRET, 2, "crcr send: ciflow needs --pr"),
        (["push", "--url", "http://127.0.0.1:9"], SECRET, 1, "crcr send: cannot reach http://127.0.0.1:9/webhook: "),
    ],
    ids=["no-secret", "bad-url", "file-without-event", "label-without-label", "ciflow-without-pr", "unreachable"],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    local: Local, args: list[str], secret: str | None, code: int, line: str
) -> None:
    done = send(local.url, *args, secret=secret) if "--url" not in args else send_raw(args, secret)

    assert done.returncode == code
    assert done.stdout == ""
    assert done.stderr.startswith(line), done.stderr
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["push", "--sha", "a" * 39], "argument --sha: 'aaaa"),
        (["push", "--sha", "g" * 40], "argument --sha:"),
        (["--file", "examples/events/push.main.json", "--event", "push\r\nX-Evil: 1"], "argument --event:"),
        (["push", "--delivery", "d-1\r\nX-Evil: 1"], "argument --delivery:"),
        (["push", "--delivery", "\x1b]0;owned\x07"], "argument --delivery:"),
    ],
    ids=["sha-39", "sha-not-hex", "event-crlf", "delivery-crlf", "delivery-escape"],
)
def test_malformed_arguments_are_refused_by_name_before_anything_is_sent(args: list[str], named: str) -> None:
    done = send_raw([*args, "--url", "http://127.0.0.1:9"], SECRET)  # nothing listens there: nothing may be tried

    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == "" and "cannot reach" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith(f"crcr send: error: {named}"), done.stderr


def send_raw(args: list[str], secret: str | None) -> subprocess.CompletedProcess[str]:
    env = base_env() | ({"CRCR_WEBHOOK_SECRET": secret} if secret else {})
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "send", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_follow_the_terminal_stays_quiet_after_the_ready_line(tmp_path: object) -> None:
    """The functions log at WARNING in `crcr local` unless told otherwise: a PR dispatched to every downstream
    prints nothing after the ready line (the raw JSON lines are for --follow or POWERTOOLS_LOG_LEVEL=INFO)."""
    env = base_env() | {
        "CRCR_WEBHOOK_SECRET": SECRET,
        "CRCR_ALLOWLIST": "examples/allowlist.yaml",
        "CRCR_CI_PROVIDERS": "examples/ci_providers.yml",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "crcr.ops.cli", "local", "--port", "0"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready", ready
        sent = send(ready["url"], "pull_request.synchronize", "--sha", SHA, "--pr", "4243")
        assert sent.returncode == 0 and "accepted" in sent.stdout, sent.stdout + sent.stderr
        deadline = time.time() + 60
        while time.time() < deadline:  # until the sandbox has the dispatches (the status page lists them)
            with urllib.request.urlopen(f"{ready['url']}/_crcr/status", timeout=5) as answer:
                status = json.loads(answer.read())
            if status["dispatches"] and status["sandbox_callbacks"]:
                break  # dispatched, and the sandbox's runs have reported
            time.sleep(0.5)
        assert status["dispatches"] and status["sandbox_callbacks"], status
        time.sleep(2)  # the rest of the runs' reports and the reporter's work
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=60)
    assert [line for line in rest.splitlines() if line.strip()] == []
