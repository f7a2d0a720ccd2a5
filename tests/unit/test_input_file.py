"""Operator files read as a stream: what a good file holds comes out whole and in order, however its bytes fall
across the reader's chunks, gzipped or not, as a JSON array or as lines; the secret comes from a file or the
environment."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from crcr.ops.input_file import CHUNK, Caps, FileRefused, json_entries, one_line, read_secret

SEED = 7
CAPS = Caps(total_bytes=64 * 1024 * 1024, entry_bytes=1024 * 1024, entries=10_000)


def entries(seed: int = SEED, n: int = 400) -> list[object]:
    """Entries of every JSON kind, sized so that many straddle the reader's 64 KiB chunks (numbers included)."""
    rng = random.Random(seed)
    out: list[object] = []
    for i in range(n):
        pad = "x" * rng.randrange(CHUNK // 8)
        out.append(rng.choice([
            {"i": i, "pad": pad, "n": rng.randrange(10**18), "f": rng.random(), "ok": True, "no": None},
            [i, pad, {"deep": [[[i]]]}], f"{i}-{pad}", rng.randrange(10**30), -rng.random(), False, None,
        ]))  # fmt: skip
    return out


@pytest.mark.parametrize("layout", ["array", "array-spaced", "lines", "lines-crlf", "array-gzip", "lines-gzip"])
def test_a_good_file_comes_out_whole_and_in_order_whatever_its_chunks(tmp_path: Path, layout: str) -> None:
    print(f"seed {SEED}")
    want = entries()
    if layout.startswith("array"):
        sep = ",\n   " if layout == "array-spaced" else ","
        text = "[" + sep.join(json.dumps(e) for e in want) + "]\n"
    else:
        text = "".join(json.dumps(e) + ("\r\n" if layout == "lines-crlf" else "\n") for e in want)
    data = text.encode()
    path = tmp_path / "file"
    path.write_bytes(gzip.compress(data) if layout.endswith("gzip") else data)
    assert len(data) > 10 * CHUNK  # many chunk boundaries fall inside entries

    got = list(json_entries(path, CAPS))

    assert [value for _, value in got] == want
    kind = "entry" if layout.startswith("array") else "line"
    assert [where for where, _ in got] == [f"{kind} {n}" for n in range(1, len(want) + 1)]


def test_a_number_cut_by_a_chunk_boundary_is_read_whole(tmp_path: Path) -> None:
    for shift in range(1, 12):  # the number's digits split at every place around the boundary
        head = "[" + '"' + "a" * (CHUNK - 4 - shift) + '",'
        path = tmp_path / f"file-{shift}"
        path.write_text(head + "12345678901234567890]")
        assert [v for _, v in json_entries(path, CAPS)] == ["a" * (CHUNK - 4 - shift), 12345678901234567890]


def test_the_secret_comes_from_its_file_without_the_line_end_or_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secret").write_bytes(b"s3cr3t\r\n")
    assert read_secret(str(tmp_path / "secret")) == "s3cr3t"
    monkeypatch.setenv("CRCR_WEBHOOK_SECRET", "from-env")
    assert read_secret(None) == "from-env"
    (tmp_path / "big").write_bytes(b"s" * 5000)
    with pytest.raises(FileRefused, match="longer than 4 KiB"):
        read_secret(str(tmp_path / "big"))


def test_text_from_a_file_is_one_inert_line() -> None:
    assert one_line("a\x1b[2J\x1b]0;t\x07b\r\nc\x9b31m\u202ed\u2066") == "a [2J ]0;t b c 31m d"
