"""A job's failing tests (`failed_tests_detail`), capped as PyTorch's HUD keeps them (50 entries, messages cut to 500
UTF-16 units), so the pages, check runs, comment and HUD name the same tests."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

MAX_ENTRIES = 50
MAX_MESSAGE_UNITS = 500  # UTF-16 code units, as String.prototype.slice counts


def utf16_cut(text: str, units: int) -> str:
    """At most `units` UTF-16 code units of `text`, never half of a surrogate pair."""
    out: list[str] = []
    used = 0
    for char in text:
        width = 2 if ord(char) > 0xFFFF else 1
        if used + width > units:
            break
        out.append(char)
        used += width
    return "".join(out)


def _number(value: float) -> int | float:
    """A number as JSON.stringify writes it: 3.0 is 3."""
    return int(value) if float(value).is_integer() and abs(value) < 2**53 else value


def cap(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The first 50 entries in torchci's shape (entries are already validated: name a string, duration finite)."""
    capped: list[dict[str, Any]] = []
    for entry in list(entries)[:MAX_ENTRIES]:
        item: dict[str, Any] = {"name": str(entry.get("name") or "")}
        if entry.get("classname"):
            item["classname"] = str(entry["classname"])
        if entry.get("message"):
            item["message"] = utf16_cut(str(entry["message"]), MAX_MESSAGE_UNITS)
        duration = entry.get("duration")
        if duration is not None and isinstance(duration, int | float) and math.isfinite(duration):
            item["duration"] = _number(duration)
        capped.append(item)
    return capped


def to_json(capped: list[dict[str, Any]]) -> str:
    """`JSON.stringify(capped)`: compact, non-ASCII as itself."""
    return json.dumps(capped, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def parse(text: str) -> list[dict[str, Any]]:
    """The recorded list back (empty when none was recorded)."""
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return (
        [v for v in value if isinstance(v, dict) and isinstance(v.get("name"), str)] if isinstance(value, list) else []
    )


def names(text: str, shown: int = 5) -> tuple[list[str], int]:
    """The first `shown` failing tests' names (classname.name when both are given) and how many more there are."""
    tests = parse(text)
    labels = [f"{t['classname']}.{t['name']}" if t.get("classname") else t["name"] for t in tests]
    return labels[:shown], max(0, len(labels) - shown)
