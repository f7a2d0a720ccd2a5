"""The ChangedFiles port on GitHub: a PR head's files, `GET /repos/{upstream}/compare/{base}...{head}`, once per head.

By SHA, so the listing is the head's whatever the PR became since (a force-push between the event and its planning
listed the newer head's files under the older head, and a skip on them passed a required check the change needed).
GitHub's comparison names at most 300 files; one that names 300 may be cut, so it counts as unknown (dispatch), as
does any answer that is not a comparison with a list of files. A head's answer is kept by this instance, so the events
of one head (labels, a redelivery) ask once.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from urllib.parse import quote

from crcr.adapters.github import GitHubApp
from crcr.app.ports.github import GitHubError
from crcr.domain.ids import SHA_PATTERN

MAX_COMPARE_FILES = 300  # GitHub's comparison lists at most this many files
KEPT_HEADS = 256
SHA = re.compile(SHA_PATTERN)


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
        token = self._github.repo_token(self._github.installation_for(upstream), upstream, {"contents": "read"})
        resp = self._github.request(
            "GET",
            f"/repos/{quote(upstream, safe='/')}/compare/{base_sha}...{head_sha}?per_page=1",
            f"Bearer {token.token}",
            kind="compare",
        )
        listed = resp.body.get("files") if isinstance(resp.body, dict) else None
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
