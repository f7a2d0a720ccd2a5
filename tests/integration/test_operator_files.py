"""`crcr replay` and `crcr shadow compare` take their files as hostile: every file here is refused with one line on
standard error naming the problem and exit status 2, no traceback, nothing sent or read from AWS, memory bounded
(each command runs in a process of its own, measured, under an address-space limit), and nothing of the file
reaches the terminal raw."""

from __future__ import annotations

import functools
import gzip
import json
import os
import random
import re
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

SEED = 41
MIB = 1024 * 1024
# An interpreter with the command's imports is about 35 MiB; the most a refused file holds is shadow compare's
# 500,000 rows before the 500,001st (about 140 MiB).
MAX_RSS_MIB = 200
ADDRESS_SPACE = 2048 * MIB  # a regression fails here with a MemoryError, never by eating the machine's memory
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@functools.cache
def bomb(mib: int, unit: bytes) -> bytes:
    """A gzip file that inflates to `mib` MiB of `unit`, built a block at a time (a few hundred KB on disk)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = unit * (MIB // len(unit))
    return b"".join([*(packer.compress(block) for _ in range(mib)), packer.flush()])


def lines(docs: list[object]) -> bytes:
    return "".join(json.dumps(d) + "\n" for d in docs).encode()


def delivery(n: int, **changes: object) -> dict[str, object]:
    return {
        "guid": f"g-{n}",
        "event": "push",
        "delivered_at": "2026-12-07T10:00:00Z",
        "request": {"payload": {}},
    } | changes


def row(n: int, **changes: object) -> dict[str, object]:
    return {"delivery_id": f"d-{n}", "downstream_repo": "org/repo", "run_id": 7000 + n} | changes


rng = random.Random(SEED)
NOISE = bytes(rng.getrandbits(8) for _ in range(4096))
NOISY = [f"{rng.getrandbits(256):064x}" for _ in range(3000)]  # lines gzip cannot shrink much
DEEP = b"[" * 100_000 + b"]" * 100_000
ESCAPES = "\x1b[2J\x1b[31mpwned\x1b[0m\x07\x9b31m\u202eevil\u2066\r\n"
HUGE = 11 * MIB
# kind -> what `crcr replay` is given and the line's telling part, what `crcr shadow compare` is given and its part.
Case = tuple[bytes | str, str, bytes | str, str]
CASES: dict[str, Callable[[], Case]] = {
    "empty": lambda: (b"", "empty: no entries", b"", "empty: no rows"),
    "blank": lambda: (b"\n  \n\t\n", "empty: no entries", b"\r\n \n", "empty: no rows"),
    "bad-json": lambda: (
        b'{"guid": "g", "event": \n',
        "line 1 is not JSON",
        b'{"delivery_id": \n',
        "line 1 is not JSON",
    ),
    "truncated-array": lambda: (
        b'[{"guid": "g", "event": "push", "req',
        "entry 1 is cut short (truncated)",
        b'[{"delivery_id": "d-1", "downstream_re',
        "entry 1 is cut short (truncated)",
    ),
    "text-after-array": lambda: (b"[] rm -rf", "text after the JSON array", b"[]\n[]", "text after the JSON array"),
    "binary": lambda: (b"\x89PNG\r\n\x1a\n" + NOISE, "line 1 is not UTF-8 text", b"\x89PNG\r\n" + NOISE, "not UTF-8"),
    "not-utf8": lambda: (b'{"guid": "\xff\xfe"}\n', "line 1 is not UTF-8 text", b'{"x": "\xc3"}\n', "not UTF-8 text"),
    "nul": lambda: (b'{"guid": "a\x00b"}\n', "line 1 is not JSON", b'{"delivery_id": "\x00"}\n', "line 1 is not JSON"),
    "wrong-shape": lambda: (b"[1, 2, 3]", "entry 1: a JSON object", b"[1, 2, 3]", "entry 1: needs delivery_id"),
    "scalar": lambda: (b"42\n", "line 1: a JSON object", b"42\n", "no rows"),
    "wrong-types": lambda: (
        lines([delivery(1, guid={"a": 1})]),
        "line 1: guid must be a string, not an object",
        lines([row(1, run_id=[1])]),
        "line 1: run_id must be a whole number or a string",
    ),
    "wrong-types-deeper": lambda: (
        lines([delivery(1), delivery(2, redelivery="yes")]),
        "line 2: redelivery must be true or false, not a string",
        lines([row(1), row(2, pr_number=1.5)]),
        "line 2: pr_number must be a whole number",
    ),
    "payload-not-object": lambda: (
        lines([delivery(1, request={"payload": [1, 2]})]),
        "line 1: request.payload must be an object",
        lines([row(1, delivery_id={"S": "d"})]),
        "line 1: delivery_id must be a string",
    ),
    "deep-nesting": lambda: (DEEP, "entry 1 is nested deeper than 64 levels", DEEP, "entry 1 is nested deeper than 64"),
    "deep-line": lambda: (
        b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}\n",
        "line 1 is not JSON it takes (JSON nested deeper than 64 levels at a.0.0.0.",
        b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",
        "line 1 is not JSON it takes (JSON nested deeper than 64 levels at a.0.0.0.",
    ),
    "huge-line": lambda: (
        b'{"guid": "' + b"a" * HUGE + b'"}\n',
        "line 1 is longer than 10 MiB",
        b'{"delivery_id": "' + b"a" * HUGE + b'"}\n',
        "line 1 is longer than 1 MiB",
    ),
    "huge-entry": lambda: (
        b'[{"guid": "' + b"a" * HUGE + b'"}]',
        "entry 1 is longer than 10 MiB",
        b'[{"delivery_id": "' + b"a" * (2 * MIB) + b'"}]',
        "entry 1 is longer than 1 MiB",
    ),
    "gzip-bomb": lambda: (bomb(300, b"\n"), "over 256 MiB (inflated when gzip)", bomb(300, b"\n"), "over 256 MiB"),
    "gzip-bomb-one-line": lambda: (bomb(64, b"\0"), "line 1 is longer than 10 MiB", bomb(64, b"\0"), "longer than"),
    "truncated-gzip": lambda: (
        gzip.compress(lines([delivery(n, guid=noise) for n, noise in enumerate(NOISY)]))[:20_000],
        "a gzip file cut short (truncated)",
        gzip.compress(lines([row(n, delivery_id=noise) for n, noise in enumerate(NOISY)]))[:20_000],
        "a gzip file cut short (truncated)",
    ),
    "bad-gzip": lambda: (b"\x1f\x8b\x08\x00" + NOISE, "not a gzip file it can inflate", b"\x1f\x8b" + NOISE, "inflate"),
    "control-characters": lambda: (ESCAPES, "line 1 is not JSON", ESCAPES, "no rows"),
    "control-characters-in-values": lambda: (
        lines([delivery(1, guid="\x1b]0;pwned\x07")]),
        "line 1: guid holds U+001B: not a header value",
        "delivery_id,downstream_repo,run_id\n\x1b[2Jd-1,\x9borg/r\u202e,\x1b[31m\n",
        "row 1: delivery_id holds the control character U+001B",
    ),
    "crlf-in-a-header": lambda: (
        lines([{"headers": {"X-GitHub-Delivery": "abc\r\nX-Evil: 1", "X-GitHub-Event": "push"}, "body": "{}"}]),
        "line 1: headers.X-GitHub-Delivery holds a line break (CR or LF): a header value cannot carry one",
        lines([row(1, run_id="1" * 300)]),
        "line 1: run_id must be a whole number or a string",
    ),
    "nan": lambda: (
        b'{"guid": "g", "event": "push", "redelivery": NaN}\n',
        "line 1 is not JSON it takes (NaN (not JSON) at redelivery)",
        b'{"delivery_id": "d", "downstream_repo": "o/r", "run_id": Infinity}\n',
        "line 1 is not JSON it takes (Infinity (not JSON) at run_id)",
    ),
    "long-number": lambda: (
        b'[{"guid": ' + b"9" * 5000 + b"}]",
        "entry 1 is not JSON it takes (an integer of 5000 digits (at most 38) at guid)",
        b'{"run_id": ' + b"9" * 5000 + b"}\n",
        "line 1 is not JSON it takes (an integer of 5000 digits (at most 38) at run_id)",
    ),
    "lone-surrogate": lambda: (
        lines([delivery(1, request={"payload": {"title": "\ud800"}})]),
        "line 1 is not JSON it takes (a lone surrogate (\\ud800-\\udfff), not Unicode text at request.payload.title)",
        b'[{"delivery_id": "\\udfff"}]',
        "entry 1 is not JSON it takes (a lone surrogate",
    ),
    "dynamodb-items": lambda: (
        lines([{"headers": {"X-GitHub-Delivery": "d", "X-GitHub-Event": "push"}, "body": {"a": 1}}]),
        "line 1: body must be a string (the body as sent), not an object",
        lines([{"Item": {"delivery_id": {"X": "1"}}}]),
        "line 1: Item.delivery_id is not a DynamoDB JSON value",
    ),
    "dynamodb-huge-number": lambda: (
        lines([delivery(1, delivered_at=1e308)]),
        "line 1: delivered_at must be a string, not a number",
        lines([{"Item": {"delivery_id": {"S": "d"}, "verified_repo": {"S": "o/r"}, "run_id": {"N": "1e125"}}}]),
        "line 1: run_id must be a whole number below",
    ),
    "csv-field-too-long": lambda: (
        lines([delivery(1, delivered_at="2026" * 100)]),
        "line 1: delivered_at is longer than an ISO 8601 time",
        b"delivery_id,downstream_repo,run_id\n" + b"d" * 200_000 + b",o/r,1\n",
        "not CSV (field larger than field limit",
    ),
    "too-many-entries": lambda: (
        gzip.compress(b'{"guid": "g", "event": "push", "request": {}}\n' * 100_001),
        "more than 100,000 entries: split it into smaller files",
        gzip.compress(b"delivery_id,downstream_repo,run_id\n" + b"d,o/r,1\n" * 500_001),
        "more than 500,000 rows: split it into smaller files",
    ),
    "dev-zero": lambda: ("/dev/zero", "/dev/zero: line 1 is longer than 10 MiB", "/dev/zero", "line 1 is longer than"),
    "directory": lambda: (".", ": Is a directory", ".", ": Is a directory"),
}


# The command as `crcr` runs it, in an interpreter that first limits its own address space and, on its way out, writes
# its peak resident memory (VmHWM: of this program only, not of the test process it was forked from).
LAUNCH = f"""
import os, resource, runpy
resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE}, {ADDRESS_SPACE}))
try:
    runpy.run_module("crcr.ops.cli", run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status, open(os.environ["PEAK_RSS_FILE"], "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")).split()[1])
"""


def run(cwd: Path, *args: str) -> tuple[int, str, str, float]:
    """The command in a process of its own: exit status, standard output and error, and its peak memory (MiB)."""
    peak = cwd / "peak-rss-kib"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))}
    env |= {"CRCR_WEBHOOK_SECRET": "s", "PEAK_RSS_FILE": str(peak)}
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, *args], cwd=cwd, env=env, capture_output=True, timeout=120, check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode(), int(peak.read_text()) / 1024


def path_of(tmp_path: Path, name: str, content: bytes | str) -> str:
    if content in ("/dev/zero", "."):
        return str(content)
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return str(path)


def one_refusal(command: str, done: tuple[int, str, str, float], part: str) -> None:
    status, stdout, stderr, rss = done
    assert (status, stdout) == (2, ""), stderr
    assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr  # one line
    assert stderr.startswith(f"crcr {command}: ") and part in stderr, stderr
    assert "Traceback" not in stderr and not CONTROL.search(stderr.rstrip("\n")), repr(stderr)
    assert rss < MAX_RSS_MIB, f"{rss:.0f} MiB"


@pytest.mark.parametrize("kind", CASES)
def test_replay_refuses_a_hostile_file_in_one_line_within_bounded_memory(tmp_path: Path, kind: str) -> None:
    content, part, _, _ = CASES[kind]()
    file = path_of(tmp_path, "deliveries.json", content)
    done = run(tmp_path, "replay", file, "--url", "http://127.0.0.1:9")  # nothing listens: nothing may be sent
    one_refusal("replay", done, part)


@pytest.mark.parametrize("kind", CASES)
def test_shadow_compare_refuses_a_hostile_file_in_one_line_within_bounded_memory(tmp_path: Path, kind: str) -> None:
    _, _, content, part = CASES[kind]()
    file = path_of(tmp_path, "rows.jsonl", content)
    one_refusal("shadow compare", run(tmp_path, "shadow", "compare", "--rows", file), part)
