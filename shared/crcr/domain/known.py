"""Failures already known upstream: the tests PyTorch disables with `DISABLED <test> (<module>.<Class>)` issues, in
the shape of test-infra's `disabled-tests-condensed.json` (`{"test_x (__main__.TestY)": ["<number>", "<issue URL>",
["<platform>", ...]]}`, an empty platform list meaning every platform), read from a configured source.

A failed job is `known` when every failing test it reported matches one of them: the test's name, and its class
(the last dotted part: a downstream's module path differs from upstream's). A test disabled on some platforms only
matches a downstream whose L3 device (`ciflow/crcr/<device>`) is one of them; with no platforms line, every
downstream. A job that reported no failing tests is never known: nothing says what failed."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# parseTestName in test-infra's torchci/lib/flakyBot/utils.ts
_TEST = re.compile(r"^\s*(test_[a-zA-Z0-9\-_.]+)\s+\(([a-zA-Z0-9\-_.]+)\)\s*$")
MAX_ENTRIES = 100_000


class KnownFailuresError(ValueError):
    """The document is not in the condensed shape."""


@dataclass(frozen=True)
class Disabled:
    test: str  # as the issue names it: "test_x (__main__.TestY)"
    number: int
    url: str
    platforms: tuple[str, ...]  # empty: every platform


@dataclass(frozen=True)
class KnownFailures:
    by_test: Mapping[tuple[str, str], Disabled]  # (test name, class's last part) -> the issue

    def __len__(self) -> int:
        return len(self.by_test)


def _key(name: str, classname: str) -> tuple[str, str]:
    return (name.strip(), classname.strip().rsplit(".", 1)[-1])


def parse_condensed(doc: Any) -> KnownFailures:
    if not isinstance(doc, dict):
        raise KnownFailuresError("expected a JSON object of test -> [number, url, platforms]")
    if len(doc) > MAX_ENTRIES:
        raise KnownFailuresError(f"more than {MAX_ENTRIES} disabled tests")
    found: dict[tuple[str, str], Disabled] = {}
    for title, value in doc.items():
        parsed = _TEST.match(str(title))
        if parsed is None or not isinstance(value, list) or len(value) < 2:
            continue  # a title test-infra would not parse either
        number, url = value[0], value[1]
        platforms = value[2] if len(value) > 2 and isinstance(value[2], list) else []
        if not str(number).isdigit() or not isinstance(url, str) or not url.startswith("https://github.com/"):
            continue
        disabled = Disabled(f"{parsed.group(1)} ({parsed.group(2)})", int(number), url, tuple(map(str, platforms)))
        found[_key(parsed.group(1), parsed.group(2))] = disabled
    return KnownFailures(found)


def known_issues(
    failed: Iterable[Mapping[str, Any]], known: KnownFailures, device: str | None
) -> tuple[Disabled, ...] | None:
    """The issues that explain every failing test (each once, in the order found), or None when a failing test is
    not known here, or none was reported."""
    issues: dict[int, Disabled] = {}
    seen = False
    for test in failed:
        seen = True
        found = known.by_test.get(_key(str(test.get("name") or ""), str(test.get("classname") or "")))
        if found is None or (found.platforms and (device is None or device not in found.platforms)):
            return None
        issues.setdefault(found.number, found)
    return tuple(issues.values()) if seen else None
