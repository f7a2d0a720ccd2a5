"""The local stack: moto in server mode as the AWS, resources from template.yaml, handlers run as Lambda would.

HTTP routes come from the functions' HttpApi events, SQS pollers from their SQS events (batch size,
partial batch failure; visibility timeout and redrive are SQS's own, in moto), all on one local port.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import importlib.util
import inspect
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

from crcr.adapters.webhook_sender import Unreachable, WebhookSender
from crcr.local.filters import passes
from crcr.local.front import FrontEnd
from crcr.local.sandbox import SandboxGitHub, SandboxWorkflows
from crcr.local.sandbox_buildkite import SandboxBuildkite, new_api_token
from crcr.local.sandbox_oidc import SandboxOidc
from crcr.local.template import FunctionDecl, Resolver, StreamSource, functions_of, load_template, resources_of
from crcr.local.torchci import TorchciHud
from crcr.settings import ConfigError, Settings

Handler = Callable[..., Any]
REGION = "us-east-1"
ACCOUNT = "123456789012"
SANDBOX_PREFIX = "/_sandbox/github"
SANDBOX_APP_ID = "424242"
SANDBOX_OIDC_PREFIX = "/_sandbox/oidc"
SANDBOX_HUD_PATH = "/_sandbox/hud/api/crcr/results"
SANDBOX_BUILDKITE_PREFIX = "/_sandbox/buildkite"
SANDBOX_BUILDKITE_OIDC_PREFIX = "/_sandbox/buildkite-oidc"
# Each scheduled function's local period, from Settings; any other scheduled function runs at the sweeper's.
SCHEDULE_INTERVALS: dict[str, Callable[[Settings], float]] = {
    "ReconcilerFunction": lambda settings: settings.reconcile_interval_s,
    "LevelFunction": lambda settings: settings.level_interval_s,
    "ExportFunction": lambda settings: settings.export_interval_s,
}


def _sweep_interval(settings: Settings) -> float:
    return settings.sweep_interval_s


# Scheduled functions `crcr local` runs at start too, not only after their first interval: the level status, and
# the results table's export (its first run is a full export, each later one incremental).
RUN_AT_START = frozenset({"LevelFunction", "ExportFunction"})
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


def table_spec(name: str, props: dict[str, Any]) -> dict[str, Any]:
    """CreateTable's arguments for a template's AWS::DynamoDB::Table, under a physical name."""
    spec: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if "GlobalSecondaryIndexes" in props:
        spec["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    if "StreamSpecification" in props:
        spec["StreamSpecification"] = {"StreamEnabled": True} | props["StreamSpecification"]
    return spec


class StreamReader:
    """A table's DynamoDB stream as Lambda's event source reads it: each shard from its start (TRIM_HORIZON),
    in order, each record as the event carries it (with its eventSourceARN).

    DynamoDB writes no stream record for a PutItem or UpdateItem that changes nothing in the item; moto does
    (with equal old and new images). Those are left out here, so the function sees what it would in AWS."""

    def __init__(self, streams: Any, arn: str) -> None:
        self._streams = streams
        self.arn = arn
        self._iterators: dict[str, str] = {}

    def shards(self) -> list[str]:
        for shard in self._streams.describe_stream(StreamArn=self.arn)["StreamDescription"].get("Shards", []):
            sid = shard["ShardId"]
            if sid not in self._iterators:
                self._iterators[sid] = self._streams.get_shard_iterator(
                    StreamArn=self.arn, ShardId=sid, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
        return list(self._iterators)

    def read(self, shard: str, limit: int) -> list[dict[str, Any]]:
        """The shard's next records (at most `limit` of them, fewer once unchanged writes are left out)."""
        return [r | {"eventSourceARN": self.arn} for r in self._next(shard, limit) if not _unchanged(r)]

    def read_all(self) -> list[dict[str, Any]]:
        """Every record written since the last read, shard by shard (moto answers with all there is)."""
        records: list[dict[str, Any]] = []
        for sid in self.shards():
            while page := self._next(sid, 1000):
                records.extend(r | {"eventSourceARN": self.arn} for r in page if not _unchanged(r))
        return records

    def _next(self, shard: str, limit: int) -> list[dict[str, Any]]:
        got = self._streams.get_records(ShardIterator=self._iterators[shard], Limit=limit)
        self._iterators[shard] = got.get("NextShardIterator") or self._iterators[shard]
        return list(got.get("Records", []))


class ParallelStream:
    """Lambda's stream event source with a ParallelizationFactor: up to that many batches of a shard at once, each
    partition key's records in order (a key waits while a batch holding it is out, or being retried). One table
    partition, say one dispatch with hundreds of jobs, then holds one batch at a time, never the others' turn."""

    LOOKAHEAD = 1000  # records read ahead of the batches

    def __init__(self, stack: LocalStack, fn: FunctionDecl, source: StreamSource) -> None:
        self.stack, self.fn, self.source = stack, fn, source
        self.reader = StreamReader(stack.client("dynamodbstreams"), stack.stream_arns[source.table])
        self.pending: list[tuple[int, str, dict[str, Any]]] = []  # (sequence number, shard, record), in order
        self.out: set[str] = set()  # partition keys of the batches out
        self.running = 0
        self.cond = threading.Condition()

    @staticmethod
    def key(record: dict[str, Any]) -> str:
        keys = (record.get("dynamodb") or {}).get("Keys") or {}
        return json.dumps(keys.get("pk", keys), sort_keys=True)

    def run(self) -> None:
        try:
            self._run()
        finally:  # the batches out finish before the stack stops moto under them
            with self.cond:
                self.cond.wait_for(lambda: self.running == 0, timeout=10)

    def _run(self) -> None:
        stop = self.stack._stop
        while not stop.is_set():
            try:
                read = self._read()
            except Exception:  # moto going away while stopping
                if stop.wait(0.5):
                    return
                continue
            with self.cond:
                batch = self._take()
                if batch:
                    self.running += 1
            if batch:
                threading.Thread(target=self._deliver, args=(batch,), daemon=True, name="stream-batch").start()
            else:
                with self.cond:
                    # An idle shard is polled 4 times a second; records whose keys are all out wait for a batch to
                    # come back (which wakes this at once).
                    self.cond.wait(0.05 if read else 0.2)

    def _read(self) -> bool:
        with self.cond:
            if len(self.pending) >= self.LOOKAHEAD:
                return False
        got: list[tuple[int, str, dict[str, Any]]] = []
        for sid in self.reader.shards():
            got += [(int(r["dynamodb"]["SequenceNumber"]), sid, r) for r in self.reader.read(sid, 1000)]
        kept = [g for g in got if passes(self.source.filters, g[2])]
        with self.cond:
            self.pending += kept
        return bool(got)

    def _take(self) -> list[tuple[int, str, dict[str, Any]]]:
        """The next batch: the oldest records whose keys no batch out holds, up to the batch size."""
        if self.running >= self.source.parallelization:
            return []
        batch: list[tuple[int, str, dict[str, Any]]] = []
        shard: str | None = None
        for item in self.pending:
            if len(batch) >= self.source.batch_size:
                break
            if self.key(item[2]) in self.out or (shard is not None and item[1] != shard):
                continue
            shard = item[1]
            batch.append(item)
        for item in batch:
            self.pending.remove(item)
            self.out.add(self.key(item[2]))
        return batch

    def _deliver(self, batch: list[tuple[int, str, dict[str, Any]]]) -> None:
        attempt, held = 0, {self.key(r) for _, _, r in batch}
        try:
            while batch and not self.stack._stop.is_set():
                records = [r for _, _, r in batch]
                try:
                    result = self.stack.invoke(self.fn.logical_id, {"Records": records})
                    failed = [f["itemIdentifier"] for f in (result or {}).get("batchItemFailures") or []]
                except Exception:
                    failed = [records[0]["dynamodb"]["SequenceNumber"]]
                if not failed:
                    return
                first = next(i for i, r in enumerate(records) if r["dynamodb"]["SequenceNumber"] in failed)
                batch, attempt = batch[first:], attempt + 1
                if self.source.max_retries >= 0 and attempt > self.source.max_retries:
                    self.stack.stream_failed(self.fn, self.source, batch[0][1], [r for _, _, r in batch])
                    return
                self.stack._stop.wait(min(2.0**attempt * 0.1, 5.0))  # its keys stay held while it backs off
        finally:
            with self.cond:
                self.running -= 1
                self.out -= held
                self.cond.notify_all()


def _unchanged(record: dict[str, Any]) -> bool:
    data = record.get("dynamodb") or {}
    return record.get("eventName") == "MODIFY" and "OldImage" in data and data.get("OldImage") == data.get("NewImage")


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
        self._stop = threading.Event()
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
            self._moto = _atomic_dynamodb_moto(moto_port)
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

    def _physical(self, logical: str) -> str:
        return f"crcr-local-{logical}"

    def _create_queues(self, refs: dict[str, str], attrs: dict[tuple[str, str], str]) -> None:
        queues = resources_of(self.template, "AWS::SQS::Queue")
        sqs = self.client("sqs")
        # Dead-letter queues first: the others name them in their redrive policies.
        for logical in sorted(queues, key=lambda q: "RedrivePolicy" in queues[q]):
            props = queues[logical]
            name = self._physical(logical)
            attributes: dict[str, str] = {
                prop: str(props[prop])
                for prop in ("VisibilityTimeout", "MessageRetentionPeriod", "MaximumMessageSize", "DelaySeconds")
                if prop in props
            }
            if "RedrivePolicy" in props:
                if self.settings.local_visibility_timeout_s is not None:
                    attributes["VisibilityTimeout"] = str(self.settings.local_visibility_timeout_s)
                policy = dict(props["RedrivePolicy"])
                policy["deadLetterTargetArn"] = attrs[(policy["deadLetterTargetArn"]["Fn::GetAtt"][0], "Arn")]
                attributes["RedrivePolicy"] = json.dumps(policy)
            url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
            refs[logical] = self.queue_urls[logical] = url
            attrs[(logical, "Arn")] = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
            attrs[(logical, "QueueName")] = name
            attrs[(logical, "QueueUrl")] = url

    def _create_tables(self, refs: dict[str, str], attrs: dict[tuple[str, str], str]) -> None:
        ddb = self.client("dynamodb")
        for logical, props in resources_of(self.template, "AWS::DynamoDB::Table").items():
            name = self._physical(logical)
            with contextlib.suppress(ddb.exceptions.ResourceInUseException):
                ddb.create_table(**table_spec(name, props))
            if (props.get("PointInTimeRecoverySpecification") or {}).get("PointInTimeRecoveryEnabled"):
                # As CloudFormation would (moto's ignores it): the scheduled export needs it.
                ddb.update_continuous_backups(
                    TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
                )
            refs[logical] = name
            attrs[(logical, "Arn")] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
            stream_arn = ddb.describe_table(TableName=name)["Table"].get("LatestStreamArn")
            if stream_arn:
                attrs[(logical, "StreamArn")] = self.stream_arns[logical] = stream_arn

    def _create_buckets(self, refs: dict[str, str], attrs: dict[tuple[str, str], str]) -> None:
        s3 = self.client("s3")
        for logical in resources_of(self.template, "AWS::S3::Bucket"):
            name = self._physical(logical).lower()
            with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
                s3.create_bucket(Bucket=name)
            refs[logical] = name
            attrs[(logical, "Arn")] = f"arn:aws:s3:::{name}"

    def _create_resources(self) -> Resolver:
        refs: dict[str, str] = {}
        attrs: dict[tuple[str, str], str] = {}
        self._create_queues(refs, attrs)
        self._create_tables(refs, attrs)
        self._create_buckets(refs, attrs)
        for logical in self.template["Resources"]:
            refs.setdefault(logical, self._physical(logical))
        parameters = {
            name: str(spec.get("Default", "")) for name, spec in (self.template.get("Parameters") or {}).items()
        }
        parameters.update(self._parameter_overrides(parameters))
        return Resolver(parameters, refs, attrs, self.template.get("Conditions") or {}, REGION, ACCOUNT)

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
        context = Context(self._physical(logical_id), fn.timeout)
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

    # -- pollers ----------------------------------------------------------------------------------------
    def _poll(self, fn: FunctionDecl, queue_logical: str, batch_size: int, report_failures: bool) -> None:
        sqs = self.client("sqs")
        url = self.queue_urls[queue_logical]
        arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{self._physical(queue_logical)}"
        while not self._stop.is_set():
            try:
                got = sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=min(batch_size, 10),
                    WaitTimeSeconds=1,
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
            except Exception:  # moto restarting or gone while stopping
                if self._stop.wait(0.5):
                    return
                continue
            messages = got.get("Messages") or []
            if not messages:
                continue
            records = [_sqs_record(m, arn) for m in messages]
            try:
                result = self.invoke(fn.logical_id, {"Records": records})
            except Exception as exc:  # the whole batch returns after the visibility timeout, as in Lambda
                print(json.dumps({"event": "invoke_failed", "function": fn.logical_id, "error": repr(exc)}), flush=True)
                continue
            failed: set[str] = set()
            if report_failures and isinstance(result, dict):
                failed = {f["itemIdentifier"] for f in result.get("batchItemFailures") or []}
            done = [m for m in messages if m["MessageId"] not in failed]
            if done:
                try:
                    sqs.delete_message_batch(
                        QueueUrl=url,
                        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
                    )
                except Exception:  # AWS gone (stopping): the messages come back, as in Lambda
                    if self._stop.is_set():
                        return

    def _poll_stream(self, fn: FunctionDecl, source: StreamSource) -> None:
        """Lambda's stream event source: in order per shard, retry from the failed record, then on-failure."""
        if source.parallelization > 1:
            ParallelStream(self, fn, source).run()
            return
        reader = StreamReader(self.client("dynamodbstreams"), self.stream_arns[source.table])
        pending: dict[str, list[dict[str, Any]]] = {}
        retries: dict[str, int] = {}
        while not self._stop.is_set():
            busy = False
            try:
                for sid in reader.shards():
                    if not pending.get(sid):
                        # Lambda filters before it batches: a filtered stream is read further ahead.
                        read = reader.read(sid, source.batch_size if not source.filters else 1000)
                        pending[sid] = [r for r in read if passes(source.filters, r)]
                        busy = busy or bool(read)
                    if pending[sid]:
                        self._deliver_stream_batch(fn, source, sid, pending, retries)
                        busy = True
            except Exception:  # moto going away while stopping
                if self._stop.wait(0.5):
                    return
            if not busy:  # Lambda polls an idle shard 4 times a second, and one with records waiting at once
                self._stop.wait(0.2)

    def stream_failed(self, fn: FunctionDecl, source: StreamSource, shard: str, dropped: list[dict[str, Any]]) -> None:
        """Records given up on after the source's retries: their batch's description to the on-failure queue."""
        if not source.on_failure_queue:
            return
        self.client("sqs").send_message(
            QueueUrl=self.queue_urls[source.on_failure_queue],
            MessageBody=json.dumps(
                {
                    "requestContext": {"condition": "RetryAttemptsExhausted", "functionArn": fn.logical_id},
                    "DDBStreamBatchInfo": {
                        "shardId": shard,
                        "streamArn": self.stream_arns[source.table],
                        "startSequenceNumber": dropped[0]["dynamodb"]["SequenceNumber"],
                        "endSequenceNumber": dropped[-1]["dynamodb"]["SequenceNumber"],
                        "batchSize": len(dropped),
                    },
                }
            ),
        )

    def _deliver_stream_batch(
        self,
        fn: FunctionDecl,
        source: StreamSource,
        shard: str,
        pending: dict[str, list[dict[str, Any]]],
        retries: dict[str, int],
    ) -> None:
        batch = pending[shard][: source.batch_size]
        try:
            result = self.invoke(fn.logical_id, {"Records": batch})
            failed = [f["itemIdentifier"] for f in (result or {}).get("batchItemFailures") or []]
        except Exception:
            failed = [batch[0]["dynamodb"]["SequenceNumber"]]
        if not failed:
            pending[shard] = pending[shard][len(batch) :]
            retries[shard] = 0
            return
        first = next(i for i, r in enumerate(batch) if r["dynamodb"]["SequenceNumber"] in failed)
        pending[shard] = pending[shard][first:]
        retries[shard] = retries.get(shard, 0) + 1
        if source.max_retries >= 0 and retries[shard] > source.max_retries:
            dropped = pending[shard][: len(batch) - first]
            pending[shard] = pending[shard][len(dropped) :]
            retries[shard] = 0
            self.stream_failed(fn, source, shard, dropped)
            return
        self._stop.wait(min(2.0 ** retries[shard] * 0.1, 5.0))  # Lambda backs off between stream retries

    def _run_schedule(self, fn: FunctionDecl) -> None:
        """EventBridge's schedule, at the function's local period (SCHEDULE_INTERVALS; docs/configuration.md)."""
        interval = SCHEDULE_INTERVALS.get(fn.logical_id, _sweep_interval)(self.settings)
        wait = 0.0 if fn.logical_id in RUN_AT_START else interval  # the level status: computed now, then each interval
        while not self._stop.wait(wait):
            wait = interval
            event = {"source": "aws.events", "detail-type": "Scheduled Event", "time": time.time(), "detail": {}}
            try:
                self.invoke(fn.logical_id, event)
            except Exception as exc:  # as in Lambda: the next tick tries again
                print(json.dumps({"event": "invoke_failed", "function": fn.logical_id, "error": repr(exc)}), flush=True)

    def _start_pollers(self) -> None:
        for fn in self.functions:
            for source in fn.sqs_sources:
                for i in range(self.pollers_per_queue):
                    thread = threading.Thread(
                        target=self._poll,
                        args=(fn, source.queue, source.batch_size, source.report_failures),
                        name=f"poll-{fn.logical_id}-{i}",
                        daemon=True,
                    )
                    thread.start()
                    self._threads.append(thread)
            if fn.schedules:
                thread = threading.Thread(
                    target=self._run_schedule, args=(fn,), name=f"timer-{fn.logical_id}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            for stream in fn.stream_sources:
                thread = threading.Thread(
                    target=self._poll_stream, args=(fn, stream), name=f"stream-{fn.logical_id}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

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

    def route(
        self, method: str, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes, dict[str, str]]:
        if path == "/_crcr/status":
            return 200, json.dumps(self.status()).encode(), {"content-type": "application/json"}
        matched = self._match_route(method, path)
        if matched is None:  # what an HTTP API with no `$default` or ANY route answers, for any method
            return 404, b'{"message":"Not Found"}', {"content-type": "application/json"}
        fn, route_key, params = matched
        event = {
            "version": "2.0",
            "routeKey": f"{method} {route_key}",
            "rawPath": path,
            "pathParameters": params,
            "rawQueryString": query,
            "headers": {k.lower(): v for k, v in headers.items()},
            "requestContext": {
                "http": {"method": method, "path": path, "sourceIp": "127.0.0.1"},
                "requestId": str(uuid.uuid4()),
                "stage": "$default",
            },
            # API Gateway base64-encodes bodies it cannot pass as text; do the same for every body.
            "body": base64.b64encode(body).decode(),
            "isBase64Encoded": True,
        }
        result = self.invoke(fn.logical_id, event)
        out = result.get("body", "")
        data = base64.b64decode(out) if result.get("isBase64Encoded") else str(out).encode()
        return int(result.get("statusCode", 200)), data, dict(result.get("headers") or {})

    def operator_env(self) -> dict[str, str]:
        """The variables with which `crcr dlq`, `crcr hud export` and `crcr health` reach this stack."""
        env = {k: os.environ[k] for k in OPERATOR_ENV_KEYS if os.environ.get(k)}
        return env | {k: self.function_env[k] for k in OPERATOR_CRCR_KEYS if self.function_env.get(k)}

    def _match_route(self, method: str, path: str) -> tuple[FunctionDecl, str, dict[str, str]] | None:
        """API Gateway's matching: an exact route first (HTTP APIs route `/x/` to `GET /x` as well), then a
        greedy `{name+}` one (longest prefix; it never matches an empty rest)."""
        for exact in (path, path.rstrip("/")):
            if (method, exact) in self.routes:
                return self.routes[(method, exact)], exact, {}
        best: tuple[FunctionDecl, str, dict[str, str]] | None = None
        for (m, route), fn in self.routes.items():
            prefix, brace, rest = route.partition("{")
            if m != method or not brace or not rest.endswith("+}") or not path.startswith(prefix):
                continue
            value = path[len(prefix) :]
            if value and (best is None or len(prefix) > len(best[1].partition("{")[0])):
                best = (fn, route, {rest[:-2]: value})
        return best

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

    def _sandbox_webhook(self, event: str, doc: dict[str, Any]) -> None:
        """The sandbox's runs tell the App about themselves (`workflow_run`), signed as GitHub signs them."""
        assert self._webhooks is not None
        with contextlib.suppress(Unreachable):  # GitHub does not redeliver a failed webhook either
            self._webhooks.post(event, json.dumps(doc).encode(), str(uuid.uuid4()))

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
        self._stop.set()
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


def _close(server: FrontEnd | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()


def _header(headers: dict[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name), "")


def _sqs_record(message: dict[str, Any], arn: str) -> dict[str, Any]:
    """A Lambda SQS event record, as the event source mapping builds it."""
    attributes = {
        name: {
            "stringValue": value.get("StringValue"),
            "dataType": value.get("DataType"),
            "stringListValues": [],
            "binaryListValues": [],
        }
        for name, value in (message.get("MessageAttributes") or {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes") or {},
        "messageAttributes": attributes,
        "md5OfBody": message.get("MD5OfBody"),
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "awsRegion": REGION,
    }


def atomic_dynamodb(app: Any) -> Any:
    """A WSGI wrapper of moto's app that handles each DynamoDB request whole before the next starts. DynamoDB
    evaluates a condition and writes as one step; moto's server checks and writes without a lock, so two racing
    conditional writes (two workers claiming one dispatch, two pacers taking one slot) could both pass there."""
    import threading  # noqa: PLC0415

    lock = threading.Lock()

    def atomic(environ: dict[str, Any], start_response: Any) -> Any:
        if not str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB_"):
            return app(environ, start_response)
        with lock:
            return list(app(environ, start_response))

    return atomic


_PARTITION = threading.local()  # the (table, key) of the key Query this thread is answering, if any


def partition_queries() -> None:
    """moto answers a Query on a table's own key by listing and sorting every item of the table and keeping those
    of the partition, so a Query's cost grows with the table (a callback's Query of its dispatch's jobs: the
    soak's callbacks slowed from 10 to 2 a second by the 8,000th job, moto at a full core). This reads it from the
    one partition the key names, as DynamoDB does, with the same answer; index queries stay as moto does them.
    Idempotent, and safe across threads (the partition is this thread's own)."""
    from moto.dynamodb.models.table import Table  # noqa: PLC0415 - dev dependency, local stack only

    if getattr(Table.query, "_crcr_partition", False):
        return
    slow_query, slow_all_items = Table.query, Table.all_items
    signature = inspect.signature(slow_query)

    def all_items(self: Any) -> list[Any]:
        asked = getattr(_PARTITION, "asked", None)
        if asked is None or asked[0] is not self:
            return slow_all_items(self)
        partition = self.items.get(asked[1])
        if partition is None:
            return []
        if not self.range_key_attr:
            return [partition]
        return sorted(partition.values(), key=lambda item: item.range_key)

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, *args, **kwargs).arguments
        if call.get("index_name") or call.get("hash_key") is None:
            return slow_query(self, *args, **kwargs)
        _PARTITION.asked = (self, call["hash_key"])
        try:
            return slow_query(self, *args, **kwargs)
        finally:
            _PARTITION.asked = None

    query._crcr_partition = True  # type: ignore[attr-defined]
    Table.query, Table.all_items = query, all_items  # type: ignore[method-assign]


def item_maps_without_shape_walk() -> None:
    """moto writes every DynamoDB answer through its generic shape serializer, attribute by attribute (about 0.3 ms
    each): a Query of 200 job rows took 2 s of CPU, and since each DynamoDB request is handled whole before the next
    (`atomic_dynamodb`), every other caller waited behind it and timed out under the soak's load. An item's map of
    attribute values (Item, Items, Attributes, keys; the streams' images) is written here in one step, with the same
    JSON: binary values base64, everything else as it is. Idempotent."""
    from moto.core.serialize import BaseJSONSerializer  # noqa: PLC0415 - dev dependency, local stack only

    if getattr(BaseJSONSerializer._serialize_type_map, "_crcr_fast", False):
        return
    walk = BaseJSONSerializer._serialize_type_map

    def serialize_map(self: Any, serialized: dict[str, Any], value: Any, shape: Any, key: str) -> None:
        if getattr(shape.value, "name", None) != "AttributeValue" or not isinstance(value, dict):
            walk(self, serialized, value, shape, key)
            return
        serialized[key] = {name: attribute_json(av) for name, av in value.items()}

    serialize_map._crcr_fast = True  # type: ignore[attr-defined]
    serialize_map._crcr_walk = walk  # type: ignore[attr-defined]
    BaseJSONSerializer._serialize_type_map = serialize_map  # type: ignore[method-assign,assignment]


def attribute_json(av: Any) -> Any:
    """One attribute value as DynamoDB's JSON writes it: `B` and `BS` base64, `L` and `M` element by element."""
    if not isinstance(av, dict):
        return av
    out: dict[str, Any] = {}
    for kind, v in av.items():
        if kind == "B":
            out[kind] = _b64(v)
        elif kind == "BS":
            out[kind] = [_b64(b) for b in v]
        elif kind == "L":
            out[kind] = [attribute_json(e) for e in v]
        elif kind == "M":
            out[kind] = {k: attribute_json(e) for k, e in v.items()}
        else:
            out[kind] = v
    return out


def _b64(value: str | bytes) -> str:
    return base64.b64encode(value.encode() if isinstance(value, str) else value).decode()


def forget_spent_shard_iterators() -> None:
    """moto keeps every DynamoDB Streams shard iterator it ever handed out (each GetRecords answers a new one), so a
    stack polling its streams grew by one iterator per poll for as long as it ran. An iterator read from is
    forgotten once the next one is handed out: the stream pollers read on from the new one and never come back to
    an old one. Idempotent."""
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend  # noqa: PLC0415 - dev dependency, local only

    if getattr(DynamoDBStreamsBackend.get_records, "_crcr_forgets", False):
        return
    kept_all = DynamoDBStreamsBackend.get_records

    def get_records(self: Any, iterator_arn: str, limit: int) -> Any:
        answer = kept_all(self, iterator_arn, limit)
        if answer.get("NextShardIterator") != iterator_arn:
            self.shard_iterators.pop(iterator_arn, None)
        return answer

    get_records._crcr_forgets = True  # type: ignore[attr-defined]
    DynamoDBStreamsBackend.get_records = get_records  # type: ignore[method-assign]


def transactions_without_table_copies() -> None:
    """moto's TransactWriteItems deep-copies every table it names before it starts, to put the copy back if the
    transaction is cancelled: each transaction cost the whole table (items and every stream record) in time and
    memory, and a cancelled one swapped in a new table whose stream the pollers' iterators never saw again. Here a
    transaction keeps only the items it names, as they were: cancelled, those are put back; written, the stream gets
    one record per item it changed (none while it runs), as DynamoDB's does. Idempotent."""
    import copy as stdlib_copy  # noqa: PLC0415

    from moto.dynamodb import models  # noqa: PLC0415 - dev dependency, local stack only
    from moto.dynamodb.models.dynamo_type import DynamoType  # noqa: PLC0415
    from moto.dynamodb.models.table import Table  # noqa: PLC0415

    backend = models.DynamoDBBackend
    if getattr(backend.transact_write_items, "_crcr_items_only", False):
        return

    class _TablesUncopied:
        """moto's module sees this as `copy`: a table it copies for a rollback is handed back as it is."""

        def __getattr__(self, name: str) -> Any:
            return getattr(stdlib_copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return value if isinstance(value, Table) else stdlib_copy.deepcopy(value, memo)

    setattr(models, "copy", _TablesUncopied())  # noqa: B010 - the module-level name moto looks up
    whole_tables = backend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        touched: list[tuple[Any, Any, Any, Any]] = []  # (table, hash, range, the item before)
        for entry in transact_items:
            op: Any = next(iter(entry.values()), {})
            table = self.tables.get(op.get("TableName")) if isinstance(op, dict) else None
            attrs = (op.get("Key") or op.get("Item") or {}) if table is not None else {}
            if table is None or table.hash_key_attr not in attrs:
                continue  # moto refuses it below, before anything is written
            hash_key = DynamoType(attrs[table.hash_key_attr])
            range_key = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr in attrs else None
            if table.range_key_attr and range_key is None:
                continue
            before = table.get_item(hash_key, range_key)
            touched.append((table, hash_key, range_key, stdlib_copy.deepcopy(before)))
        shards = {id(t): t.stream_shard for t, *_ in touched if t.stream_shard is not None}
        for shard in shards.values():
            shard.add = lambda old, new: None  # no record while it runs
        try:
            whole_tables(self, transact_items)
        except Exception:
            for table, hash_key, range_key, before in reversed(touched):
                table.delete_item(hash_key, range_key)
                if before is not None:
                    table.put_item(before.to_json()["Attributes"])
            raise
        finally:
            for shard in shards.values():
                del shard.add
        for table, hash_key, range_key, before in touched:
            after = table.get_item(hash_key, range_key)
            if table.stream_shard is not None and (before is not None or after is not None):
                table.stream_shard.add(before, after)

    transact_write_items._crcr_items_only = True  # type: ignore[attr-defined]
    backend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def _atomic_dynamodb_moto(port: int) -> Any:
    """moto in server mode, with each DynamoDB request handled whole before the next (`atomic_dynamodb`)."""
    from moto.moto_server.werkzeug_app import (  # noqa: PLC0415
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from moto.server import ThreadedMotoServer  # noqa: PLC0415 - dev dependency, local stack only
    from werkzeug.serving import make_server  # noqa: PLC0415

    class Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            partition_queries()
            item_maps_without_shape_walk()
            forget_spent_shard_iterators()
            transactions_without_table_copies()
            app = atomic_dynamodb(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    return Server(ip_address="127.0.0.1", port=port, verbose=False)


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
