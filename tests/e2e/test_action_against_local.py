"""The report action, run as its composite step runs it, against the real relay on `crcr local`.

The relay dispatches a PR to the L2 repository (into the GitHub double); the test then plays that
repository's runner: GitHub's OIDC token endpoint (a tiny local server that mints tokens from the
independent issuer double, as `ACTIONS_ID_TOKEN_REQUEST_URL` does) and the composite step itself
(action.yml's `run:` line under bash, with the env action.yml's `env:` block sets from the inputs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import LISTED, ROOT, Relay, event_body
from tests.doubles.oidc_issuer import OidcIssuer

pytestmark = pytest.mark.e2e

ACTION_DIR = ROOT / "action"
REPO_IDS = {repo: 5000 + i for i, repo in enumerate(LISTED)}
L2 = "org-two/l2-repo"
L3 = "org-three/l3-repo"
AUDIENCE = "crcr"
REQUEST_TOKEN = "runner-request-token"  # ACTIONS_ID_TOKEN_REQUEST_TOKEN: what the runner gives a job
RUN_ID = 9_100_200_300
RUN_ATTEMPT = 2
WORKFLOW = "OOT L2 CI"
JOB = "build-and-test"
RESULTS = {"passed": 120, "failed": 0, "skipped": 3, "total": 123}


class TokenEndpoint:
    """GitHub's per-job OIDC token endpoint: `GET <url>&audience=<aud>` with `Authorization: bearer <request token>`.

    Answers `{"value": <JWT>}` for the job's own repository and run (`mint_for` can make it mint
    for another repository, to play a runner of the wrong repository). Anything malformed is a
    4xx, and recorded in `problems` so a test notices the script asked wrongly.
    """

    def __init__(self, issuer: OidcIssuer, repository: str, run_id: int, run_attempt: int) -> None:
        self.issuer = issuer
        self.mint_for = repository
        self.run_id = run_id
        self.run_attempt = run_attempt
        self.minted = 0
        self.problems: list[str] = []
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                status, body = endpoint._answer(self.path, self.headers.get("Authorization", ""))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/_apis/actionstoken/token?api-version=2.0"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()

    def _answer(self, raw_path: str, authorization: str) -> tuple[int, dict[str, Any]]:
        parts = urllib.parse.urlsplit(raw_path)
        query = urllib.parse.parse_qs(parts.query)
        with self._lock:
            if parts.path != "/_apis/actionstoken/token":
                self.problems.append(f"unexpected path {parts.path}")
                return 404, {"message": "not found"}
            scheme, _, credential = authorization.partition(" ")
            if scheme.lower() != "bearer" or credential != REQUEST_TOKEN:
                self.problems.append(f"bad Authorization {authorization!r}")
                return 401, {"message": "bad request token"}
            if query.get("api-version") != ["2.0"] or query.get("audience") != [AUDIENCE]:
                self.problems.append(f"bad query {query!r}")
                return 400, {"message": "bad query"}
            self.minted += 1
            repo = self.mint_for
        token = self.issuer.token(
            repository=repo,
            repository_id=REPO_IDS[repo],
            run_id=self.run_id,
            run_attempt=self.run_attempt,
            job_workflow_ref=f"{repo}/.github/workflows/crcr.yml@refs/heads/main",
            audience=query["audience"][0],
            workflow=WORKFLOW,
        )
        return 200, {"count": 1, "value": token}

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2)


@dataclass
class Step:
    code: int
    stdout: str
    stderr: str
    outputs: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


CHECK_RUN_ID = 51725241954  # what GitHub would put in job.check_run_id for the running job


def resolve_inputs(inputs: dict[str, str], context: dict[str, str]) -> dict[str, str]:
    """Each input's value as the runner computes it: given, else action.yml's default (expressions from `context`)."""
    action = yaml.safe_load((ACTION_DIR / "action.yml").read_text())
    unknown = set(inputs) - set(action["inputs"])
    assert not unknown, f"action.yml has no inputs {unknown}"
    values: dict[str, str] = {}
    for name, spec in action["inputs"].items():
        value = inputs.get(name, str(spec.get("default", "")))
        if value.startswith("${{"):
            value = context[value]
        values[name] = value
    return values


def run_step(tmp_path: Path, endpoint: TokenEndpoint, client_payload: dict[str, Any], **inputs: str) -> Step:
    """The composite step exactly as the runner executes it: its `env:` block, then its `run:` line under bash."""
    action = yaml.safe_load((ACTION_DIR / "action.yml").read_text())
    [step] = action["runs"]["steps"]
    assert step["shell"] == "bash"
    context = {
        "${{ toJSON(github.event.client_payload) }}": json.dumps(client_payload, indent=2),
        "${{ github.workflow }}": WORKFLOW,
        "${{ github.job }}": "report",
        "${{ job.check_run_id }}": str(CHECK_RUN_ID),
    }
    values = resolve_inputs(inputs, context)
    step_env: dict[str, str] = {}
    for name, expression in step["env"].items():
        if expression.startswith("${{ inputs."):
            step_env[name] = values[expression.removeprefix("${{ inputs.").removesuffix(" }}")]
        else:
            step_env[name] = context[expression]
    outputs = tmp_path / f"github_output-{uuid.uuid4().hex}"
    outputs.write_text("")
    script = tmp_path / f"step-{uuid.uuid4().hex}.sh"
    script.write_text(step["run"] + "\n")
    runner_env = {
        # python3 on the runner: the interpreter running the tests (its directory first on PATH).
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GITHUB_ACTIONS": "true",
        "GITHUB_ACTION_PATH": str(ACTION_DIR),
        "GITHUB_EVENT_NAME": "repository_dispatch",
        "GITHUB_WORKFLOW": WORKFLOW,
        "GITHUB_JOB": "report",
        "GITHUB_RUN_ID": str(RUN_ID),
        "GITHUB_RUN_ATTEMPT": str(RUN_ATTEMPT),
        "GITHUB_REPOSITORY": L2,
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_OUTPUT": str(outputs),
        "ACTIONS_ID_TOKEN_REQUEST_URL": endpoint.url,
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
        "CRCR_REPORT_BACKOFF_BASE_S": "0.01",
    }
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],  # GitHub's `shell: bash`
        env=runner_env | step_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    return Step(done.returncode, done.stdout, done.stderr, outputs.read_text())


@dataclass
class Downstream:
    relay: Relay
    endpoint: TokenEndpoint
    delivery: str
    head_sha: str
    pr: int
    client_payload: dict[str, Any]
    tmp_path: Path
    steps: list[Step] = field(default_factory=list)

    def report(self, **inputs: str) -> Step:
        step = run_step(self.tmp_path, self.endpoint, self.client_payload, **inputs)
        self.steps.append(step)
        return step

    def jobs(self) -> list[dict[str, Any]]:
        ddb = self.relay.stack.client("dynamodb")
        items = ddb.scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
        return [{k: next(iter(v.values())) for k, v in item.items()} for item in items]


@pytest.fixture
def issuer() -> Iterator[OidcIssuer]:
    with OidcIssuer() as double:
        yield double


@pytest.fixture
def downstream(relay_factory: Callable[..., Relay], issuer: OidcIssuer, tmp_path: Path) -> Iterator[Downstream]:
    relay = relay_factory(env={"CRCR_OIDC_ISSUER": issuer.url, "CRCR_OIDC_AUDIENCE": AUDIENCE})
    delivery = str(uuid.uuid4())
    body = event_body("pull_request.opened.json")
    status, reply = relay.post("pull_request", body, delivery)
    assert status == 202, reply
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    [dispatch] = relay.github.dispatches(L2)
    event = json.loads(body)
    endpoint = TokenEndpoint(issuer, L2, RUN_ID, RUN_ATTEMPT)
    try:
        yield Downstream(
            relay,
            endpoint,
            delivery,
            event["pull_request"]["head"]["sha"],
            event["pull_request"]["number"],
            dispatch["client_payload"],
            tmp_path,
        )
    finally:
        endpoint.stop()
    assert endpoint.problems == []


def test_the_client_payload_points_the_action_at_this_relay(downstream: Downstream) -> None:
    payload = downstream.client_payload
    assert payload["callback_url"] == f"{downstream.relay.url}/callback"
    assert payload["callback_url"].startswith("http://127.0.0.1:")
    assert isinstance(payload["ticket"], str) and payload["ticket"].count(".") == 2


def test_the_action_reports_a_job_and_the_relay_records_it(downstream: Downstream) -> None:
    d = downstream
    common = {"job-name": JOB, "relay-url": d.relay.url}

    started = d.report(status="in_progress", **common)
    assert started.code == 0, started.output
    assert "crcr: relay answered recorded" in started.stdout
    assert started.outputs == "relay-status=recorded\n"
    [job] = d.jobs()
    assert job["state"] == "in_progress"

    done = d.report(status="completed", conclusion="success", **{"test-results": json.dumps(RESULTS)}, **common)
    assert done.code == 0, done.output
    assert "crcr: relay answered recorded" in done.stdout
    assert "::notice title=crcr report::reported completed/success for build-and-test: recorded" in done.stdout
    assert done.outputs == "relay-status=recorded\n"

    again = d.report(status="completed", conclusion="success", **{"test-results": json.dumps(RESULTS)}, **common)
    assert again.code == 0, again.output
    assert "crcr: relay answered duplicate" in again.stdout
    assert again.outputs == "relay-status=duplicate\n"

    # One fresh token per POST (no retries were needed), each announced masked before use.
    assert d.endpoint.minted == 3
    for step in d.steps:
        assert step.stdout.count("::add-mask::") == 1
        assert "attempt 1 failed" not in step.stderr

    [job] = d.jobs()
    assert (job["state"], job["conclusion"]) == ("completed", "success")
    assert (job["repo"], job["repo_id"], job["level"]) == (L2, str(REPO_IDS[L2]), "2")
    assert (job["delivery_id"], job["head_sha"], job["pr"]) == (d.delivery, d.head_sha, str(d.pr))
    assert (job["run_id"], job["run_attempt"], job["job_name"]) == (str(RUN_ID), str(RUN_ATTEMPT), JOB)
    assert job["workflow_name"] == WORKFLOW
    # A reporting job names another job, so it sends no check-run id of its own: one per attempt is derived.
    assert job["check_run_id"] == f"crcr-{RUN_ID}-{RUN_ATTEMPT}"
    assert job["url"] == f"https://github.com/{L2}/actions/runs/{RUN_ID}"
    assert float(job["started_at"]) <= float(job["completed_at"])
    sent = json.loads(job["callback_payload"])  # what the action sent, kept verbatim less its ticket
    assert sent["test_results"] == RESULTS and "ticket" not in sent


def test_a_token_for_another_repository_is_refused_and_the_step_fails(downstream: Downstream) -> None:
    d = downstream
    d.endpoint.mint_for = L3  # a runner of the L3 repository presenting the L2 dispatch's ticket

    step = d.report(status="in_progress", **{"job-name": JOB})

    assert step.code == 1, step.output
    assert "relay rejected the report: HTTP 403 forbidden" in step.stderr
    assert "(field: ticket)" in step.stderr
    assert "::error title=crcr report::relay rejected the report: HTTP 403 forbidden" in step.stdout
    assert "relay answered" not in step.stdout
    assert step.outputs == ""
    assert d.endpoint.minted == 1  # a 403 is final: no retry
    assert d.jobs() == []
