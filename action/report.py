"""crcr report helper: POSTs a downstream job's status to the relay's /callback, run by action.yml on a GitHub
Actions runner or as a command step of a Buildkite pipeline (detected by BUILDKITE=true).

Standard library only and Python >= 3.9, because it runs on whatever python3 the runner or agent has (self-hosted
hardware included). Every input arrives through the environment (see action.yml, and action/README.md for
Buildkite), never spliced into a shell line. Retrying is safe: the relay answers a same-state re-delivery
`200 duplicate` (docs/contracts.md).
"""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime
from email.message import Message
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("in_progress", "completed")
CONCLUSIONS = ("success", "failure", "cancelled", "skipped", "timed_out", "neutral", "action_required")
TEST_RESULT_KEYS = ("passed", "failed", "skipped", "total")
MAX_ATTEMPTS = 6
# 6 attempts with base 2 s sleep at most 2+4+8+16+32 = 62 s; a long Retry-After may stretch it to this.
MAX_TOTAL_WAIT_S = 120.0
REQUEST_TIMEOUT_S = 20.0
# The summary ends up in an upstream check run, whose output.summary GitHub caps at 65,535 characters.
SUMMARY_LIMIT = 65_535
SUMMARY_TRUNCATED = "\n\n… (truncated by the crcr report action)"
# The relay answers 413 above 256 KiB of body; 65,535 characters of non-ASCII markdown can exceed that.
MAX_BODY_BYTES = 256 * 1024 - 1024
USER_AGENT = "crcr-report-action/1"
NOT_DISPATCHED = "this job was not started by a crcr dispatch"
NOT_DISPATCHED_BUILD = "this build was not created by a crcr dispatch"
# Buildkite: tokens come from the agent. The relay maps organization_id/pipeline_id (immutable UUIDs, optional
# claims Buildkite adds only when asked) to the repository, so every token asks for them.
BUILDKITE_AGENT = "buildkite-agent"
BUILDKITE_CLAIMS = "organization_id,pipeline_id"
BUILDKITE_DEFAULT_AUDIENCE = "crcr"
AGENT_REFUSED = 77  # buildkite-agent's exit status when the API positively refused (400, 401, 403, 404, 410, 422)
AGENT_TIMEOUT_S = 120.0  # the agent retries its own API calls (5 attempts from 2 s) before it gives up
# `buildkite-agent step get outcome`: neutral, passed, soft_failed, hard_failed, errored. A soft failure is one
# the pipeline declared acceptable (the step shows as passed), so it is no verdict either way: neutral.
OUTCOMES = {
    "passed": "success",
    "soft_failed": "neutral",
    "hard_failed": "failure",
    "errored": "failure",
    "neutral": "neutral",
}
_BUILD_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
# The action's inputs, which a Buildkite step sets as CRCR_<NAME> variables (the names errors use there).
INPUTS = (
    "status",
    "conclusion",
    "audience",
    "client-payload",
    "relay-url",
    "workflow-name",
    "job-name",
    "check-run-id",
    "test-results",
    "artifact-url",
    "summary",
    "started-at",
    "completed-at",
)
HINTS = {
    401: "the relay could not verify the OIDC token or the ticket: check that `audience` matches the relay's "
    "CRCR_OIDC_AUDIENCE and that the dispatch's ticket has not expired",
    403: "the relay's allowlist does not admit this repository or workflow (see `workflows` in its allowlist)",
    409: "the relay already holds a different result for this job, run and attempt",
    413: "the report is too large: shorten `summary`",
}


class ReportError(Exception):
    """A failure to show the user as it is; the step exits 1."""


class Transient(Exception):
    """A failure worth another attempt (connection trouble, 429, 5xx)."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the bearer token to another URL (or drop the POST body): treat it as an answer."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_NoRedirect())


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def annotate(level: str, message: str) -> None:
    """One-line workflow command (::error:: / ::notice:: / ::warning::), shown on the run's summary page."""
    print(f"::{level} title=crcr report::{_escape_data(message)}", flush=True)


def log(message: str) -> None:
    # One line, so text the relay sent can never start a line of its own (a workflow command).
    print(f"crcr: {message}".replace("\r", "\\r").replace("\n", "\\n"), file=sys.stderr, flush=True)


def _get(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin(parts: urllib.parse.SplitResult) -> tuple[str, str, int | None]:
    default = {"https": 443, "http": 80}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def check_callback_url(url: str, relay_url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError on a malformed port
    except ValueError as exc:
        raise ReportError(f"refusing callback_url {url!r}: {exc}") from None
    host = parts.hostname or ""
    if not host:
        raise ReportError(f"refusing callback_url {url!r}: it has no host")
    if parts.username is not None or parts.password is not None:
        raise ReportError(f"refusing callback_url {url!r}: credentials in a URL are not allowed")
    if parts.scheme != "https" and not (parts.scheme == "http" and _is_loopback(host)):
        raise ReportError(
            f"refusing callback_url {url!r}: the OIDC token is only sent over https "
            "(plain http only to a loopback host: 127.0.0.1, localhost, ::1)"
        )
    if relay_url:
        pinned = urllib.parse.urlsplit(relay_url)
        if _origin(parts) != _origin(pinned):
            raise ReportError(
                f"refusing callback_url {url!r}: it is not on the relay this workflow trusts "
                f"(`relay-url` {relay_url!r}); the dispatch did not come from that relay"
            )
    return url


def _check_run_id(env: Mapping[str, str], job_name: str) -> str:
    """The reported job's check-run id (unique per job attempt; PyTorch's HUD keys rows with it): as given,
    else this job's own when it reports itself. A separate reporting job sends none: the relay then
    derives one per attempt, since its own id would name the wrong job."""
    given = _get(env, "CRCR_CHECK_RUN_ID")
    if not given and job_name == _get(env, "GITHUB_JOB"):
        given = _get(env, "CRCR_OWN_CHECK_RUN_ID")
    if given and not re.fullmatch(r"[1-9][0-9]{0,18}", given):
        raise ReportError(f"`check-run-id` must be a job's numeric check-run id, got {given!r}")
    return given


def _timestamp(name: str, value: str) -> str:
    # Python 3.9's fromisoformat knows neither "Z" nor arbitrary fraction lengths; only validate, send as given.
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    if "." in text:
        head, _, rest = text.partition(".")
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:digits][:6].ljust(6, '0')}{rest[digits:]}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ReportError(
            f"`{name}` must be an ISO 8601 timestamp such as 2026-01-31T12:00:00Z, got {value!r}"
        ) from None
    if parsed.tzinfo is None:
        raise ReportError(f"`{name}` must carry a time zone (e.g. a trailing Z), got {value!r}")
    return value


def _test_results(value: str) -> dict[str, int]:
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise ReportError(f"`test-results` is not JSON ({exc}): {value[:200]!r}") from None
    if not isinstance(data, dict):
        raise ReportError("`test-results` must be a JSON object {passed, failed, skipped, total}")
    missing = [k for k in TEST_RESULT_KEYS if k not in data]
    extra = sorted(k for k in data if k not in TEST_RESULT_KEYS)
    if missing or extra:
        raise ReportError(
            f"`test-results` must have exactly the keys passed, failed, skipped, total (missing: "
            f"{', '.join(missing) or 'none'}; unknown: {', '.join(extra) or 'none'})"
        )
    for key in TEST_RESULT_KEYS:
        count = data[key]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ReportError(f"`test-results.{key}` must be a whole number >= 0, got {count!r}")
    return {k: data[k] for k in TEST_RESULT_KEYS}


def _int_env(env: Mapping[str, str], name: str) -> int:
    value = _get(env, name)
    try:
        number = int(value)
    except ValueError:
        raise ReportError(
            f"${name} is {value!r}, not a number: this script runs only inside a GitHub Actions job"
        ) from None
    if number < 1:
        raise ReportError(f"${name} must be positive, got {number}")
    return number


def _client_payload(env: Mapping[str, str]) -> tuple[str, str]:
    raw = _get(env, "CRCR_CLIENT_PAYLOAD")
    event = _get(env, "GITHUB_EVENT_NAME") or "unknown"
    try:
        payload = json.loads(raw) if raw else None
    except ValueError:
        raise ReportError(f"{NOT_DISPATCHED}: `client-payload` is not JSON") from None
    if not isinstance(payload, dict):
        raise ReportError(f"{NOT_DISPATCHED}: it has no client_payload (event: {event})")
    ticket = payload.get("ticket")
    callback_url = payload.get("callback_url")
    if not isinstance(ticket, str) or not ticket:
        raise ReportError(f"{NOT_DISPATCHED}: client_payload has no `ticket` (event: {event})")
    if not isinstance(callback_url, str) or not callback_url:
        raise ReportError(f"{NOT_DISPATCHED}: client_payload has no `callback_url` (event: {event})")
    return ticket, callback_url


def on_buildkite(env: Mapping[str, str]) -> bool:
    """A Buildkite command step (the agent sets BUILDKITE=true in every job) rather than a GitHub Actions job."""
    if _get(env, "BUILDKITE") != "true":
        return False
    if _get(env, "GITHUB_ACTIONS") == "true":
        raise ReportError("both $BUILDKITE and $GITHUB_ACTIONS are true: cannot tell which CI runs this step")
    return True


def _build_env_dispatch(env: Mapping[str, str]) -> tuple[str, str]:
    """The ticket and callback URL the relay put in the env of the Buildkite build it created."""
    ticket = _get(env, "CRCR_TICKET")
    callback_url = _get(env, "CRCR_CALLBACK_URL")
    if not ticket:
        raise ReportError(f"{NOT_DISPATCHED_BUILD}: $CRCR_TICKET is not set (source: {_get(env, 'BUILDKITE_SOURCE')})")
    if not callback_url:
        raise ReportError(f"{NOT_DISPATCHED_BUILD}: $CRCR_CALLBACK_URL is not set")
    return ticket, callback_url


def _github_identity(env: Mapping[str, str]) -> dict[str, Any]:
    workflow_name = _get(env, "CRCR_WORKFLOW_NAME") or _get(env, "GITHUB_WORKFLOW")
    job_name = _get(env, "CRCR_JOB_NAME") or _get(env, "GITHUB_JOB")
    if not workflow_name or not job_name:
        raise ReportError("`workflow-name` and `job-name` must not be empty")
    run_id = _int_env(env, "GITHUB_RUN_ID")
    run_attempt = _int_env(env, "GITHUB_RUN_ATTEMPT")
    server = _get(env, "GITHUB_SERVER_URL").rstrip("/")
    repository = _get(env, "GITHUB_REPOSITORY")
    if not server or not repository:
        raise ReportError("$GITHUB_SERVER_URL and $GITHUB_REPOSITORY must be set (is this a GitHub Actions job?)")
    identity: dict[str, Any] = {
        "workflow_name": workflow_name,
        "job_name": job_name,
        "run_id": run_id,
        "run_attempt": run_attempt,
        "url": f"{server}/{repository}/actions/runs/{run_id}",
    }
    check_run_id = _check_run_id(env, job_name)
    if check_run_id:
        identity["check_run_id"] = check_run_id
    return identity


def _buildkite_identity(env: Mapping[str, str]) -> dict[str, Any]:
    """The build the relay created (run_id: its UUID, bound to the token's build by the relay), this job's attempt
    (retries of this step count attempts) and this job's id: unique per job attempt, and the token's job_id."""
    workflow_name = _get(env, "CRCR_WORKFLOW_NAME") or _get(env, "BUILDKITE_PIPELINE_SLUG")
    job_name = _get(env, "CRCR_JOB_NAME") or _get(env, "BUILDKITE_STEP_KEY") or _get(env, "BUILDKITE_LABEL")
    if not workflow_name or not job_name:
        raise ReportError("`workflow-name` and `job-name` must not be empty")
    build_id = _get(env, "BUILDKITE_BUILD_ID")
    if not _BUILD_UUID.fullmatch(build_id):
        raise ReportError(f"$BUILDKITE_BUILD_ID is {build_id!r}, not a build UUID: this runs only in a Buildkite job")
    retries = _get(env, "BUILDKITE_RETRY_COUNT") or "0"
    if not retries.isdigit():
        raise ReportError(f"$BUILDKITE_RETRY_COUNT is {retries!r}, not a number: this runs only in a Buildkite job")
    job_id = _get(env, "BUILDKITE_JOB_ID")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}", job_id):
        raise ReportError(f"$BUILDKITE_JOB_ID is {job_id!r}, not a job id: this runs only in a Buildkite job")
    if _get(env, "CRCR_CHECK_RUN_ID"):
        raise ReportError("`check-run-id` is not used on Buildkite: the report carries this job's $BUILDKITE_JOB_ID")
    url = _get(env, "BUILDKITE_BUILD_URL")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise ReportError(f"$BUILDKITE_BUILD_URL is {url!r}, not an http(s) URL")
    return {
        "workflow_name": workflow_name,
        "job_name": job_name,
        "run_id": build_id,
        "run_attempt": int(retries) + 1,
        "url": url,
        "check_run_id": job_id,
    }


def _status(env: Mapping[str, str], outcome_step: str) -> tuple[str, str]:
    status = _get(env, "CRCR_STATUS")
    conclusion = _get(env, "CRCR_CONCLUSION")
    if status not in STATUSES:
        raise ReportError(f"`status` must be one of {', '.join(STATUSES)}, got {status!r}")
    if outcome_step:
        if status != "completed":
            raise ReportError(f"CRCR_OUTCOME_STEP gives a conclusion, which only status completed takes (got {status})")
        if conclusion:
            raise ReportError("give `conclusion` or CRCR_OUTCOME_STEP, not both")
        return status, conclusion
    if status == "completed" and not conclusion:
        raise ReportError(f"`conclusion` is required when status is completed ({', '.join(CONCLUSIONS)})")
    if status != "completed" and conclusion:
        raise ReportError(f"`conclusion` is only allowed when status is completed (status is {status})")
    if conclusion and conclusion not in CONCLUSIONS:
        raise ReportError(f"`conclusion` must be one of {', '.join(CONCLUSIONS)}, got {conclusion!r}")
    return status, conclusion


def find_agent(env: Mapping[str, str]) -> str:
    agent = shutil.which(BUILDKITE_AGENT, path=env.get("PATH") or os.defpath)
    if agent is None:
        raise ReportError(
            f"{BUILDKITE_AGENT} is not on PATH: the report must run in a Buildkite job, where the agent mints its "
            "OIDC token"
        )
    return agent


def _agent(agent: str, argv: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    # A list, never a shell line; the agent reads its job credentials (BUILDKITE_AGENT_ACCESS_TOKEN, ...) from env.
    return subprocess.run(  # noqa: S603
        [agent, *argv], env=dict(env), capture_output=True, text=True, timeout=AGENT_TIMEOUT_S, check=False
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def step_outcome(env: Mapping[str, str], agent: str, step: str) -> str:
    """The conclusion of the step the report is about, from its Buildkite outcome (not its own word)."""
    argv = ["step", "get", "outcome", "--step", step]
    try:
        done = _agent(agent, argv, env)
    except subprocess.TimeoutExpired:
        raise ReportError(f"{BUILDKITE_AGENT} {' '.join(argv)} did not answer in {AGENT_TIMEOUT_S:.0f}s") from None
    except OSError as exc:
        raise ReportError(f"could not run {agent}: {exc.strerror}") from None
    if done.returncode != 0:
        raise ReportError(
            f"{BUILDKITE_AGENT} {' '.join(argv)} failed (exit {done.returncode}): {_last_line(done.stderr)}"
        )
    outcome = done.stdout.strip()
    if outcome not in OUTCOMES:
        raise ReportError(
            f"step {step!r} has outcome {outcome[:80]!r}, not one of {', '.join(OUTCOMES)}: it has not finished "
            "(the reporting step must depend on it) or the key names no step"
        )
    return OUTCOMES[outcome]


def build_report(env: Mapping[str, str]) -> tuple[dict[str, Any], str, str]:
    """Validate every input before any network call; returns (body, callback_url, audience)."""
    buildkite = on_buildkite(env)
    outcome_step = _get(env, "CRCR_OUTCOME_STEP") if buildkite else ""
    status, conclusion = _status(env, outcome_step)
    audience = _get(env, "CRCR_AUDIENCE") or (BUILDKITE_DEFAULT_AUDIENCE if buildkite else "")
    if not audience:
        raise ReportError("`audience` must not be empty")

    ticket, callback_url = _build_env_dispatch(env) if buildkite else _client_payload(env)
    check_callback_url(callback_url, _get(env, "CRCR_RELAY_URL"))
    identity = _buildkite_identity(env) if buildkite else _github_identity(env)

    body: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "ticket": ticket, "status": status, **identity}
    if conclusion:
        body["conclusion"] = conclusion
    for name, key in (("started-at", "CRCR_STARTED_AT"), ("completed-at", "CRCR_COMPLETED_AT")):
        value = _get(env, key)
        if value:
            body[name.replace("-", "_")] = _timestamp(name, value)
    results = _get(env, "CRCR_TEST_RESULTS")
    if results:
        body["test_results"] = _test_results(results)
    artifact_url = _get(env, "CRCR_ARTIFACT_URL")
    if artifact_url:
        parts = urllib.parse.urlsplit(artifact_url)
        if parts.scheme not in ("https", "http") or not parts.netloc:
            raise ReportError(f"`artifact-url` must be an http(s) URL, got {artifact_url!r}")
        body["artifact_url"] = artifact_url
    summary = env.get("CRCR_SUMMARY", "")
    if summary.strip():
        body["summary"] = summary

    if buildkite:
        agent = find_agent(env)
        if outcome_step:  # the last check: it asks the agent, but never the relay
            body["conclusion"] = step_outcome(env, agent, outcome_step)
    elif not _get(env, "ACTIONS_ID_TOKEN_REQUEST_URL") or not _get(env, "ACTIONS_ID_TOKEN_REQUEST_TOKEN"):
        raise ReportError(
            "no OIDC token can be requested: add `permissions: id-token: write` to this job "
            "(and keep it off the job that runs the upstream code)"
        )
    return body, callback_url, audience


def encode(body: dict[str, Any], github: bool = True) -> bytes:
    """The JSON to send, with an oversize summary cut (with a warning) rather than refused by the relay."""
    summary = body.get("summary")
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    if summary is None or (len(summary) <= SUMMARY_LIMIT and len(data) <= MAX_BODY_BYTES):
        return data
    keep = min(len(summary), SUMMARY_LIMIT) - len(SUMMARY_TRUNCATED)
    while True:
        body = {**body, "summary": summary[:keep] + SUMMARY_TRUNCATED}
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        if len(data) <= MAX_BODY_BYTES or keep <= 0:
            break
        keep = max(0, min(keep - 1, keep * MAX_BODY_BYTES // len(data)))  # shrinks every round
    warning = f"summary is {len(summary)} characters; sent the first {keep} to fit the relay's limits"
    if github:
        annotate("warning", warning)
    else:
        log(f"warning: {warning}")
    return data


def _retry_after(headers: Message | None) -> float | None:
    value = str(headers.get("Retry-After") or "").strip() if headers is not None else ""
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _read_http_error(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read(64 * 1024)
    except (OSError, http.client.HTTPException):
        return b""


def mint_token(env: Mapping[str, str], audience: str, opener: urllib.request.OpenerDirector) -> str:
    """GitHub's documented way: GET $ACTIONS_ID_TOKEN_REQUEST_URL&audience=… with the request token."""
    url = _get(env, "ACTIONS_ID_TOKEN_REQUEST_URL")
    if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
        raise ReportError(f"$ACTIONS_ID_TOKEN_REQUEST_URL is not an http(s) URL: {url!r}")
    sep = "&" if "?" in url else "?"
    # Scheme checked just above.
    request = urllib.request.Request(  # noqa: S310
        f"{url}{sep}audience={urllib.parse.quote(audience, safe='')}",
        headers={
            "Authorization": f"bearer {_get(env, 'ACTIONS_ID_TOKEN_REQUEST_TOKEN')}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        },
    )
    try:
        with opener.open(request, timeout=REQUEST_TIMEOUT_S) as response:
            raw = response.read(1024 * 1024)
    except urllib.error.HTTPError as exc:
        text = _read_http_error(exc).decode("utf-8", "replace")[:300]
        if exc.code == 429 or exc.code >= 500:
            raise Transient(f"OIDC token request answered HTTP {exc.code}", _retry_after(exc.headers)) from None
        raise ReportError(f"could not get an OIDC token: HTTP {exc.code} {text}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise Transient(f"OIDC token request failed: {exc}") from None
    try:
        token = json.loads(raw)["value"]
    except (ValueError, KeyError, TypeError):
        raise Transient("OIDC token response had no `value`") from None
    if not isinstance(token, str) or not token:
        raise Transient("OIDC token response had no `value`")
    # GitHub's own toolkit masks the token the same way (core.getIDToken -> setSecret).
    print(f"::add-mask::{token}", flush=True)
    return token


def mint_buildkite_token(env: Mapping[str, str], agent: str, audience: str) -> str:
    """Buildkite's documented way: `buildkite-agent oidc request-token` for this job, just before each POST
    (tokens live 5 minutes by default). The agent redacts the token from the job log (agent >= 3.104)."""
    argv = ["oidc", "request-token", "--audience", audience, "--claim", BUILDKITE_CLAIMS]
    try:
        done = _agent(agent, argv, env)
    except subprocess.TimeoutExpired:
        raise Transient(f"{BUILDKITE_AGENT} oidc request-token did not answer in {AGENT_TIMEOUT_S:.0f}s") from None
    except OSError as exc:
        raise ReportError(f"could not run {agent}: {exc.strerror}") from None
    if done.returncode == AGENT_REFUSED:
        raise ReportError(
            f"{BUILDKITE_AGENT} refused to mint an OIDC token (exit {AGENT_REFUSED}): {_last_line(done.stderr)}"
        )
    if done.returncode != 0:
        raise Transient(
            f"{BUILDKITE_AGENT} oidc request-token failed (exit {done.returncode}): {_last_line(done.stderr)}"
        )
    token = done.stdout.strip()
    if not _JWT.fullmatch(token):
        raise ReportError(f"{BUILDKITE_AGENT} oidc request-token printed no token")
    return token


def _reason(status: int, raw: bytes) -> str:
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict) and ("error" in data or "message" in data):
        reason = " ".join(str(data[k]) for k in ("error", "message") if data.get(k))
        if data.get("field"):
            reason += f" (field: {data['field']})"
    else:
        reason = raw.decode("utf-8", "replace").strip()[:500] or "no body"
    return f"HTTP {status} {reason}"


def post_report(url: str, token: str, body: bytes, opener: urllib.request.OpenerDirector) -> tuple[int, Message, bytes]:
    # The scheme was checked by check_callback_url (https, or http to loopback only).
    request = urllib.request.Request(  # noqa: S310
        url,
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        },
    )
    try:
        with opener.open(request, timeout=REQUEST_TIMEOUT_S) as response:
            return response.status, response.headers, response.read(64 * 1024)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, _read_http_error(exc)
    except (OSError, http.client.HTTPException) as exc:
        raise Transient(f"could not reach the relay: {exc}") from None


def _backoff_base(env: Mapping[str, str]) -> float:
    value = _get(env, "CRCR_REPORT_BACKOFF_BASE_S") or "2"
    try:
        base = float(value)
    except ValueError:
        raise ReportError(f"CRCR_REPORT_BACKOFF_BASE_S must be a number, got {value!r}") from None
    return max(0.0, base)


def _set_output(env: Mapping[str, str], name: str, value: str) -> None:
    path = env.get("GITHUB_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{name}={value}\n")


def send(
    env: Mapping[str, str],
    body: dict[str, Any],
    callback_url: str,
    audience: str,
    mint: Callable[[], str] | None = None,
) -> str:
    """POST until the relay answers for good; returns the relay's status (recorded|duplicate|ignored).

    `mint` gives a fresh OIDC token (default: GitHub Actions' token endpoint)."""
    base = _backoff_base(env)
    opener = _opener()
    data = encode(body, github=mint is None)
    waited = 0.0
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            # Fresh per attempt: tokens live minutes.
            token = mint() if mint is not None else mint_token(env, audience, opener)
            status, headers, raw = post_report(callback_url, token, data, opener)
            if 200 <= status < 300:
                try:
                    answer = json.loads(raw)
                except ValueError:
                    answer = None
                relay_status = answer.get("status") if isinstance(answer, dict) else None
                # It goes into $GITHUB_OUTPUT and the log: keep it one plain word.
                return re.sub(r"[^A-Za-z0-9_.-]", "_", str(relay_status or f"HTTP_{status}"))[:40]
            if status in (408, 429) or status >= 500:
                raise Transient(_reason(status, raw), _retry_after(headers))
            hint = HINTS.get(status)
            raise ReportError(f"relay rejected the report: {_reason(status, raw)}" + (f"; {hint}" if hint else ""))
        except Transient as exc:
            if attempt == MAX_ATTEMPTS:
                raise ReportError(f"gave up after {attempt} attempts: {exc.reason}") from None
            step = base * 2 ** (attempt - 1)
            delay = step / 2 + random.uniform(0, step / 2)  # jitter, not crypto
            if exc.retry_after is not None:
                delay = max(delay, exc.retry_after)
            if waited + delay > MAX_TOTAL_WAIT_S:
                raise ReportError(
                    f"gave up after {attempt} attempts: {exc.reason} (next retry in {delay:.0f}s would pass "
                    f"the {MAX_TOTAL_WAIT_S:.0f}s budget)"
                ) from None
            log(f"attempt {attempt} failed: {exc.reason}; retrying in {delay:.2f}s")
            time.sleep(delay)
            waited += delay
    raise AssertionError("unreachable")  # pragma: no cover


def for_buildkite(message: str) -> str:
    """An error in the names a Buildkite step sets (CRCR_TEST_RESULTS), not the action's input names."""

    def name(match: re.Match[str]) -> str:
        if match.group(1) not in INPUTS:
            return match.group(0)
        return "CRCR_" + match.group(1).upper().replace("-", "_") + match.group(2)

    return re.sub(r"`([a-z][a-z-]*)((?:\.[a-z]+)?)`", name, message)


def _buildkite_ids(env: Mapping[str, str]) -> None:
    # What the relay's ci_providers.yml must map to the repository (the token's organization_id/pipeline_id).
    org, pipeline = _get(env, "BUILDKITE_ORGANIZATION_ID"), _get(env, "BUILDKITE_PIPELINE_ID")
    if org and pipeline:
        print(f"crcr: this pipeline is {org}/{pipeline} in the relay's ci_providers.yml", flush=True)


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    buildkite = False
    try:
        buildkite = on_buildkite(env)
        body, callback_url, audience = build_report(env)
        what = f"{body['status']}{'/' + body['conclusion'] if 'conclusion' in body else ''} for {body['job_name']}"
        mint: Callable[[], str] | None = None
        if buildkite:
            _buildkite_ids(env)
            agent = find_agent(env)
            mint = lambda: mint_buildkite_token(env, agent, audience)  # noqa: E731
        relay_status = send(env, body, callback_url, audience, mint)
    except ReportError as exc:
        if buildkite:
            log(for_buildkite(str(exc)))
            return 1
        log(str(exc))
        annotate("error", str(exc))
        return 1
    note = " (the relay does not record results for this repository's level)" if relay_status == "ignored" else ""
    print(f"crcr: relay answered {relay_status}", flush=True)
    if buildkite:
        print(f"crcr: reported {what}: {relay_status}{note}", flush=True)
        return 0
    _set_output(env, "relay-status", relay_status)
    annotate("notice", f"reported {what}: {relay_status}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
