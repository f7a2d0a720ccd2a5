"""Buildkite REST client for Buildkite dispatches (create a build, find a dispatch's builds) over a urllib3 pool, like
the GitHub one: no retries inside the Lambda, every failure classified for the caller, which retries through the
queue. The API token goes only in the Authorization header, never in an error or a log line."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import urllib3

from crcr.adapters.http_pool import pool_for
from crcr.app.outbound import BUILDKITE, Permit, require
from crcr.app.ports.buildkite import (
    DISPATCH_META_KEY,
    BuildkiteBuild,
    BuildkiteJob,
    BuildkiteRateLimited,
    BuildkiteRejected,
    BuildkiteUnavailable,
    NewBuild,
)
from crcr.app.ports.ledger import BuildRef
from crcr.domain.retry import buildkite_rate_limit_wait
from crcr.domain.runs import BUILDKITE_BUILD_FINAL, buildkite_conclusion, timestamp

USER_AGENT = "crcr-relay/0.1"
FIND_PAGE_SIZE = 10  # a dispatch has one build; more means an earlier repeat, and the oldest is the one kept

# The request never left this process: nothing can have been created.
_NOT_SENT = (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.NewConnectionError)


class BuildkiteClient:
    """The Builds port over `POST/GET /v2/organizations/{org}/pipelines/{pipeline}/builds`, and one build by number
    (`GET .../builds/{number}`) for the sweeper."""

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        connect_timeout_s: float = 3.05,
        read_timeout_s: float = 10.0,
        pool: urllib3.PoolManager | None = None,
    ) -> None:
        self._api = _api_base(api_url)
        self._auth = f"Bearer {token}"
        self._timeout = urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s)
        self._http = pool or pool_for(self._api, maxsize=10)

    def __repr__(self) -> str:  # never the token
        return f"BuildkiteClient({self._api!r})"

    def create(self, organization: str, pipeline: str, build: NewBuild, *, permit: Permit) -> BuildRef:
        body = {
            "commit": build.commit,
            "branch": build.branch,
            "message": build.message,
            # The allowlist names the branch to build; the pipeline's own branch filter must not drop it.
            "ignore_pipeline_branch_filters": True,
            "env": build.env,
            "meta_data": build.meta_data,
        }
        status, parsed = self._request("POST", _builds_path(organization, pipeline), body, permit=permit)
        if status != 201 or not isinstance(parsed, dict):
            # Not Buildkite's documented answer to a create: it may still have created the build.
            raise BuildkiteUnavailable(f"POST {_builds_path(organization, pipeline)}: unexpected HTTP {status}")
        ref = _build_ref(parsed, f"{organization}/{pipeline}")
        if ref is None:
            raise BuildkiteUnavailable(f"POST {_builds_path(organization, pipeline)}: 201 without id, number, web_url")
        return ref

    def find(self, organization: str, pipeline: str, dispatch_id: str) -> list[BuildRef]:
        query = urlencode({f"meta_data[{DISPATCH_META_KEY}]": dispatch_id, "per_page": FIND_PAGE_SIZE})
        path = f"{_builds_path(organization, pipeline)}?{query}"
        status, parsed = self._request("GET", path)
        if status != 200 or not isinstance(parsed, list):
            raise BuildkiteUnavailable(f"GET {_builds_path(organization, pipeline)}: unexpected answer", False)
        found = []
        for item in parsed:
            # The filter is Buildkite's; the check is ours, so a filter dropped on the way finds nothing wrong.
            meta = item.get("meta_data") if isinstance(item, dict) else None
            if isinstance(meta, Mapping) and meta.get(DISPATCH_META_KEY) == dispatch_id:
                ref = _build_ref(item, f"{organization}/{pipeline}")
                if ref is not None:
                    found.append(ref)
        return sorted(found, key=lambda ref: ref.number)

    def build(self, organization: str, pipeline: str, number: int) -> BuildkiteBuild | None:
        path = f"{_builds_path(organization, pipeline)}/{int(number)}"
        try:
            _, parsed = self._request("GET", path)
        except BuildkiteRejected as exc:
            if exc.status == 404:
                return None
            raise
        if not isinstance(parsed, dict) or not isinstance(parsed.get("state"), str):
            raise BuildkiteUnavailable(f"GET {path}: not a build", maybe_sent=False)
        latest: dict[str, BuildkiteJob] = {}
        for item in parsed.get("jobs") or []:
            job = _job(item)
            if job is not None and not item.get("retried"):  # a retried job's place is its retry's
                latest[job.id] = job
        state, build_number = parsed["state"], parsed.get("number")
        return BuildkiteBuild(
            state=state,
            finished=state in BUILDKITE_BUILD_FINAL,
            jobs=tuple(latest.values()),
            id=str(parsed.get("id") or ""),
            number=build_number if isinstance(build_number, int) and not isinstance(build_number, bool) else None,
        )

    def _request(self, method: str, path: str, body: Any = None, *, permit: Permit | None = None) -> tuple[int, Any]:
        if method != "GET":
            require(permit, BUILDKITE, "dispatch")  # the outbound door's word (crcr.app.outbound), or nothing is sent
        headers = {"Authorization": self._auth, "Accept": "application/json", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        where = f"{method} {path.split('?', 1)[0]}"
        try:
            raw = self._http.request(
                method, self._api + path, body=data, headers=headers, timeout=self._timeout, redirect=False
            )
        except _NOT_SENT as exc:
            raise BuildkiteUnavailable(f"{where}: {type(exc).__name__}", maybe_sent=False) from exc
        except urllib3.exceptions.HTTPError as exc:  # read timeouts, resets: the request may have arrived
            raise BuildkiteUnavailable(f"{where}: {type(exc).__name__}") from exc
        try:
            parsed = json.loads(raw.data) if raw.data else None
        except ValueError:
            parsed = None
        message = parsed.get("message") if isinstance(parsed, dict) else None
        text = str(message)[:500] if message else "no message"
        if raw.status >= 500:
            raise BuildkiteUnavailable(f"{where}: HTTP {raw.status}")
        if raw.status == 429:
            reset = parsed.get("reset") if isinstance(parsed, dict) else None
            wait = buildkite_rate_limit_wait(dict(raw.headers.items()), reset)
            raise BuildkiteRateLimited(wait, f"{where}: HTTP 429 {text}")
        if raw.status >= 400:
            raise BuildkiteRejected(raw.status, f"{where}: {text}")
        if not 200 <= raw.status < 300:
            # A redirect is not Buildkite having done it (redirects are not followed: the token stays here).
            raise BuildkiteUnavailable(f"{where}: unexpected HTTP {raw.status}", maybe_sent=False)
        return raw.status, parsed


def _api_base(url: str) -> str:
    """The token goes in every request: https only, except plain http on loopback (local runs, tests)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if (parts.scheme == "https" and host) or (parts.scheme == "http" and loopback):
        return url.rstrip("/")
    raise ValueError(f"CRCR_BUILDKITE_API_URL {url!r} must be https (plain http only on loopback)")


def _builds_path(organization: str, pipeline: str) -> str:
    return f"/v2/organizations/{quote(organization, safe='')}/pipelines/{quote(pipeline, safe='')}/builds"


def _build_ref(item: Mapping[str, Any], pipeline: str) -> BuildRef | None:
    build_id, number, web_url = item.get("id"), item.get("number"), item.get("web_url")
    if not isinstance(build_id, str) or not build_id or isinstance(number, bool) or not isinstance(number, int):
        return None
    return BuildRef(id=build_id, number=number, url=web_url if isinstance(web_url, str) else "", pipeline=pipeline)


def _job(item: Any) -> BuildkiteJob | None:
    """A command job (`type: script`) of a build; waiters, block steps and triggers are not jobs that report."""
    if not isinstance(item, Mapping) or item.get("type") != "script" or not isinstance(item.get("id"), str):
        return None
    state = str(item.get("state") or "")
    name = item.get("name") or item.get("step_key") or item.get("label") or ""
    url = item.get("web_url")
    return BuildkiteJob(
        id=item["id"],
        name=str(name)[:200],
        state=state,
        conclusion=buildkite_conclusion(state, item.get("soft_failed") is True),
        started_at=timestamp(item.get("started_at")),
        finished_at=timestamp(item.get("finished_at")),
        url=url if isinstance(url, str) else "",
    )
