"""Sandbox Buildkite for `crcr local` without CRCR_BUILDKITE_API_URL: create-build and list for the dispatcher, and
builds that report through the real /callback with Buildkite-agent-shaped OIDC tokens from a sandbox issuer."""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from crcr.local.sandbox import SandboxReply

# Organization and pipeline ids are UUIDs derived from their slugs in a fixed namespace: the same slug always has
# the same id, in every run and in examples/ci_providers.yml.
_NAMESPACE = uuid.UUID("6f1c3d2e-7a1b-4c5d-9e8f-0a1b2c3d4e5f")
_BUILDS = re.compile(r"^/v2/organizations/([a-z0-9-]+)/pipelines/([a-z0-9-]+)/builds$")


def organization_id(organization: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"organization:{organization}"))


def pipeline_id(organization: str, pipeline: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"pipeline:{organization}/{pipeline}"))


class SandboxBuildkite:
    def __init__(
        self,
        api_token: str,
        mint: Callable[[dict[str, Any]], str],
        audience: str,
        queue_s: float = 0.4,
        run_s: float = 0.8,
    ) -> None:
        self.api_token = api_token
        self._mint = mint
        self._audience = audience
        self._queue_s = queue_s
        self._run_s = run_s
        self._lock = threading.Lock()
        self._numbers: dict[tuple[str, str], int] = {}
        self.builds: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []

    def handle(self, method: str, path: str, query: str, auth: str, body: Any) -> SandboxReply:
        match = _BUILDS.match(path)
        if match is None:
            return SandboxReply(404, {"message": "Not Found"})
        if auth != f"Bearer {self.api_token}":
            return SandboxReply(401, {"message": "Authentication required. Please supply a valid API Access Token"})
        organization, pipeline = match.groups()
        if method == "GET":
            wanted = {
                k.removeprefix("meta_data[").removesuffix("]"): v
                for k, v in parse_qsl(query)
                if k.startswith("meta_data[")
            }
            with self._lock:
                found = [
                    b for b in self.builds
                    if b["pipeline"]["slug"] == pipeline and all(b["meta_data"].get(k) == v for k, v in wanted.items())
                ]  # fmt: skip
            return SandboxReply(200, found)
        if method != "POST":
            return SandboxReply(405, {"message": "Method not allowed"})
        if not isinstance(body, dict) or not body.get("commit") or not body.get("branch"):
            return SandboxReply(422, {"message": "Validation Failed", "errors": ["commit and branch are required"]})
        build = self._create(organization, pipeline, body)
        threading.Thread(target=self._run, args=(build,), daemon=True).start()
        return SandboxReply(201, build)

    def _create(self, organization: str, pipeline: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            number = self._numbers.get((organization, pipeline), 0) + 1
            self._numbers[(organization, pipeline)] = number
            web = f"https://buildkite.com/{organization}/{pipeline}/builds/{number}"
            build = {
                "id": str(uuid.uuid4()),
                "number": number,
                "url": f"https://api.buildkite.com/v2/organizations/{organization}/pipelines/{pipeline}/builds/{number}",
                "web_url": web,
                "state": "scheduled",
                "source": "api",
                "commit": body["commit"],
                "branch": body["branch"],
                "message": body.get("message", ""),
                "env": dict(body.get("env") or {}),
                "meta_data": dict(body.get("meta_data") or {}),
                "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "pipeline": {"slug": pipeline, "id": pipeline_id(organization, pipeline)},
                "organization": {"slug": organization, "id": organization_id(organization)},
            }
            self.builds.append(build)
        return build

    def _run(self, build: dict[str, Any]) -> None:
        """The build's one reporting job: in_progress, then completed, as the report helper would send them."""
        env = build["env"]
        ticket, url = env.get("CRCR_TICKET"), env.get("CRCR_CALLBACK_URL")
        if not ticket or not url:
            return
        job_id = str(uuid.uuid4())
        base = {
            "schema_version": 1,
            "ticket": ticket,
            "workflow_name": build["pipeline"]["slug"],
            "job_name": "test",
            "run_id": build["id"],
            "run_attempt": 1,
            "check_run_id": job_id,
            "url": build["web_url"],
        }
        time.sleep(self._queue_s)
        self._report(url, build, job_id, base | {"status": "in_progress"})
        time.sleep(self._run_s)
        results = {"test_results": {"passed": 88, "failed": 0, "skipped": 2, "total": 90}}
        self._report(url, build, job_id, base | {"status": "completed", "conclusion": "success"} | results)

    def _claims(self, build: dict[str, Any], job_id: str) -> dict[str, Any]:
        organization, pipeline = build["organization"]["slug"], build["pipeline"]["slug"]
        commit = "0" * 40 if build["commit"] == "HEAD" else build["commit"]
        ref = f"refs/heads/{build['branch']}"
        return {
            "aud": self._audience,
            "sub": f"organization:{organization}:pipeline:{pipeline}:ref:{ref}:commit:{commit}:step:test",
            "organization_slug": organization,
            "pipeline_slug": pipeline,
            "build_number": build["number"],
            "build_branch": build["branch"],
            "build_commit": commit,
            "step_key": "test",
            "job_id": job_id,
            "agent_id": str(uuid.uuid4()),
            "build_source": build["source"],
            "runner_environment": "self-hosted",
            "organization_id": build["organization"]["id"],  # as `--claim organization_id,pipeline_id` asks
            "pipeline_id": build["pipeline"]["id"],
        }

    def _report(self, url: str, build: dict[str, Any], job_id: str, body: dict[str, Any]) -> None:
        token = self._mint(self._claims(build, job_id))
        request = urllib.request.Request(  # noqa: S310 - the relay's own local callback URL
            url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"content-type": "application/json", "authorization": f"Bearer {token}"},
        )
        for _ in range(20):  # a report before the relay recorded its build answers 503: retry, as the helper does
            try:
                with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310
                    status, reply = resp.status, json.loads(resp.read() or b"{}")
            except urllib.error.HTTPError as exc:
                status, reply = exc.code, json.loads(exc.read() or b"{}")
            except OSError as exc:
                status, reply = 0, {"error": repr(exc)}
            if status not in (0, 429, 503):
                break
            time.sleep(0.5)
        with self._lock:
            self.replies.append(
                {"repo": build["pipeline"]["slug"], "status": body["status"], "http": status, "reply": reply}
            )


def new_api_token() -> str:
    return "bkua_" + secrets.token_hex(20)
