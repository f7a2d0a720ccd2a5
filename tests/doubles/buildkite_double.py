"""An independent HTTP double of Buildkite's REST API (builds), for judging the relay's Buildkite dispatches.

Written from Buildkite's public documentation (buildkite.com/docs/apis/rest-api, its builds page and
rate-limit page, and the list-builds query strings; see /work/research/buildkite-spec.md §3), never from
the relay's code. A real HTTP server (``ThreadingHTTPServer`` on 127.0.0.1, a free port, a daemon
thread), so the code under test talks to it over the wire as it would to ``https://api.buildkite.com``.

Usage::

    bk = BuildkiteDouble()                          # already serving
    bk.url                                          # "http://127.0.0.1:<port>"
    token = bk.add_token(scopes=("write_builds", "read_builds"))   # or bk.token (both scopes)
    bk.add_pipeline("acme", "ci", branch_filter="main release/*")
    bk.script("POST", r"/v2/organizations/acme/pipelines/ci/builds", [Reply(502), Reply.slow(3)])
    ...
    bk.builds("acme", "ci")   # created builds, oldest first (the objects the API answered)
    bk.requests               # every request, in arrival order (RecordedRequest)
    bk.unexpected             # requests outside the endpoints below (answered 404)
    bk.internal_errors        # exceptions inside the double (answered 500): should stay empty
    bk.stop()                 # or: with BuildkiteDouble() as bk: ...

Endpoints (anything else: ``404 {"message": "Not Found"}``, recorded in ``unexpected``):

* ``POST /v2/organizations/{org}/pipelines/{pipeline}/builds`` (scope ``write_builds``) -> 201 Build
* ``GET  /v2/organizations/{org}/pipelines/{pipeline}/builds`` (scope ``read_builds``) -> 200 [Build],
  newest first, with the documented filters ``meta_data[<key>]=<value>`` (every one must match),
  ``branch`` (repeatable), ``commit``, ``state`` (repeatable), and ``page``/``per_page`` (default 30,
  at most 100) with a ``Link`` header.
* ``GET  /v2/organizations/{org}/pipelines/{pipeline}/builds/{number}`` (scope ``read_builds``) -> 200 Build, or
  404 ``{"message": "No build found"}`` (the body is not documented). A build's ``jobs`` are what ``play`` set:
  each ``{"id", "graphql_id", "type": "script", "name", "step_key", "state", "web_url", "soft_failed",
  "exit_status", "retried", "started_at", "finished_at", ...}`` as the builds page's Build object lists them.

Buildkite facts this double enforces (sources: the builds page and the REST overview):

* ``Authorization: Bearer <API access token>`` only (the overview: basic auth is not supported). No or an
  unknown token: 401 ``{"message": "Authentication required. Please supply a valid API Access Token:
  https://buildkite.com/docs/apis/rest-api#authentication"}`` (the text third-party code records). A token
  without the endpoint's scope: 403 (body undocumented; ours names the scope).
* An unknown organization or pipeline: 404 ``{"message": "No pipeline found"}`` (as recorded by a public
  mock; the 404 body is not documented).
* Create: ``commit`` and ``branch`` required (non-empty strings); ``env`` and ``meta_data`` objects (meta
  data values strings); ``ignore_pipeline_branch_filters`` boolean. Otherwise 422 ``{"message":
  "Validation Failed", "errors": [...]}``. A branch the pipeline's branch filter excludes is refused with
  422 unless ``ignore_pipeline_branch_filters`` is true (a third-party note; the message text is ours).
* The 201 body is a Build: ``id`` (a UUID), ``graphql_id``, ``url`` (the API URL, by number),
  ``web_url``, ``number`` (per pipeline, increasing), ``state: "scheduled"``, ``blocked``, ``message``,
  ``commit``, ``branch``, ``env``, ``source: "api"``, ``creator``, ``jobs``, ``created_at``,
  ``scheduled_at``, ``started_at``, ``finished_at``, ``meta_data``, ``pull_request``, ``pipeline``.
* No idempotency: the same body twice creates two builds.
* Rate limits (the newer rate-limits page): two windows of one minute, per organization (200) and per
  token user (50); a request over either gets 429 with ``{"message": "You have exceeded your API rate
  limit. Please wait N seconds before making more requests.", "scope": "rest" | "rest_user", "limit",
  "current", "reset"}``. Every answer carries ``RateLimit-Scope: rest``, ``RateLimit-Remaining``,
  ``RateLimit-Limit``, ``RateLimit-Reset`` (seconds until the window resets) and the ``RateLimit-User-*``
  set with ``RateLimit-User-Scope: rest_user``. No ``Retry-After`` (none is documented).

Scripted faults: ``bk.script(method, path_regex, replies)`` as in the GitHub double: ``path_regex`` is
matched with ``re.fullmatch`` against the path (no query string); the next matching requests take the
replies in order, before authentication, validation and rate limits. Reply kinds:

* ``Reply(502)`` / ``Reply.error(status, message=None)`` - that status with ``{"message": ...}``.
* ``Reply.rate_limited(reset=2, user_reset=None, scope="rest_user")`` - the documented 429, with
  ``RateLimit-Reset`` = ``reset`` and ``RateLimit-User-Reset`` = ``user_reset`` (or ``reset``).
* ``Reply.slow(seconds, then=None)`` - wait, then answer normally (or with ``then``).
* ``Reply.slow_after_processing(seconds)`` - process normally at once (the build IS created), then answer
  after ``seconds`` (a client that times out never hears of it).
* ``Reply.drop(after_processing=False)`` - close the connection without an answer; with
  ``after_processing=True`` the request is processed first (the build IS created).
* ``Reply.normal()`` - a gap in a sequence.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import itertools
import json
import math
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

__all__ = ["BuildkiteDouble", "RecordedRequest", "Reply"]

AUTH_REQUIRED = (
    "Authentication required. Please supply a valid API Access Token: "
    "https://buildkite.com/docs/apis/rest-api#authentication"
)
WINDOW_S = 60.0
ORG_LIMIT = 200
USER_LIMIT = 50
BUILD_STATES = (
    "creating",
    "scheduled",
    "running",
    "passed",
    "failing",
    "failed",
    "blocked",
    "canceled",
    "canceling",
    "skipped",
    "not_run",
    "waiting",
    "waiting_failed",
)


@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``status=None`` means "answer normally" (after ``delay``)."""

    status: int | None = None
    message: str | None = None
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    delay_after_processing: bool = False
    close_connection: bool = False
    after_processing: bool = False

    @classmethod
    def error(cls, status: int, message: str | None = None) -> Reply:
        return cls(status=status, message=message)

    @classmethod
    def rate_limited(cls, reset: int = 2, user_reset: int | None = None, scope: str = "rest_user") -> Reply:
        user = reset if user_reset is None else user_reset
        limit = USER_LIMIT if scope == "rest_user" else ORG_LIMIT
        shown = user if scope == "rest_user" else reset
        body = {
            "message": (
                f"You have exceeded your API rate limit. Please wait {shown} seconds before making more requests."
            ),
            "scope": scope,
            "limit": limit,
            "current": limit + 1,
            "reset": shown,
        }
        headers = {"ratelimit-reset": str(reset), "ratelimit-user-reset": str(user)}
        if scope == "rest_user":
            headers["ratelimit-user-remaining"] = "0"
        else:
            headers["ratelimit-remaining"] = "0"
        return cls(status=429, body=body, headers=headers)

    @classmethod
    def slow(cls, seconds: float, then: Reply | None = None) -> Reply:
        base = then or cls()
        return cls(**{**base.__dict__, "delay": seconds})

    @classmethod
    def slow_after_processing(cls, seconds: float) -> Reply:
        return cls(delay=seconds, delay_after_processing=True)

    @classmethod
    def drop(cls, after_processing: bool = False) -> Reply:
        return cls(close_connection=True, after_processing=after_processing)

    @classmethod
    def normal(cls) -> Reply:
        return cls()


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    json: Any
    time: float
    status: int | None = None
    outcome: str = "pending"  # answered | scripted | dropped | client-gone | pending
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytes = b""

    @property
    def response_json(self) -> Any:
        try:
            return json.loads(self.response_body) if self.response_body else None
        except ValueError:
            return None


@dataclass
class _Token:
    token: str
    user: str
    scopes: frozenset[str]
    organizations: frozenset[str] | None  # None: every organization


@dataclass
class _Pipeline:
    org: str
    slug: str
    id: str
    branch_filter: str  # space-separated patterns ("" = every branch), as Buildkite's branch filtering
    builds: list[dict[str, Any]] = field(default_factory=list)
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


@dataclass
class _Resp:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Script:
    method: str
    regex: re.Pattern[str]
    replies: deque[Reply]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], double: BuildkiteDouble) -> None:
        self.double = double
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "Buildkite"
    sys_version = ""
    timeout = 30
    server: _Server

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _serve(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
        except (OSError, ValueError):
            self.close_connection = True
            return
        self.server.double._serve(self, body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class BuildkiteDouble:
    """Buildkite's builds REST API served over HTTP. See the module docstring."""

    def __init__(
        self,
        *,
        org_limit: int = ORG_LIMIT,
        user_limit: int = USER_LIMIT,
        clock: Callable[[], float] = time.time,
        host: str = "127.0.0.1",
        web_url: str = "https://buildkite.com",
    ) -> None:
        self.org_limit = org_limit
        self.user_limit = user_limit
        self.clock = clock
        self.web = web_url.rstrip("/")
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._requests: list[RecordedRequest] = []
        self._unexpected: list[RecordedRequest] = []
        self.internal_errors: list[Exception] = []
        self._scripts: list[_Script] = []
        self._tokens: dict[str, _Token] = {}
        self._pipelines: dict[tuple[str, str], _Pipeline] = {}
        self._orgs: set[str] = set()
        self._windows: dict[str, list[float]] = {}  # "org:<slug>" / "user:<name>" -> [window start, used]
        self._server = _Server((host, 0), self)
        self.port: int = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self.token = self.add_token()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- lifecycle and world

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> BuildkiteDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_token(
        self,
        scopes: Iterable[str] = ("read_builds", "write_builds"),
        *,
        user: str = "crcr-bot",
        organizations: Iterable[str] | None = None,
    ) -> str:
        """An API access token of ``user`` with these scopes (limited to ``organizations`` if given)."""
        token = "bkua_" + uuid.uuid4().hex
        orgs = frozenset(organizations) if organizations is not None else None
        with self._lock:
            self._tokens[token] = _Token(token, user, frozenset(scopes), orgs)
        return token

    def add_pipeline(self, org: str, slug: str, *, branch_filter: str = "") -> str:
        """A pipeline (its organization too); returns the pipeline's UUID."""
        with self._lock:
            self._orgs.add(org)
            pipeline = self._pipelines.setdefault((org, slug), _Pipeline(org, slug, str(uuid.uuid4()), branch_filter))
            pipeline.branch_filter = branch_filter
            return pipeline.id

    def script(self, method: str, path_pattern: str, replies: Iterable[Reply]) -> None:
        with self._lock:
            self._scripts.append(_Script(method.upper(), re.compile(path_pattern), deque(replies)))

    # ---------------------------------------------------------------- observation

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def unexpected(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._unexpected)

    def play(
        self, org: str, slug: str, number: int, jobs: Iterable[tuple[str, str]], state: str, **job_fields: Any
    ) -> list[dict[str, Any]]:
        """The build ran: its command jobs are `jobs` ((name, job state) pairs: "running", "passed", "failed",
        "canceled", "timed_out", "expired", ...) and the build is in `state`; `job_fields` go on every job (e.g.
        ``soft_failed=True``). A job keeps its id from one call to the next (by name). Returns the jobs (their ids are
        the agents' ``job_id``)."""
        if state not in BUILD_STATES:
            raise ValueError(f"not a build state: {state}")
        now = self._iso()
        with self._lock:
            build = next(b for b in self._pipelines[(org, slug)].builds if b["number"] == number)
            made = []
            for name, job_state in jobs:
                job_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{build['id']}/{name}"))
                running = job_state not in ("scheduled", "waiting", "expired")
                made.append({
                    "id": job_id, "graphql_id": f"Sm9iLS0t{job_id.replace('-', '')[:16]}", "type": "script",
                    "name": name, "step_key": name, "state": job_state, "web_url": f"{build['web_url']}#{job_id}",
                    "soft_failed": False, "exit_status": {"passed": 0, "failed": 1}.get(job_state),
                    "retried": False, "retried_in_job_id": None, "retries_count": None, "agent": None,
                    "created_at": build["created_at"], "scheduled_at": build["scheduled_at"],
                    "started_at": now if running else None,
                    "finished_at": now if job_state not in ("scheduled", "running", "assigned") else None,
                } | job_fields)  # fmt: skip
            build["jobs"] = made
            build["state"] = state
            build["started_at"] = build["started_at"] or now
            build["finished_at"] = now if state in ("passed", "failed", "canceled", "skipped", "not_run") else None
            return copy.deepcopy(made)

    def builds(self, org: str, slug: str) -> list[dict[str, Any]]:
        """Builds created on a pipeline, oldest first."""
        with self._lock:
            pipeline = self._pipelines.get((org, slug))
            return copy.deepcopy(pipeline.builds) if pipeline else []

    # ---------------------------------------------------------------- HTTP plumbing

    def _serve(self, handler: _Handler, body: bytes) -> None:
        split = urlsplit(handler.path)
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        rec = RecordedRequest(
            method=handler.command,
            path=unquote(split.path),
            query=parse_qs(split.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
            json=parsed,
            time=self.clock(),
        )
        with self._lock:
            self._requests.append(rec)
            reply = self._take_scripted(rec)
        if reply is None:
            resp = self._process(rec)
            rec.outcome = "answered"
        elif reply.close_connection:
            if reply.after_processing:
                self._process(rec)
            self._drop(handler, rec)
            return
        elif reply.delay_after_processing:
            resp = self._process(rec)
            rec.outcome = "answered"
            if self._stopping.wait(reply.delay):
                self._drop(handler, rec)
                return
        else:
            if reply.delay and self._stopping.wait(reply.delay):
                self._drop(handler, rec)
                return
            if reply.status is None:
                resp = self._process(rec)
                rec.outcome = "answered"
            else:
                body_out = reply.body if reply.body is not None else {"message": reply.message or _reason(reply.status)}
                resp = _Resp(reply.status, body_out, dict(reply.headers))
                rec.outcome = "scripted"
        self._send(handler, rec, resp)

    def _take_scripted(self, rec: RecordedRequest) -> Reply | None:
        for script in self._scripts:
            if script.replies and script.method in ("*", rec.method) and script.regex.fullmatch(rec.path):
                return script.replies.popleft()
        return None

    def _process(self, rec: RecordedRequest) -> _Resp:
        try:
            return self._route(rec)
        except Exception as exc:  # a bug in the double must show, not hang the client
            with self._lock:
                self.internal_errors.append(exc)
            return _Resp(500, {"message": "Internal Server Error"})

    def _drop(self, handler: _Handler, rec: RecordedRequest) -> None:
        rec.outcome = "dropped"
        rec.status = None
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, handler: _Handler, rec: RecordedRequest, resp: _Resp) -> None:
        payload = json.dumps(resp.body).encode() if resp.body is not None else b""
        headers = {**self._rate_headers(rec), **resp.headers}
        headers["content-type"] = "application/json; charset=utf-8"
        headers["content-length"] = str(len(payload))
        rec.status = resp.status
        rec.response_headers = dict(headers)
        rec.response_body = payload
        try:
            handler.send_response(resp.status)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(payload)
            handler.wfile.flush()
        except OSError:
            rec.outcome = "client-gone"
            handler.close_connection = True

    # ---------------------------------------------------------------- rate limits

    def _window(self, key: str) -> list[float]:
        now = self.clock()
        state = self._windows.get(key)
        if state is None or now >= state[0] + WINDOW_S:
            state = [now, 0]
            self._windows[key] = state
        return state

    def _reset_in(self, state: list[float]) -> int:
        return max(0, math.ceil(state[0] + WINDOW_S - self.clock()))

    def _rate_headers(self, rec: RecordedRequest) -> dict[str, str]:
        org, user = self._scopes_of(rec)
        with self._lock:
            org_state = self._window(f"org:{org}")
            user_state = self._window(f"user:{user}:{org}")
            return {
                "ratelimit-scope": "rest",
                "ratelimit-limit": str(self.org_limit),
                "ratelimit-remaining": str(max(0, self.org_limit - int(org_state[1]))),
                "ratelimit-reset": str(self._reset_in(org_state)),
                "ratelimit-user-scope": "rest_user",
                "ratelimit-user-limit": str(self.user_limit),
                "ratelimit-user-remaining": str(max(0, self.user_limit - int(user_state[1]))),
                "ratelimit-user-reset": str(self._reset_in(user_state)),
            }

    def _scopes_of(self, rec: RecordedRequest) -> tuple[str, str]:
        match = re.match(r"/v2/organizations/([^/]+)", rec.path)
        token = self._token_of(rec)
        return (match.group(1) if match else "-"), (token.user if token else "anonymous")

    def _count(self, org: str, user: str) -> _Resp | None:
        """Count one request against both windows; a 429 when either is already spent."""
        with self._lock:
            org_state = self._window(f"org:{org}")
            user_state = self._window(f"user:{user}:{org}")
            for state, limit, scope in (
                (user_state, self.user_limit, "rest_user"),
                (org_state, self.org_limit, "rest"),
            ):
                if state[1] >= limit:
                    reset = self._reset_in(state)
                    return _Resp(
                        429,
                        {
                            "message": (
                                f"You have exceeded your API rate limit. Please wait {reset} seconds before "
                                "making more requests."
                            ),
                            "scope": scope,
                            "limit": limit,
                            "current": int(state[1]) + 1,
                            "reset": reset,
                        },
                    )
            org_state[1] += 1
            user_state[1] += 1
        return None

    # ---------------------------------------------------------------- endpoints

    def _token_of(self, rec: RecordedRequest) -> _Token | None:
        scheme, _, cred = rec.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not cred:
            return None
        with self._lock:
            return self._tokens.get(cred.strip())

    def _route(self, rec: RecordedRequest) -> _Resp:
        match = re.fullmatch(r"/v2/organizations/([^/]+)/pipelines/([^/]+)/builds(?:/(\d+))?", rec.path)
        if match is None or rec.method not in ("GET", "POST") or (match.group(3) and rec.method != "GET"):
            with self._lock:
                self._unexpected.append(rec)
            return _Resp(404, {"message": "Not Found"})
        org, slug, number = match.groups()
        token = self._token_of(rec)
        if token is None:
            return _Resp(401, {"message": AUTH_REQUIRED})
        limited = self._count(org, token.user)
        if limited is not None:
            return limited
        scope = "write_builds" if rec.method == "POST" else "read_builds"
        if scope not in token.scopes:
            return _Resp(403, {"message": f"Your access token doesn't have the {scope} scope"})
        with self._lock:
            pipeline = self._pipelines.get((org, slug))
        if pipeline is None or (token.organizations is not None and org not in token.organizations):
            return _Resp(404, {"message": "No pipeline found" if org in self._orgs else "No organization found"})
        if rec.method == "POST":
            return self._create(rec, pipeline, token)
        if number is not None:
            with self._lock:
                found = next((copy.deepcopy(b) for b in pipeline.builds if b["number"] == int(number)), None)
            return _Resp(200, found) if found is not None else _Resp(404, {"message": "No build found"})
        return self._list(rec, pipeline)

    def _create(self, rec: RecordedRequest, pipeline: _Pipeline, token: _Token) -> _Resp:
        body = rec.json
        if not isinstance(body, dict):
            return _Resp(400, {"message": "Problems parsing JSON"})
        errors = []
        for name in ("commit", "branch"):
            if not isinstance(body.get(name), str) or not body[name]:
                errors.append({"field": name, "code": "missing_field"})
        env, meta = body.get("env", {}), body.get("meta_data", {})
        if not isinstance(env, dict):
            errors.append({"field": "env", "code": "invalid"})
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            errors.append({"field": "meta_data", "code": "invalid"})
        ignore = body.get("ignore_pipeline_branch_filters", False)
        if not isinstance(ignore, bool):
            errors.append({"field": "ignore_pipeline_branch_filters", "code": "invalid"})
        if "message" in body and not isinstance(body["message"], str):
            errors.append({"field": "message", "code": "invalid"})
        if errors:
            return _Resp(422, {"message": "Validation Failed", "errors": errors})
        branch = body["branch"]
        patterns = pipeline.branch_filter.split()
        if patterns and not ignore and not any(fnmatch.fnmatchcase(branch, p) for p in patterns):
            return _Resp(422, {"message": f"Branch {branch!r} does not match the pipeline's branch filter"})
        now = self._iso()
        with self._lock:
            number = next(pipeline.numbers)
            build_id = str(uuid.uuid4())
            api = f"{self.url}/v2/organizations/{pipeline.org}/pipelines/{pipeline.slug}"
            build = {
                "id": build_id,
                "graphql_id": f"QnVpbGQtLS0{build_id.replace('-', '')[:16]}",
                "url": f"{api}/builds/{number}",
                "web_url": f"{self.web}/{pipeline.org}/{pipeline.slug}/builds/{number}",
                "number": number,
                "state": "scheduled",
                "blocked": False,
                "cancel_reason": None,
                "message": body.get("message") or "",
                "commit": body["commit"],
                "branch": branch,
                "tag": None,
                "env": copy.deepcopy(env),
                "source": "api",
                "creator": {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, token.user)), "name": token.user},
                "jobs": [],
                "created_at": now,
                "scheduled_at": now,
                "started_at": None,
                "finished_at": None,
                "meta_data": copy.deepcopy(meta),
                "pull_request": None,
                "rebuilt_from": None,
                "pipeline": {"id": pipeline.id, "url": api, "slug": pipeline.slug, "name": pipeline.slug},
            }
            pipeline.builds.append(build)
            return _Resp(201, copy.deepcopy(build))

    def _list(self, rec: RecordedRequest, pipeline: _Pipeline) -> _Resp:
        query = rec.query
        meta = {
            k[len("meta_data[") : -1]: v[-1] for k, v in query.items() if k.startswith("meta_data[") and k.endswith("]")
        }
        states = query.get("state[]", []) + query.get("state", [])
        if any(s not in BUILD_STATES for s in states):
            return _Resp(422, {"message": "Validation Failed", "errors": [{"field": "state", "code": "invalid"}]})
        branches = query.get("branch[]", []) + query.get("branch", [])
        try:
            per_page = min(max(int(query.get("per_page", ["30"])[-1]), 1), 100)
            page = max(int(query.get("page", ["1"])[-1]), 1)
        except ValueError:
            return _Resp(422, {"message": "Validation Failed", "errors": [{"field": "per_page", "code": "invalid"}]})
        with self._lock:
            found = [
                copy.deepcopy(b)
                for b in reversed(pipeline.builds)  # newest first
                if all(b["meta_data"].get(k) == v for k, v in meta.items())
                and (not branches or b["branch"] in branches)
                and ("commit" not in query or b["commit"] == query["commit"][-1])
                and (not states or b["state"] in states)
            ]
        chunk = found[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(found):
            rest = {k: v[-1] for k, v in query.items() if k not in ("page", "per_page")}
            nxt = urlencode({**rest, "page": page + 1, "per_page": per_page})
            headers["link"] = f'<{self.url}{rec.path}?{nxt}>; rel="next"'
        return _Resp(200, chunk, headers)

    def _iso(self) -> str:
        return datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _reason(status: int) -> str:
    return {
        400: "Bad Request",
        401: AUTH_REQUIRED,
        403: "Forbidden",
        404: "Not Found",
        422: "Validation Failed",
        429: "Too Many Requests",
        500: "Internal Server Error",
        502: "Bad Gateway",
        503: "Service Unavailable",
        504: "Gateway Timeout",
    }.get(status, "Error")
