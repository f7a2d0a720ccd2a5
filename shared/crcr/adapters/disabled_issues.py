"""The upstream's open `DISABLED` issues from GitHub's issue search (`GET /search/issues`), turned into the condensed
disabled-tests document as test-infra makes it (crcr.domain.known): the fetcher `CRCR_DISABLED_TESTS=
github-issues:<owner>/<repo>` reads, with the upstream installation's `issues: read`, paced below search's own limit;
only the issues whose authors crcr.app.disable_authors accepts, their access read with `metadata: read`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from crcr.adapters.github import GitHubApp
from crcr.app.disable_authors import DisableAuthors
from crcr.app.ports import Metrics
from crcr.app.ports.github import GitHubRejected
from crcr.domain.known import DisableIssue, condensed_from_issues

PER_PAGE = 100
RESULTS_PER_QUERY = 1000  # GitHub's search lists at most this many per query: the walk goes on from the last one
MAX_PAGES = 30  # per refresh: 3,000 issues
PREFIX = "github-issues:"


class SearchPaused(RuntimeError):
    """The searches per minute are spent: the last good list stays."""


class SearchBudget(Protocol):
    def hit(self, key: str, now: float) -> float: ...


@dataclass
class GitHubDisabledIssues:
    github: GitHubApp
    upstream: str
    metrics: Metrics
    clock: Callable[[], float]
    authors: DisableAuthors  # whose issues count
    budget: SearchBudget | None = None  # searches a minute on the upstream installation, shared by every instance

    def __call__(self) -> bytes:
        """The condensed document of every open issue titled `DISABLED …` whose author may disable a test, oldest
        first; raises (so the last good list stays) when GitHub refuses, answers incompletely, or the budget is spent
        part way."""
        token = self.github.repo_token(self.github.installation_for(self.upstream), self.upstream, {"issues": "read"})
        found: dict[int, DisableIssue] = {}
        since: str | None = None
        pages = 0
        while True:
            query = f"repo:{self.upstream} is:issue is:open in:title DISABLED" + (
                f" created:>={since}" if since else ""
            )
            last: str | None = None
            for page in range(1, RESULTS_PER_QUERY // PER_PAGE + 1):
                if pages == MAX_PAGES:
                    self.metrics.count("DisabledTestsIncomplete")
                    return self._document(found)
                if self.budget is not None and self.budget.hit(self.upstream, self.clock()) > 0:
                    self.metrics.count("DisabledTestsSearchPaused")
                    raise SearchPaused(f"searches of {self.upstream} spent for this minute")
                body = self._page(query, page, f"Bearer {token.token}")
                pages += 1
                items = body["items"]
                for item in items:
                    issue = _issue(item)
                    if issue is not None:
                        found[issue.number] = issue
                if items:
                    last = str(items[-1].get("created_at") or "")
                if len(items) < PER_PAGE or page * PER_PAGE >= int(body.get("total_count") or 0):
                    return self._document(found)
            if not last or last == since:  # a thousand issues opened in one second: no way past them
                self.metrics.count("DisabledTestsIncomplete")
                return self._document(found)
            since = last  # `>=`: the issues of that second again, kept once by number

    def _document(self, found: dict[int, DisableIssue]) -> bytes:
        return json.dumps(condensed_from_issues(self.authors.accepted(self.upstream, found.values()))).encode()

    def _page(self, query: str, page: int, auth: str) -> dict[str, Any]:
        params = urlencode({"q": query, "sort": "created", "order": "asc", "per_page": PER_PAGE, "page": page})
        resp = self.github.request("GET", f"/search/issues?{params}", auth, kind="search")
        body = resp.body if isinstance(resp.body, dict) else {}
        if not isinstance(body.get("items"), list) or body.get("incomplete_results"):
            raise ValueError(f"issue search of {self.upstream}: incomplete or not a search answer")
        return body


def _issue(item: Any) -> DisableIssue | None:
    if not isinstance(item, dict) or "pull_request" in item or not isinstance(item.get("number"), int):
        return None
    title, url = item.get("title"), item.get("html_url")
    if not isinstance(title, str) or not title.startswith("DISABLED ") or not isinstance(url, str):
        return None
    user = item.get("user")
    login = user.get("login") if isinstance(user, dict) else None
    association = item.get("author_association")
    return DisableIssue(
        item["number"], url, title, str(item.get("body") or ""), login if isinstance(login, str) else None,
        association if isinstance(association, str) else None,
    )  # fmt: skip


@dataclass
class GitHubAuthorPermissions:
    """The AuthorPermissions port: `GET /repos/{upstream}/collaborators/{login}/permission` on the upstream's
    installation, with a token for the upstream alone."""

    github: GitHubApp

    def permission(self, upstream: str, login: str) -> tuple[str | None, str | None]:
        token = self.github.repo_token(self.github.installation_for(upstream), upstream, {"metadata": "read"})
        try:
            resp = self.github.request(
                "GET",
                f"/repos/{quote(upstream, safe='/')}/collaborators/{quote(login, safe='')}/permission",
                f"Bearer {token.token}",
                kind="permission",
            )
        except GitHubRejected as exc:
            if exc.status == 404:  # no such user (any more)
                return None, None
            raise
        body = resp.body if isinstance(resp.body, dict) else {}
        permission, role = body.get("permission"), body.get("role_name")
        return (permission if isinstance(permission, str) else None), (role if isinstance(role, str) else None)
