"""The golden file's normal form: what differs from run to run replaced by placeholders that keep equality, then a
canonical order, so that two runs of one commit give the same file and a change of what goes where still shows."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# Past this, a string is kept as its hash and length (the webhook bodies the stream sends, echoed payloads).
LONG_TEXT = 2048
# Text of several lines (check-run summaries, the PR comment) is kept line by line up to this size, for the diff.
LONG_LINES = 8192
# A duration measured by the relay: the key names its unit (seconds) and a value varies with the machine's speed.
DURATION_KEYS = frozenset({"queue_s", "run_s", "queue_time", "execution_time"})
# Digests of what the relay stored or wrote, which holds times and ids of the run (the PR comment's text, a job record).
DIGEST_KEYS = frozenset({"fingerprint", "body_hash"})
LOOPBACK_PORT = re.compile(r"(?<=127\.0\.0\.1:)\d+")
NEGATIVE_ZERO = re.compile(r"(?<![\w.])-(?=0(?:\.0+)?(?![\d.]))")
DURATION_TEXT = re.compile(r"(?P<label>(?:Queue|Execution) time: )\d+(?:\.\d+)? (?:s|min|h)\b")
ISO = re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.(?P<fraction>\d+))?(?:Z|[+-]\d\d:\d\d)?")
CLOCK = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d\b")
DATE = re.compile(r"\b\d{4}-\d\d-\d\d\b")
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
UUID4_HEX = re.compile(r"(?<![0-9a-zA-Z])[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}(?![0-9a-zA-Z])")
JWT = re.compile(r"eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+")
SHA256 = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
NUMBER_IN_TEXT = re.compile(r"(?<![0-9A-Za-z.])\d+(?:\.\d+)?(?![0-9A-Za-z]|\.\d)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# Claims that say when a token was made or expires: a new value each run, nothing about where it goes.
TOKEN_TIMES = frozenset({"iat", "exp", "nbf"})


@dataclass(frozen=True)
class Window:
    """The epoch seconds a time the run made may take: from a while before it started to the longest TTL after."""

    start: float
    end: float

    def holds(self, seconds: float) -> bool:
        return self.start <= seconds <= self.end

    @property
    def began(self) -> float:
        """When the run began (the window opens BEFORE_S earlier)."""
        return self.start + BEFORE_S


BEFORE_S = 3600.0  # a time the run made may be this much before it began (a seeded history's)


@dataclass(frozen=True)
class Volatile:
    """A value that differs from run to run. `numbered`: the same raw value seen twice gets the same placeholder;
    otherwise all values of its kind read alike (too coarse for equality to mean anything)."""

    kind: str
    raw: str
    numbered: bool = True
    shape: str = ""  # how it was written (`.0`, `.dec`, `.long`; `.3` for an ISO time's fraction): a change shows
    number: bool = False  # a JSON number, not a string


@dataclass(frozen=True)
class Text:
    """A string with volatile parts inside it."""

    parts: tuple[str | Volatile, ...]


@dataclass
class Rules:
    """What is volatile in one capture: its time window and the ids the doubles handed out."""

    window: Window
    ids: frozenset[int] = frozenset()
    # sha256 digests of the stream's webhooks that carry such an id (a check run's, a comment's): they vary with it.
    digests: frozenset[str] = frozenset()
    # Documents that round every time to the millisecond: two times in one millisecond are equal by chance there.
    coarse_times: bool = False


# -- one small function per kind of value ----------------------------------------------------------------------------


def number_shape(text: str) -> str:
    """Integer, a float with nothing after the point, a decimal as Python prints a float (at most 7 places for a time
    of this century), or longer (a Decimal made from a float): a change between them is a change of format."""
    if "." not in text and "e" not in text.lower():
        return ""
    if re.fullmatch(r"-?\d+\.0+", text):
        return ".0"
    return ".long" if len(text.partition(".")[2]) > 9 else ".dec"


def epoch(text: str, rules: Rules, number: bool = False) -> Volatile | None:
    """Epoch seconds or milliseconds the run made: numbered when finer than a second (whole seconds coincide by
    chance), equal to the microsecond (the relay writes one instant both as Python prints it and to 6 places)."""
    digits = text.lstrip("0") or "0"
    value = float(digits)
    if rules.window.holds(value):
        form = number_shape(text)
        fine = form in (".dec", ".long") and not rules.coarse_times
        return Volatile("t", f"{value:.6f}", numbered=fine, shape=form, number=number)
    if "." not in digits and rules.window.holds(value / 1000):
        return Volatile("ms", digits, numbered=not rules.coarse_times, number=number)
    return None


def double_id(text: str, rules: Rules, number: bool = False) -> Volatile | None:
    """An id a double handed out (check runs, comments): its order varies with how requests raced."""
    if "." not in text and int(text) in rules.ids:
        return Volatile("id", text, number=number)
    return None


def iso_time(match: re.Match[str], rules: Rules) -> Volatile | None:
    """An ISO 8601 time the run made. Numbered only with microseconds: seconds and milliseconds coincide by chance."""
    text = match.group(0)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        return None
    if not rules.window.holds((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()):
        return None
    fraction = match.group("fraction") or ""
    return Volatile("iso", text, numbered=len(fraction) >= 6, shape=f".{len(fraction)}" if fraction else "")


def clock_time(match: re.Match[str], rules: Rules) -> Volatile | None:
    """A time to the minute, as people read it ("2026-12-07 22:24"): far too coarse to number."""
    return _dated(match.group(0), "clock", rules)


def calendar_date(match: re.Match[str], rules: Rules) -> Volatile | None:
    """A day the run names (a page's day, a nightly's, a trend's last 14): named by how many days before the run's
    it is, so a run after midnight, or on another day, reads alike."""
    text = match.group(0)
    try:
        day = datetime.fromisoformat(text).replace(tzinfo=UTC).date()
    except ValueError:
        return None
    today = datetime.fromtimestamp(rules.window.began, UTC).date()
    back = (today - day).days
    if not 0 <= back <= DAYS_BACK:
        return None
    return Volatile("date" if back == 0 else f"date-{back}", text, numbered=False)


DAYS_BACK = 60  # the oldest day a page names: health's window (30 days) and its trend (14) are within it


def _dated(text: str, kind: str, rules: Rules) -> Volatile | None:
    try:
        when = datetime.fromisoformat(text.replace(" ", "T")).replace(tzinfo=UTC)
    except ValueError:
        return None
    # A day's start may be up to a day before the run; a day is as coarse as this gets.
    if not (rules.window.start - 86_400 <= when.timestamp() <= rules.window.end):
        return None
    return Volatile(kind, text, numbered=False)


def loopback_port(match: re.Match[str], rules: Rules) -> Volatile | None:
    """A port the kernel handed a server of the run (the relay's edge, a double)."""
    return Volatile("port", match.group(0))


def digest(text: str) -> Volatile:
    """A digest of something holding the run's times or ids: it differs whenever they do."""
    return Volatile("digest", text)


def input_digest(match: re.Match[str], rules: Rules) -> Volatile | None:
    """The digest of a webhook the stream sent with an id the double handed out in it."""
    return digest(match.group(0)) if match.group(0) in rules.digests else None


def negative_zero(text: str) -> str:
    """A difference of two clock readings that is nearly nothing comes out as -0 or 0: the sign is a race."""
    return NEGATIVE_ZERO.sub("", text)


def random_uuid(match: re.Match[str], rules: Rules) -> Volatile | None:
    """A uuid (hex or dashed): booking tickets, lease owners, Buildkite's build ids, drawn at random each run."""
    return Volatile("uuid", match.group(0))


def duration(text: str, number: bool = False) -> Volatile:
    """How long something took on this machine: it varies with the load."""
    return Volatile("duration", text, numbered=False, number=number)


def token(text: str) -> Any:
    """A JWT (a dispatch's ticket): its header and claims, but when it was made and expires, and no signature (it
    signs those times)."""
    header, claims, _signature = text.split(".")
    try:
        head = json.loads(_b64(header))
        body = json.loads(_b64(claims))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(body, dict):
        return None
    return {"jwt": {"header": head, "claims": {k: v for k, v in body.items() if k not in TOKEN_TIMES}}}


def _b64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


# -- the walk that applies them --------------------------------------------------------------------------------------

SCANNERS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str], Rules], Volatile | None]], ...] = (
    (LOOPBACK_PORT, loopback_port),
    (SHA256, input_digest),
    (UUID, random_uuid),
    (UUID4_HEX, random_uuid),
    (ISO, iso_time),
    (CLOCK, clock_time),
    (DATE, calendar_date),
)


def shape_string(text: str, rules: Rules) -> Any:
    """A string as parts: JSON inside it parsed, a whole JWT decoded, volatile pieces found."""
    stripped = text.strip()
    if JWT.fullmatch(stripped) and (decoded := token(stripped)) is not None:
        return shape(decoded, rules)
    if stripped[:1] in "{[" and len(text) > 1:
        try:
            inner = json.loads(text)
        except ValueError:
            pass
        else:
            return {"json": shape(inner, rules)}
    if NUMBER.fullmatch(text) and (found := epoch(text, rules) or double_id(text, rules)):
        return found
    parts: list[str | Volatile] = [text]
    for pattern, kind in SCANNERS:
        parts = _split(parts, pattern, lambda m, kind=kind: kind(m, rules))
    parts = _split(parts, DURATION_TEXT, _duration_in_text)
    parts = _split(parts, NUMBER_IN_TEXT, lambda m: epoch(m.group(0), rules) or double_id(m.group(0), rules))
    parts = [p for p in parts if p != ""]
    if all(isinstance(p, str) for p in parts):
        return text
    return Text(tuple(parts))


def _duration_in_text(match: re.Match[str]) -> Volatile | None:
    return Volatile("duration", match.group(0).removeprefix(match.group("label")), numbered=False)


def _split(
    parts: list[str | Volatile], pattern: re.Pattern[str], found: Callable[[re.Match[str]], Volatile | None]
) -> list[str | Volatile]:
    out: list[str | Volatile] = []
    for part in parts:
        if not isinstance(part, str):
            out.append(part)
            continue
        at = 0
        for match in pattern.finditer(part):
            value = found(match)
            if value is None:
                continue
            prefix = match.group("label") if "label" in pattern.groupindex else ""
            leading = len(match.group(0)) - len(match.group(0).lstrip("0")) if value.kind == "ms" else 0
            out.append(part[at : match.start()] + prefix + match.group(0)[:leading])
            out.append(value)
            at = match.end()
        out.append(part[at:])
    return out


def shape(value: Any, rules: Rules, key: str = "") -> Any:
    """The capture with volatile values marked (Volatile, Text), JSON in strings and tokens opened up."""
    if isinstance(value, dict):
        if key and len(value) == 1 and next(iter(value)) in ("S", "N"):
            return {k: shape(v, rules, key) for k, v in value.items()}  # a DynamoDB attribute: its name says
        return {shape_key(k, rules): shape(v, rules, k) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v, rules) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        if value == 0:
            return abs(value)  # -0.0: see negative_zero
        text = repr(value)
        if key in DURATION_KEYS:
            return duration(text, number=True)
        return epoch(text, rules, number=True) or double_id(text, rules, number=True) or value
    if isinstance(value, str):
        if key in DURATION_KEYS:
            return duration(value)
        if key in DIGEST_KEYS:
            return digest(value)
        return shape_string(negative_zero(value), rules)
    return value


def shape_key(key: str, rules: Rules) -> Any:
    found = shape_string(key, rules)
    return found if isinstance(found, (str, Text, Volatile)) else key


# -- canonical order and numbering ----------------------------------------------------------------------------------


def blind(value: Any) -> Any:
    """The value with every volatile part reading alike: what sorting may look at, so that no raw id or time orders
    anything."""
    if isinstance(value, Volatile):
        return f"<{value.kind}>"
    if isinstance(value, Text):
        return "".join(blind(p) for p in value.parts)
    if isinstance(value, dict):
        return {blind(k): blind(v) for k, v in value.items()}
    if isinstance(value, list):
        return [blind(v) for v in value]
    return value


def order_key(value: Any) -> str:
    return json.dumps(blind(value), sort_keys=True, default=str)


@dataclass
class Numbering:
    """Placeholders per kind, numbered in the order values first appear."""

    seen: dict[tuple[str, str], int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def placeholder(self, value: Volatile) -> str:
        name = value.kind
        if value.numbered:
            key = (value.kind, value.raw)
            if key not in self.seen:
                self.counts[value.kind] = self.counts.get(value.kind, 0) + 1
                self.seen[key] = self.counts[value.kind]
            name = f"{value.kind}{self.seen[key]}"
        return f"{'#' if value.number else ''}<{name}{value.shape}>"

    def render(self, value: Any) -> Any:
        """Placeholders in, walking dicts in the blinded order of their keys (never by a raw id or time)."""
        if isinstance(value, Volatile):
            return self.placeholder(value)
        if isinstance(value, Text):
            return "".join(p if isinstance(p, str) else self.placeholder(p) for p in value.parts)
        if isinstance(value, dict):
            rendered = {}
            for k in sorted(value, key=lambda k: (order_key(k), order_key(value[k]))):
                name = self.render(k)
                if name in rendered:  # keys that differ only by a coarse placeholder: one would hide the other
                    raise ValueError(f"two keys read alike in the normal form: {name}")
                rendered[name] = self.render(value[k])
            return rendered
        if isinstance(value, list):
            return [self.render(v) for v in value]
        return value


def canonical(items: list[Any]) -> list[Any]:
    """A list whose order is the relay's concurrency, not its behaviour, in the order of its blinded values."""
    return sorted(items, key=order_key)


def trim(value: Any) -> Any:
    """Long strings kept as their hash (several lines of text as lines, up to LONG_LINES), so the file stays small
    and a difference inside them still shows."""
    if isinstance(value, dict):
        return {k: trim(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trim(v) for v in value]
    if isinstance(value, str):
        if "\n" in value and len(value) <= LONG_LINES:
            return {"lines": value.split("\n")}
        if len(value) > LONG_TEXT:
            return {"sha256": hashlib.sha256(value.encode()).hexdigest(), "chars": len(value)}
    return value
