"""Regression ranges on the upstream's default branch: for one downstream job, which upstream commits could have
broken it (docs/decisions.md, 2026-12-06).

The job's results on the branch (pushes and scheduled runs) are read in the branch's order. A commit's result is
what its attempts say together: passed if any attempt passed (a job that failed and passed on a retry is flaky, not
broken), failed if an attempt failed for a reason of its own; an infrastructure failure or a time-out says nothing
of the code, nor does a job still running or cancelled. A regression opens on the first failing commit after a
passing one; its range is (last pass, first fail] and its blamelist the branch's commits in that range. A later pass
closes it: fixed between the last failing commit and that pass. A job failing since before its first known pass
opens nothing: there is no range to name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from crcr.domain.verdicts import Attempt

Said = Literal["pass", "fail"]


def said(attempts: Iterable[Attempt]) -> Said | None:
    """What one commit's attempts of the job say of the code: `pass`, `fail`, or nothing (None)."""
    seen = list(attempts)
    if any(a.passed for a in seen):
        return "pass"
    if any(a.failed and not a.infra for a in seen):
        return "fail"
    return None


@dataclass(frozen=True)
class Regression:
    last_pass: str
    first_fail: str
    blamelist: tuple[str, ...]  # the branch's commits after last_pass up to first_fail, oldest first
    last_fail: str  # the newest failing commit seen while open
    fixed_by: str | None = None  # the first passing commit after it: closed, fixed in (last_fail, fixed_by]

    @property
    def open(self) -> bool:
        return self.fixed_by is None


def regressions(results: Mapping[str, Said | None], branch: Sequence[str]) -> list[Regression]:
    """Every regression of one job, oldest first, from its result per commit (`said`) and the branch's commits in
    order (oldest first; a commit not on it is not placed and says nothing)."""
    position = {sha: i for i, sha in enumerate(branch)}
    placed = sorted((position[sha], sha, r) for sha, r in results.items() if sha in position and r is not None)
    found: list[Regression] = []
    last_pass: str | None = None
    current: Regression | None = None
    for _, sha, result in placed:
        if result == "pass":
            if current is not None:
                found.append(replace(current, fixed_by=sha))
                current = None
            last_pass = sha
        elif current is not None:
            current = replace(current, last_fail=sha)
        elif last_pass is not None:
            blame = tuple(branch[position[last_pass] + 1 : position[sha] + 1])
            current = Regression(last_pass=last_pass, first_fail=sha, blamelist=blame, last_fail=sha)
    if current is not None:
        found.append(current)
    return found
