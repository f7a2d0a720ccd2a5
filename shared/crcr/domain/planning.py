"""Which downstream repositories an upstream event goes to, and why the others do not."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from enum import Enum

from crcr.domain.allowlist import Allowlist, Entry
from crcr.domain.regressions import BranchCommit

# Pull-request actions that dispatch; "labeled" only releases PRs held for trusted_authors_only.
# The label PyTorch's merge bot adds to a PR it merged (it pushes the commit itself, so GitHub's `merged` stays false).
MERGED_LABEL = "Merged"
MAX_RESOLVED_PRS = 100  # PRs one push may say it resolves (a push of a stack lands a few)
DISPATCH_ACTIONS = frozenset({"opened", "reopened", "synchronize", "ready_for_review", "closed"})
PR_ACTIONS_READ = DISPATCH_ACTIONS | {"labeled", "unlabeled"}  # labels decide L3 check runs
# author_association values GitHub gives people who already had work merged or have write access.
TRUSTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR"})
CIFLOW_PREFIX = "ciflow/"
# The upstream's bot runs a PR's trunk (or another named) CI by pushing this tag at the PR's head.
_CIFLOW_TAG = re.compile(r"^refs/tags/ciflow/([A-Za-z0-9][A-Za-z0-9._-]{0,49})/([1-9][0-9]{0,9})$")


def ciflow_tag(ref: str | None) -> tuple[str, int] | None:
    """`refs/tags/ciflow/<name>/<PR>` -> (name, PR)."""
    match = _CIFLOW_TAG.fullmatch(ref or "")
    return (match.group(1), int(match.group(2))) if match else None


@dataclass(frozen=True)
class UpstreamEvent:
    kind: str  # "pull_request" | "push"
    action: str | None
    repo: str
    head_sha: str
    pr_number: int | None = None
    ref: str | None = None  # push: refs/heads/<branch>; PR: head branch
    default_branch: str | None = None
    draft: bool = False
    author_association: str | None = None
    labels: tuple[str, ...] = ()
    added_label: str | None = None
    deleted: bool = False
    base_sha: str = ""  # PR: the commit it is based on
    closed: bool = False  # PR: GitHub says it is closed
    commits: tuple[BranchCommit, ...] = ()  # push: each commit with its time and what a blamelist shows, oldest first
    updated_at: str = ""  # PR: GitHub's updated_at, which orders webhooks that arrive out of order
    ciflow: str | None = None  # push of refs/tags/ciflow/<name>/<PR>: the name (pr_number is the PR)
    # push: the files its commits added, modified or removed (None: not all listed in the payload)
    pushed_files: tuple[str, ...] | None = None
    changed_files: int | None = None  # PR: how many files GitHub says it changes
    # What the HUD pages show of the change: the PR's title or the head commit's first line, who made it, when
    # (epoch seconds), and a closed PR's merge.
    title: str | None = None
    author: str | None = None
    at: float | None = None
    merged: bool = False  # PR: GitHub's `merged`, or PyTorch's merge bot's label
    # push to the default branch: the PRs its commits say they resolve (PyTorch's merge bot's trailer)
    resolved_prs: tuple[int, ...] = ()

    @property
    def has_ciflow_label(self) -> bool:
        return any(label.startswith(CIFLOW_PREFIX) for label in self.labels)

    @property
    def trusted_author(self) -> bool:
        return (self.author_association or "").upper() in TRUSTED_ASSOCIATIONS


class Verdict(Enum):
    DISPATCH = "dispatch"
    HOLD = "hold"  # trusted_authors_only: wait for a maintainer's ciflow/ label
    RELEASE = "release"  # a held PR got its ciflow/ label: dispatch once per head commit
    SKIP = "skip"


SENDS = frozenset({Verdict.DISPATCH, Verdict.RELEASE})  # verdicts that send now


@dataclass(frozen=True)
class Decision:
    entry: Entry
    verdict: Verdict
    reason: str


def _ciflow_decision(event: UpstreamEvent, entry: Entry) -> Decision:
    """A ciflow tag push runs CI for its PR at the tag's commit: for repositories taking part in pull requests
    that want this ciflow name (trunk by default). The bot pushes it after a maintainer's label: no hold."""
    if event.deleted:
        return Decision(entry, Verdict.SKIP, "tag_deleted")
    if "pull_request" not in entry.settings.events:
        return Decision(entry, Verdict.SKIP, "event_disabled")
    if event.ciflow not in entry.settings.ciflow:
        return Decision(entry, Verdict.SKIP, "ciflow_not_wanted")
    return Decision(entry, Verdict.DISPATCH, f"ciflow/{event.ciflow}")


def _push_decision(event: UpstreamEvent, entry: Entry) -> Decision:
    if event.deleted:
        return Decision(entry, Verdict.SKIP, "branch_deleted")
    ref = event.ref or ""
    if not ref.startswith("refs/heads/"):
        return Decision(entry, Verdict.SKIP, "not_a_branch")
    branch = ref.removeprefix("refs/heads/")
    patterns = entry.settings.branches
    if patterns is None:
        patterns = (event.default_branch,) if event.default_branch else ()
    if not any(fnmatch.fnmatchcase(branch, p) for p in patterns):
        return Decision(entry, Verdict.SKIP, "branch_filtered")
    return Decision(entry, Verdict.DISPATCH, "push")


def _pr_decision(event: UpstreamEvent, entry: Entry) -> Decision:
    settings = entry.settings
    untrusted = settings.trusted_authors_only and not event.trusted_author
    if event.action == "unlabeled":
        return Decision(entry, Verdict.SKIP, "label_only")
    if event.action == "labeled":
        if untrusted and (event.added_label or "").startswith(CIFLOW_PREFIX) and not event.draft:
            return Decision(entry, Verdict.RELEASE, "ciflow_label")
        return Decision(entry, Verdict.SKIP, "label_only")
    if event.action not in DISPATCH_ACTIONS:
        return Decision(entry, Verdict.SKIP, "action_ignored")
    if settings.skip_drafts and event.draft and event.action != "closed":
        return Decision(entry, Verdict.SKIP, "draft")
    if untrusted and not event.has_ciflow_label and event.action != "closed":
        return Decision(entry, Verdict.HOLD, "untrusted_author")
    if untrusted and event.action == "closed":
        return Decision(entry, Verdict.SKIP, "untrusted_author")
    if event.action == "closed" and settings.buildkite is not None:
        # A build cannot tell a closed PR from an open one (its env names no action): it would be a full
        # CI run for nothing. Only repository_dispatch carries the event for a downstream to clean up.
        return Decision(entry, Verdict.SKIP, "closed_on_buildkite")
    return Decision(entry, Verdict.DISPATCH, event.action or "pull_request")


NO_MATCHING_FILES = "no_matching_files"


def needs_files(decisions: list[Decision], event: UpstreamEvent) -> bool:
    """Whether a dispatch decided here depends on the change's files (a path filter; never a closed PR, which is
    sent so downstreams can clean up)."""
    if event.action == "closed":
        return False
    # A held downstream needs none yet: its release (a ciflow/ label) is planned, and asks, on its own.
    return any(d.verdict in SENDS and d.entry.settings.path_filter.active for d in decisions)


def filter_paths(decisions: list[Decision], event: UpstreamEvent, files: tuple[str, ...] | None) -> list[Decision]:
    """Path filters applied to what would go out: a downstream none of whose filtered files changed is skipped.
    `files` None: the change's files cannot be known (over GitHub's 3,000-file listing, a failed read): dispatch."""
    if files is None or event.action == "closed":
        return decisions
    return [
        Decision(d.entry, Verdict.SKIP, NO_MATCHING_FILES)
        if d.verdict is not Verdict.SKIP and not d.entry.settings.path_filter.concerns(files)
        else d
        for d in decisions
    ]


def plan(event: UpstreamEvent, allowlist: Allowlist) -> list[Decision]:
    """One decision per allowlisted repository; unlisted repositories never appear."""
    decisions = []
    for entry in allowlist.entries:
        if entry.settings.nightly_only:
            decisions.append(Decision(entry, Verdict.SKIP, "nightly_only"))
        elif event.kind == "push" and event.ciflow is not None:
            decisions.append(_ciflow_decision(event, entry))
        elif event.kind not in entry.settings.events:
            decisions.append(Decision(entry, Verdict.SKIP, "event_disabled"))
        elif event.kind == "push":
            decisions.append(_push_decision(event, entry))
        else:
            decisions.append(_pr_decision(event, entry))
    return decisions
