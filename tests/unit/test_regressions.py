"""Regression ranges of one downstream job on the upstream's default branch (crcr.domain.regressions)."""

from __future__ import annotations

import random

import pytest

from crcr.domain.regressions import CommitResult, commit_result, regressions
from crcr.domain.verdicts import Attempt

BRANCH = [f"{i:040x}" for i in range(1, 11)]  # ten pushes to main, oldest first


def passed(n: int = 1) -> Attempt:
    return Attempt(n, "completed", "success")


def failed(n: int = 1, kind: str | None = "test") -> Attempt:
    return Attempt(n, "completed", "failure", kind)


def test_a_job_passing_on_five_pushes_and_failing_from_the_sixth_opens_one_regression_naming_the_sixth() -> None:
    results: dict[str, CommitResult | None] = {
        sha: commit_result([passed() if i < 5 else failed()]) for i, sha in enumerate(BRANCH)
    }
    [regression] = regressions(results, BRANCH)
    assert (regression.last_pass, regression.first_fail) == (BRANCH[4], BRANCH[5])
    assert regression.blamelist == (BRANCH[5],)
    assert regression.open and regression.last_fail == BRANCH[9]


def test_a_nightly_testing_every_fourth_commit_blames_the_four_commits_since_its_last_pass() -> None:
    tested = {
        BRANCH[1]: commit_result([passed()]),
        BRANCH[5]: commit_result([failed()]),
        BRANCH[9]: commit_result([failed()]),
    }
    [regression] = regressions(tested, BRANCH)
    assert regression.blamelist == tuple(BRANCH[2:6])  # (2nd, 6th]: four commits
    assert regression.first_fail == BRANCH[5] and regression.last_fail == BRANCH[9]


def test_a_later_pass_closes_it_with_the_range_of_the_fix() -> None:
    pattern = [passed(), failed(), failed(), passed(), passed()]
    results = {sha: commit_result([a]) for sha, a in zip(BRANCH, pattern, strict=False)}
    [regression] = regressions(results, BRANCH)
    assert not regression.open
    assert (regression.last_fail, regression.fixed_by) == (BRANCH[2], BRANCH[3])


@pytest.mark.parametrize(
    ("attempts", "meaning"),
    [
        ([failed(1), passed(2)], "pass"),  # flaky: failed, then passed on a retry of the same commit
        ([failed(1, "infra")], None),  # the downstream's infrastructure failed
        ([Attempt(1, "timed_out", None)], None),  # the relay timed it out
        ([Attempt(1, "completed", "cancelled")], None),
        ([Attempt(1, "in_progress", None)], None),
        ([failed(1, "infra"), failed(2, "build")], "fail"),  # the retry failed for a reason of its own
        ([failed(1, None)], "fail"),  # no kind said: a failure of the code until told otherwise
    ],
)
def test_what_a_commits_attempts_say_of_the_code(attempts: list[Attempt], meaning: str | None) -> None:
    assert commit_result(attempts) == meaning


def test_a_retry_that_passes_and_an_infra_failure_open_nothing() -> None:
    results = {
        BRANCH[0]: commit_result([passed()]),
        BRANCH[1]: commit_result([failed(1), passed(2)]),
        BRANCH[2]: commit_result([failed(1, "infra")]),
        BRANCH[3]: commit_result([Attempt(1, "timed_out", None)]),
        BRANCH[4]: commit_result([passed()]),
    }
    assert regressions(results, BRANCH) == []


def test_failing_since_before_any_known_pass_and_commits_off_the_branch_open_nothing() -> None:
    results: dict[str, CommitResult | None] = {
        BRANCH[0]: "fail",
        BRANCH[1]: "fail",
        "f" * 40: "pass",
        BRANCH[2]: "fail",
    }
    assert regressions(results, BRANCH) == []


def test_ranges_never_overlap_and_each_blames_only_its_own_commits() -> None:
    seed = 20261206
    print(f"seed {seed}")
    rng = random.Random(seed)
    branch = [f"{i:040x}" for i in range(1, 201)]
    for trial in range(200):
        results: dict[str, CommitResult | None] = {
            sha: rng.choice(["pass", "fail", None]) for sha in branch if rng.random() < 0.5
        }
        found = regressions(results, branch)
        blamed = [sha for r in found for sha in r.blamelist]
        assert len(blamed) == len(set(blamed)), f"seed {seed}, trial {trial}"
        for r in found:
            assert results[r.last_pass] == "pass" and results[r.first_fail] == "fail", f"seed {seed}, trial {trial}"
            assert r.blamelist[-1] == r.first_fail and branch.index(r.blamelist[0]) == branch.index(r.last_pass) + 1
            between = [results.get(sha) for sha in r.blamelist[:-1]]
            assert all(x is None for x in between), f"seed {seed}, trial {trial}: a result inside the range"
        assert all(r.open is False for r in found[:-1]), f"seed {seed}, trial {trial}: only the newest may be open"
