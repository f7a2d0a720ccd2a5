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

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from crcr.domain.ids import repo_key
from crcr.domain.verdicts import Attempt

CommitResult = Literal["pass", "fail"]
BISECT = "bisect"  # the event type of a bisection run: its ledger row, its jobs and its repository_dispatch

# A squash merge's first line ends with its PR: "Fix the thing (#1234)".
_TITLE_PR = re.compile(r"\(#([1-9][0-9]{0,9})\)\s*$")
MAX_COMMIT_FILES = 100  # a commit's files kept for narrowing a blamelist; more: not known (never narrowed)


@dataclass(frozen=True)
class BranchCommit:
    """A commit pushed to the upstream's default branch, as a blamelist names it."""

    sha: str
    committed_at: float  # the branch's order (ties: its place in its push)
    place: int = 0
    parent: str | None = None  # the commit before it on the branch, when the push said (its `before` or its list)
    pr: int | None = None  # the PR it landed, from the merge bot's trailer or the squash title's "(#N)"
    title: str | None = None  # the message's first line
    author: str | None = None
    files: tuple[str, ...] | None = None  # None: not all known

    @property
    def order(self) -> tuple[float, int]:
        return (self.committed_at, self.place)


def title_pr(title: str | None) -> int | None:
    """The PR a squash merge's first line names, as GitHub writes it ("… (#1234)")."""
    found = _TITLE_PR.search(title or "")
    return int(found.group(1)) if found else None


def landed_pr(resolves: tuple[str, int] | None, title: str | None, upstream: str) -> int | None:
    """The upstream PR a commit landed: its merge bot's trailer when it names the upstream, else its title's "(#N)"."""
    if resolves is not None and repo_key(resolves[0]) == repo_key(upstream):
        return resolves[1]
    return title_pr(title)


def commit_result(attempts: Iterable[Attempt]) -> CommitResult | None:
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


def regressions(results: Mapping[str, CommitResult | None], branch: Sequence[str]) -> list[Regression]:
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


CLOSED_KEPT_S = 14 * 86_400  # a closed regression stays listed this long after it was fixed


@dataclass(frozen=True)
class Blamed:
    """One commit of a blamelist, with what the relay knows of it."""

    sha: str
    pr: int | None = None
    title: str | None = None
    author: str | None = None
    # False when the commit's files are known and none concerns the job's path filter: listed, not suspected.
    suspect: bool = True


@dataclass(frozen=True)
class Tracked:
    """A regression of one downstream job as the relay keeps and shows it."""

    repo: str
    workflow_name: str
    job_name: str
    last_pass: str
    first_fail: str
    last_fail: str
    blamelist: tuple[Blamed, ...]
    opened_at: float
    fixed_by: str | None = None
    closed_at: float | None = None
    told: bool = False  # the downstream's owners were told of it
    # Bisection (opt-in): dispatches made, the most it may make (ceil(log2 n) of the range it started on), the commit
    # whose run it waits for, and why it stopped (`cancelled`, `no_result`, `budget` is only a pause).
    bisect_runs: int = 0
    bisect_limit: int = 0
    bisect_pending: str | None = None
    bisect_stopped: str | None = None

    @property
    def open(self) -> bool:
        return self.fixed_by is None

    @property
    def culprit(self) -> str | None:
        """The one commit bisection left in the range."""
        return self.first_fail if self.bisect_runs and len(self.blamelist) == 1 else None

    @property
    def state(self) -> str:
        return "open" if self.open else "closed"

    def to_json(self) -> dict[str, object]:
        """As the HUD's route and `crcr regressions --json` show it (whether its owners were told is the store's)."""
        return {
            "repo": self.repo,
            "workflow_name": self.workflow_name,
            "job_name": self.job_name,
            "state": self.state,
            "last_pass": self.last_pass,
            "first_fail": self.first_fail,
            "last_fail": self.last_fail,
            "fixed_by": self.fixed_by,
            "blamelist": [
                {"sha": b.sha, "pr": b.pr, "title": b.title, "author": b.author, "suspect": b.suspect}
                for b in self.blamelist
            ],
            "opened_at": self.opened_at,
            "closed_at": self.closed_at,
            "culprit": self.culprit,
            "bisect": {"runs": self.bisect_runs, "pending": self.bisect_pending, "stopped": self.bisect_stopped}
            if self.bisect_runs or self.bisect_stopped
            else None,
        }

    def stored(self) -> dict[str, object]:
        return self.to_json() | {"told": self.told, "bisect_limit": self.bisect_limit}

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Tracked:
        def text(name: str) -> str | None:
            value = doc.get(name)
            return str(value) if value is not None else None

        blamelist = doc.get("blamelist")
        blamed = tuple(
            Blamed(str(b["sha"]), b.get("pr"), b.get("title"), b.get("author"), bool(b.get("suspect", True)))
            for b in (blamelist if isinstance(blamelist, list) else [])
            if isinstance(b, dict)
        )
        closed = doc.get("closed_at")
        return cls(
            repo=str(doc["repo"]),
            workflow_name=str(doc["workflow_name"]),
            job_name=str(doc["job_name"]),
            last_pass=str(doc["last_pass"]),
            first_fail=str(doc["first_fail"]),
            last_fail=str(doc["last_fail"]),
            blamelist=blamed,
            opened_at=float(str(doc["opened_at"])),
            fixed_by=text("fixed_by"),
            closed_at=float(str(closed)) if closed is not None else None,
            told=bool(doc.get("told")),
            **_bisect_of(doc),
        )


def _bisect_of(doc: Mapping[str, object]) -> dict[str, Any]:
    state = doc.get("bisect")
    if not isinstance(state, dict):
        return {}
    return {
        "bisect_runs": int(state.get("runs") or 0),
        "bisect_limit": int(str(doc.get("bisect_limit") or 0)),
        "bisect_pending": state.get("pending"),
        "bisect_stopped": state.get("stopped"),
    }


def covers(t: Tracked, times: Mapping[str, float], base_sha: str) -> bool:
    """Whether the job was (or may have been) broken at `base_sha` by this regression: the base comes after its last
    pass, and before its fix if it has one. `times` places commits on the branch; an unplaced one says no."""
    base, last_pass = times.get(base_sha), times.get(t.last_pass)
    if base is None or last_pass is None or base <= last_pass:
        return False
    fixed = times.get(t.fixed_by) if t.fixed_by else None
    return t.fixed_by is None or (fixed is not None and base < fixed)


def _shas(x: Tracked | Regression) -> set[str]:
    return {b.sha if isinstance(b, Blamed) else b for b in x.blamelist}


def same_regression(a: Tracked | Regression, b: Tracked | Regression) -> bool:
    """The same regression seen again, perhaps with its range narrowed by a result that came late."""
    return a.first_fail == b.first_fail or a.last_pass == b.last_pass or bool(_shas(a) & _shas(b))


def merged(
    stored: Sequence[Tracked],
    found: Sequence[Regression],
    blame: Callable[[Regression], tuple[Blamed, ...]],
    job: tuple[str, str, str],
    now: float,
    known: Callable[[str], bool],
) -> list[Tracked]:
    """The job's regressions after a new look at its results: each one found keeps what was kept of it (when it
    opened, whether its owners were told, when it closed); a stored one its look could not see (`known` says whether
    its first failing commit was in the look) stays until it has been closed CLOSED_KEPT_S; the rest were mistaken
    (a late retry passed) and go."""
    repo, workflow_name, job_name = job
    kept: list[Tracked] = []
    used: set[int] = set()
    for r in found:
        match = next((i for i, s in enumerate(stored) if i not in used and same_regression(s, r)), None)
        before = stored[match] if match is not None else None
        if match is not None:
            used.add(match)
        closed_at = None
        if r.fixed_by is not None:
            closed_at = before.closed_at if before is not None and before.fixed_by == r.fixed_by else now
        seen = before or Tracked(repo, workflow_name, job_name, r.last_pass, r.first_fail, r.last_fail, (), now)
        kept.append(
            replace(
                seen,
                last_pass=r.last_pass,
                first_fail=r.first_fail,
                last_fail=r.last_fail,
                blamelist=blame(r),
                fixed_by=r.fixed_by,
                closed_at=closed_at,
            )
        )
    for i, s in enumerate(stored):
        if i in used or known(s.first_fail):
            continue
        if s.open or (s.closed_at is not None and now - s.closed_at < CLOSED_KEPT_S):
            kept.append(s)
    kept = [t for t in kept if t.open or (t.closed_at is not None and now - t.closed_at < CLOSED_KEPT_S)]
    return sorted(kept, key=lambda t: t.opened_at)


NOTICE_BLAMED = 20  # commits a notice names; the HUD's repository page lists them all


def notice_marker(t: Tracked) -> str:
    return f"<!-- crcr-regression {t.repo.lower()} {t.first_fail} -->"


def notice_body(t: Tracked, owners: Sequence[str], job: str) -> str:
    """The one comment that tells a downstream's owners their job broke on the default branch, on the PR of its first
    failing commit. `job` is the job's name as inert text (the downstream named it: untrusted)."""
    commits = "commit" if len(t.blamelist) == 1 else "commits"
    lines = [
        notice_marker(t),
        f"**Downstream regression: `{t.repo}`, {job}**, failing on the default branch since "
        f"{t.first_fail[:10]}, which this PR landed; it last passed on {t.last_pass[:10]}.",
        "",
        f"Blamelist ({len(t.blamelist)} {commits} between the last pass and the first failure):",
    ]
    for b in t.blamelist[-NOTICE_BLAMED:]:
        pr = f"#{b.pr}" if b.pr else b.sha[:10]
        why = "" if b.suspect else " (outside the job's path filter)"
        lines.append(f"- {b.sha[:10]} {pr}{why}")
    if len(t.blamelist) > NOTICE_BLAMED:
        lines.append(f"- … and {len(t.blamelist) - NOTICE_BLAMED} older (the relay's HUD lists them all)")
    if owners:
        lines += ["", "Owners of `" + t.repo + "`: " + " ".join(f"@{o}" for o in owners)]
    lines += [
        "",
        "<sub>Told once per regression by the cross-repository CI relay; advice only: no check run or merge "
        "rule changes. A later pass closes it on the HUD.</sub>",
    ]
    return "\n".join(lines)


def midpoint(t: Tracked) -> str | None:
    """The commit a bisection run tests next: the middle of the range's commits before its first failure (for
    (c0, c4]: c2, then c3 or c1), so ceil(log2 n) runs name one of n commits; None when one is left."""
    untested = [b.sha for b in t.blamelist[:-1]]
    if not untested:
        return None
    return untested[(len(untested) + 1) // 2 - 1]


def bisect_limit(t: Tracked) -> int:
    """ceil(log2 n) runs for a range of n commits."""
    return max(0, (len(t.blamelist) - 1).bit_length())
