"""GitHub REST client for the App: JWT, down-scoped installation tokens (cached), repository_dispatch; over a urllib3
pool (`crcr.adapters.http_pool`), no retries inside the Lambda, no redirects followed: every failure is classified for
the caller, which retries through the queue."""

from __future__ import annotations

import json
import re
import threading
import time
from calendar import timegm
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote

import jwt
import urllib3
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from crcr.adapters.http_pool import pool_for
from crcr.app.outbound import GITHUB, Permit, require
from crcr.app.ports.comment import IssueComment
from crcr.app.ports.deliveries import DeliveryListing
from crcr.app.ports.github import (
    GitHubError,
    GitHubRateLimited,
    GitHubRejected,
    GitHubUnavailable,
    NotInstalled,
    RepoToken,
)
from crcr.app.ports.reruns import WorkflowRun
from crcr.contracts.github import HookDeliveryItem
from crcr.domain.ids import repo_key
from crcr.domain.redelivery import Attempt
from crcr.domain.retry import rate_limit_wait

USER_AGENT = "crcr-relay/0.1"
API_VERSION = "2022-11-28"
APP_JWT_LIFETIME_S = 540  # GitHub accepts at most 10 minutes
APP_JWT_BACKDATE_S = 60  # GitHub recommends backdating iat against clock drift
TOKEN_REFRESH_MARGIN_S = 300  # stop using an installation token 5 minutes before it expires
INSTALLATION_CACHE_S = 3600.0
# Least privilege per call: repository_dispatch needs contents:write and nothing more.
DISPATCH_PERMISSIONS = {"contents": "write"}
# A PR's conversation: GitHub takes issues:write or pull_requests:write for a PR's comments; ask for both, so
# the token works whichever the installation's settings lean on.
COMMENT_PERMISSIONS = {"issues": "write", "pull_requests": "write"}
MAX_COMMENT_PAGES = 30  # 3,000 comments: a PR's conversation is looked through once, after a lost row
DELIVERIES_PER_PAGE = 100  # GitHub's maximum
_TOKEN_MINT = re.compile(r"/app/installations/\d+/access_tokens")
_NEXT_CURSOR = re.compile(r'<[^>]*[?&]cursor=([^&>]+)[^>]*>;\s*rel="next"')


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: Any


@dataclass
class CallLog:
    """Counts of GitHub calls by endpoint kind; the benchmark reads it."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _parse_time(value: str) -> float:
    return float(timegm(datetime.fromisoformat(value.replace("Z", "+00:00")).utctimetuple()))


class GitHubApp:
    def __init__(
        self,
        api_url: str,
        app_id: str,
        private_key_pem: str,
        clock: Callable[[], float],
        *,
        connect_timeout_s: float = 3.05,
        read_timeout_s: float = 10.0,
        pool_size: int = 10,
    ) -> None:
        # GitHub Enterprise Server's API lives under a path (/api/v3): every request's path goes after it.
        self._api = api_url.rstrip("/")
        self._app_id = app_id
        key = load_pem_private_key(private_key_pem.encode(), password=None)
        if not isinstance(key, RSAPrivateKey):
            raise ValueError("CRCR_GITHUB_APP_PRIVATE_KEY must be the App's RSA key as GitHub issues it")
        self._key = key
        self._clock = clock
        # HTTPS_PROXY and NO_PROXY, as git and the GitHub CLI read them; a connection per thread of a batch.
        self._http = pool_for(self._api, maxsize=pool_size)
        self._timeout = urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s)
        self._lock = threading.Lock()
        self._jwt: tuple[str, float] | None = None
        self._installations: dict[str, tuple[int, float]] = {}
        self._tokens: dict[str, RepoToken] = {}
        self.calls = CallLog()

    # -- transport --------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        auth: str,
        body: Any = None,
        kind: str = "other",
        extra_headers: dict[str, str] | None = None,
        *,
        permit: Permit | None = None,
    ) -> Response:
        """One request. A GET, and the installation tokens the App mints for itself, need nothing more; every other
        request needs the outbound door's permit (crcr.app.outbound), so no path writes to GitHub around it."""
        if method != "GET" and not _TOKEN_MINT.fullmatch(path):
            require(permit, GITHUB)
        if any(part in (".", "..") for part in unquote(path.split("?", 1)[0]).split("/")):
            # A name that walks the path (`../x`) would aim the App's credentials at another endpoint: never sent.
            raise GitHubRejected(400, f"{method} {path}: a path segment is '.' or '..'; not sent")
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": USER_AGENT,
            "Authorization": auth,
            **(extra_headers or {}),
        }
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        self.calls.add(kind)
        try:
            raw = self._http.request(
                method, self._api + path, body=data, headers=headers, timeout=self._timeout, redirect=False
            )
        except urllib3.exceptions.HTTPError as exc:  # timeouts, resets, refused connections
            raise GitHubUnavailable(f"{method} {path}: {type(exc).__name__}") from exc
        status, answer = raw.status, raw.data
        # By lowercase name, a repeated header's values joined with ", ".
        resp_headers = {name.lower(): value for name, value in raw.headers.itermerged()}
        if status == 304:
            return Response(304, resp_headers, None)
        try:
            parsed = json.loads(answer) if answer else None
        except ValueError:
            parsed = None
        message = parsed.get("message", "") if isinstance(parsed, dict) else ""
        if status >= 500:
            raise GitHubUnavailable(f"{method} {path}: HTTP {status}")
        wait = rate_limit_wait(status, resp_headers, message, self._clock())
        if wait is not None:
            raise GitHubRateLimited(wait, f"{method} {path}: HTTP {status} {message}".strip())
        if status >= 400:
            raise GitHubRejected(status, f"{method} {path}: {message or 'no message'}")
        if not 200 <= status < 300:
            # A redirect or anything else is not GitHub having done it: never count it as sent.
            raise GitHubUnavailable(f"{method} {path}: unexpected HTTP {status}")
        return Response(status, resp_headers, parsed)

    @property
    def app_id(self) -> str:
        return self._app_id

    def app_jwt(self) -> str:
        now = self._clock()
        with self._lock:
            if self._jwt and self._jwt[1] - 60 > now:
                return self._jwt[0]
            issued = int(now) - APP_JWT_BACKDATE_S
            exp = int(now) + APP_JWT_LIFETIME_S
            token = jwt.encode({"iat": issued, "exp": exp, "iss": self._app_id}, self._key, algorithm="RS256")
            self._jwt = (token, float(exp))
            return token

    # -- installations and tokens ---------------------------------------------------------------
    def installation_for(self, repo: str) -> int:
        key = repo_key(repo)
        cached = self._installations.get(key)
        if cached and cached[1] > self._clock():
            return cached[0]
        try:
            resp = self.request(
                "GET", f"/repos/{_path(repo)}/installation", f"Bearer {self.app_jwt()}", kind="installation"
            )
        except GitHubRejected as exc:
            if exc.status == 404:
                raise NotInstalled(f"the App is not installed on {repo}") from exc
            raise
        installation_id = int(resp.body["id"])
        self._installations[key] = (installation_id, self._clock() + INSTALLATION_CACHE_S)
        return installation_id

    def repo_token(self, installation_id: int, repo: str, permissions: dict[str, str] | None = None) -> RepoToken:
        wanted = permissions or DISPATCH_PERMISSIONS
        key = repo_key(repo) + "|" + ",".join(f"{k}:{v}" for k, v in sorted(wanted.items()))
        cached = self._tokens.get(key)
        if cached and cached.expires_at - TOKEN_REFRESH_MARGIN_S > self._clock():
            return cached
        name = repo.split("/", 1)[1]
        try:
            resp = self.request(
                "POST",
                f"/app/installations/{installation_id}/access_tokens",
                f"Bearer {self.app_jwt()}",
                {"repositories": [name], "permissions": wanted},
                kind="access_token",
            )
        except GitHubRejected as exc:
            if exc.status in (404, 422):
                # The installation is gone or no longer covers the repository: look it up again next time.
                self._installations.pop(repo_key(repo), None)
                if exc.status == 422:
                    raise NotInstalled(f"installation {installation_id} does not cover {repo}") from exc
                raise GitHubUnavailable(f"installation {installation_id} is gone; looking it up again") from exc
            raise
        repos = resp.body.get("repositories") or []
        match = next((r for r in repos if repo_key(r.get("full_name", "")) == repo_key(repo)), None)
        if match is None:
            raise GitHubRejected(422, f"token for {repo} does not list the repository")
        token = RepoToken(
            token=resp.body["token"],
            repo_id=int(match["id"]),
            full_name=match["full_name"],
            expires_at=_parse_time(resp.body["expires_at"]),
        )
        self._tokens[key] = token
        return token

    def forget_token(self, repo: str) -> None:
        prefix = repo_key(repo) + "|"
        for key in [k for k in self._tokens if k.startswith(prefix)]:
            self._tokens.pop(key, None)

    # -- calls --------------------------------------------------------------------------------------
    def dispatch(
        self, repo: str, token: RepoToken, event_type: str, client_payload: dict[str, Any], *, permit: Permit
    ) -> None:
        self.request(
            "POST",
            f"/repos/{_path(repo)}/dispatches",
            f"Bearer {token.token}",
            {"event_type": event_type, "client_payload": client_payload},
            kind="dispatch",
            permit=require(permit, GITHUB, "dispatch", repo),
        )

    def get_contents(self, repo: str, path: str, ref: str, token: RepoToken, etag: str | None) -> Response:
        """File contents; status 304 (body None) when `etag` still matches, which costs no rate limit."""
        return self.request(
            "GET",
            f"/repos/{_path(repo)}/contents/{quote(path)}?ref={quote(ref, safe='')}",
            f"Bearer {token.token}",
            kind="contents",
            extra_headers={"If-None-Match": etag} if etag else None,
        )


class GitHubCheckRuns:
    """The CheckRunApi port: check runs on the upstream, written with a checks:write token for it alone."""

    def __init__(self, github: GitHubApp) -> None:
        self._github = github

    def _auth(self, upstream: str) -> str:
        token = self._github.repo_token(self._github.installation_for(upstream), upstream, {"checks": "write"})
        return f"Bearer {token.token}"

    def installation_for(self, upstream: str) -> int:
        return self._github.installation_for(upstream)

    def create_check_run(self, upstream: str, fields: dict[str, Any], *, permit: Permit) -> int:
        resp = self._github.request(
            "POST",
            f"/repos/{_path(upstream)}/check-runs",
            self._auth(upstream),
            fields,
            kind="check_run",
            permit=require(permit, GITHUB, "check_run"),
        )
        return int(resp.body["id"])

    def update_check_run(self, upstream: str, check_run_id: int, fields: dict[str, Any], *, permit: Permit) -> None:
        self._github.request(
            "PATCH",
            f"/repos/{_path(upstream)}/check-runs/{check_run_id}",
            self._auth(upstream),
            fields,
            kind="check_run",
            permit=require(permit, GITHUB, "check_run"),
        )


class GitHubIssueComments:
    """The IssueComments port: the upstream PR's conversation, with a token for the upstream alone."""

    def __init__(self, github: GitHubApp) -> None:
        self._github = github

    def _auth(self, upstream: str) -> str:
        token = self._github.repo_token(self._github.installation_for(upstream), upstream, COMMENT_PERMISSIONS)
        return f"Bearer {token.token}"

    def installation_for(self, upstream: str) -> int:
        return self._github.installation_for(upstream)

    def create_comment(self, upstream: str, pr: int, body: str, *, permit: Permit) -> int:
        resp = self._github.request(
            "POST",
            f"/repos/{_path(upstream)}/issues/{pr}/comments",
            self._auth(upstream),
            {"body": body},
            kind="comment",
            permit=require(permit, GITHUB),
        )
        return int(resp.body["id"])

    def update_comment(self, upstream: str, comment_id: int, body: str, *, permit: Permit) -> None:
        self._github.request(
            "PATCH",
            f"/repos/{_path(upstream)}/issues/comments/{comment_id}",
            self._auth(upstream),
            {"body": body},
            kind="comment",
            permit=require(permit, GITHUB),
        )

    def list_comments(self, upstream: str, pr: int) -> list[IssueComment]:
        auth = self._auth(upstream)
        app_id = self._github.app_id
        out: list[IssueComment] = []
        for page in range(1, MAX_COMMENT_PAGES + 1):
            resp = self._github.request(
                "GET",
                f"/repos/{_path(upstream)}/issues/{pr}/comments?per_page=100&page={page}",
                auth,
                kind="comments",
            )
            comments = resp.body if isinstance(resp.body, list) else []
            for c in comments:
                app = c.get("performed_via_github_app") or {}
                user = c.get("user") or {}
                # Ours: made through this App (its id), by its bot user; a human quoting the marker is not.
                ours = str(app.get("id")) == app_id and user.get("type") == "Bot"
                out.append(IssueComment(int(c["id"]), str(c.get("body") or ""), ours))
            if 'rel="next"' not in resp.headers.get("link", ""):
                break
        return out


class GitHubReruns:
    """The Reruns port: downstream runs read and re-run with an actions:write token for that repository."""

    def __init__(self, github: GitHubApp) -> None:
        self._github = github

    def _auth(self, repo: str, permissions: dict[str, str]) -> str:
        return f"Bearer {self._github.repo_token(self._github.installation_for(repo), repo, permissions).token}"

    def installation_for(self, repo: str) -> int:
        return self._github.installation_for(repo)

    def workflow_run(self, repo: str, run_id: str) -> WorkflowRun:
        resp = self._github.request(
            "GET", f"/repos/{_path(repo)}/actions/runs/{run_id}", self._auth(repo, {"actions": "write"}), kind="run"
        )
        return WorkflowRun(status=str(resp.body.get("status")), run_attempt=int(resp.body.get("run_attempt") or 1))

    def rerun_failed_jobs(self, repo: str, run_id: str, *, permit: Permit) -> bool:
        try:
            self._github.request(
                "POST",
                f"/repos/{_path(repo)}/actions/runs/{run_id}/rerun-failed-jobs",
                self._auth(repo, {"actions": "write"}),
                kind="rerun",
                permit=require(permit, GITHUB, "rerun", repo),
            )
        except GitHubRejected as exc:
            # "This workflow is already running": someone re-ran it since it was read, a no-op as asked.
            # Other refusals ("cannot be retried", a run too old, no permission) are GitHub's answer to keep.
            if exc.status == 403 and "already running" in str(exc).lower():
                return False
            raise
        return True

    def suite_check_runs(self, upstream: str, suite_id: int) -> list[tuple[int, str, str | None]]:
        auth = self._auth(upstream, {"checks": "write"})
        out: list[tuple[int, str, str | None]] = []
        for page in range(1, 11):  # at most 1,000 check runs
            resp = self._github.request(
                "GET",
                f"/repos/{_path(upstream)}/check-suites/{suite_id}/check-runs?per_page=100&page={page}",
                auth,
                kind="check_runs",
            )
            runs = resp.body.get("check_runs") or []
            out += [(int(r["id"]), str(r["name"]), r.get("external_id")) for r in runs]
            if len(runs) < 100:
                break
        return out


class UpstreamCommitLookup:
    """The UpstreamCommits port: does a commit exist in the upstream repository? (Positive answers cached.)"""

    def __init__(self, github: GitHubApp, upstream: str) -> None:
        self._github = github
        self._upstream = upstream
        self._known: set[str] = set()

    def exists(self, sha: str) -> bool:
        if sha in self._known:
            return True
        token = self._github.repo_token(
            self._github.installation_for(self._upstream), self._upstream, {"contents": "read"}
        )
        try:
            self._github.request(
                "GET", f"/repos/{_path(self._upstream)}/commits/{sha}", f"Bearer {token.token}", kind="commit"
            )
        except GitHubRejected as exc:
            if exc.status in (404, 422):
                return False
            raise
        self._known.add(sha)
        return True

    def repo_id(self, repo: str) -> int:
        # A metadata-only token down-scoped to the repository lists it with its id (docs/contracts.md).
        return self._github.repo_token(self._github.installation_for(repo), repo, {"metadata": "read"}).repo_id


PAGE_WAIT_MAX_S = 10.0  # a page of the delivery log waits at most this for GitHub's rate limit, else ends the listing


class GitHubHookDeliveries:
    """The HookDeliveries port: the App's webhook deliveries, listed and redelivered with the App's JWT."""

    def __init__(
        self, github: GitHubApp, upstream: str, sleep: Callable[[float], None] = time.sleep, page_tries: int = 3
    ) -> None:
        self._github = github
        self._upstream = upstream
        self._upstream_id: int | None = None
        self._sleep = sleep
        self._page_tries = page_tries

    def _page(self, path: str) -> Any:
        """One page, asked again (after 0.5 s, then 1 s; after GitHub's own wait when it asks for at most
        PAGE_WAIT_MAX_S) when GitHub answers 5xx, does not answer or limits the rate: a listing is tens of pages when
        the downstreams' run events fill the log, and one failed page must not waste the rest."""
        for attempt in range(self._page_tries):
            try:
                return self._github.request("GET", path, f"Bearer {self._github.app_jwt()}", kind="hook_deliveries")
            except (GitHubUnavailable, GitHubRateLimited) as exc:
                wait = exc.wait_s if isinstance(exc, GitHubRateLimited) else 0.5 * 2**attempt
                if attempt == self._page_tries - 1 or wait > PAGE_WAIT_MAX_S:
                    raise
                self._sleep(wait)
        raise AssertionError("unreachable")

    def list_deliveries(self, since: float, max_pages: int) -> DeliveryListing:
        attempts: list[Attempt] = []
        path = f"/app/hook/deliveries?per_page={DELIVERIES_PER_PAGE}"
        for number in range(max_pages):
            try:
                resp = self._page(path)
            except (GitHubUnavailable, GitHubRateLimited):
                if number == 0:
                    raise  # nothing listed: the run fails (alarmed) and the next one tries again
                return DeliveryListing(attempts, incomplete=True)
            items = resp.body if isinstance(resp.body, list) else []
            page = [a for a in (_attempt(item) for item in items) if a is not None]
            attempts += [a for a in page if a.delivered_at >= since]
            # Newest first: a page reaching back past `since` is the last one needed.
            match = _NEXT_CURSOR.search(resp.headers.get("link", ""))
            if not page or min(a.delivered_at for a in page) < since or match is None:
                return DeliveryListing(attempts)
            # Only the cursor is taken from the link: the next request goes to the configured API, whatever
            # host the header names.
            path = f"/app/hook/deliveries?per_page={DELIVERIES_PER_PAGE}&cursor={quote(unquote(match.group(1)))}"
        return DeliveryListing(attempts, truncated=True)

    def redeliver(self, delivery_id: int, *, permit: Permit) -> None:
        self._github.request(
            "POST",
            f"/app/hook/deliveries/{int(delivery_id)}/attempts",
            f"Bearer {self._github.app_jwt()}",
            kind="redelivery",
            permit=require(permit, GITHUB, "redelivery"),
        )

    def upstream_id(self) -> int | None:
        if self._upstream_id is None:
            try:
                # A metadata-only token down-scoped to the upstream lists it with its id (docs/contracts.md).
                installation = self._github.installation_for(self._upstream)
                token = self._github.repo_token(installation, self._upstream, {"metadata": "read"})
            except GitHubError:
                return None  # every repository's events are considered; the webhook ignores the others
            self._upstream_id = token.repo_id
        return self._upstream_id


def _attempt(item: Any) -> Attempt | None:
    """One listed delivery; an item GitHub's schema does not describe is skipped rather than failing the run."""
    try:
        parsed = HookDeliveryItem.model_validate(item)
        at = _parse_time(parsed.delivered_at)
    except (ValueError, TypeError):
        return None
    return Attempt(
        id=parsed.id,
        guid=parsed.guid,
        delivered_at=at,
        status_code=parsed.status_code,
        event=parsed.event,
        action=parsed.action,
        redelivery=parsed.redelivery,
        repository_id=parsed.repository_id,
    )


def _path(repo: str) -> str:
    owner, name = repo.split("/", 1)
    return f"{quote(owner, safe='')}/{quote(name, safe='')}"
