"""GitHub's comparison of two upstream commits (`GET /repos/{upstream}/compare/{base}...{head}`): the ChangedFiles port
(a PR head's files, by SHA) and the BranchHistory port (a regression range's commits the relay never saw pushed)."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError

from crcr.adapters.github import GitHubApp
from crcr.app.ports.github import GitHubError
from crcr.contracts.github import PushCommit
from crcr.domain.ids import SHA_PATTERN
from crcr.domain.regressions import BranchCommit, landed_pr

MAX_COMPARE_FILES = 300  # GitHub's comparison lists at most this many files
KEPT_HEADS = 256  # heads whose files this instance keeps: the events of one head (labels, a redelivery) ask once
SHA = re.compile(SHA_PATTERN)


def compare(github: GitHubApp, upstream: str, base_sha: str, head_sha: str, query: str = "") -> dict[str, Any]:
    """GitHub's comparison of two upstream commits with the upstream installation's `contents: read` ({} when the
    answer is not an object)."""
    token = github.repo_token(github.installation_for(upstream), upstream, {"contents": "read"})
    resp = github.request(
        "GET",
        f"/repos/{quote(upstream, safe='/')}/compare/{base_sha}...{head_sha}{query}",
        f"Bearer {token.token}",
        kind="compare",
    )
    return resp.body if isinstance(resp.body, dict) else {}


class GitHubCompareFiles:
    def __init__(self, github: GitHubApp) -> None:
        self._github = github
        self._kept: OrderedDict[tuple[str, str, str], tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def change_files(self, upstream: str, base_sha: str, head_sha: str) -> tuple[str, ...] | None:
        if not (SHA.match(base_sha) and SHA.match(head_sha)):
            return None  # no base to compare with (a ciflow tag of a PR the relay never saw): unknown
        key = (upstream.lower(), base_sha, head_sha)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        try:
            files = self._compare(upstream, base_sha, head_sha)
        except GitHubError:
            return None  # unknown: the planner dispatches (a path filter never loses a run to a failed read)
        if files is None:
            return None
        with self._lock:
            self._kept[key] = files
            while len(self._kept) > KEPT_HEADS:
                self._kept.popitem(last=False)
        return files

    def _compare(self, upstream: str, base_sha: str, head_sha: str) -> tuple[str, ...] | None:
        body = compare(self._github, upstream, base_sha, head_sha, "?per_page=1")
        listed = body.get("files")
        if not isinstance(listed, list) or len(listed) >= MAX_COMPARE_FILES:
            return None
        names: set[str] = set()
        for item in listed:
            if not isinstance(item, dict) or not isinstance(item.get("filename"), str) or not item["filename"]:
                return None  # not GitHub's shape: nothing may be skipped on it
            names.add(item["filename"])
            if isinstance(item.get("previous_filename"), str) and item["previous_filename"]:
                names.add(item["previous_filename"])  # a rename touches both paths
        return tuple(sorted(names))


class GitHubBranchHistory:
    """The BranchHistory port: the default branch's commits between two of them, from the same comparison
    (`GET /repos/{upstream}/compare/{base}...{head}`: up to 250 commits, oldest first), with the upstream
    installation's `contents: read`."""

    def __init__(self, github: GitHubApp) -> None:
        self._github = github

    def commits_between(self, upstream: str, base_sha: str, head_sha: str) -> list[BranchCommit] | None:
        """The commits after `base_sha` up to `head_sha`; None when GitHub cannot say (not an ancestor, more than it
        lists, not a comparison). Raises GitHubError for a failed request."""
        if not (SHA.match(base_sha) and SHA.match(head_sha)):
            return None
        body = compare(self._github, upstream, base_sha, head_sha)
        listed = body.get("commits")
        if body.get("status") != "ahead" or not isinstance(listed, list) or body.get("total_commits") != len(listed):
            return None  # diverged, behind, or more commits than one answer lists
        found: list[BranchCommit] = []
        for i, item in enumerate(listed):
            commit = _listed(item, i, upstream)
            if commit is None:
                return None
            found.append(commit)
        return found


def _listed(item: object, i: int, upstream: str) -> BranchCommit | None:
    """One commit of a comparison, read as a push lists its commits (its first line, its merge bot's trailer)."""
    if not isinstance(item, dict) or not isinstance(item.get("commit"), dict):
        return None
    detail = item["commit"]
    committer = detail.get("committer") if isinstance(detail.get("committer"), dict) else {}
    parents = item.get("parents") if isinstance(item.get("parents"), list) else []
    parent = parents[0].get("sha") if parents and isinstance(parents[0], dict) else None
    login = item["author"].get("login") if isinstance(item.get("author"), dict) else None
    try:
        commit = PushCommit.model_validate(
            {"id": item.get("sha"), "message": detail.get("message"), "timestamp": committer.get("date")}
        )
        t = datetime.fromisoformat(str(commit.timestamp)).timestamp()
    except (ValidationError, ValueError):
        return None
    return BranchCommit(
        commit.id.lower(),
        t,
        place=i,
        parent=parent if isinstance(parent, str) else None,
        pr=landed_pr(commit.resolves, commit.message, upstream),
        title=commit.message,
        author=login if isinstance(login, str) else None,
        files=None,  # a comparison's files are the whole range's: not known per commit
    )
