"""Sandbox GitHub for `crcr local` without CRCR_GITHUB_API_URL: a GitHub App's view of the REST API
that checks the App JWT and installation tokens, records what the relay sends, and shows it."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

INSTALLATION_DOCS = "https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app"


@dataclass
class SandboxReply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Token:
    repos: frozenset[str]
    expires: float


def _ids(repo: str) -> tuple[int, int]:
    """Stable installation id per owner and repository id per name, like GitHub's numeric ids."""
    owner = repo.split("/", 1)[0].lower()
    return 1000 + zlib.crc32(owner.encode()) % 100_000, 100_000 + zlib.crc32(repo.lower().encode()) % 10_000_000


def _repository(repo: str, repo_id: int) -> dict[str, Any]:
    """A run's repository as GitHub's run objects and events carry it: its id and its owner's."""
    owner = repo.split("/", 1)[0].lower()
    return {"id": repo_id, "full_name": repo, "owner": {"id": 2_000_000 + zlib.crc32(owner.encode()) % 1_000_000}}


class SandboxGitHub:
    """`installed(repo)` says where the App is installed (`crcr local`: the upstream, the allowlist's repositories and
    CRCR_SANDBOX_INSTALLED); elsewhere GitHub's answers: 404 for the installation, 422 for a token."""

    def __init__(
        self, app_id: str, app_public_key: RSAPublicKey, installed: Callable[[str], bool] = lambda _repo: True
    ) -> None:
        self._app_id = app_id
        self._key = app_public_key
        self._installed = installed
        self._lock = threading.Lock()
        self._tokens: dict[str, _Token] = {}
        self._owners: dict[int, str] = {}
        self.on_dispatch: Callable[[str, int, dict[str, Any], str], None] | None = None
        self.dispatches: list[dict[str, Any]] = []
        self.check_runs: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, dict[str, Any]] = {}  # PR comments, kept for `crcr demo` to show
        self.requests: list[tuple[str, str, int]] = []
        self.runs: SandboxWorkflows | None = None  # the runs it plays, for the Actions runs API
        self.reruns: list[tuple[str, int]] = []
        self.refuse_dispatch: dict[str, str] = {}  # repository -> the 4xx message its dispatches get (crcr demo)

    def _app_ok(self, auth: str) -> bool:
        token = auth.removeprefix("Bearer ").strip()
        try:
            claims = jwt.decode(token, self._key, algorithms=["RS256"], options={"require": ["iat", "exp", "iss"]})
        except jwt.PyJWTError:
            return False
        return str(claims["iss"]) == self._app_id and claims["exp"] - claims["iat"] <= 660

    def handle(self, method: str, path: str, auth: str, body: Any) -> SandboxReply:
        reply = self._route(method, path, auth, body)
        with self._lock:
            self.requests.append((method, path, reply.status))
        return reply

    def _route(self, method: str, path: str, auth: str, body: Any) -> SandboxReply:
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/installation", path):
            if method != "GET":
                return SandboxReply(404, {"message": "Not Found"})
            if not self._app_ok(auth):
                return SandboxReply(401, {"message": "A JSON web token could not be decoded"})
            if not self._installed(m.group(1)):
                return SandboxReply(404, {"message": "Not Found", "documentation_url": INSTALLATION_DOCS})
            inst, _ = _ids(m.group(1))
            with self._lock:
                self._owners[inst] = m.group(1).split("/")[0]
            return SandboxReply(200, {"id": inst, "account": {"login": m.group(1).split("/")[0]}})
        if path == "/app/hook/deliveries":
            # The sandbox delivers no webhooks itself (`crcr demo` and tests POST them): nothing was missed.
            if method != "GET" or not self._app_ok(auth):
                return SandboxReply(401, {"message": "A JSON web token could not be decoded"})
            return SandboxReply(200, [])
        if m := re.fullmatch(r"/app/installations/(\d+)/access_tokens", path):
            if method != "POST" or not self._app_ok(auth):
                return SandboxReply(401, {"message": "A JSON web token could not be decoded"})
            names = (body or {}).get("repositories") or []
            with self._lock:
                owner = self._owners.get(int(m.group(1)))
            if owner is None or not names:
                return SandboxReply(422, {"message": "the sandbox needs repositories named in the request"})
            repos = [f"{owner}/{n}" for n in names]
            if not all(self._installed(r) for r in repos):
                return SandboxReply(422, {"message": "There is at least one repository that does not exist or is not "
                                          "accessible to the parent installation."})  # fmt: skip
            token = "ghs_" + secrets.token_urlsafe(24)
            with self._lock:
                self._tokens[token] = _Token(frozenset(r.lower() for r in repos), time.time() + 3600)
            expires = datetime.fromtimestamp(time.time() + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return SandboxReply(
                201,
                {
                    "token": token,
                    "expires_at": expires,
                    "permissions": (body or {}).get("permissions") or {},
                    "repository_selection": "selected",
                    "repositories": [{"id": _ids(r)[1], "full_name": r, "name": r.split("/")[1]} for r in repos],
                },
            )
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/actions/runs/(\d+)(/rerun-failed-jobs)?", path):
            return self._run(method, m.group(1), int(m.group(2)), bool(m.group(3)), auth)
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/actions/runs(?:/(\d+)/attempts/(\d+)/jobs)?", path):
            return self._runs_read(method, m.group(1), m.group(2), m.group(3), auth)
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/check-runs(?:/(\d+))?", path):
            return self._check_run(method, m.group(1), m.group(2), auth, body or {})
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/(?:(\d+)/comments|comments/(\d+))", path):
            return self._comment(method, m.group(1), m.group(2), m.group(3), auth, body or {})
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/dispatches", path):
            repo = m.group(1)
            denied = self._token_denied(auth, repo)
            if denied is not None:
                return denied
            payload = (body or {}).get("client_payload") or {}
            refused = self.refuse_dispatch.get(repo.lower())
            if refused:
                return SandboxReply(403, {"message": refused})
            if len(payload) > 10:
                return SandboxReply(
                    422, {"message": f"No more than 10 properties are allowed; {len(payload)} were supplied."}
                )
            with self._lock:
                self.dispatches.append(
                    {
                        "repo": repo,
                        "event_type": (body or {}).get("event_type"),
                        "client_payload": payload,
                        "at": time.time(),
                    }
                )
            if self.on_dispatch is not None:
                self.on_dispatch(repo, _ids(repo)[1], payload, str((body or {}).get("event_type") or ""))
            return SandboxReply(204)
        return SandboxReply(404, {"message": "Not Found"})

    def _run(self, method: str, repo: str, run_id: int, rerun: bool, auth: str) -> SandboxReply:
        """A downstream run the sandbox played: read it, or re-run its failed jobs (the relay's retry)."""
        denied = self._token_denied(auth, repo)
        if denied is not None:
            return denied
        if self.runs is None:
            return SandboxReply(404, {"message": "Not Found"})
        if not rerun and method == "GET":
            found = self.runs.status(repo, run_id)
            return SandboxReply(200, found) if found else SandboxReply(404, {"message": "Not Found"})
        if rerun and method == "POST":
            if self.runs.status(repo, run_id) is None:
                return SandboxReply(404, {"message": "Not Found"})
            if not self.runs.rerun(repo, run_id):
                return SandboxReply(403, {"message": "This workflow is already running"})
            with self._lock:
                self.reruns.append((repo, run_id))
            return SandboxReply(201, {})
        return SandboxReply(404, {"message": "Not Found"})

    def _runs_read(self, method: str, repo: str, run_id: str | None, attempt: str | None, auth: str) -> SandboxReply:
        """GitHub's record of the runs the sandbox played: a repository's runs (newest first, one page, the
        filters not applied), or one attempt's jobs."""
        denied = self._token_denied(auth, repo)
        if denied is not None:
            return denied
        if method != "GET" or self.runs is None:
            return SandboxReply(404, {"message": "Not Found"})
        if run_id is None:
            found = self.runs.runs_of(repo)
            return SandboxReply(200, {"total_count": len(found), "workflow_runs": found})
        jobs = self.runs.jobs(repo, int(run_id), int(attempt or 1))
        if jobs is None:
            return SandboxReply(404, {"message": "Not Found"})
        return SandboxReply(200, {"total_count": len(jobs), "jobs": jobs})

    def _token_denied(self, auth: str, repo: str) -> SandboxReply | None:
        with self._lock:
            tok = self._tokens.get(auth.removeprefix("Bearer ").removeprefix("token ").strip())
        if tok is None or tok.expires < time.time():
            return SandboxReply(401, {"message": "Bad credentials"})
        if repo.lower() not in tok.repos:
            return SandboxReply(404, {"message": "Not Found"})
        return None

    def _check_run(self, method: str, repo: str, run_id: str | None, auth: str, body: dict[str, Any]) -> SandboxReply:
        """Create (POST) and update (PATCH) check runs on the upstream, kept for `crcr demo` to show."""
        denied = self._token_denied(auth, repo)
        if denied is not None:
            return denied
        with self._lock:
            if method == "POST" and run_id is None:
                if not body.get("name") or not body.get("head_sha"):
                    return SandboxReply(422, {"message": "name and head_sha are required"})
                new_id = 5_000_000 + len(self.check_runs) + 1
                self.check_runs[new_id] = {"id": new_id, "repo": repo, "writes": 1, "conclusion": None} | body
                return SandboxReply(201, self.check_runs[new_id])
            if method == "PATCH" and run_id is not None and int(run_id) in self.check_runs:
                run = self.check_runs[int(run_id)]
                run.update(body)
                run["writes"] += 1
                return SandboxReply(200, run)
        return SandboxReply(404, {"message": "Not Found"})

    def _comment(
        self, method: str, repo: str, pr: str | None, comment_id: str | None, auth: str, body: dict[str, Any]
    ) -> SandboxReply:
        """A PR's conversation: list, create and edit the App's comments (every PR exists in the sandbox)."""
        denied = self._token_denied(auth, repo)
        if denied is not None:
            return denied
        app = {"id": int(self._app_id) if self._app_id.isdigit() else self._app_id, "slug": "crcr-sandbox"}
        with self._lock:
            if method == "GET" and pr is not None:
                found = [c for c in self.comments.values() if (c["repo"], c["pr"]) == (repo.lower(), int(pr))]
                return SandboxReply(200, found)
            text = body.get("body")
            if method in ("POST", "PATCH") and (not isinstance(text, str) or len(text) > 65536):
                return SandboxReply(422, {"message": "Validation Failed"})
            if method == "POST" and pr is not None:
                new_id = 7_000_000 + len(self.comments) + 1
                self.comments[new_id] = {
                    "id": new_id, "repo": repo.lower(), "pr": int(pr), "body": text, "writes": 1,
                    "user": {"login": "crcr-sandbox[bot]", "type": "Bot"}, "performed_via_github_app": app,
                }  # fmt: skip
                return SandboxReply(201, self.comments[new_id])
            if method == "PATCH" and comment_id is not None and int(comment_id) in self.comments:
                comment = self.comments[int(comment_id)]
                comment["body"] = text
                comment["writes"] += 1
                return SandboxReply(200, comment)
        return SandboxReply(404, {"message": "Not Found"})


@dataclass(frozen=True)
class SandboxJob:
    """What one job of a sandbox run reports. `finish=False`: its runner vanishes after it started: it never
    reports again, and GitHub fails the job a while later (`lost_s`; on GitHub.com about ten minutes), as it does
    when it loses a runner; `failure_kind` and `failed_tests` go with a failure, as a downstream's report carries
    them."""

    name: str = "build-and-test"
    conclusion: str = "success"
    failure_kind: str | None = None
    failed_tests: tuple[str, ...] = ()
    finish: bool = True


# A script: (repository, client_payload) -> the runs a dispatch starts, each a workflow name and its jobs, with
# what the run's re-run (attempt 2, `rerun-failed-jobs`) reports instead. None: the one default run.
Script = Callable[[str, dict[str, Any]], list[tuple[str, list[SandboxJob], list[SandboxJob]]] | None]
DEFAULT_RUN = ("crcr sandbox", [SandboxJob()], [SandboxJob()])


class SandboxWorkflows:
    """Plays a downstream workflow for each sandbox dispatch, as GitHub and the downstream would: the run is
    created (queued) titled with the dispatch id (the example workflow's `run-name`), starts, and completes; its jobs
    report in_progress, then completed, over HTTP; GitHub's record of it (the run, its jobs per attempt) is served
    by the sandbox GitHub, and each step sends the App the `workflow_run` webhook (`deliver`, set by the stack).

    The runs report through the relay's real /callback path with tokens from the sandbox issuer. `script`
    (`crcr demo` sets it) decides per dispatch what its runs report; a run the relay re-runs (the sandbox
    GitHub's `rerun-failed-jobs`) plays its failed jobs again as attempt 2.
    """

    # A run starts 1.5 s after its dispatch (a real one takes far longer to get a runner): time for an L4
    # repository's check run to show queued first, as it does on GitHub, even while ChecksFunction starts cold.
    def __init__(
        self, mint: Callable[..., str], audience: str, queue_s: float = 1.5, run_s: float = 0.8, lost_s: float = 4.0
    ) -> None:
        self._mint = mint
        self._audience = audience
        self._queue_s = queue_s
        self._run_s = run_s
        self._lost_s = lost_s
        self._lock = threading.Lock()
        self._next_run = 9_000_000_000
        self._next_job = 70_000_000_000
        self.replies: list[dict[str, Any]] = []
        self.script: Script | None = None
        self.deliver: Callable[[str, dict[str, Any]], None] | None = None  # a webhook to the App
        # run id -> repo, repo id, client payload, workflow, title, re-run's jobs, attempt, status, conclusion, and
        # GitHub's jobs of each attempt
        self.runs: dict[int, dict[str, Any]] = {}

    def start(self, repo: str, repo_id: int, client_payload: dict[str, Any], event_type: str = "") -> None:
        planned = (self.script(repo, client_payload) if self.script else None) or [DEFAULT_RUN]
        for workflow, jobs, rerun in planned:
            with self._lock:
                self._next_run += 1
                run_id = self._next_run
                self.runs[run_id] = {
                    "repo": repo, "repo_id": repo_id, "payload": client_payload, "workflow": workflow,
                    "title": f"crcr {event_type} {client_payload.get('dispatch_id') or ''}".strip(),
                    "rerun": rerun, "attempt": 1, "status": "queued", "conclusion": None, "created": time.time(),
                    "jobs": {},
                }  # fmt: skip
            self._hook(run_id, "requested")
            threading.Thread(target=self._play, args=(run_id, jobs, 1), daemon=True).start()

    def status(self, repo: str, run_id: int) -> dict[str, Any] | None:
        """The run as `GET .../actions/runs/{id}` describes it now."""
        with self._lock:
            run = self.runs.get(run_id)
            if run is None or run["repo"].lower() != repo.lower():
                return None
            return self._run_obj(run_id, run)

    def runs_of(self, repo: str) -> list[dict[str, Any]]:
        with self._lock:
            found = [self._run_obj(i, r) for i, r in self.runs.items() if r["repo"].lower() == repo.lower()]
        return found[::-1]

    def jobs(self, repo: str, run_id: int, attempt: int) -> list[dict[str, Any]] | None:
        with self._lock:
            run = self.runs.get(run_id)
            if run is None or run["repo"].lower() != repo.lower() or attempt not in run["jobs"]:
                return None
            return [dict(job) for job in run["jobs"][attempt]]

    def rerun(self, repo: str, run_id: int) -> bool:
        """GitHub's rerun-failed-jobs: the run's failed jobs play again as the next attempt."""
        with self._lock:
            run = self.runs.get(run_id)
            if run is None or run["repo"].lower() != repo.lower() or run["status"] != "completed":
                return False
            run["attempt"] += 1
            run["status"], run["conclusion"] = "queued", None
            attempt, jobs = run["attempt"], run["rerun"]
        self._hook(run_id, "requested")
        threading.Thread(target=self._play, args=(run_id, jobs, attempt), daemon=True).start()
        return True

    @staticmethod
    def _run_obj(run_id: int, run: dict[str, Any]) -> dict[str, Any]:
        repository = _repository(run["repo"], run["repo_id"])  # who ran it, for the relay's inbound door
        return {
            "id": run_id, "name": run["workflow"], "display_title": run["title"], "event": "repository_dispatch",
            "status": run["status"], "conclusion": run["conclusion"], "run_attempt": run["attempt"],
            "html_url": f"https://github.com/{run['repo']}/actions/runs/{run_id}", "created_at": _iso(run["created"]),
            "path": ".github/workflows/crcr.yml", "head_branch": "main", "repository": repository,
            "head_repository": repository,
        }  # fmt: skip

    def _hook(self, run_id: int, action: str) -> None:
        with self._lock:
            run = self.runs[run_id]
            payload = {
                "action": action,
                "workflow_run": self._run_obj(run_id, run),
                "repository": _repository(run["repo"], run["repo_id"]),
                "installation": {"id": _ids(run["repo"])[0]},
            }
        if self.deliver is not None:
            self.deliver("workflow_run", payload)

    def _github_jobs(self, run_id: int, jobs: list[SandboxJob], attempt: int) -> list[dict[str, Any]]:
        """GitHub's record of the attempt's jobs, all in progress from now."""
        with self._lock:
            run = self.runs[run_id]
            made = []
            for job in jobs:
                self._next_job += 1
                made.append({
                    "id": self._next_job, "run_id": run_id, "run_attempt": attempt, "name": job.name,
                    "status": "in_progress", "conclusion": None, "started_at": _iso(time.time()),
                    "completed_at": None, "runner_name": "crcr-sandbox-runner",
                    "html_url": f"https://github.com/{run['repo']}/actions/runs/{run_id}/job/{self._next_job}",
                })  # fmt: skip
            run["jobs"][attempt] = made
            run["status"] = "in_progress"
            return made

    def _end(self, record: dict[str, Any], conclusion: str) -> None:
        with self._lock:
            record.update(status="completed", conclusion=conclusion, completed_at=_iso(time.time()))

    def _play(self, run_id: int, jobs: list[SandboxJob], attempt: int) -> None:
        run = self.runs[run_id]
        repo, repo_id, client_payload = run["repo"], run["repo_id"], run["payload"]
        ticket, url = client_payload.get("ticket"), client_payload.get("callback_url")
        if not ticket or not url:
            return
        base = {
            "schema_version": 1,
            "ticket": ticket,
            "workflow_name": run["workflow"],
            "run_id": run_id,
            "run_attempt": attempt,
            "url": f"https://github.com/{repo}/actions/runs/{run_id}",
        }
        time.sleep(self._queue_s)
        records = self._github_jobs(run_id, jobs, attempt)
        self._hook(run_id, "in_progress")
        for job in jobs:
            self._report(url, repo, repo_id, run_id, base | {"job_name": job.name, "status": "in_progress"}, attempt)
        time.sleep(self._run_s)
        for job, record in zip(jobs, records, strict=True):
            if job.finish:
                self._end(record, job.conclusion)
                self._report(url, repo, repo_id, run_id, base | {"job_name": job.name} | _completed(job), attempt)
        if not all(job.finish for job in jobs):
            time.sleep(self._lost_s)  # GitHub notices the lost runner and fails its job
            for job, record in zip(jobs, records, strict=True):
                if not job.finish:
                    self._end(record, "failure")
        with self._lock:
            failed = any(r["conclusion"] not in ("success", "skipped", "neutral") for r in records)
            run["status"], run["conclusion"] = "completed", "failure" if failed else "success"
        self._hook(run_id, "completed")

    def _report(self, url: str, repo: str, repo_id: int, run_id: int, body: dict[str, Any], attempt: int = 1) -> None:
        """One report as the callback action sends it: a 429, a 5xx or no answer is sent again (up to 5 times, after
        the answer's Retry-After when it gives one, capped at 5 s here); `replies` keeps the last answer and how many
        tries it took."""
        for tries in range(1, REPORT_TRIES + 1):
            token = self._mint(
                audience=self._audience, repository=repo, repository_id=repo_id, run_id=run_id, run_attempt=attempt
            )
            request = urllib.request.Request(  # noqa: S310 - the relay's own local callback URL
                url,
                data=json.dumps(body).encode(),
                method="POST",
                headers={"content-type": "application/json", "authorization": f"Bearer {token}"},
            )
            wait = float(tries)
            try:
                with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310
                    status, reply = resp.status, json.loads(resp.read() or b"{}")
            except urllib.error.HTTPError as exc:
                status, reply = exc.code, json.loads(exc.read() or b"{}")
                with contextlib.suppress(TypeError, ValueError):
                    wait = float(exc.headers.get("Retry-After") or wait)
            except OSError as exc:
                status, reply = 0, {"error": repr(exc)}
            if status not in (0, 429) and status < 500:
                break
            time.sleep(min(wait, 5.0))
        with self._lock:
            self.replies.append(
                {"repo": repo, "status": body["status"], "http": status, "reply": reply, "tries": tries}
            )


REPORT_TRIES = 5


class SandboxInstalls:
    """Where the sandbox's App is installed: the upstream, every repository the allowlist names (read again when its
    file changes, so a repository added while the stack runs is installed at once) and CRCR_SANDBOX_INSTALLED
    (`owner/repo` or `owner/*`, comma-separated): a repository onboarding would find on GitHub. Elsewhere the
    sandbox answers as GitHub does where the App is not installed."""

    def __init__(self, upstream: str, allowlist: str | None, option: str) -> None:
        from crcr.domain.ids import repo_key  # noqa: PLC0415

        self._key = repo_key
        self._fixed = {repo_key(upstream)} | {repo_key(r.strip()) for r in option.split(",") if r.strip()}
        self._path = Path(allowlist) if allowlist and not allowlist.startswith(("s3://", "github:")) else None
        self._mtime: float | None = None
        self._listed: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, repo: str) -> bool:
        key = self._key(repo)
        return key in self._fixed or f"{key.split('/')[0]}/*" in self._fixed or key in self._allowlisted()

    def _allowlisted(self) -> set[str]:
        from crcr.adapters.allowlist_source import parse_allowlist  # noqa: PLC0415
        from crcr.domain.errors import AllowlistError  # noqa: PLC0415

        if self._path is None:
            return set()
        with self._lock:
            try:
                mtime = self._path.stat().st_mtime
                if mtime != self._mtime:
                    self._listed = {e.key for e in parse_allowlist(self._path.read_bytes()).entries}
                    self._mtime = mtime
            except (OSError, AllowlistError):
                pass  # the last good list stays, as the relay keeps its last good allowlist
            return self._listed


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _completed(job: SandboxJob) -> dict[str, Any]:
    failed = len(job.failed_tests) or (1 if job.conclusion == "failure" and job.failure_kind == "test" else 0)
    body: dict[str, Any] = {
        "status": "completed",
        "conclusion": job.conclusion,
        "test_results": {"passed": 412 - failed, "failed": failed, "skipped": 9, "total": 421},
    }
    if job.failure_kind:
        body["failure_kind"] = job.failure_kind
    if job.failed_tests:
        body["failed_tests_detail"] = [
            {"name": name.rsplit("::", 1)[-1], "classname": name.rsplit("::", 1)[0], "message": "AssertionError"}
            for name in job.failed_tests
        ]
    return body
