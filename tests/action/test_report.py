"""The report action's script, run as a subprocess against a local OIDC token endpoint and relay callback."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "action" / "report.py"
REQUEST_TOKEN = "request-token-from-the-runner"
TICKET = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJvcmcvZG93bnN0cmVhbSJ9.c2ln"
NOT_DISPATCHED = "this job was not started by a crcr dispatch"


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


class FakeGitHubAndRelay:
    """Plays the runner's OIDC token endpoint (GET /token) and the relay's POST /callback."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.replies: list[Reply] = []
        self.minted = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urllib.parse.urlsplit(self.path)
                seen = Seen(
                    self.command,
                    parts.path,
                    urllib.parse.parse_qs(parts.query),
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                    time.monotonic(),
                )
                with fake._lock:
                    fake.seen.append(seen)
                    reply = fake._answer(seen)
                data = b"" if reply.body is None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _handle
            do_POST = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _answer(self, seen: Seen) -> Reply:
        if seen.path == "/token":
            if seen.method != "GET" or seen.headers.get("authorization") != f"bearer {REQUEST_TOKEN}":
                return Reply(401, {"message": "bad request token"})
            self.minted += 1
            return Reply(200, {"value": f"oidc-token-{self.minted}"})
        if seen.path == "/callback":
            return self.replies.pop(0) if self.replies else Reply(200, {"status": "recorded"})
        return Reply(404, {"error": "not_found"})

    def reply(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def requests(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    def __enter__(self) -> FakeGitHubAndRelay:
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeGitHubAndRelay]:
    with FakeGitHubAndRelay() as server:
        yield server


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    outputs: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def client_payload(callback_url: str, **changes: Any) -> dict[str, Any]:
    payload = {
        "event_type": "pull_request",
        "delivery_id": "5b7c0d2e-0000-4000-8000-000000000001",
        "payload": {"pull_request": {"number": 7, "head": {"sha": "a" * 40}}},
        "ticket": TICKET,
        "callback_url": callback_url,
    }
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not None}


def run_report(fake: FakeGitHubAndRelay, tmp_path: Path, **env: str | None) -> Run:
    """Runs report.py the way action.yml does, with a job's environment and the given inputs."""
    outputs = tmp_path / "github_output"
    outputs.write_text("")
    base = {
        "PATH": os.environ.get("PATH", ""),
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": "repository_dispatch",
        "GITHUB_WORKFLOW": "crcr downstream",
        "GITHUB_JOB": "report-start",
        "GITHUB_RUN_ID": "4242",
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "org/downstream",
        "GITHUB_OUTPUT": str(outputs),
        "ACTIONS_ID_TOKEN_REQUEST_URL": f"{fake.url}/token?api-version=2.0",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
        "CRCR_STATUS": "in_progress",
        "CRCR_CONCLUSION": "",
        "CRCR_AUDIENCE": "crcr",
        "CRCR_CLIENT_PAYLOAD": json.dumps(client_payload(f"{fake.url}/callback")),
        "CRCR_WORKFLOW_NAME": "",
        "CRCR_JOB_NAME": "build-and-test",
        "CRCR_REPORT_BACKOFF_BASE_S": "0.001",
    }
    merged = {k: v for k, v in {**base, **env}.items() if v is not None}
    done = subprocess.run(
        [sys.executable, str(REPORT)], env=merged, capture_output=True, text=True, timeout=60, check=False
    )
    return Run(done.returncode, done.stdout, done.stderr, outputs.read_text())


def load_report_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crcr_report_action", REPORT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reports_in_progress_with_the_exact_body_and_a_minted_token(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    run = run_report(fake, tmp_path)

    assert run.code == 0, run.output
    [token_request] = fake.requests("/token")
    assert token_request.method == "GET"
    assert token_request.query == {"api-version": ["2.0"], "audience": ["crcr"]}
    assert token_request.headers["authorization"] == f"bearer {REQUEST_TOKEN}"
    [callback] = fake.requests("/callback")
    assert callback.method == "POST"
    assert callback.headers["authorization"] == "Bearer oidc-token-1"
    assert callback.headers["content-type"] == "application/json"
    body = callback.json()
    assert body == {
        "schema_version": 1,
        "ticket": TICKET,
        "status": "in_progress",
        "workflow_name": "crcr downstream",
        "job_name": "build-and-test",
        "run_id": 4242,
        "run_attempt": 2,
        "url": "https://github.com/org/downstream/actions/runs/4242",
    }
    assert type(body["run_id"]) is int and type(body["run_attempt"]) is int
    assert "::add-mask::oidc-token-1" in run.stdout
    assert "::notice title=crcr report::reported in_progress for build-and-test: recorded" in run.stdout
    assert run.outputs == "relay-status=recorded\n"


def test_reports_completed_with_every_optional_field(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    summary = "## Results\n\n| suite | passed |\n|---|---|\n| ops | 120 |\n"
    run = run_report(
        fake,
        tmp_path,
        CRCR_STATUS="completed",
        CRCR_CONCLUSION="failure",
        CRCR_AUDIENCE="https://relay.example.com",
        CRCR_WORKFLOW_NAME="xpu nightly",
        CRCR_JOB_NAME="build (xpu)",
        CRCR_TEST_RESULTS='{"passed": 120, "failed": 3, "skipped": 7, "total": 130}',
        CRCR_ARTIFACT_URL="https://github.com/org/downstream/actions/runs/4242/artifacts/1",
        CRCR_SUMMARY=summary,
        CRCR_STARTED_AT="2026-11-29T20:00:00Z",
        CRCR_COMPLETED_AT="2026-11-29T20:41:07.123+00:00",
    )

    assert run.code == 0, run.output
    assert fake.requests("/token")[0].query["audience"] == ["https://relay.example.com"]
    assert fake.requests("/callback")[0].json() == {
        "schema_version": 1,
        "ticket": TICKET,
        "status": "completed",
        "conclusion": "failure",
        "workflow_name": "xpu nightly",
        "job_name": "build (xpu)",
        "run_id": 4242,
        "run_attempt": 2,
        "url": "https://github.com/org/downstream/actions/runs/4242",
        "started_at": "2026-11-29T20:00:00Z",
        "completed_at": "2026-11-29T20:41:07.123+00:00",
        "test_results": {"passed": 120, "failed": 3, "skipped": 7, "total": 130},
        "artifact_url": "https://github.com/org/downstream/actions/runs/4242/artifacts/1",
        "summary": summary,
    }


def test_job_name_defaults_to_the_running_job(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    run = run_report(fake, tmp_path, CRCR_JOB_NAME="")

    assert run.code == 0, run.output
    assert fake.requests("/callback")[0].json()["job_name"] == "report-start"


def test_check_run_id_is_the_reported_jobs_own_never_the_reporting_jobs(
    fake: FakeGitHubAndRelay, tmp_path: Path
) -> None:
    # Reporting itself: the job's own job.check_run_id goes along.
    assert run_report(fake, tmp_path, CRCR_JOB_NAME="", CRCR_OWN_CHECK_RUN_ID="51725241954").code == 0
    # A separate reporting job names another job: its own id would be that job's, so none is sent ...
    assert run_report(fake, tmp_path, CRCR_OWN_CHECK_RUN_ID="51725241954").code == 0
    # ... unless the reported job's id is passed in.
    assert run_report(fake, tmp_path, CRCR_CHECK_RUN_ID="51725249999", CRCR_OWN_CHECK_RUN_ID="1").code == 0
    sent = [r.json().get("check_run_id") for r in fake.requests("/callback")]
    assert sent == ["51725241954", None, "51725249999"]
    bad = run_report(fake, tmp_path, CRCR_CHECK_RUN_ID="12/34")
    assert bad.code == 1 and "`check-run-id` must be" in bad.stderr


def test_429_is_retried_after_retry_after_with_a_fresh_token(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    fake.reply(Reply(429, {"error": "rate_limited"}, {"Retry-After": "1"}), Reply(200, {"status": "recorded"}))

    run = run_report(fake, tmp_path)

    assert run.code == 0, run.output
    first, second = fake.requests("/callback")
    assert second.at - first.at >= 0.9  # the backoff base is 1 ms: only Retry-After explains the wait
    assert first.body == second.body
    assert [c.headers["authorization"] for c in (first, second)] == ["Bearer oidc-token-1", "Bearer oidc-token-2"]
    assert len(fake.requests("/token")) == 2
    assert "retrying" in run.stderr


def test_503_twice_then_200_succeeds(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    fake.reply(Reply(503, {"error": "unavailable"}), Reply(503), Reply(200, {"status": "recorded"}))

    run = run_report(fake, tmp_path)

    assert run.code == 0, run.output
    callbacks = fake.requests("/callback")
    assert len(callbacks) == 3
    assert len({c.body for c in callbacks}) == 1
    assert run.outputs == "relay-status=recorded\n"


def test_gives_up_after_six_attempts(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    fake.reply(*[Reply(502, {"error": "bad_gateway"})] * 10)

    run = run_report(fake, tmp_path)

    assert run.code == 1
    assert len(fake.requests("/callback")) == 6
    assert "gave up after 6 attempts" in run.output
    assert "::error title=crcr report::" in run.stdout


def test_an_unreachable_relay_is_retried_then_fails(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]

    run = run_report(
        fake,
        tmp_path,
        CRCR_CLIENT_PAYLOAD=json.dumps(client_payload(f"http://127.0.0.1:{closed_port}/callback")),
    )

    assert run.code == 1
    assert "could not reach the relay" in run.output
    assert len(fake.requests("/token")) == 6


def test_400_fails_at_once_with_the_relays_reason(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    fake.reply(Reply(400, {"error": "bad_request", "message": "conclusion is required", "field": "conclusion"}))

    run = run_report(fake, tmp_path)

    assert run.code == 1
    assert len(fake.requests("/callback")) == 1
    assert "HTTP 400 bad_request conclusion is required (field: conclusion)" in run.stderr
    [annotation] = [line for line in run.stdout.splitlines() if line.startswith("::error")]
    assert "bad_request" in annotation and "field: conclusion" in annotation


@pytest.mark.parametrize(("status", "hint"), [(401, "CRCR_OIDC_AUDIENCE"), (403, "allowlist"), (409, "different")])
def test_other_4xx_fail_without_retry_and_say_why(
    fake: FakeGitHubAndRelay, tmp_path: Path, status: int, hint: str
) -> None:
    fake.reply(Reply(status, {"error": "rejected", "message": "no"}))

    run = run_report(fake, tmp_path)

    assert run.code == 1
    assert len(fake.requests("/callback")) == 1
    assert f"HTTP {status} rejected no" in run.stderr
    assert hint in run.stderr


def test_an_annotation_stays_on_one_line(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    fake.reply(Reply(400, {"error": "bad_request", "message": "line one\nline two 100%"}))

    run = run_report(fake, tmp_path)

    [annotation] = [line for line in run.stdout.splitlines() if line.startswith("::error")]
    assert "line one%0Aline two 100%25" in annotation


@pytest.mark.parametrize("relay_status", ["duplicate", "ignored"])
def test_duplicate_and_ignored_answers_succeed(fake: FakeGitHubAndRelay, tmp_path: Path, relay_status: str) -> None:
    fake.reply(Reply(200, {"status": relay_status}))

    run = run_report(fake, tmp_path)

    assert run.code == 0, run.output
    assert f"relay answered {relay_status}" in run.stdout
    assert run.outputs == f"relay-status={relay_status}\n"


def test_a_redirect_is_not_followed_with_the_token(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    fake.reply(Reply(307, None, {"Location": f"{fake.url}/elsewhere"}))

    run = run_report(fake, tmp_path)

    assert run.code == 1
    assert "HTTP 307" in run.output
    assert fake.requests("/elsewhere") == []


@pytest.mark.parametrize(
    "payload",
    [
        None,  # toJSON(github.event.client_payload) on an event without one
        {"event_type": "pull_request", "delivery_id": "d", "payload": {}},  # PyTorch's relay: no ticket
        {"ticket": TICKET},
        {"ticket": "", "callback_url": "https://relay.example.com/callback"},
    ],
)
def test_a_job_without_a_crcr_dispatch_fails_clearly(
    fake: FakeGitHubAndRelay, tmp_path: Path, payload: dict[str, Any] | None
) -> None:
    run = run_report(fake, tmp_path, GITHUB_EVENT_NAME="push", CRCR_CLIENT_PAYLOAD=json.dumps(payload))

    assert run.code == 1
    assert NOT_DISPATCHED in run.stderr
    assert fake.seen == []


@pytest.mark.parametrize(
    "callback_url",
    [
        "http://relay.example.com/callback",
        "http://10.0.0.8:8080/callback",
        "http://127.0.0.1.nip.io/callback",
        "ftp://127.0.0.1/callback",
        "file:///etc/passwd",
        "https://user:secret@relay.example.com/callback",
        "https:///callback",
    ],
)
def test_an_unsafe_callback_url_is_refused_before_a_token_is_minted(
    fake: FakeGitHubAndRelay, tmp_path: Path, callback_url: str
) -> None:
    run = run_report(fake, tmp_path, CRCR_CLIENT_PAYLOAD=json.dumps(client_payload(callback_url)))

    assert run.code == 1
    assert "refusing callback_url" in run.stderr
    assert fake.seen == []


def test_relay_url_pins_where_the_token_may_go(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    refused = run_report(fake, tmp_path, CRCR_RELAY_URL="https://crcr.example.com")
    accepted = run_report(fake, tmp_path, CRCR_RELAY_URL=f"{fake.url}/")

    assert refused.code == 1
    assert "not on the relay this workflow trusts" in refused.stderr
    assert accepted.code == 0, accepted.output
    assert len(fake.requests("/callback")) == 1


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9/callback", "http://localhost/callback", "http://[::1]:8000/callback", "https://relay.example"],
)
def test_loopback_http_and_any_https_callback_urls_are_allowed(url: str) -> None:
    assert load_report_module().check_callback_url(url, "") == url


def test_missing_oidc_permission_names_the_fix(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    run = run_report(fake, tmp_path, ACTIONS_ID_TOKEN_REQUEST_URL=None, ACTIONS_ID_TOKEN_REQUEST_TOKEN=None)

    assert run.code == 1
    assert "permissions: id-token: write" in run.stderr
    assert fake.seen == []


def test_a_token_endpoint_refusal_fails_without_calling_the_relay(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    run = run_report(fake, tmp_path, ACTIONS_ID_TOKEN_REQUEST_TOKEN="stale")

    assert run.code == 1
    assert "could not get an OIDC token: HTTP 401" in run.stderr
    assert fake.requests("/callback") == []


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"CRCR_STATUS": "done"}, "`status` must be one of in_progress, completed"),
        ({"CRCR_STATUS": "completed"}, "`conclusion` is required when status is completed"),
        ({"CRCR_CONCLUSION": "success"}, "`conclusion` is only allowed when status is completed"),
        ({"CRCR_STATUS": "completed", "CRCR_CONCLUSION": "stale"}, "`conclusion` must be one of"),
        ({"CRCR_AUDIENCE": ""}, "`audience` must not be empty"),
        ({"CRCR_TEST_RESULTS": "passed=3"}, "`test-results` is not JSON"),
        ({"CRCR_TEST_RESULTS": '{"passed": 1, "failed": 0, "total": 1}'}, "missing: skipped"),
        ({"CRCR_TEST_RESULTS": '{"passed": 1, "failed": 0, "skipped": 0, "total": 1, "x": 1}'}, "unknown: x"),
        ({"CRCR_TEST_RESULTS": '{"passed": -1, "failed": 0, "skipped": 0, "total": 1}'}, "`test-results.passed`"),
        ({"CRCR_TEST_RESULTS": '{"passed": true, "failed": 0, "skipped": 0, "total": 1}'}, "`test-results.passed`"),
        ({"CRCR_TEST_RESULTS": '{"passed": "1", "failed": 0, "skipped": 0, "total": 1}'}, "`test-results.passed`"),
        ({"CRCR_TEST_RESULTS": "[1, 2]"}, "must be a JSON object"),
        ({"CRCR_STARTED_AT": "yesterday"}, "`started-at` must be an ISO 8601 timestamp"),
        ({"CRCR_COMPLETED_AT": "2026-11-29T20:00:00"}, "`completed-at` must carry a time zone"),
        ({"CRCR_ARTIFACT_URL": "javascript:alert(1)"}, "`artifact-url` must be an http(s) URL"),
        ({"GITHUB_RUN_ID": ""}, "$GITHUB_RUN_ID is '', not a number"),
        ({"GITHUB_RUN_ATTEMPT": "first"}, "$GITHUB_RUN_ATTEMPT is 'first', not a number"),
        ({"CRCR_REPORT_BACKOFF_BASE_S": "fast"}, "CRCR_REPORT_BACKOFF_BASE_S must be a number"),
    ],
)
def test_bad_inputs_fail_early_without_network(
    fake: FakeGitHubAndRelay, tmp_path: Path, inputs: dict[str, str], message: str
) -> None:
    run = run_report(fake, tmp_path, **inputs)

    assert run.code == 1
    assert message in run.stderr
    assert fake.requests("/callback") == []


def test_an_oversize_summary_is_cut_to_the_check_run_limit(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    run = run_report(fake, tmp_path, CRCR_SUMMARY="x" * 70_000)

    assert run.code == 0, run.output
    summary = fake.requests("/callback")[0].json()["summary"]
    assert len(summary) == 65_535
    assert summary.endswith("(truncated by the crcr report action)")
    assert "::warning title=crcr report::" in run.stdout


def test_a_summary_is_sent_as_utf8_and_cut_to_the_relays_body_limit(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    # A value over 128 KiB cannot even pass through env (Linux's MAX_ARG_STRLEN), so the overflow to
    # provoke is JSON escaping: each control character costs 6 bytes of body.
    run = run_report(fake, tmp_path, CRCR_SUMMARY="测试" * 20_000)

    assert run.code == 0, run.output
    [callback] = fake.requests("/callback")
    assert callback.body.count("测试".encode()) == 20_000  # UTF-8, not \\u escapes that triple its size
    assert "::warning" not in run.stdout

    run = run_report(fake, tmp_path, CRCR_SUMMARY="\x01" * 45_000)

    assert run.code == 0, run.output
    last = fake.requests("/callback")[-1]
    assert 250 * 1024 < len(last.body) <= 255 * 1024
    assert last.json()["summary"].endswith("(truncated by the crcr report action)")
    assert "::warning title=crcr report::" in run.stdout


def test_the_script_parses_as_python_3_9() -> None:
    # Runners' python3 may be 3.9; ruff's target-version for action/ keeps newer idioms out as well.
    ast.parse(REPORT.read_text(), filename=str(REPORT), feature_version=(3, 9))


def test_relay_text_cannot_forge_workflow_commands(fake: FakeGitHubAndRelay, tmp_path: Path) -> None:
    fake.reply(Reply(200, {"status": "recorded\n::add-mask::x\nother=1"}))

    run = run_report(fake, tmp_path)

    assert run.code == 0, run.output
    assert run.outputs == "relay-status=recorded___add-mask__x_other_1\n"
    assert not any(line.startswith("::add-mask::x") for line in run.stdout.splitlines())
