"""The local stack: moto in server mode as the AWS, resources from template.yaml, handlers run as Lambda would; HTTP
routes from the functions' HttpApi events, SQS pollers from their SQS events (batch size, partial batch failure;
visibility timeout and redrive are SQS's own, in moto), all on one local port."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import logging
import os
import secrets
import socket
import sys
import threading
import time
import urllib.request
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from crcr.local.aws import ACCOUNT, REGION, moto_server
from crcr.local.front import FrontEnd
from crcr.local.http_api import JSON, NOT_FOUND, Answer, match_route, proxy_answer, proxy_event
from crcr.local.pollers import start_pollers
from crcr.local.resources import create_resources, physical
from crcr.local.sandbox import SandboxGitHub, SandboxInstalls, SandboxWorkflows
from crcr.local.sandbox_buildkite import SandboxBuildkite, new_api_token
from crcr.local.sandbox_oidc import SandboxOidc
from crcr.local.template import FunctionDecl, Resolver, functions_of, load_template
from crcr.local.torchci import TorchciHud
from crcr.local.webhook_sender import Unreachable, WebhookSender
from crcr.settings import ConfigError, Settings

Handler = Callable[..., Any]
SANDBOX_PREFIX = "/_sandbox/github"
SANDBOX_APP_ID = "424242"
SANDBOX_OIDC_PREFIX = "/_sandbox/oidc"
SANDBOX_HUD_PATH = "/_sandbox/hud/api/crcr/results"
SANDBOX_BUILDKITE_PREFIX = "/_sandbox/buildkite"
SANDBOX_BUILDKITE_OIDC_PREFIX = "/_sandbox/buildkite-oidc"
# What an operator command needs to reach this stack (the ready line's `env`); never secrets.
OPERATOR_ENV_KEYS = (
    "AWS_ENDPOINT_URL",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)
OPERATOR_CRCR_KEYS = (
    "CRCR_UPSTREAM_REPO",
    "CRCR_ALLOWLIST",
    "CRCR_STATE_TABLE",
    "CRCR_RESULTS_TABLE",
    "CRCR_EVENTS_QUEUE_URL",
    "CRCR_DISPATCH_QUEUE_URL",
    "CRCR_DISPATCH_DLQ_URL",
    "CRCR_REPORTER_DLQ_URL",
    "CRCR_CHECKS_QUEUE_URL",
    "CRCR_CHECKS_DLQ_URL",
    "CRCR_BODIES_BUCKET",
    "CRCR_HUD_BUCKET",
    "CRCR_SECRETS_ARN",  # where the secret is (`crcr keys rotate --secret-arn`), not what it holds
)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def project_root() -> Path:
    """The folder holding template.yaml: the checkout this package is installed from, or the cwd."""
    for base in (Path(__file__).resolve().parents[3], Path.cwd()):
        if (base / "template.yaml").exists():
            return base
    raise FileNotFoundError("template.yaml not found; run crcr local from the project folder")


def _shown_dispatch(dispatch: dict[str, Any]) -> dict[str, Any]:
    payload = dispatch.get("client_payload") or {}
    return {
        "repo": dispatch.get("repo"),
        "event_type": dispatch.get("event_type"),
        "delivery_id": payload.get("delivery_id"),
        "at": dispatch.get("at"),
    }


@dataclass
class Context:
    """The bits of the Lambda context object the handlers (and Powertools) read."""

    function_name: str
    timeout_s: int
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = ""
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _deadline: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:123456789012:function:{self.function_name}"
        self._deadline = time.time() + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.time()) * 1000))


def generate_keys() -> dict[str, str]:
    """Fresh credentials for a local run: the App key as GitHub issues it (PKCS#1) and an Ed25519 ticket key."""
    app = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ticket = ed25519.Ed25519PrivateKey.generate()
    return {
        "github_app_private_key": app.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        ).decode(),
        "ticket_signing_key": ticket.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
        "webhook_secret": secrets.token_hex(20),
    }


class LocalStack:
    def __init__(
        self,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        root: Path | None = None,
        env: dict[str, str] | None = None,
        pollers_per_queue: int = 2,
    ) -> None:
        self.root = root or project_root()
        self.host = host
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        # The sandbox GitHub, OIDC issuers, Buildkite and HUD answer on a port of their own (bound when the stack
        # starts): the relay's calls to them never queue behind requests to the relay's own edge.
        self.sandbox_port = 0
        self.sandbox_url = ""
        self.env = dict(os.environ if env is None else env)
        self.pollers_per_queue = pollers_per_queue
        self.settings = Settings()  # read from `env` when the stack starts (preflight)
        self.template = load_template(self.root / "template.yaml")
        self.functions = functions_of(self.template)
        self.sandbox: SandboxGitHub | None = None
        self.sandbox_oidc: SandboxOidc | None = None
        self.workflows: SandboxWorkflows | None = None
        self.sandbox_hud: TorchciHud | None = None
        self.sandbox_buildkite: SandboxBuildkite | None = None
        self.sandbox_buildkite_oidc: SandboxOidc | None = None
        self.secrets: dict[str, str] = {}
        self.queue_urls: dict[str, str] = {}
        self.stream_arns: dict[str, str] = {}
        self.handlers: dict[str, Handler] = {}
        self.routes: dict[tuple[str, str], FunctionDecl] = {}
        self.function_env: dict[str, str] = {}
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._moto: Any = None
        self._http: FrontEnd | None = None
        self._sandbox_http: FrontEnd | None = None
        self._webhooks: WebhookSender | None = None  # the sandbox's runs, telling the App about themselves
        self.invocations: dict[str, int] = {}
        self._saved_environ: dict[str, str] = {}
        self._warm: set[str] = set()
        self._cold_lock = threading.Lock()

    # -- AWS ----------------------------------------------------------------------------------------
    def _start_aws(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        # Local runs keep metrics in a tally (GET /_crcr/status) instead of EMF lines on stdout.
        warnings.filterwarnings("ignore", message="No application metrics to publish")
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
        os.environ["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"]
        if not self.env.get("AWS_ENDPOINT_URL"):
            moto_port = free_port("127.0.0.1")
            self._moto = moto_server(moto_port)
            self._moto.start()
            self.env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{moto_port}"
            # moto keeps its backends per process: a stack started after another must begin empty.
            reset_url = f"{self.env['AWS_ENDPOINT_URL']}/moto-api/reset"
            reset = urllib.request.Request(reset_url, method="POST")  # noqa: S310 - our own loopback server
            urllib.request.urlopen(reset, timeout=10).close()  # noqa: S310
        os.environ["AWS_ENDPOINT_URL"] = self.env["AWS_ENDPOINT_URL"]

    def client(self, service: str) -> Any:
        import boto3  # noqa: PLC0415

        return boto3.client(service, endpoint_url=self.env["AWS_ENDPOINT_URL"], region_name=REGION)

    def _create_resources(self) -> Resolver:
        created = create_resources(self.template, self.client, self.settings.local_visibility_timeout_s)
        self.queue_urls.update(created.queue_urls)
        self.stream_arns.update(created.stream_arns)
        parameters = {
            name: str(spec.get("Default", "")) for name, spec in (self.template.get("Parameters") or {}).items()
        }
        parameters.update(self._parameter_overrides(parameters))
        return Resolver(parameters, created.refs, created.attrs, self.template.get("Conditions") or {}, REGION, ACCOUNT)

    def _parameter_overrides(self, parameters: dict[str, str]) -> dict[str, str]:
        secret_arn = self._store_secret()
        overrides = {"SecretsArn": secret_arn, "PublicUrl": self.url}
        by_env = {
            "UpstreamRepo": "CRCR_UPSTREAM_REPO",
            "GitHubApiUrl": "CRCR_GITHUB_API_URL",
            "GitHubAppId": "CRCR_GITHUB_APP_ID",
            "GitHubAppSlug": "CRCR_GITHUB_APP_SLUG",
            "Allowlist": "CRCR_ALLOWLIST",
            "OidcIssuer": "CRCR_OIDC_ISSUER",
            "OidcAudience": "CRCR_OIDC_AUDIENCE",
            "CiProviders": "CRCR_CI_PROVIDERS",
            "BuildkiteOidcIssuer": "CRCR_BUILDKITE_OIDC_ISSUER",
            "BuildkiteApiUrl": "CRCR_BUILDKITE_API_URL",
            "HudUrl": "CRCR_HUD_URL",
            "HealthThresholds": "CRCR_HEALTH_THRESHOLDS",
            "PrComment": "CRCR_PR_COMMENT",
            "StartTimeoutS": "CRCR_START_TIMEOUT_S",
            "RunTimeoutS": "CRCR_RUN_TIMEOUT_S",
        }
        for param, var in by_env.items():
            if param in parameters and self.env.get(var):
                overrides[param] = self.env[var]
        return overrides

    def _store_secret(self) -> str:
        """Secrets go through Secrets Manager, as in Lambda: the same code path reads them."""
        generated = generate_keys()
        for name, value in generated.items():
            self.secrets[name] = self.env.get(f"CRCR_{name.upper()}") or value
        if self.env.get("CRCR_HUD_TOKEN"):
            self.secrets["hud_token"] = self.env["CRCR_HUD_TOKEN"]
        sm = self.client("secretsmanager")
        name = f"crcr-local-secrets-{uuid.uuid4().hex[:8]}"
        return str(sm.create_secret(Name=name, SecretString=json.dumps(self.secrets))["ARN"])

    # -- functions ------------------------------------------------------------------------------------
    def _load_handler(self, fn: FunctionDecl) -> Handler:
        module_name, func = fn.handler.rsplit(".", 1)
        path = self.root / fn.code_uri / f"{module_name}.py"
        spec = importlib.util.spec_from_file_location(f"crcr_fn_{fn.logical_id}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        handler: Handler = getattr(module, func)
        return handler

    def invoke(self, logical_id: str, event: dict[str, Any]) -> Any:
        fn = next(f for f in self.functions if f.logical_id == logical_id)
        self.invocations[logical_id] = self.invocations.get(logical_id, 0) + 1
        context = Context(physical(logical_id), fn.timeout)
        if logical_id not in self._warm:
            # Lambda runs one invocation per environment: the first (cold) one builds the handler's
            # dependencies alone, so parallel pollers do not each build their own caches.
            with self._cold_lock:
                result = self.handlers[logical_id](event, context)
                self._warm.add(logical_id)
                return result
        return self.handlers[logical_id](event, context)

    def _configure_functions(self, resolver: Resolver) -> None:
        merged: dict[str, str] = {}
        for fn in self.functions:
            for key, value in fn.environment.items():
                resolved = str(resolver.resolve(value))
                if key in merged and merged[key] != resolved:
                    raise ValueError(f"functions disagree on {key}; the local stack shares one environment")
                merged[key] = resolved
        merged.setdefault("CRCR_CALLBACK_URL", f"{self.url}/callback")
        merged["POWERTOOLS_METRICS_DISABLED"] = self.env.get("POWERTOOLS_METRICS_DISABLED", "true")
        merged["POWERTOOLS_LOG_LEVEL"] = self.env.get("POWERTOOLS_LOG_LEVEL", "WARNING")
        # Configuration given to `crcr local` (docs/configuration.md variables) wins over the template's defaults.
        merged.update({k: v for k, v in self.env.items() if k.startswith("CRCR_") and k != "CRCR_SECRETS_ARN"})
        self.function_env = merged
        os.environ.update(merged)
        from crcr.adapters.observability import logger  # noqa: PLC0415 - loaded before this environment was set

        logger.setLevel(merged["POWERTOOLS_LOG_LEVEL"])  # as a function's cold start reads it
        for fn in self.functions:
            self.handlers[fn.logical_id] = self._load_handler(fn)
            for route in fn.http_routes:
                self.routes[route] = fn

    # -- HTTP -------------------------------------------------------------------------------------------
    def _serve(self) -> None:
        # API Gateway's edge in front of the routes: framing, payload and header quotas, bursts (crcr.local.front).
        assert self._http is not None and self._sandbox_http is not None
        sandboxed = (
            self.sandbox,
            self.sandbox_oidc,
            self.sandbox_hud,
            self.sandbox_buildkite,
            self.sandbox_buildkite_oidc,
        )
        if not any(sandboxed):
            self._sandbox_http.server_close()  # no sandbox service to serve
            self._sandbox_http = None
        for name, server in (("crcr-http", self._http), ("crcr-sandbox-http", self._sandbox_http)):
            if server is not None:
                thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)

    def sandbox_route(
        self, method: str, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes, dict[str, str]]:
        """The sandbox services, on their own port."""
        if path.startswith(SANDBOX_PREFIX + "/") and self.sandbox is not None:
            doc = json.loads(body) if body else None
            reply = self.sandbox.handle(
                method, path.removeprefix(SANDBOX_PREFIX), _header(headers, "authorization"), doc
            )
            data = json.dumps(reply.body).encode() if reply.body is not None else b""
            return reply.status, data, {"content-type": "application/json"} | reply.headers
        if path.startswith(SANDBOX_BUILDKITE_PREFIX + "/") and self.sandbox_buildkite is not None:
            doc = json.loads(body) if body else None
            reply = self.sandbox_buildkite.handle(
                method, path.removeprefix(SANDBOX_BUILDKITE_PREFIX), query, _header(headers, "authorization"), doc
            )
            return reply.status, json.dumps(reply.body).encode(), {"content-type": "application/json"} | reply.headers
        for prefix, issuer in (
            (SANDBOX_OIDC_PREFIX, self.sandbox_oidc),
            (SANDBOX_BUILDKITE_OIDC_PREFIX, self.sandbox_buildkite_oidc),
        ):
            if path.startswith(prefix + "/") and issuer is not None:
                docs = {"/.well-known/openid-configuration": issuer.discovery, "/.well-known/jwks": issuer.jwks}
                suffix = path.removeprefix(prefix)
                if suffix in docs:
                    return 200, json.dumps(docs[suffix]()).encode(), {"content-type": "application/json"}
                return 404, b'{"error":"not_found"}', {"content-type": "application/json"}
        if path == SANDBOX_HUD_PATH and self.sandbox_hud is not None:
            status, answer = self.sandbox_hud.handle(method, headers, body)
            return status, json.dumps(answer).encode(), {"content-type": "application/json"}
        return 404, b'{"message":"Not Found"}', {"content-type": "application/json"}

    def route(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Answer:
        if path == "/_crcr/status":
            return 200, json.dumps(self.status()).encode(), JSON
        matched = match_route(self.routes, method, path)
        if matched is None:  # what an HTTP API with no `$default` or ANY route answers, for any method
            return NOT_FOUND
        fn, route_key, params = matched
        return proxy_answer(
            self.invoke(fn.logical_id, proxy_event(method, path, route_key, params, query, headers, body))
        )

    def operator_env(self) -> dict[str, str]:
        """The variables with which `crcr dlq`, `crcr hud export` and `crcr health` reach this stack."""
        env = {k: os.environ[k] for k in OPERATOR_ENV_KEYS if os.environ.get(k)}
        return env | {k: self.function_env[k] for k in OPERATOR_CRCR_KEYS if self.function_env.get(k)}

    def status(self) -> dict[str, Any]:
        from crcr.adapters.observability import TOTALS  # noqa: PLC0415

        return {
            "url": self.url,
            "metrics": dict(TOTALS),
            "invocations": dict(self.invocations),
            "queues": dict(self.queue_urls),
            # What was sent, never the credentials in it: a ticket lets its holder report for the dispatch.
            "dispatches": [_shown_dispatch(d) for d in self.sandbox.dispatches] if self.sandbox else None,
            "sandbox_callbacks": self.workflows.replies if self.workflows else None,
            "sandbox_hud_rows": len(self.sandbox_hud.table) if self.sandbox_hud else None,
            "sandbox_builds": len(self.sandbox_buildkite.builds) if self.sandbox_buildkite else None,
            "http": self._http.stats() if self._http else None,
            "sandbox_url": self.sandbox_url if self._sandbox_http else None,
            "sandbox_http": self._sandbox_http.stats() if self._sandbox_http else None,
        }

    # -- lifecycle --------------------------------------------------------------------------------------
    def preflight(self) -> None:
        """Everything `crcr local` can know is wrong before it starts, as ConfigError: one line per problem."""
        from crcr.adapters import preflight  # noqa: PLC0415

        busy = port_problem(self.host, self.port)
        try:
            self.settings = Settings.from_env(self.env)
        except ConfigError as exc:
            raise ConfigError(*([busy] if busy else []), *exc.problems) from None
        problems = ([busy] if busy else []) + preflight.documents(self.settings) + preflight.keys(self.settings)
        if problems:
            raise ConfigError(*problems)

    def start(self) -> LocalStack:
        self.preflight()
        self._saved_environ = dict(os.environ)
        try:
            return self._start()
        except BaseException:
            self.stop()  # what did start (moto, servers, the process environment) is put back as it was
            raise

    def _start(self) -> LocalStack:
        # Both ports are bound first, so nothing the stack starts next (moto on a free port) can take either.
        self._http = FrontEnd((self.host, self.port), self.route)
        self._sandbox_http = FrontEnd((self.host, 0), self.sandbox_route)
        self.sandbox_port = int(self._sandbox_http.server_address[1])
        self.sandbox_url = f"http://{self.host}:{self.sandbox_port}"
        from crcr.adapters.observability import logger  # noqa: PLC0415 - Powertools, loaded with the functions
        from crcr.local.logs import per_thread_log_keys  # noqa: PLC0415

        per_thread_log_keys(logger)  # the functions run in threads here, each with its own log keys
        self._start_aws()
        if not self.env.get("CRCR_GITHUB_API_URL"):
            keys = generate_keys()
            self.env.setdefault("CRCR_GITHUB_APP_PRIVATE_KEY", keys["github_app_private_key"])
            self.env.setdefault("CRCR_GITHUB_APP_ID", SANDBOX_APP_ID)
            self.env["CRCR_GITHUB_API_URL"] = self.sandbox_url + SANDBOX_PREFIX
            private = serialization.load_pem_private_key(self.env["CRCR_GITHUB_APP_PRIVATE_KEY"].encode(), None)
            assert isinstance(private, rsa.RSAPrivateKey)
            installs = SandboxInstalls(
                self.env.get("CRCR_UPSTREAM_REPO") or "pytorch/pytorch",
                self.env.get("CRCR_ALLOWLIST"),
                self.settings.sandbox_installed,
            )
            self.sandbox = SandboxGitHub(self.env["CRCR_GITHUB_APP_ID"], private.public_key(), installs)
            if not self.env.get("CRCR_OIDC_ISSUER"):
                # Sandbox downstream runs report with tokens from a sandbox issuer on the sandbox port.
                self.sandbox_oidc = SandboxOidc(self.sandbox_url + SANDBOX_OIDC_PREFIX)
                self.env["CRCR_OIDC_ISSUER"] = self.sandbox_oidc.issuer
                self.env["CRCR_OIDC_AUDIENCE"] = self.env.get("CRCR_OIDC_AUDIENCE") or "crcr"
                self.workflows = SandboxWorkflows(self.sandbox_oidc.token, self._sandbox_audience())
                self.sandbox.on_dispatch = self.workflows.start
                self.sandbox.runs = self.workflows
            if not self.env.get("CRCR_BUILDKITE_API_URL"):
                self._start_sandbox_buildkite()
            if not self.env.get("CRCR_HUD_URL"):
                # Pushes go to a port of PyTorch's HUD endpoint, which judges them as PyTorch's would.
                self.sandbox_hud = TorchciHud(self.env.get("CRCR_HUD_TOKEN") or secrets.token_hex(16))
                self.env["CRCR_HUD_URL"] = self.sandbox_url + SANDBOX_HUD_PATH
                self.env["CRCR_HUD_TOKEN"] = self.sandbox_hud.token
        resolver = self._create_resources()
        self._configure_functions(resolver)
        self._serve()
        if self.workflows is not None:
            self._webhooks = WebhookSender(
                self.url, self.secrets["webhook_secret"], agent="GitHub-Hookshot/crcr-sandbox"
            )
            self.workflows.deliver = self._sandbox_webhook
        self._start_pollers()
        return self

    def _start_pollers(self) -> None:
        self._threads += start_pollers(self, self.functions, self.pollers_per_queue)

    def _sandbox_webhook(self, event: str, doc: dict[str, Any]) -> None:
        """The sandbox's runs tell the App about themselves (`workflow_run`), signed as GitHub signs them."""
        assert self._webhooks is not None
        body, delivery = json.dumps(doc).encode(), str(uuid.uuid4())
        # Once more if a kept connection closed under it (the relay takes a delivery id once); then, as GitHub, no more.
        for _ in range(2):
            with contextlib.suppress(Unreachable):
                self._webhooks.post(event, body, delivery)
                return

    def _sandbox_audience(self) -> str:
        """The audience sandbox runs request: the first of CRCR_OIDC_AUDIENCE's (default crcr)."""
        return (self.env.get("CRCR_OIDC_AUDIENCE") or "crcr").split(",")[0].strip() or "crcr"

    def _start_sandbox_buildkite(self) -> None:
        """Buildkite downstreams build on a sandbox Buildkite whose jobs report with sandbox agent tokens."""
        if not self.env.get("CRCR_BUILDKITE_OIDC_ISSUER"):
            self.sandbox_buildkite_oidc = SandboxOidc(self.sandbox_url + SANDBOX_BUILDKITE_OIDC_PREFIX)
            self.env["CRCR_BUILDKITE_OIDC_ISSUER"] = self.sandbox_buildkite_oidc.issuer
        if self.sandbox_buildkite_oidc is None:
            return  # tokens from another issuer: the sandbox cannot mint them
        token = self.env.get("CRCR_BUILDKITE_API_TOKEN") or new_api_token()
        self.sandbox_buildkite = SandboxBuildkite(token, self.sandbox_buildkite_oidc.mint, self._sandbox_audience())
        self.env["CRCR_BUILDKITE_API_URL"] = self.sandbox_url + SANDBOX_BUILDKITE_PREFIX
        self.env["CRCR_BUILDKITE_API_TOKEN"] = token

    def stop(self) -> None:
        """The relay's edge stops taking requests, the pollers finish what they are running, and only then do the
        sandbox services stop: a reporter still pushing to the sandbox HUD is not refused by a stopped sandbox."""
        self.stopping.set()
        _close(self._http)
        for thread in self._threads:
            if thread.name != "crcr-sandbox-http":
                thread.join(timeout=5)
        _close(self._sandbox_http)
        for thread in self._threads:
            thread.join(timeout=5)
        if self._webhooks is not None:
            self._webhooks.close()
        if self._moto is not None:
            self._moto.stop()
        # Leave the process environment as found, so stacks started one after another do not mix.
        os.environ.clear()
        os.environ.update(self._saved_environ)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _close(server: FrontEnd | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()


def _header(headers: dict[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name), "")


def port_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be served, or None (port 0 is any free port)."""
    if not 0 <= port <= 65535:
        return f"--port {port}: a port is 0 to 65535 (0 picks a free one)"
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            # As the server binds: a port whose last listener just stopped (TIME_WAIT) is free, a listening one not.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return f"--port {port}: {host}:{port} is in use (another crcr local?); --port 0 picks a free one"
        return f"--host {host} --port {port}: cannot listen there: {exc.strerror or exc}"
    return None
