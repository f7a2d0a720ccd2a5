"""Failures already known upstream (crcr.domain.known): test-infra's disabled-tests-condensed.json, matched against a
job's failing tests, and the `known` verdict that fails open when the list cannot be read."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from crcr.adapters.allowlist_source import CachedKnownFailures
from crcr.app.ports.pulls import PrInfo
from crcr.app.verdicts import judgement
from crcr.domain.known import KnownFailuresError, known_issues, parse_condensed
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
