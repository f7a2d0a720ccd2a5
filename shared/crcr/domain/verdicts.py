"""Failure verdicts (docs/contracts.md): what a failed (or timed out) L3/L4 job on a pull request means for its author.

- `new`: the job passed on its baseline, the PR broke it;
- `pre-existing`: it failed on its baseline too, the PR did not;
- `infra`: the downstream said its infrastructure failed, or the relay timed the started job out (retried
  once automatically before anyone is told);
- `flaky`: it failed, then passed on a retry of the same commit;
- `no baseline`: nothing to compare with;
- `known`: every test it says failed is one upstream disabled (crcr.domain.known), whatever its baseline;
- `broken trunk`: it would be `new`, `pre-existing` or `no baseline`, but the same job is broken on the default
  branch at the PR's base: a regression of the branch (crcr.domain.regressions) was open there.

A job's baseline is its latest result, from a push to the upstream's default branch or a scheduled run, on
an upstream commit at or before the PR's base commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

NEW = "new"
PRE_EXISTING = "pre-existing"
INFRA = "infra"
FLAKY = "flaky"
NO_BASELINE = "no baseline"
BROKEN_TRUNK = "broken trunk"
KNOWN = "known"
# What a regression open at the PR's base turns into `broken trunk`: never infra or flaky, which say more.
TRUNK_MAY_EXPLAIN = frozenset({NEW, PRE_EXISTING, NO_BASELINE})
VERDICT_MEANING = {
    NEW: "it passed on the base commit: this change broke it",
    PRE_EXISTING: "it failed on the base commit too",
    INFRA: "the downstream's infrastructure failed, or the job timed out; retried once",
    FLAKY: "it failed, then passed on a retry of the same commit",
    NO_BASELINE: "no result of this job on the base commit or before it to compare with",
    BROKEN_TRUNK: "the job is broken on the default branch at the base commit (an open regression): not this change",
    KNOWN: "every failing test is one PyTorch has disabled (a DISABLED issue): a failure already known upstream",
}
FAILED_CONCLUSIONS = frozenset({"failure", "timed_out"})


@dataclass(frozen=True)
class Attempt:
    """One attempt of one job, as the classification reads it."""

    run_attempt: int
    state: str  # in_progress, completed, timed_out (the sweeper)
    conclusion: str | None
    failure_kind: str | None = None

    @property
    def failed(self) -> bool:
        return self.state == "timed_out" or (self.state == "completed" and self.conclusion in FAILED_CONCLUSIONS)

    @property
    def passed(self) -> bool:
        return self.state == "completed" and self.conclusion == "success"

    @property
    def infra(self) -> bool:
        """The downstream said its infrastructure failed, or the relay timed it out (started or not)."""
        return self.failed and (self.failure_kind == "infra" or self.state == "timed_out")

    @property
    def retryable_infra(self) -> bool:
        """An infrastructure failure of a run's first attempt: the relay re-runs it once. (The sweeper's
        record of a dispatch no job started on is attempt 0: there is no run to re-run.)"""
        return self.infra and self.run_attempt == 1


def classify(attempts: Iterable[Attempt], baseline: Attempt | None) -> str | None:
    """The verdict of a job from its attempts on one commit (a re-run is the run's next attempt) and its
    baseline's latest attempt; None when it never failed."""
    ordered = sorted(attempts, key=lambda a: a.run_attempt)
    if not any(a.failed for a in ordered):
        return None
    latest = ordered[-1]
    if latest.state == "in_progress":
        return None  # a retry is running: its result decides
    if latest.passed:
        return FLAKY  # failed, then passed on a retry of the same commit
    if latest.infra:
        return INFRA
    if baseline is None or not (baseline.failed or baseline.passed):
        return NO_BASELINE
    return PRE_EXISTING if baseline.failed else NEW
