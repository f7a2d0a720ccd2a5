"""`crcr follow` over the functions' log lines: one human line per step, only the deliveries asked for, the raw
lines with --json, and lines as `aws logs tail` prints them (a timestamp and stream before the JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

LINES = [
    'not json at all',
    '2026-12-04T12:00:00 2026/12/04/[$LATEST]abc {"level":"INFO","message":"webhook handled",'
    '"timestamp":"2026-12-04 12:00:00,100+0000","correlation_id":"aaaa1111-x","outcome":"accepted"}',
    json.dumps({"level": "INFO", "message": "planned", "timestamp": "2026-12-04 12:00:01,000+0000",
                "correlation_id": "aaaa1111-x", "dispatched": ["a/b", "c/d"], "held": [], "skipped": {}}),
    json.dumps({"level": "INFO", "message": "dispatch handled", "timestamp": "2026-12-04 12:00:02,000+0000",
                "delivery_id": "aaaa1111-x", "target_repo": "c/d", "outcome": "dead_lettered",
                "detail": "GitHub refused: 404 Not Found"}),
    json.dumps({"level": "INFO", "message": "reported", "timestamp": "2026-12-04 12:00:03,000+0000",
                "delivery_id": "aaaa1111-x", "target_repo": "a/b", "job": "ci/test", "state": "completed",
                "conclusion": "failure", "verdict": "new", "hud": "pushed"}),
    json.dumps({"level": "INFO", "message": "check runs synced", "timestamp": "2026-12-04 12:00:04,000+0000",
                "delivery_id": "aaaa1111-x", "kind": "comment", "pr": 7, "written": ["comment 9"],
                "outcome": "created"}),
    json.dumps({"level": "INFO", "message": "check runs synced", "timestamp": "2026-12-04 12:00:04,500+0000",
                "delivery_id": "aaaa1111-x", "kind": "comment", "pr": 7, "written": [], "outcome": "coalesced"}),
    json.dumps({"level": "INFO", "message": "webhook handled", "timestamp": "2026-12-04 12:00:05,000+0000",
                "correlation_id": "bbbb2222-y", "outcome": "accepted"}),
    json.dumps({"level": "ERROR", "message": "planning failed; SQS will redeliver",
                "timestamp": "2026-12-04 12:00:06,000+0000", "correlation_id": "bbbb2222-y"}),
]  # fmt: skip


def follow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "follow", *args],
        input="\n".join(LINES) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_each_step_is_one_human_line() -> None:
    done = follow()

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "12:00:00  aaaa1111  webhook   accepted",
        "12:00:01  aaaa1111  planned   2 dispatches, 0 held, 0 skipped",
        "12:00:02  aaaa1111  dispatch  DEAD-LETTERED c/d: GitHub refused: 404 Not Found",
        "12:00:03  aaaa1111  report    a/b ci/test: completed failure, verdict new; HUD push accepted",
        "12:00:04  aaaa1111  comment   PR #7: created (comment 9)",
        "12:00:05  bbbb2222  webhook   accepted",
        "12:00:06  bbbb2222  error     planning failed; SQS will redeliver",
    ]


def test_one_delivery_and_its_raw_lines() -> None:
    done = follow("bbbb2222-y", "--json")

    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["message"] for line in done.stdout.splitlines()] == [
        "webhook handled",
        "planning failed; SQS will redeliver",
    ]


def test_an_unreadable_file_is_one_line() -> None:
    done = follow("--file", "/nonexistent/crcr.log")

    assert done.returncode == 2
    assert done.stderr == "crcr follow: /nonexistent/crcr.log: No such file or directory\n"


def test_a_downstreams_words_reach_the_terminal_escaped_and_a_malformed_line_is_no_traceback(tmp_path: Any) -> None:
    hostile = json.dumps({
        "level": "INFO", "message": "reported", "timestamp": "2026-12-04 12:00:03,000+0000", "delivery_id": "cccc3333",
        "target_repo": "a/b", "job": "ci/\x1b[2J\x1b]0;owned\x07test\u2028\u202e", "state": "completed",
    })  # fmt: skip
    odd = json.dumps({"level": "INFO", "message": "dispatch handled", "delivery_id": "dddd4444", "delay_s": "soon"})
    log = tmp_path / "crcr.log"
    log.write_bytes(b"\n".join([hostile.encode(), odd.encode(), b'{"message": "\xff\xfe not utf-8"}']) + b"\n")
    for args in ((), ("--json",)):
        done = subprocess.run(
            [sys.executable, "-m", "crcr.ops.cli", "follow", "--file", str(log), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert not [ch for ch in done.stdout if ch in "\x1b\x07\u2028\u202e"], repr(done.stdout)
    human = follow("--file", str(log)).stdout
    assert "ci/\\x1b[2J\\x1b]0;owned\\x07test\\u2028\\u202e" in human
    assert "dddd4444  info      dispatch handled" in human  # its delay is no number: the step shown as it came
