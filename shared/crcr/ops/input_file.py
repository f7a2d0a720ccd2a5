"""Operator input files read as hostile: decompressed as a stream under caps, every problem refused in one line."""

from __future__ import annotations

import codecs
import gzip
import json
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from io import BufferedReader
from pathlib import Path
from typing import Any

from crcr.domain import jsondoc
from crcr.domain.errors import BadRequest
from crcr.domain.text import NAME_FORBIDDEN

CHUNK = 64 * 1024
MAX_SECRET_BYTES = 4096


class FileRefused(Exception):
    """What makes an operator's input file unusable, in one line naming the file and where (exit status 2)."""


@dataclass(frozen=True)
class Caps:
    """How much of a file a command reads before refusing it: bytes once decompressed, one line or JSON array entry,
    and entries."""

    total_bytes: int
    entry_bytes: int
    entries: int


def one_line(text: object) -> str:
    """Text that came from a file, fit for a terminal: C0 and C1 controls (escape sequences' ESC and CSI included),
    DEL, line separators and bidirectional marks removed, whitespace runs as one space."""
    return " ".join(NAME_FORBIDDEN.sub(" ", str(text)).split())


def size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n // 1024} KiB"


def chunks(path: Path, caps: Caps) -> Iterator[bytes]:
    """The file's bytes (inflated when it is gzip), a chunk at a time, refused past `caps.total_bytes`."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise FileRefused(f"{path}: {exc.strerror or exc}") from None
    with raw:
        try:
            gzipped = raw.peek(2)[:2] == b"\x1f\x8b"
        except OSError as exc:
            raise FileRefused(f"{path}: {exc.strerror or exc}") from None
        # gzip's read(n) inflates at most n bytes at a time: a small bomb never becomes a large buffer.
        stream: gzip.GzipFile | BufferedReader = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
        total = 0
        while True:
            try:
                chunk = stream.read(CHUNK)
            except EOFError:
                raise FileRefused(f"{path}: a gzip file cut short (truncated)") from None
            except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
                raise FileRefused(f"{path}: not a gzip file it can inflate ({type(exc).__name__})") from None
            if not chunk:
                return
            total += len(chunk)
            if total > caps.total_bytes:
                raise FileRefused(
                    f"{path}: over {size(caps.total_bytes)} (inflated when gzip): split it into smaller files"
                )
            yield chunk


def lines(path: Path, source: Iterable[bytes], caps: Caps, number: int = 0) -> Iterator[tuple[int, str]]:
    """The non-blank lines of `source` with their numbers (after `number` lines already read), as UTF-8 text; a line
    past `caps.entry_bytes` is refused before it is whole."""
    pending: list[bytes] = []
    held = 0
    for chunk in source:
        if not held and not chunk.strip():  # blank lines (a bomb of newlines) counted, never split one by one
            number += chunk.count(b"\n")
            continue
        if b"\n" not in chunk:
            pending.append(chunk)
            held += len(chunk)
            if held > caps.entry_bytes:
                raise FileRefused(f"{path}: line {number + 1} is longer than {size(caps.entry_bytes)}")
            continue
        parts = (b"".join(pending) + chunk).split(b"\n")
        last = parts.pop()
        pending, held = [last], len(last)
        for part in parts:
            number += 1
            if len(part) > caps.entry_bytes:
                raise FileRefused(f"{path}: line {number} is longer than {size(caps.entry_bytes)}")
            if part.strip():
                yield number, _text(path, f"line {number}", part, number == 1)
        if held > caps.entry_bytes:
            raise FileRefused(f"{path}: line {number + 1} is longer than {size(caps.entry_bytes)}")
    tail = b"".join(pending)
    if tail.strip():
        yield number + 1, _text(path, f"line {number + 1}", tail, number == 0)


def _text(path: Path, where: str, data: bytes, first: bool) -> str:
    try:
        return data.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(f"{path}: {where} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


@dataclass
class Opened:
    """A file's first byte that is not whitespace (b"" for a blank file), its chunks from the first that holds one, and
    the lines the blank chunks before it held (dropped, never kept: a bomb of blank lines is counted, not held)."""

    first: bytes
    chunks: Iterator[bytes]
    blank_lines: int = 0


def opened(source: Iterator[bytes]) -> Opened:
    blank = 0
    for n, chunk in enumerate(source):
        text = (chunk.removeprefix(codecs.BOM_UTF8) if n == 0 else chunk).lstrip()
        if text:
            return Opened(text[:1], _chain(chunk, source), blank)
        blank += chunk.count(b"\n")
    return Opened(b"", iter(()), blank)


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


# Finds where a JSON array's entry ends without judging it (numbers and constants kept as text): each entry is then
# parsed by the relay's own strict loader.
_SPAN = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=str)


def loads(path: Path, where: str, text: str) -> Any:
    """One JSON document, as the relay's edges take one (crcr.domain.jsondoc): nested at most 64 deep, no `NaN`,
    integers of at most 38 digits, no lone surrogates."""
    try:
        return jsondoc.loads(text)
    except BadRequest as exc:
        why = exc.message.removeprefix("body is not UTF-8 JSON: ")
        raise FileRefused(f"{path}: {where} is not JSON it takes ({why})") from None


def json_entries(path: Path, caps: Caps, source: Opened | None = None) -> Iterator[tuple[str, Any]]:
    """Each entry of a JSON array, or of JSON lines (one document a line), with where it is (`entry 3`, `line 7`):
    streamed, so an entry is parsed as soon as it is whole, and at most `caps.entries` of them."""
    file = source if source is not None else opened(chunks(path, caps))
    if not file.first:
        raise FileRefused(f"{path}: empty: no entries")
    found = _array(path, file.chunks, caps) if file.first == b"[" else _json_lines(path, file, caps)
    for n, (where, value) in enumerate(found, 1):
        if n > caps.entries:
            raise FileRefused(f"{path}: more than {caps.entries:,} entries: split it into smaller files")
        yield where, value


def _json_lines(path: Path, file: Opened, caps: Caps) -> Iterator[tuple[str, Any]]:
    for number, text in lines(path, file.chunks, caps, file.blank_lines):
        yield f"line {number}", loads(path, f"line {number}", text)


class _Text:
    """A JSON array's text as it arrives: decoded UTF-8 kept from the entry being read on."""

    def __init__(self, path: Path, source: Iterable[bytes]) -> None:
        self.path, self._source, self._utf8 = path, iter(source), codecs.getincrementaldecoder("utf-8-sig")()
        self.buf, self.pos, self.ended = "", 0, False

    def more(self) -> bool:
        chunk = next(self._source, None)
        try:
            text = self._utf8.decode(chunk or b"", final=chunk is None)
        except UnicodeDecodeError as exc:
            raise FileRefused(f"{self.path}: not UTF-8 text ({exc.reason})") from None
        self.buf, self.pos, self.ended = self.buf[self.pos :] + text, 0, chunk is None
        return not self.ended

    def skip_space(self) -> str:
        """The next character that is not whitespace ("" at the end), not consumed."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""


def _array(path: Path, source: Iterable[bytes], caps: Caps) -> Iterator[tuple[str, Any]]:
    """A top-level JSON array's entries one at a time: each decoded once its text is whole, never the whole array."""
    text = _Text(path, source)
    text.skip_space()
    text.pos += 1  # the "[" that opened() saw
    n = 0
    if text.skip_space() == "]":
        text.pos += 1
    else:
        while True:
            n += 1
            yield f"entry {n}", _entry(text, n, caps)
            sep = text.skip_space()
            if sep == "]":
                text.pos += 1
                break
            if sep != ",":
                raise FileRefused(f"{path}: entry {n} is not followed by , or ] (not a JSON array)")
            text.pos += 1
    if text.skip_space():
        raise FileRefused(f"{path}: text after the JSON array's closing ]")


def _entry(text: _Text, n: int, caps: Caps) -> Any:
    """One entry: its end found in what has arrived, reading more (doubling what it holds before looking again) until
    it is whole, the file ends, or it is longer than an entry may be; then parsed as the relay parses a body."""
    tried, where = 0, f"entry {n}"
    if not text.skip_space():
        raise FileRefused(f"{text.path}: the JSON array ends without its closing ] (truncated)")
    while True:
        held = len(text.buf) - text.pos
        if held >= 2 * tried or text.ended or held > caps.entry_bytes:
            try:
                _, end = _SPAN.raw_decode(text.buf, text.pos)
            except RecursionError:
                raise FileRefused(f"{text.path}: {where} is nested deeper than {jsondoc.MAX_DEPTH} levels") from None
            except json.JSONDecodeError as exc:
                if text.ended:
                    cut = exc.pos >= len(text.buf) - 1 or "Unterminated" in exc.msg
                    raise FileRefused(
                        f"{text.path}: {where} is " + ("cut short (truncated)" if cut else f"not JSON ({exc.msg})")
                    ) from None
            else:
                # A number or literal that ends where the text so far ends may go on in the next chunk.
                if end < len(text.buf) or text.ended or text.buf[text.pos] in '{["':
                    if end - text.pos > caps.entry_bytes:
                        raise FileRefused(f"{text.path}: {where} is longer than {size(caps.entry_bytes)}")
                    start, text.pos = text.pos, end
                    return loads(text.path, where, text.buf[start:end])
            tried = max(held, 1)
        if held > caps.entry_bytes:
            raise FileRefused(f"{text.path}: {where} is longer than {size(caps.entry_bytes)}")
        text.more()


def read_secret(secret_file: str | None, env: str = "CRCR_WEBHOOK_SECRET") -> str:
    """The webhook secret from `--secret-file` (one line; its line end dropped) or the environment, never from the
    command line, which every local user can read (/proc/<pid>/cmdline)."""
    if secret_file is None:
        secret = os.environ.get(env, "")
        if not secret:
            raise FileRefused(f"the relay's webhook secret: set {env}, or give --secret-file PATH")
        return secret
    path = Path(secret_file)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise FileRefused(f"--secret-file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise FileRefused(f"--secret-file {path}: longer than {size(MAX_SECRET_BYTES)}: not a webhook secret")
    try:
        secret = data.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise FileRefused(f"--secret-file {path}: not UTF-8 text") from None
    if not secret or "\n" in secret or "\r" in secret or "\x00" in secret:
        raise FileRefused(f"--secret-file {path}: one line holding the secret (empty, or more than one line)")
    return secret
