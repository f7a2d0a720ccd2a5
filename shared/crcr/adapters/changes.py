"""The ChangedFiles port on GitHub: a PR's files, `GET /repos/{upstream}/pulls/{n}/files`, once per head.

Paginated (100 a page); GitHub lists at most 3,000 files, so a listing that long may be cut: it counts as unknown.
A head's listing is kept by this instance, so the events of one head (labels, a redelivery) list it once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from urllib.parse import quote

from crcr.adapters.github import GitHubApp
from crcr.app.ports.github import GitHubError

PER_PAGE = 100
MAX_FILES = 3000
KEPT_HEADS = 256


class GitHubPullFiles:
    def __init__(self, github: GitHubApp) -> None:
        self._github = github
        self._kept: OrderedDict[tuple[str, int, str], tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def pull_files(self, upstream: str, pr: int, head_sha: str) -> tuple[str, ...] | None:
        key = (upstream.lower(), pr, head_sha)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        try:
            files = self._list(upstream, pr)
        except GitHubError:
            return None  # unknown: the planner dispatches (a path filter never loses a run to a failed read)
        if files is None:
            return None
        with self._lock:
            self._kept[key] = files
            while len(self._kept) > KEPT_HEADS:
                self._kept.popitem(last=False)
        return files

    def _list(self, upstream: str, pr: int) -> tuple[str, ...] | None:
        token = self._github.repo_token(self._github.installation_for(upstream), upstream, {"pull_requests": "read"})
        names: set[str] = set()
        listed = 0
        for page in range(1, MAX_FILES // PER_PAGE + 1):
            resp = self._github.request(
                "GET",
                f"/repos/{quote(upstream, safe='/')}/pulls/{pr}/files?per_page={PER_PAGE}&page={page}",
                f"Bearer {token.token}",
                kind="pull_files",
            )
            items = resp.body if isinstance(resp.body, list) else []
            for item in items:
                names.add(str(item.get("filename", "")))
                if item.get("previous_filename"):
                    names.add(str(item["previous_filename"]))  # a rename touches both paths
            listed += len(items)
            if len(items) < PER_PAGE:
                return tuple(sorted(n for n in names if n))
        return None if listed >= MAX_FILES else tuple(sorted(n for n in names if n))
