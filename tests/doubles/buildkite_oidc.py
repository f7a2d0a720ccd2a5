"""An independent test double of Buildkite's agent OIDC issuer (``https://agent.buildkite.com``), plus a stand-in
``buildkite-agent`` executable that mints its tokens the way the real agent does.

Written from Buildkite's public documentation and the agent's public source, never from the relay's code:

* "buildkite-agent oidc" (buildkite.com/docs/agent/cli/reference/oidc): the endpoints (discovery at
  ``/.well-known/openid-configuration``, keys at ``/.well-known/jwks``), the example token, every default claim
  and its type (``build_number`` is a JSON integer; ``build_tag`` only when the build has a tag; ``step_key`` is
  ``nil`` for a step without a key), ``sub`` = ``organization:ORG:pipeline:PIPELINE:ref:REF:commit:SHA:step:KEY``
  with ``REF`` = ``refs/tags/TAG`` or ``refs/heads/BRANCH``, ``nbf`` = ``iat``, ``exp`` = ``iat`` + 5 minutes
  unless ``--lifetime``, the default audience ``https://buildkite.com/ORG``, and the optional claims added with
  ``--claim`` (``organization_id``, ``pipeline_id``, ``build_id``, and the cluster ones only on clusters).
* The agent's API client (buildkite/agent ``api/oidc.go``, ``api/auth.go``): ``POST <endpoint>/jobs/<job id>/
  oidc/tokens`` with ``Authorization: Token <agent access token>`` and ``{"audience", "lifetime", "claims"}``
  (empty ones left out), answered ``{"token": "<jwt>"}``; the CLI (``clicommand/oidc_request_token.go``) prints
  the token on standard output and exits 77 when the API "positively refused" (400, 401, 403, 404, 410, 422).
* "Environment variables" (buildkite.com/docs/pipelines/configure/environment-variables): what a job's
  environment holds (``BUILDKITE_BUILD_ID`` the build UUID, ``BUILDKITE_RETRY_COUNT``, ``BUILDKITE_JOB_ID``...).

RS256 only: the live discovery document advertises RS256 (Buildkite's docs do not name the algorithm). The exact
JWKS entry fields and ``kid`` format are not documented; keys here are plain RSA JWKs with a random ``kid``.
Every organization shares the one issuer, which is why identity must come from ``organization_id``/``pipeline_id``.

Usage::

    with BuildkiteOidc(audience="crcr") as bk:              # serving on 127.0.0.1
        bk.url == bk.issuer                                   # the `iss`; bk.jwks_uri, bk.discovery_url
        bk.audience                                           # what the relay expects (CRCR_OIDC_AUDIENCE)
        token = bk.mint(step_key="crcr-report-result")        # claims: Buildkite's defaults for this double's
        token = bk.mint(build_number=None)                    # organization and pipeline; None deletes one,
        token = bk.mint(optional=())                          # others replace/add; `optional` = the --claim list
        bk.claims(...)                                        # the payload mint() would sign
        job = bk.job(step_key="crcr-report-start")            # a job the agent API will mint tokens for
        job.env()                                             # its BUILDKITE_* environment (+ BUILDKITE=true)
        agent = StandInAgent(tmp_path / "bin", outcomes={"build-and-test": "passed"})
        # PATH=<agent.directory>:... and job.env(): `buildkite-agent oidc request-token ...` now works
        agent.calls()                                         # every argv the stand-in was run with
        bk.token_requests                                     # [(job_id, request body), ...] the agent API saw
        bk.fail_next("/v3/jobs/<id>/oidc/tokens", 1, 503)

``organization_id`` and ``pipeline_id`` are in ``mint()``'s tokens by default (crcr's report helper always asks
for them); the agent API adds them only when the request's ``claims`` list names them, as Buildkite does.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

BUILDKITE_ISSUER = "https://agent.buildkite.com"
DEFAULT_LIFETIME = 300  # "Defaults to 5 minutes in the future at generation"
DISCOVERY_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/.well-known/jwks"
AGENT_API_PREFIX = "/v3"  # the agent's --endpoint default is https://agent.buildkite.com/v3
# Optional claims `--claim` may ask for; the cluster ones exist only for jobs on a cluster.
OPTIONAL_CLAIMS = ("organization_id", "pipeline_id", "build_id", "cluster_id", "cluster_name", "queue_id", "queue_key")
CLUSTER_CLAIMS = frozenset({"cluster_id", "cluster_name", "queue_id", "queue_key"})
REFUSED_STATUSES = (400, 401, 403, 404, 410, 422)  # the agent exits 77 on these
# Claims in the order Buildkite's documented example token lists them (optional ones after).
DEFAULT_CLAIMS = (
    "iss",
    "sub",
    "aud",
    "iat",
    "nbf",
    "exp",
    "organization_slug",
    "pipeline_slug",
    "build_number",
    "build_branch",
    "build_tag",
    "build_commit",
    "step_key",
    "job_id",
    "agent_id",
    "build_source",
    "runner_environment",
)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _int_b64url(value: int) -> str:
    return _b64url(value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


def _segment(obj: dict[str, Any]) -> str:
    return _b64url(json.dumps(obj, separators=(",", ":")).encode("utf-8"))


@dataclass
class Job:
    """One job of a build of the double's pipeline: what its token says and what its environment holds."""

    issuer: BuildkiteOidc
    job_id: str
    access_token: str  # the job's BUILDKITE_AGENT_ACCESS_TOKEN
    claims: dict[str, Any]  # overrides for claims() (step_key, build_number, ...)
    retry_count: int = 0
    label: str = ""

    def env(self) -> dict[str, str]:
        """The job's environment as the agent sets it (the variables a report step reads)."""
        c = self.issuer.claims(optional=("organization_id", "pipeline_id", "build_id"), **self.claims)
        org, pipeline, number = c["organization_slug"], c["pipeline_slug"], c["build_number"]
        return {
            "BUILDKITE": "true",
            "CI": "true",
            "BUILDKITE_AGENT_ACCESS_TOKEN": self.access_token,
            "BUILDKITE_AGENT_ENDPOINT": self.issuer.agent_endpoint,
            "BUILDKITE_AGENT_ID": str(c["agent_id"]),
            "BUILDKITE_JOB_ID": self.job_id,
            "BUILDKITE_BUILD_ID": str(c["build_id"]),
            "BUILDKITE_BUILD_NUMBER": str(number),
            "BUILDKITE_BUILD_URL": f"https://buildkite.com/{org}/{pipeline}/builds/{number}",
            "BUILDKITE_RETRY_COUNT": str(self.retry_count),
            "BUILDKITE_STEP_KEY": str(c.get("step_key") or ""),
            "BUILDKITE_LABEL": self.label or str(c.get("step_key") or ""),
            "BUILDKITE_ORGANIZATION_SLUG": org,
            "BUILDKITE_ORGANIZATION_ID": str(c["organization_id"]),
            "BUILDKITE_PIPELINE_SLUG": pipeline,
            "BUILDKITE_PIPELINE_ID": str(c["pipeline_id"]),
            "BUILDKITE_BRANCH": str(c["build_branch"]),
            "BUILDKITE_COMMIT": str(c["build_commit"]),
            "BUILDKITE_SOURCE": str(c["build_source"]),
        }


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    time: float = field(default_factory=time.monotonic)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    double: BuildkiteOidc


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, payload = self.server.double._respond(self.command, self.path, headers, body)
        data = json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _handle


class BuildkiteOidc:
    """Buildkite's agent OIDC issuer and the agent API's token endpoint on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        *,
        audience: str = "crcr",
        organization_slug: str = "acme-inc",
        pipeline_slug: str = "xpu-ci",
        organization_id: str | None = None,
        pipeline_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.audience = audience
        self.organization_slug = organization_slug
        self.pipeline_slug = pipeline_slug
        self.organization_id = organization_id or str(uuid.uuid4())
        self.pipeline_id = pipeline_id or str(uuid.uuid4())
        self.clock = clock
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = secrets.token_hex(16)
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._failures: dict[str, list[int]] = {}
        self.requests: list[RecordedRequest] = []
        self.token_requests: list[tuple[str, dict[str, Any]]] = []
        self.build_id = str(uuid.uuid4())
        self.build_number = 1514
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.double = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()

    # -- lifecycle -------------------------------------------------------------------------------------
    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2)

    def __enter__(self) -> BuildkiteOidc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the issuer's public face ----------------------------------------------------------------------
    @property
    def issuer(self) -> str:
        return self.url

    @property
    def jwks_uri(self) -> str:
        return self.url + JWKS_PATH

    @property
    def discovery_url(self) -> str:
        return self.url + DISCOVERY_PATH

    @property
    def agent_endpoint(self) -> str:
        """The agent's --endpoint / BUILDKITE_AGENT_ENDPOINT for jobs of this double."""
        return self.url + AGENT_API_PREFIX

    def discovery_document(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "jwks_uri": self.jwks_uri,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "claims_supported": [*DEFAULT_CLAIMS, *OPTIONAL_CLAIMS],
        }

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        jwk = {"kty": "RSA", "alg": "RS256", "use": "sig", "kid": self.kid}
        return {"keys": [jwk | {"n": _int_b64url(numbers.n), "e": _int_b64url(numbers.e)}]}

    # -- tokens ----------------------------------------------------------------------------------------
    def claims(
        self,
        *,
        optional: Iterable[str] = ("organization_id", "pipeline_id"),
        now: float | None = None,
        lifetime: int = DEFAULT_LIFETIME,
        **overrides: Any,
    ) -> dict[str, Any]:
        """The payload a job's token carries, as Buildkite documents it. ``optional``: the ``--claim`` names.

        ``overrides`` replace or add claims (``sub`` is derived from the values after overriding, unless given);
        an override of ``None`` deletes the claim. ``build_tag`` is present only when given.
        """
        iat = int(self.clock() if now is None else now)
        values: dict[str, Any] = {
            "organization_slug": self.organization_slug,
            "pipeline_slug": self.pipeline_slug,
            "build_number": self.build_number,
            "build_branch": "main",
            "build_tag": None,
            "build_commit": "9f3182061f1e2cca4702c368cbc039b7dc9d4485",
            "step_key": "crcr-report-result",
            "job_id": "0184990a-477b-4fa8-9968-496074483cee",
            "agent_id": "0184990a-4782-42b5-afc1-16715b10b8ff",
            "build_source": "api",
            "runner_environment": "self-hosted",
            "organization_id": self.organization_id,
            "pipeline_id": self.pipeline_id,
            "build_id": self.build_id,
        }
        values.update({k: v for k, v in overrides.items() if k not in ("iss", "sub", "aud", "iat", "nbf", "exp")})
        ref = f"refs/tags/{values['build_tag']}" if values.get("build_tag") else f"refs/heads/{values['build_branch']}"
        step = values.get("step_key") or ""
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": (
                f"organization:{values['organization_slug']}:pipeline:{values['pipeline_slug']}:ref:{ref}"
                f":commit:{values['build_commit']}:step:{step}"
            ),
            "aud": self.audience,
            "iat": iat,
            "nbf": iat,
            "exp": iat + lifetime,
        }
        for name in DEFAULT_CLAIMS[6:]:
            if name == "build_tag" and not values.get("build_tag"):
                continue
            claims[name] = values.get(name)
        for name in optional:
            if name not in OPTIONAL_CLAIMS:
                raise ValueError(f"{name!r} is not a claim Buildkite adds on request ({', '.join(OPTIONAL_CLAIMS)})")
            if name in values and values[name] is not None:
                claims[name] = values[name]
        for name in ("iss", "sub", "aud", "iat", "nbf", "exp"):
            if name in overrides:
                claims[name] = overrides[name]
        for name, value in overrides.items():
            if name not in claims and value is not None:
                claims[name] = value  # a claim Buildkite never sends: for tests of what a verifier ignores
        return {k: v for k, v in claims.items() if v is not None and overrides.get(k, 0) is not None}

    def mint(self, **claims: Any) -> str:
        """A token signed by the issuer's key (parameters: see ``claims``)."""
        return self.sign(self.claims(**claims))

    def sign(self, payload: dict[str, Any], header: dict[str, Any] | None = None) -> str:
        head = {"alg": "RS256", "kid": self.kid, "typ": "JWT"} | (header or {})
        signing_input = f"{_segment(head)}.{_segment(payload)}"
        signature = self._key.sign(signing_input.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"

    # -- jobs the agent API knows -------------------------------------------------------------------------
    def job(
        self, step_key: str | None = "crcr-report-result", *, retry_count: int = 0, label: str = "", **claims: Any
    ) -> Job:
        """A job of the current build; the agent API mints its tokens with these claims (job_id is its own)."""
        job_id = str(uuid.uuid4())
        token = "bkaj_" + secrets.token_urlsafe(24)
        job = Job(self, job_id, token, {"step_key": step_key, "job_id": job_id, **claims}, retry_count, label)
        with self._lock:
            self._jobs[job_id] = job
        return job

    def fail_next(self, path: str, n: int = 1, status: int = 503) -> None:
        """The next ``n`` requests to ``path`` get ``status`` with a Buildkite-shaped error body."""
        with self._lock:
            self._failures.setdefault(path, []).extend([status] * n)

    # -- HTTP --------------------------------------------------------------------------------------------
    def _respond(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        path = raw_path.split("?", 1)[0]
        with self._lock:
            self.requests.append(RecordedRequest(method, raw_path, headers, body))
            queue = self._failures.get(path)
            failure = queue.pop(0) if queue else None
        if failure is not None:
            return failure, {"message": f"scripted failure {failure}"}
        if method in ("GET", "HEAD") and path == DISCOVERY_PATH:
            return 200, self.discovery_document()
        if method in ("GET", "HEAD") and path == JWKS_PATH:
            return 200, self.jwks()
        match = re.fullmatch(AGENT_API_PREFIX + r"/jobs/([^/]+)/oidc/tokens", path)
        if match and method == "POST":
            return self._token_request(match.group(1), headers.get("authorization", ""), body)
        return 404, {"message": "Not Found"}

    def _token_request(self, job_id: str, authorization: str, raw: bytes) -> tuple[int, Any]:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None or authorization != f"Token {job.access_token}":
            return 401, {"message": "Authentication required. Please supply a valid Agent Access Token"}
        try:
            request = json.loads(raw or b"{}")
        except ValueError:
            return 400, {"message": "Invalid JSON"}
        if not isinstance(request, dict):
            return 400, {"message": "Invalid JSON"}
        with self._lock:
            self.token_requests.append((job_id, request))
        wanted = request.get("claims") or []
        unknown = [c for c in wanted if c not in OPTIONAL_CLAIMS]
        if unknown:
            return 422, {"message": f"Invalid claim: {unknown[0]}"}
        lifetime = request.get("lifetime") or DEFAULT_LIFETIME
        if not isinstance(lifetime, int) or lifetime < 0:
            return 422, {"message": "Lifetime must be a non-negative integer"}
        audience = request.get("audience") or f"https://buildkite.com/{self.organization_slug}"
        optional = [c for c in wanted if c not in CLUSTER_CLAIMS]  # the double's agents are not on a cluster
        claims = self.claims(optional=optional, lifetime=lifetime, **job.claims)
        claims["aud"] = audience
        return 200, {"token": self.sign(claims)}


# The stand-in agent: a script, run as its own process like the real binary, standard library only.
_AGENT_SCRIPT = r'''#!{python}
"""Stand-in buildkite-agent written by a test: oidc request-token (through the agent API) and step get outcome."""
import json, os, sys, urllib.error, urllib.request

LOG = {log!r}
OUTCOMES = {outcomes!r}
REFUSED = {refused!r}

with open(LOG, "a", encoding="utf-8") as fh:
    fh.write(json.dumps(sys.argv) + "\n")
args = sys.argv[1:]


def option(name, default=None, many=False):
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]
    if many:
        return [v for value in values for v in value.split(",") if v]
    return values[-1] if values else default


if args[:2] == ["oidc", "request-token"]:
    job = option("--job", os.environ.get("BUILDKITE_JOB_ID", ""))
    if not job:
        print("fatal: missing required flag --job", file=sys.stderr)
        sys.exit(1)
    body = {{}}
    if option("--audience"):
        body["audience"] = option("--audience")
    if option("--lifetime"):
        body["lifetime"] = int(option("--lifetime"))
    if option("--claim", many=True):
        body["claims"] = option("--claim", many=True)
    endpoint = os.environ.get("BUILDKITE_AGENT_ENDPOINT", "https://agent.buildkite.com/v3").rstrip("/")
    request = urllib.request.Request(
        f"{{endpoint}}/jobs/{{job}}/oidc/tokens",
        data=json.dumps(body).encode(),
        method="POST",
        headers={{
            "Authorization": "Token " + os.environ.get("BUILDKITE_AGENT_ACCESS_TOKEN", ""),
            "Content-Type": "application/json",
        }},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            print(json.loads(response.read())["token"])
    except urllib.error.HTTPError as exc:
        message = exc.read().decode("utf-8", "replace")
        print(f"fatal: failed to get OIDC token: POST {{request.full_url}}: {{exc.code}} {{message}}", file=sys.stderr)
        sys.exit(77 if exc.code in REFUSED else 1)
    except OSError as exc:
        print(f"fatal: failed to get OIDC token: {{exc}}", file=sys.stderr)
        sys.exit(1)
elif args[:3] == ["step", "get", "outcome"]:
    step = option("--step", "")
    if step not in OUTCOMES:
        print(f"fatal: failed to get step: 404 No step found with key {{step!r}}", file=sys.stderr)
        sys.exit(1)
    print(OUTCOMES[step])
else:
    print("fatal: the stand-in agent does not know " + " ".join(args), file=sys.stderr)
    sys.exit(1)
'''


class StandInAgent:
    """A ``buildkite-agent`` executable in ``directory`` (put it first on PATH): ``oidc request-token`` asks the
    issuer double's agent API for the job in its environment as the real agent does (exit 77 on a refusal);
    ``step get outcome --step KEY`` prints ``outcomes[KEY]``; every argv is logged for ``calls()``."""

    def __init__(self, directory: Path, outcomes: dict[str, str] | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.path = directory / "buildkite-agent"
        self._log = directory / "buildkite-agent.calls.jsonl"
        self._log.write_text("")
        self.path.write_text(
            _AGENT_SCRIPT.format(
                python=sys.executable, log=str(self._log), outcomes=dict(outcomes or {}), refused=REFUSED_STATUSES
            )
        )
        self.path.chmod(self.path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def calls(self) -> list[list[str]]:
        """Each run's argv (argv[0], the executable's path, included)."""
        return [json.loads(line) for line in self._log.read_text().splitlines() if line]

    def path_env(self, rest: str | None = None) -> str:
        """A PATH with this agent first (``rest`` defaults to the current PATH)."""
        return f"{self.directory}{os.pathsep}{os.environ.get('PATH', '') if rest is None else rest}"
