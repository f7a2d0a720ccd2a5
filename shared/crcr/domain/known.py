"""Failures already known upstream: the tests PyTorch disables with `DISABLED <test> (<module>.<Class>)` issues, in
the shape of test-infra's `disabled-tests-condensed.json` (`{"test_x (__main__.TestY)": ["<number>", "<issue URL>",
["<platform>", ...]]}`, an empty platform list meaning every platform), read from a configured source. The relay's
own issue search writes the issue's author after the platforms; test-infra's file names none.

Beside them, a known-issues file kept beside the allowlist (YAML, a list): each entry names a downstream `repo`,
optionally a `job`, a `test` (its name, or `name (Class)`) or a `log` pattern (a regular expression searched in the
failing test's message), the `issue` URL, and an `expires` date after which it no longer counts.

A failed job is `known` when every failing test it reported matches one of them: a disabled test's name and class
(the last dotted part: a downstream's module path differs from upstream's), or a known-issues entry. A test disabled
on some platforms only matches a downstream whose L3 device (`ciflow/crcr/<device>`) is one of them; with no
platforms line, every downstream. A job that reported no failing tests is never known: nothing says what failed.

A searched issue counts only when its author may disable a test, as test-infra's verifyDisableTestIssueBot decides:
one of PyTorch's bots, or someone with write access to the upstream (crcr.app.disable_authors asks GitHub)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

# parseTestName in test-infra's torchci/lib/flakyBot/utils.ts
_TEST = re.compile(r"^\s*(test_[a-zA-Z0-9\-_.]+)\s+\(([a-zA-Z0-9\-_.]+)\)\s*$")
MAX_ENTRIES = 100_000
# A GitHub login (older accounts may hold a double or trailing hyphen), or an App's bot user: `[` is no user's.
LOGIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}(?:\[bot\])?$")
# author_association of someone who cannot have write access (it would say COLLABORATOR, MEMBER or OWNER): refused
# without asking GitHub.
NO_ACCESS_ASSOCIATIONS = frozenset({"NONE", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR"})
# A collaborator's permission that may disable a test: `permission` folds maintain into write (and a custom role into
# its base), `role_name` names the role.
WRITE_ACCESS = frozenset({"admin", "maintain", "write"})


class KnownFailuresError(ValueError):
    """The document is not in the condensed shape."""


@dataclass(frozen=True)
class Disabled:
    test: str  # as the issue names it: "test_x (__main__.TestY)"
    number: int
    url: str
    platforms: tuple[str, ...]  # empty: every platform
    author: str | None = None  # the issue's author, when the relay searched the issues itself


@dataclass(frozen=True)
class KnownIssue:
    """One entry of the known-issues file."""

    repo: str  # lower case
    issue: Disabled  # its URL and number (the test it names, or its pattern, in `test`)
    expires: date
    job: str | None = None
    test: tuple[str, str] | None = None  # (name, class's last part or "")
    log: re.Pattern[str] | None = None

    def matches(self, repo: str, job: str, test: Mapping[str, Any], today: date) -> bool:
        if today > self.expires or repo.lower() != self.repo or (self.job is not None and self.job != job):
            return False
        if self.test is not None:
            name, cls = self.test
            if _key(str(test.get("name") or ""), str(test.get("classname") or "")) != (name, cls or _class_of(test)):
                return False
        return self.log is None or bool(self.log.search(str(test.get("message") or "")))


@dataclass(frozen=True)
class KnownFailures:
    by_test: Mapping[tuple[str, str], Disabled]  # (test name, class's last part) -> the issue
    issues: tuple[KnownIssue, ...] = ()  # the known-issues file's entries

    def __len__(self) -> int:
        return len(self.by_test) + len(self.issues)


def _class_of(test: Mapping[str, Any]) -> str:
    return str(test.get("classname") or "").strip().rsplit(".", 1)[-1]


_ISSUE_URL = re.compile(r"^https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/issues/([1-9][0-9]{0,9})$")
MAX_ISSUES = 1000


def parse_known_issues(doc: Any) -> tuple[KnownIssue, ...]:
    """The known-issues file: a list of entries, each with `repo`, `issue`, `expires` and a `test` or a `log`; an
    error names the entry."""
    if not isinstance(doc, list) or len(doc) > MAX_ISSUES:
        raise KnownFailuresError(f"expected a list of at most {MAX_ISSUES} known issues")
    found = []
    for n, entry in enumerate(doc, 1):
        where = f"known issue {n}"
        if not isinstance(entry, dict) or set(entry) - {"repo", "job", "test", "log", "issue", "expires"}:
            raise KnownFailuresError(f"{where}: a mapping of repo, job, test or log, issue, expires")
        url, expires, repo = entry.get("issue"), entry.get("expires"), entry.get("repo")
        number = _ISSUE_URL.match(url) if isinstance(url, str) else None
        if not isinstance(repo, str) or "/" not in repo or number is None:
            raise KnownFailuresError(f"{where}: needs repo (owner/name) and issue (a GitHub issue URL)")
        if not isinstance(expires, date):
            raise KnownFailuresError(f"{where}: needs expires, a date (YYYY-MM-DD)")
        test, log = entry.get("test"), entry.get("log")
        if (test is None) == (log is None) or not isinstance(test or log, str):
            raise KnownFailuresError(f"{where}: give test (a test name) or log (a pattern), one of them")
        named = None
        if isinstance(test, str):
            parsed = re.match(r"^\s*([^\s(]+)\s*(?:\(([^)]*)\))?\s*$", test)
            if parsed is None:
                raise KnownFailuresError(f"{where}: test must be a name, or name (Class)")
            named = _key(parsed.group(1), parsed.group(2) or "")
        try:
            pattern = re.compile(log) if isinstance(log, str) else None
        except re.error as exc:
            raise KnownFailuresError(f"{where}: log is not a regular expression: {exc}") from None
        job = entry.get("job")
        issue = Disabled(str(test or log), int(number.group(1)), str(url), ())
        found.append(KnownIssue(repo.lower(), issue, expires, str(job) if job else None, named, pattern))
    return tuple(found)


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
        author = value[3] if len(value) > 3 and isinstance(value[3], str) and LOGIN.fullmatch(value[3]) else None
        if not str(number).isdigit() or not isinstance(url, str) or not url.startswith("https://github.com/"):
            continue
        name = f"{parsed.group(1)} ({parsed.group(2)})"
        disabled = Disabled(name, int(number), url, tuple(map(str, platforms)), author)
        found[_key(parsed.group(1), parsed.group(2))] = disabled
    return KnownFailures(found)


# supportedPlatforms in test-infra's torchci/lib/flakyBot/utils.ts: a platform not among them is not parsed
PLATFORMS = frozenset({"asan", "linux", "mac", "macos", "rocm", "xpu", "slow", "win", "windows", "dynamo", "inductor"})
_PLATFORM_SPLIT = re.compile(r"^\s+|\s*,\s*|\s+$")


@dataclass(frozen=True)
class DisableIssue:
    """An open issue of the upstream whose title starts with `DISABLED `, as GitHub's issue search lists it."""

    number: int
    url: str
    title: str
    body: str
    author: str | None = None  # `user.login`
    association: str | None = None  # `author_association`: OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, NONE, ...


def may_disable(permission: str | None, role_name: str | None) -> bool:
    """GitHub's answer for a collaborator (`permission`, `role_name`) gives write access to the repository."""
    return (permission or "").lower() in WRITE_ACCESS or (role_name or "").lower() in WRITE_ACCESS


def _test_name(text: str) -> str | None:
    parsed = _TEST.match(text)
    return f"{parsed.group(1)} ({parsed.group(2)})" if parsed else None


def _single_platforms(body: str) -> list[str]:
    """singleDisableIssue.parseBody: the supported platforms of the body's `Platforms:` lines (none: every one)."""
    found: list[str] = []
    for line in re.findall(r"[^\r\n]+", body):
        lower = line.lower().strip()
        if lower.startswith("platforms:"):
            for platform in _PLATFORM_SPLIT.split(lower[len("platforms:") :]):
                if platform in PLATFORMS and platform not in found:
                    found.append(platform)
    return found


def _aggregate_tests(body: str) -> list[tuple[str, list[str]]]:
    """aggregateDisableIssue.parseBody: the code block after "disable the following tests:", one `test (Class):
    platform, platform` per line."""
    start = body.lower().find("disable the following tests:")
    if start == -1:
        return []
    blocks = body[start:].split("```")
    found = []
    for line in (blocks[1] if len(blocks) > 1 else "").split("\n"):
        if not line.strip():
            continue
        head, _, platforms = line.partition(":")
        name = _test_name(head)
        if name is not None:
            listed = [p.strip().lower() for p in platforms.split(",") if p.strip()]
            found.append((name, [p for p in listed if p in PLATFORMS]))
    return found


def condensed_from_issues(issues: Iterable[DisableIssue]) -> dict[str, list[Any]]:
    """test-infra's getDisabledTests (torchci/pages/api/flaky-tests/getDisabledTestsAndJobs.ts): the condensed
    document from the open `DISABLED` issues, taken in the order of their URLs; a test named twice keeps its first
    issue (and its author, after the platforms), and every platform named for it (none named by any one of them:
    every platform)."""
    tests: dict[str, tuple[int, str, list[str], str | None]] = {}

    def add(name: str, issue: DisableIssue, platforms: list[str]) -> None:
        if name not in tests:
            tests[name] = (issue.number, issue.url, list(platforms), issue.author)
        elif not platforms:
            tests[name][2].clear()
        elif tests[name][2]:
            tests[name][2].extend(platforms)

    for issue in sorted(issues, key=lambda i: i.url):
        if issue.title.startswith("DISABLED MULTIPLE "):
            for name, platforms in _aggregate_tests(issue.body):
                add(name, issue, platforms)
        elif issue.title.startswith("DISABLED ") and (single := _test_name(issue.title[len("DISABLED ") :])):
            add(single, issue, _single_platforms(issue.body))
    return {name: [str(n), url, sorted(set(p)), *([a] if a else [])] for name, (n, url, p, a) in tests.items()}


def known_refs(issues: Iterable[Disabled]) -> str:
    """A `known` verdict's issues as the job's row keeps them: each URL, `@<author>` after it when the issue search
    named one, spaced."""
    return " ".join(d.url + (f"@{d.author}" if d.author else "") for d in issues)


def parse_known_refs(refs: str) -> list[tuple[str, str | None]]:
    """The row's `known_issues`: (URL, author or None) each; a row written before authors were kept has URLs only."""
    found: list[tuple[str, str | None]] = []
    for ref in refs.split():
        url, at, author = ref.rpartition("@")
        found.append((url, author) if at and url and LOGIN.fullmatch(author) else (ref, None))
    return found


def known_issues(
    failed: Iterable[Mapping[str, Any]],
    known: KnownFailures,
    device: str | None,
    where: tuple[str, str] = ("", ""),
    today: date | None = None,
) -> tuple[Disabled, ...] | None:
    """The issues that explain every failing test of a job (`where`: its repository and name) (each once, in the
    order found), or None when a failing test is not known here, or none was reported."""
    issues: dict[int, Disabled] = {}
    seen = False
    for test in failed:
        seen = True
        found = known.by_test.get(_key(str(test.get("name") or ""), str(test.get("classname") or "")))
        if found is not None and found.platforms and (device is None or device not in found.platforms):
            found = None
        if found is None and today is not None:
            entry = next((k for k in known.issues if k.matches(where[0], where[1], test, today)), None)
            found = entry.issue if entry is not None else None
        if found is None:
            return None
        issues.setdefault(found.number, found)
    return tuple(issues.values()) if seen else None
