"""Failures already known upstream (crcr.domain.known): test-infra's disabled-tests-condensed.json, matched against a
job's failing tests, and the `known` verdict that fails open when the list cannot be read."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date

import pytest
import yaml

from crcr.adapters.allowlist_source import CachedKnownFailures, CachedKnownIssues
from crcr.app.ports.pulls import PrInfo
from crcr.app.verdicts import judgement
from crcr.domain.errors import AllowlistError
from crcr.domain.known import (
    DisableIssue,
    KnownFailures,
    KnownFailuresError,
    condensed_from_issues,
    known_issues,
    parse_condensed,
    parse_known_issues,
)
from tests.unit.fakes import RecordingMetrics
from tests.unit.test_verdicts import BASE, HEAD, OLDER, World, on_branch, record

ISSUE = "https://github.com/pytorch/pytorch/issues/{}"
# As test-infra writes it: title -> [number, url, platforms]; an empty list disables the test everywhere.
CONDENSED = {
    "test_matmul (__main__.TestLinalg)": ["170300", ISSUE.format(170300), []],
    "test_conv (__main__.TestConvolution)": ["170301", ISSUE.format(170301), ["rocm", "xpu"]],
    "test_add (test_ops.TestOps)": ["170302", ISSUE.format(170302), []],
    "DISABLED test_nope (x)": ["1", ISSUE.format(1), []],  # not a test title: ignored, as test-infra does
    "test_bad (__main__.TestBad)": ["12", "http://evil.example/12", []],  # not GitHub's: ignored
}
KNOWN = parse_condensed(CONDENSED)


def failed(*tests: tuple[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "classname": cls} for name, cls in tests]


def test_the_condensed_list_is_read_as_test_infra_writes_it() -> None:
    assert len(KNOWN) == 3
    with pytest.raises(KnownFailuresError):
        parse_condensed(["not", "an", "object"])


@pytest.mark.parametrize(
    ("tests", "device", "issues"),
    [
        (failed(("test_matmul", "test_linalg.TestLinalg")), None, [170300]),  # the class's last part matches
        (failed(("test_matmul", "TestLinalg"), ("test_add", "TestOps")), None, [170300, 170302]),
        (failed(("test_matmul", "TestLinalg"), ("test_new", "TestLinalg")), None, None),  # one is not known
        (failed(("test_conv", "TestConvolution")), "rocm", [170301]),  # disabled on its platform
        (failed(("test_conv", "TestConvolution")), "gpu", None),  # disabled elsewhere only
        (failed(("test_conv", "TestConvolution")), None, None),
        (failed(("test_matmul", "TestOther")), None, None),  # another class's test of that name
        ([], None, None),  # nothing said what failed: never known
    ],
)
def test_a_failure_is_known_when_every_failing_test_is_disabled_upstream(
    tests: list[dict[str, str]], device: str | None, issues: list[int] | None
) -> None:
    found = known_issues(tests, KNOWN, device)
    assert (None if found is None else [d.number for d in found]) == issues


def known_world() -> tuple[World, RecordingMetrics]:
    return World(prs={7: PrInfo(HEAD, BASE)}, times={OLDER: 10.0, BASE: 20.0}), RecordingMetrics()


def test_a_pr_failure_whose_tests_are_all_disabled_is_known_with_its_issues_whatever_its_baseline() -> None:
    world, _ = known_world()
    tests = json.dumps(failed(("test_matmul", "TestLinalg"), ("test_add", "TestOps")))
    job = replace(record(), failed_tests=tests)
    world.rows = [on_branch(BASE, "success", "p1"), job]  # it passed on the base: would be `new`
    deps = replace(world.deps(), known=lambda: KNOWN)
    assert judgement(job, deps).verdict == "known"
    assert judgement(job, deps).known_issues == f"{ISSUE.format(170300)} {ISSUE.format(170302)}"
    other = replace(job, failed_tests=json.dumps(failed(("test_matmul", "TestLinalg"), ("test_x", "TestY"))))
    world.rows = [on_branch(BASE, "success", "p1"), other]
    assert judgement(other, deps).verdict == "new"  # one failure is not known: the author's
    infra = replace(job, failure_kind="infra")
    assert judgement(infra, deps).verdict == "infra"  # infrastructure says more


def test_a_list_that_cannot_be_read_leaves_failures_unclassified_and_is_counted() -> None:
    world, metrics = known_world()
    job = replace(record(), failed_tests=json.dumps(failed(("test_matmul", "TestLinalg"))))
    world.rows = [on_branch(BASE, "success", "p1"), job]
    unread = CachedKnownFailures(lambda: (_ for _ in ()).throw(OSError("S3 unreachable")), metrics, lambda: 0.0)
    deps = replace(world.deps(), known=unread.current, on_unknown=lambda exc: metrics.count("KnownFailuresUnavailable"))
    assert judgement(job, deps).verdict == "new"
    assert metrics.counts["KnownFailuresUnavailable"] == 1 and metrics.counts["DisabledTestsRejected"] == 1
    good = CachedKnownFailures(lambda: json.dumps(CONDENSED).encode(), metrics, lambda: 0.0)
    assert judgement(job, replace(deps, known=good.current)).verdict == "known"


FILE = """\
- repo: Org/Backend
  job: test
  test: test_conv2d (TestConvolution)
  issue: https://github.com/pytorch/pytorch/issues/170400
  expires: 2027-01-31
- repo: org/backend
  log: "HIP error: .*out of memory"
  issue: https://github.com/pytorch/pytorch/issues/170401
  expires: 2026-12-31
"""


def from_file(text: str) -> CachedKnownIssues:
    return CachedKnownIssues(text.encode, RecordingMetrics(), lambda: 0.0)


@pytest.mark.parametrize(
    ("tests", "job", "today", "issues"),
    [
        (failed(("test_conv2d", "test_nn.TestConvolution")), "test", "2026-12-06", [170400]),
        (failed(("test_conv2d", "TestConvolution")), "build", "2026-12-06", None),  # another job of the downstream
        (failed(("test_conv2d", "TestConvolution")), "test", "2027-02-01", None),  # expired
        ([{"name": "test_x", "message": "HIP error: device out of memory"}], "any", "2026-12-06", [170401]),
        ([{"name": "test_x", "message": "HIP error: invalid device"}], "any", "2026-12-06", None),
        # One test from each list: known, both issues linked.
        (
            failed(("test_matmul", "TestLinalg"), ("test_conv2d", "TestConvolution")),
            "test",
            "2026-12-06",
            [170300, 170400],
        ),
    ],
)
def test_a_known_issues_entry_explains_a_downstreams_failing_tests_until_it_expires(
    tests: list[dict[str, str]], job: str, today: str, issues: list[int] | None
) -> None:
    entries = from_file(FILE).current()
    both = KnownFailures(KNOWN.by_test, entries.issues)
    found = known_issues(tests, both, None, ("org/BACKEND", job), date.fromisoformat(today))
    assert (None if found is None else [d.number for d in found]) == issues


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- repo: org/x\n  test: t\n  issue: https://github.com/o/r/issues/1\n", "needs expires"),
        ("- repo: org/x\n  test: t\n  log: x\n  issue: https://github.com/o/r/issues/1\n  expires: 2027-01-01\n",
         "one of them"),
        ("- repo: org/x\n  log: '('\n  issue: https://github.com/o/r/issues/1\n  expires: 2027-01-01\n",
         "not a regular expression"),
        ("- repo: org/x\n  test: t\n  issue: http://evil/1\n  expires: 2027-01-01\n", "GitHub issue URL"),
    ],
)  # fmt: skip
def test_a_bad_known_issues_file_names_the_entry_and_is_never_loaded(text: str, problem: str) -> None:
    with pytest.raises(KnownFailuresError, match=problem):
        parse_known_issues(yaml.safe_load(text))
    metrics = RecordingMetrics()
    source = CachedKnownIssues(text.encode, metrics, lambda: 0.0)
    with pytest.raises(AllowlistError):
        source.current()  # nothing loaded: a verdict fails open
    assert metrics.counts["KnownIssuesRejected"] == 1


def issue(number: int, title: str, body: str = "", url: str | None = None) -> DisableIssue:
    return DisableIssue(number, url or ISSUE.format(number), title, body)


# The cases of test-infra's torchci/test/flakyBotTests/getDisabledTestsAndJobs.test.ts, on its issue shapes.
TITLE_A = "DISABLED test_a (__main__.suite_a)"


def test_disable_issues_condense_as_test_infra_condenses_them() -> None:
    # One test: its platforms from the body's line.
    assert condensed_from_issues([issue(1, TITLE_A, "Platforms: win", "url")]) == {
        "test_a (__main__.suite_a)": ["1", "url", ["win"]]
    }
    # Two issues for one test: the first (by URL) gives number and link, the platforms merge.
    two = [issue(2, TITLE_A, "Platforms: linux", "url2"), issue(1, TITLE_A, "Platforms: win", "url")]
    assert condensed_from_issues(two) == {"test_a (__main__.suite_a)": ["1", "url", ["linux", "win"]]}
    # One of them names no platform: every platform.
    many = [*two, issue(3, TITLE_A, "Platforms:", "url2"), issue(4, TITLE_A, "Platforms: mac", "url2")]
    assert condensed_from_issues(many) == {"test_a (__main__.suite_a)": ["1", "url", []]}
    # A title that is not a test (a disabled job, a malformed name) disables no test; an unknown platform is dropped.
    assert condensed_from_issues([issue(5, "DISABLED Lint / Link checks / lint-urls / linux-job")]) == {}
    assert condensed_from_issues([issue(6, TITLE_A + " 2")]) == {}
    only_rocm = condensed_from_issues([issue(7, TITLE_A, "Platforms: rocm, toaster\n\nflaky since #1")])
    assert only_rocm["test_a (__main__.suite_a)"][2] == ["rocm"]


def test_an_aggregate_disable_issue_disables_each_test_it_lists() -> None:
    body = (
        "There are multiple flaky tests in file_a.py. Please investigate and fix the flakiness.\n\n"
        "disable the following tests:\n```\n"
        + "".join(f"test_{i} (__main__.suite_{i}): win, linux\n" for i in range(11))
        + "not a test: win\n```\n\nHere is an example for test_0 (suite_0):\n```\nno tests here (x): mac\n```"
    )
    found = condensed_from_issues([issue(9, "DISABLED MULTIPLE There are multiple flaky tests in file_a.py", body)])
    assert len(found) == 11
    assert found["test_5 (__main__.suite_5)"] == ["9", ISSUE.format(9), ["linux", "win"]]
    # And what it makes is the document the relay reads: a failing test_5 on a Windows downstream is known.
    known = parse_condensed(found)
    assert known_issues(failed(("test_5", "suite_5")), known, "win") is not None
    assert known_issues(failed(("test_5", "suite_5")), known, "rocm") is None
