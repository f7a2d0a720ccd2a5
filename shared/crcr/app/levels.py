"""Level check (LevelFunction, on a schedule): each L2-L4 downstream's level status as PyTorch's level-status route
serves it, and one allowlist PR per L3 repository to demote (opened, updated, closed, never merged)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from crcr.app.health import sample
from crcr.app.outbound import GITHUB, Outbound, Permit, Write
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.github import DispatchRuns, GitHubError
from crcr.app.ports.jobs import JobRecord, JobsByRepo
from crcr.app.ports.levels import Demotions, LevelHistory, PullRef
from crcr.app.ports.pages import PageDocs
from crcr.domain.allowlist import Allowlist, Entry
from crcr.domain.allowlist_edit import EditError, demote_to_l2
from crcr.domain.errors import AllowlistError
from crcr.domain.ids import is_github_run, repo_key
from crcr.domain.level_status import (
    COOL_DOWN_S,
    DEMOTION_MIN_JOBS,
    RepoStatus,
    document,
    plan_demotions,
    pr_body,
    pr_title,
    status_of,
    tenure,
)
from crcr.domain.levels import Level


class AllowlistPulls(Protocol):
    """The repository holding the allowlist (its `github:owner/repo/path@base` source), as a demotion PR needs it."""

    @property
    def repo(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def base(self) -> str: ...

    def installation_for(self, repo: str) -> int: ...
    def find_open(self, branch: str) -> PullRef | None:
        """The open PR from `branch` (in the same repository) to the base, if any."""
        ...

    def base_sha(self) -> str: ...
    def read_file(self, ref: str) -> tuple[str, str]:
        """The allowlist's text and blob sha at `ref` (a branch or commit)."""
        ...

    def prepare_branch(self, branch: str, sha: str, *, permit: Permit) -> None:
        """Create `branch` at `sha`, or move it there when it is left over from an earlier PR."""
        ...

    def write_file(self, branch: str, text: str, blob_sha: str, message: str, *, permit: Permit) -> None: ...
    def open_pull(self, branch: str, title: str, body: str, labels: list[str], *, permit: Permit) -> int: ...
    def update_pull(self, number: int, title: str, body: str, *, permit: Permit) -> None: ...
    def close_pull(self, number: int, comment: str, *, permit: Permit) -> None: ...


BRANCH_PREFIX = "crcr-demotion/"
DEMOTION_LABEL = "crcr-auto-demotion"
LEVEL_STATUS_DOC = "level-status.json"


@dataclass(frozen=True)
class LevelDeps:
    allowlist: AllowlistProvider
    jobs: JobsByRepo
    history: LevelHistory
    demotions: Demotions
    docs: PageDocs
    metrics: Metrics
    clock: Clock
    parse: Callable[[str], Allowlist]  # the allowlist's own loader, to check an edit
    door: Outbound  # a shadow downstream's demotion PR is kept as a shadow decision, never opened or closed
    pulls: AllowlistPulls | None = None  # None: the allowlist is not in a GitHub repository (no PR can be opened)
    hud_url: str | None = None  # the HUD's base URL, linked from the PR
    runs: DispatchRuns | None = None  # whether a downstream's runs carry the dispatch id (looked at once a day)
    demotion_min_jobs: int = DEMOTION_MIN_JOBS  # finished jobs in the window before a demotion PR is opened


@dataclass
class LevelOutcome:
    statuses: list[RepoStatus]
    actions: list[tuple[str, str, str]]
    failed: list[str]


def branch_of(repo: str) -> str:
    return f"{BRANCH_PREFIX}{repo}"


def statuses(deps: LevelDeps, allowlist: Allowlist, now: float) -> list[RepoStatus]:
    """Every L2-L4 repository, by level then name, from its recorded jobs (a repository whose jobs cannot be read
    now is left out of this run, so nothing is decided on missing figures)."""
    entries = sorted((e for e in allowlist.entries if e.level >= Level.L2), key=lambda e: (e.level, e.key))
    since = deps.history.l2_since([(e.repo, int(e.level)) for e in entries], now)
    dedupe = deps.history.dedupe_states()
    out = []
    for entry in entries:
        window = 14 * 86_400 if entry.level == Level.L2 else 7 * 86_400
        jobs = deps.jobs.jobs_of_repo(entry.repo, now - window)
        status = status_of(entry.repo, entry.level, (sample(j) for j in jobs), now, tenure(since.get(entry.key), now))
        out.append(replace(status, dispatch_dedupe=_dedupe(deps, entry, jobs, dedupe.get(entry.key), now)))
    return out


DEDUPE_CHECK_S = 86_400.0


def _dedupe(deps: LevelDeps, entry: Entry, jobs: list[JobRecord], known: tuple[str, float] | None, now: float) -> str:
    """Whether a repeated dispatch can be told from a new one: `run-name` when its latest dispatched run's title
    carries the dispatch id, `none` when it does not (a send whose answer was lost may then start a second run),
    `buildkite` (builds are looked up by their meta-data), or `unknown` (no run to look at yet)."""
    if entry.settings.buildkite is not None:
        return "buildkite"
    if known is not None and now - known[1] < DEDUPE_CHECK_S:
        return known[0]
    runs = [j for j in jobs if j.delivery_id != "scheduled" and is_github_run(j.run_id) and j.job_name]
    if deps.runs is None or not runs:
        return known[0] if known is not None else "unknown"
    latest = max(runs, key=lambda j: j.dispatched_at)
    try:
        title = deps.runs.title(entry.repo, latest.run_id)
    except GitHubError:
        return known[0] if known is not None else "unknown"
    state = "run-name" if latest.dispatch_id in title else "none"
    deps.history.set_dedupe(entry.repo, state, now)
    return state


def level_status_missing(deps: LevelDeps) -> bool:
    """Whether no level status is stored yet (a new stack, or one whose document was lost): the frequent schedule
    and `crcr local`'s start compute it at once instead of waiting for the hourly run."""
    doc, _ = deps.docs.get(LEVEL_STATUS_DOC)
    return doc is None


def check_levels(deps: LevelDeps) -> LevelOutcome:
    now = deps.clock.now()
    allowlist = deps.allowlist.current()
    found = statuses(deps, allowlist, now)
    _publish(deps, found, now)
    for status in found:
        if status.change:
            deps.metrics.count("LevelChangeProposed", change=status.change)
    if deps.pulls is None:
        return LevelOutcome(found, [], [])
    return _sync_pulls(deps, deps.pulls, allowlist, {repo_key(s.repo): s for s in found}, now)


def _publish(deps: LevelDeps, found: list[RepoStatus], now: float) -> None:
    for _ in range(3):
        _, tag = deps.docs.get(LEVEL_STATUS_DOC)
        if deps.docs.put(LEVEL_STATUS_DOC, document(found, now), tag):
            return
    raise RuntimeError("the level-status document kept changing under this writer")


def _sync_pulls(
    deps: LevelDeps, pulls: AllowlistPulls, allowlist: Allowlist, by_key: dict[str, RepoStatus], now: float
) -> LevelOutcome:
    l3 = {e.key: e for e in allowlist.entries if e.level == Level.L3}
    recorded = deps.demotions.open_demotions()
    names = {key: entry.repo for key, entry in l3.items()} | {key: d.repo for key, d in recorded.items()}
    open_prs: dict[str, PullRef] = {}
    unknown: set[str] = set()
    failed: list[str] = []
    for key, repo in sorted(names.items()):
        try:
            pull = pulls.find_open(branch_of(repo))
        except GitHubError as exc:
            failed.append(f"{repo}: {exc}")  # unknown: left as it is this run (never a second PR)
            unknown.add(key)
            deps.metrics.count("DemotionFailed")
            continue
        if pull is not None:
            open_prs[repo] = pull
            if key not in recorded:  # opened by an earlier run that failed before recording it, or reopened
                deps.demotions.set_demotion(repo, pull.number, now)
        elif key in recorded:  # closed or merged by a person: the check runs come back (or it is L2 now)
            deps.demotions.clear_demotion(repo)
    known = {key: status for key, status in by_key.items() if key not in unknown}
    l3_known = [e.repo for key, e in l3.items() if key not in unknown]
    cooling = deps.demotions.cooling(now, COOL_DOWN_S)
    prs = {repo: pull.number for repo, pull in open_prs.items()}
    actions = plan_demotions(known, l3_known, prs, cooling, deps.demotion_min_jobs)
    for action, repo, reason in actions:
        what = {"action": action, "reason": reason, "pull": open_prs[repo].number if repo in open_prs else None}
        permit = deps.door.permit(
            Write(GITHUB, "level_pr", repo, deps.door.upstream, f"{repo}:{action}:{reason}", what)
        )
        if permit is None:
            continue  # a shadow downstream: kept as a shadow decision
        try:
            if action == "close":
                comment = f"`{repo}` {reason}, so this demotion is no longer proposed."
                pulls.close_pull(open_prs[repo].number, comment, permit=permit)
                deps.demotions.clear_demotion(repo, closed_at=now)
            else:
                status = by_key[repo_key(repo)]
                entry = l3[repo_key(repo)]
                number = _propose(deps, pulls, entry, status, open_prs.get(repo), permit)
                deps.demotions.set_demotion(repo, number, now)
            deps.metrics.count("DemotionSynced", action=action)
        except (GitHubError, AllowlistError) as exc:
            failed.append(f"{repo}: {action}: {exc}")
            deps.metrics.count("DemotionFailed")
    return LevelOutcome(list(by_key.values()), actions, failed)


def _propose(
    deps: LevelDeps, pulls: AllowlistPulls, entry: Entry, status: RepoStatus, pull: PullRef | None, permit: Permit
) -> int:
    """Open the PR, or bring an open one's description up to date (the same PR: never a second one)."""
    title = pr_title(entry.repo)
    body = pr_body(status, entry.oncalls, pulls.path, deps.hud_url)
    if pull is not None:
        if (pull.title, pull.body.strip()) != (title, body.strip()):
            pulls.update_pull(pull.number, title, body, permit=permit)
            deps.metrics.count("DemotionUpdated")
        return pull.number
    base = pulls.base_sha()
    text, blob = pulls.read_file(base)
    current = deps.parse(text).get(entry.repo)
    if current is None or current.level != Level.L3:
        raise EditError(f"{entry.repo} is not at L3 on {pulls.base}")
    edited = demote_to_l2(text, current)
    _check_edit(deps, text, edited, current)
    branch = branch_of(entry.repo)
    pulls.prepare_branch(branch, base, permit=permit)
    pulls.write_file(branch, edited, blob, title, permit=permit)
    return pulls.open_pull(branch, title, body, [DEMOTION_LABEL], permit=permit)


def _check_edit(deps: LevelDeps, before: str, after: str, entry: Entry) -> None:
    """The edited file must say exactly what the old one said, but for the entry now at L2 without a device."""
    old, new = deps.parse(before), deps.parse(after)
    moved = new.get(entry.repo)
    expected = replace(entry, level=Level.L2, device=None, line=None)
    if moved is None or replace(moved, line=None) != expected:
        raise EditError(f"moving {entry.repo} to L2 did not give the entry expected")
    rest_old = {e.key: replace(e, line=None) for e in old.entries if e.key != entry.key}
    rest_new = {e.key: replace(e, line=None) for e in new.entries if e.key != entry.key}
    if rest_old != rest_new:
        raise EditError(f"moving {entry.repo} to L2 changed more than its entry")
