"""Bench plumbing: an App key, a GitHub double with the targets installed, a local stack, signed webhooks.

Everything here is started and stopped by the benchmark itself; nothing outside bench/ is written.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Powertools reads the level when crcr's logger is created (first import): keep the relay quiet.
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
if str(ROOT) not in sys.path:  # tests.doubles lives at the project root, next to bench/
    sys.path.insert(0, str(ROOT))
if str(ROOT / "shared") not in sys.path:
    sys.path.insert(0, str(ROOT / "shared"))

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402

from crcr.adapters.observability import TOTALS  # noqa: E402
from crcr.domain.signature import sign  # noqa: E402
from crcr.local.stack import LocalStack  # noqa: E402
from tests.doubles.github_double import GitHubDouble, RecordedRequest  # noqa: E402

APP_ID = "271828"
UPSTREAM = "pytorch/pytorch"
EVENT_FILE = ROOT / "examples" / "events" / "pull_request.opened.json"
DISPATCH_FUNCTION = "DispatchFunction"
REPO_ID_BASE = 50_000  # the double gives target i the repository id REPO_ID_BASE + i

_KINDS = (
    ("access_tokens", re.compile(r"/app/installations/\d+/access_tokens")),
    ("installation", re.compile(r"/repos/[^/]+/[^/]+/installation")),
    ("dispatches", re.compile(r"/repos/[^/]+/[^/]+/dispatches")),
)


def request_kind(rec: RecordedRequest) -> str:
    for kind, pattern in _KINDS:
        if pattern.fullmatch(rec.path):
            return kind
    return "other"


def breakdown(requests: list[RecordedRequest]) -> dict[str, int]:
    counts = Counter(request_kind(r) for r in requests)
    return {kind: counts.get(kind, 0) for kind in ("access_tokens", "installation", "dispatches", "other")}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank-free linear interpolation (numpy's default), q in [0, 100]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary_ms(values_s: list[float]) -> dict[str, Any]:
    ms = [v * 1000.0 for v in values_s]
    if not ms:
        return {"samples": 0}
    return {
        "samples": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
        "min_ms": round(min(ms), 2),
        "max_ms": round(max(ms), 2),
    }


def metrics_delta(before: Counter[str]) -> dict[str, int]:
    now = Counter(TOTALS)
    now.subtract(before)
    return {k: v for k, v in sorted(now.items()) if v}


def log_summary(lines: list[str]) -> dict[str, Any]:
    """Relay output (Powertools JSON logs at WARNING+, stack prints) seen in a window."""
    levels: Counter[str] = Counter()
    samples: list[str] = []
    for line in lines:
        try:
            doc = json.loads(line)
            level = str(doc.get("level") or doc.get("event") or "json")
            text = f"{level}: {doc.get('message') or doc.get('error') or ''} {doc.get('exception_name') or ''}".strip()
        except ValueError:
            level, text = "text", line
        levels[level] += 1
        if len(samples) < 5 and text not in samples:
            samples.append(text[:300])
    return {"lines": len(lines), "by_level": dict(levels), "samples": samples}


@dataclass(frozen=True)
class AppKey:
    private_pem: str  # PKCS#1, as GitHub issues App keys
    public_pem: bytes

    @classmethod
    def generate(cls) -> AppKey:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        ).decode()
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return cls(private, public)


def target_repos(n: int, installations: int) -> list[tuple[str, int]]:
    """n repositories spread round-robin over `installations` orgs (one App installation per org)."""
    k = max(1, min(n, installations))
    return [(f"bench-org-{i % k}/repo-{i}", 7000 + i % k) for i in range(n)]


@dataclass
class Relay:
    """A GitHub double with the targets installed and a local stack pointed at it."""

    double: GitHubDouble
    stack: LocalStack
    repos: list[str]
    workdir: Path
    secret: bytes
    moto: MotoProcess
    _conn: http.client.HTTPConnection | None = None
    posted: dict[str, float] = field(default_factory=dict)  # delivery id -> wall time the POST started
    pollers_exited: bool | None = None
    stop_s: float | None = None

    # -- webhooks ----------------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.stack.host, self.stack.port, timeout=30)
        return self._conn

    def post(self, body: bytes, event: str = "pull_request", *, keep_alive: bool = False) -> tuple[int, float, str]:
        """One signed webhook: (status, round trip seconds, delivery id).

        By default each POST opens its own connection (the timing includes the TCP connect), as GitHub's
        deliveries do; keep_alive=True reuses one connection.
        """
        delivery = str(uuid.uuid4())
        body = distinct(body, delivery)
        headers = {
            "content-type": "application/json",
            "x-github-event": event,
            "x-github-delivery": delivery,
            "x-hub-signature-256": sign(self.secret, body),
            "user-agent": "GitHub-Hookshot/crcr-bench",
        }
        self.posted[delivery] = time.time()
        status, elapsed, _ = self._send("/webhook", body, headers, keep_alive=keep_alive)
        return status, elapsed, delivery

    def callback(self, body: bytes, token: str | None, *, keep_alive: bool = False) -> tuple[int, float, bytes]:
        """One POST /callback with `Authorization: Bearer <token>`: (status, round trip seconds, reply body).

        A new connection per POST by default: each downstream job reports from its own runner process.
        """
        headers = {"content-type": "application/json", "user-agent": "crcr-bench-downstream"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return self._send("/callback", body, headers, keep_alive=keep_alive)

    def _send(self, path: str, body: bytes, headers: dict[str, str], *, keep_alive: bool) -> tuple[int, float, bytes]:
        if not keep_alive and self._conn is not None:
            self._conn.close()
            self._conn = None
        for attempt in range(2):
            conn = self._connection()
            start = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                self._conn = None
                if attempt:
                    raise
                continue
            elapsed = time.perf_counter() - start
            if not keep_alive:
                conn.close()
                self._conn = None
            return resp.status, elapsed, data
        raise AssertionError("unreachable")

    # -- observation -------------------------------------------------------------------------------
    def accepted_dispatch_count(self) -> int:
        """Cheap to poll: counts 204s on /dispatches without copying payloads."""
        return sum(1 for r in self.double.requests if r.status == 204 and request_kind(r) == "dispatches")

    def wait_for_dispatches(self, expected: int, timeout_s: float, settle_s: float = 1.5) -> bool:
        """Poll until `expected` dispatches were accepted, then wait `settle_s` for any extra (duplicates)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.accepted_dispatch_count() >= expected:
                time.sleep(settle_s)
                return True
            time.sleep(0.05)
        return False

    def github_calls(self) -> dict[str, int] | None:
        """The relay's own tally of GitHub calls (GitHubApp.calls) in the dispatch function, if reachable."""
        module = sys.modules.get(f"crcr_fn_{DISPATCH_FUNCTION}")
        deps = getattr(module, "_deps", None)
        calls = getattr(getattr(deps, "github", None), "calls", None)
        counts = getattr(calls, "counts", None)
        return dict(counts) if isinstance(counts, dict) else None

    def close(self) -> None:
        """Stop the stack, then its moto: a poller still inside an invocation (LocalStack.stop joins each for
        5 s) then fails fast instead of reaching the next run. Wait for it to be gone."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        start = time.perf_counter()
        try:
            self.stack.stop()
            self.moto.stop()
            self.pollers_exited = wait_for_pollers_to_exit()
        finally:
            self.double.stop()
            self.stop_s = round(time.perf_counter() - start, 2)


def wait_for_pollers_to_exit(timeout_s: float = 60.0) -> bool:
    """LocalStack.stop() joins its pollers for 5 s each; one still inside a slow invocation runs on. Wait for it,
    so nothing of this stack touches the next one's queues, tally or GitHub double."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not [t for t in threading.enumerate() if t.name.startswith("poll-") and t.is_alive()]:
            return True
        time.sleep(0.05)
    return False


class AwsCalls:
    """Counts AWS API calls by service.Operation through a botocore hook on boto3's default session.

    Every client the relay and the stack create afterwards (boto3.client) copies the session's hooks.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.by_function: dict[str, Counter[str]] = {}  # the calls made inside each function's invocations
        # Every call by the thread that made it, keyed by the thread itself: a thread id is reused once its thread
        # ends (the front end starts one per connection), a Thread object kept here is not.
        self.by_thread: dict[threading.Thread, Counter[str]] = {}
        self._lock = threading.Lock()
        self._invoking = threading.local()

    def install(self) -> AwsCalls:
        import boto3  # noqa: PLC0415

        if boto3.DEFAULT_SESSION is None:
            boto3.setup_default_session()
        assert boto3.DEFAULT_SESSION is not None
        boto3.DEFAULT_SESSION.events.register("before-call", self._on_call)
        observe_dynamodb(self._count)
        return self

    def attribute(self, stack: Any) -> None:
        """Count the calls each function of `stack` makes apart: its invocations (`LocalStack.invoke`, in
        whichever thread the front end or a poller runs them) are marked with the function's logical id."""
        invoke = stack.invoke

        def marked(logical_id: str, event: dict[str, Any]) -> Any:
            outer = getattr(self._invoking, "function", None)
            self._invoking.function = logical_id
            try:
                return invoke(logical_id, event)
            finally:
                self._invoking.function = outer

        stack.invoke = marked

    def _on_call(self, model: Any, **_: Any) -> None:
        self._count(f"{model.service_model.service_name}.{model.name}")

    def _count(self, name: str) -> None:
        function = getattr(self._invoking, "function", None)
        thread = threading.current_thread()
        with self._lock:
            self.counts[name] += 1
            self.by_thread.setdefault(thread, Counter())[name] += 1
            if function is not None:
                self.by_function.setdefault(function, Counter())[name] += 1

    def of_threads(self, threads: list[threading.Thread]) -> Counter[str]:
        """The calls the given threads have made so far."""
        with self._lock:
            out: Counter[str] = Counter()
            for thread in threads:
                out.update(self.by_thread.get(thread, Counter()))
            return out

    def snapshot(self, function: str | None = None) -> Counter[str]:
        """Calls so far: all of them, or those made inside one function's invocations."""
        with self._lock:
            return Counter(self.counts if function is None else self.by_function.get(function, Counter()))


class FunctionWork:
    """One function's invocations on a stack, the records they were handed, and the CPU and AWS calls of the threads
    that ran them: the invoking thread and the batch's worker threads it keeps (`crcr.sqs_batch`: each invoking
    thread has its own pool, so those threads work for this function alone). Read per thread (the thread's CPU clock,
    `AwsCalls.by_thread`), so what the stack's other functions do meanwhile is not counted."""

    def __init__(self, stack: Any, function: str, aws: AwsCalls) -> None:
        self.function = function
        self.invocations = 0
        self.records = 0
        self.records_by_source: Counter[str] = Counter()  # aws:sqs (ChecksQueue), aws:dynamodb (a table's stream)
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.calls: Counter[str] = Counter()
        self._aws = aws
        self._lock = threading.Lock()
        invoke = stack.invoke

        def counted(logical_id: str, event: dict[str, Any]) -> Any:
            if logical_id != function:
                return invoke(logical_id, event)
            cpu, calls, wall = self._cpu(), self._calls(), time.perf_counter()
            try:
                return invoke(logical_id, event)
            finally:
                spent_cpu, spent_calls = self._cpu(), self._calls()
                spent_calls.subtract(calls)
                records = (event or {}).get("Records") or []
                with self._lock:
                    self.invocations += 1
                    self.records += len(records)
                    self.records_by_source.update(str(r.get("eventSource", "?")) for r in records)
                    self.cpu_s += sum(v - cpu.get(t, 0.0) for t, v in spent_cpu.items())  # a new worker from 0
                    self.wall_s += time.perf_counter() - wall
                    self.calls.update({k: v for k, v in spent_calls.items() if v})

        stack.invoke = counted

    @staticmethod
    def _threads() -> list[threading.Thread]:
        """The calling (invoking) thread and its batch workers."""
        from crcr import sqs_batch  # noqa: PLC0415

        pools = sqs_batch._pools.__dict__.get("by_size", {})
        return [threading.current_thread(), *(t for pool in pools.values() for t in list(pool._threads))]

    def _cpu(self) -> dict[threading.Thread, float]:
        out = {}
        for thread in self._threads():
            if thread.ident is not None and thread.is_alive():
                out[thread] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        return out

    def _calls(self) -> Counter[str]:
        return self._aws.of_threads(self._threads())


def observe_dynamodb(observer: Callable[[str], None]) -> None:
    """For a `--baseline` run of code from 2026-12-02 to 2026-12-03 (up to b05e48f), whose DynamoDB calls and SQS
    sends went through its own JSON-API client and so skipped botocore's hooks: they are counted through that
    client's observers, with the same `dynamodb.<Operation>` and `sqs.<Operation>` names. The relay's calls go
    through botocore before and since, and its `before-call` hook counts them."""
    try:
        from crcr.adapters.dynamodb_client import call_observers  # noqa: PLC0415
    except ImportError:
        return
    call_observers.append(observer)


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time of this process (all threads) or of another process (from /proc)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MotoProcess:
    """moto in server mode in its own process, one per stack.

    LocalStack starts moto in its own process by default, where every moto server shares moto's global
    backends and competes with the handlers for the GIL. LocalStack uses an AWS_ENDPOINT_URL it is given
    instead; a process per stack also gives each stack its own queue URLs (the port is in them), so a
    poller left over from an earlier stack can never reach a later stack's queues.
    """

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> MotoProcess:
        # bench/soak_moto.py: moto's server with each DynamoDB request whole before the next and a key Query read
        # from its partition, as DynamoDB does both (and as `crcr local` runs moto).
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("soak_moto.py")), str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/data.json", timeout=2):
                    return self
            except OSError:
                if self._proc.poll() is not None:
                    raise RuntimeError("moto_server exited at start") from None
                time.sleep(0.1)
        raise RuntimeError("moto_server did not answer within 30 s")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_ENDPOINT"))}


@contextlib.contextmanager
def relay(
    key: AppKey,
    n_targets: int,
    *,
    installations: int,
    pollers_per_queue: int = 2,
    level: str = "L1",
    extra_env: dict[str, str] | None = None,
    repo_settings: str = "",
) -> Iterator[Relay]:
    """A fresh GitHub double, moto process and local stack: nothing is shared with any other run.

    Every target is allowlisted at `level` (with `repo_settings` under `repos:`, if given); `extra_env` adds to
    (or overrides) the stack's configuration.
    """
    with tempfile.TemporaryDirectory(prefix="crcr-bench-") as tmp, MotoProcess() as moto:
        workdir = Path(tmp)
        double = GitHubDouble(app_id=APP_ID, app_public_key_pem=key.public_pem)
        repos: list[str] = []
        try:
            for i, (repo, installation_id) in enumerate(target_repos(n_targets, installations)):
                double.install(repo, installation_id=installation_id, repo_id=REPO_ID_BASE + i)
                repos.append(repo)
            allowlist = workdir / "allowlist.yaml"
            text = f"{level}:\n" + "".join(f"  - {r}\n" for r in repos)
            if repo_settings:  # the same per-repository settings for every target, e.g. "check_runs: per_repo"
                text += "repos:\n" + "".join(f"  {r}:\n    {repo_settings}\n" for r in repos)
            allowlist.write_text(text)
            secret = uuid.uuid4().hex
            env = (
                clean_env()
                | {
                    "CRCR_UPSTREAM_REPO": UPSTREAM,
                    "CRCR_GITHUB_API_URL": double.url,
                    "CRCR_GITHUB_APP_ID": APP_ID,
                    "CRCR_GITHUB_APP_PRIVATE_KEY": key.private_pem,
                    "CRCR_ALLOWLIST": str(allowlist),
                    "CRCR_WEBHOOK_SECRET": secret,
                    "POWERTOOLS_LOG_LEVEL": "WARNING",
                    "AWS_ENDPOINT_URL": moto.url,
                }
                | (extra_env or {})
            )
            stack = LocalStack(port=0, env=env, pollers_per_queue=pollers_per_queue)
        except BaseException:
            double.stop()
            raise
        try:
            stack.start()
        except BaseException:
            with contextlib.suppress(Exception):
                stack.stop()
            double.stop()
            raise
        the_relay = Relay(double, stack, repos, workdir, stack.secrets.get("webhook_secret", secret).encode(), moto)
        try:
            yield the_relay
        finally:
            the_relay.close()


def event_body() -> bytes:
    return EVENT_FILE.read_bytes()


def distinct(body: bytes, delivery: str) -> bytes:
    """The body as an event of its own: GitHub never sends two events alike to the byte, and the relay takes the
    same signed bytes under a new delivery id for a replay. A field the relay does not read, put in front."""
    if not body.startswith(b"{") or body[1:].lstrip().startswith(b"}"):
        return body
    return b'{"crcr_bench_delivery": "' + delivery.encode() + b'", ' + body[1:]


class OutputCapture:
    """Sends fd 1 and 2 (the relay's Powertools logs, stray prints) to a file; `say` still reaches the terminal."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkstemp(prefix="crcr-bench-log-")[1])
        self._saved: list[int] = []
        self._lock = threading.Lock()
        self.terminal = sys.__stdout__

    def __enter__(self) -> OutputCapture:
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = [os.dup(1), os.dup(2)]
        self.terminal = os.fdopen(os.dup(self._saved[0]), "w", buffering=1)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        self.terminal.close()
        self.terminal = sys.__stdout__

    def say(self, text: str) -> None:
        with self._lock:
            print(text, file=self.terminal, flush=True)

    def offset(self) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        return self.path.stat().st_size

    def lines_between(self, start: int, end: int | None = None) -> list[str]:
        with self.path.open("rb") as fh:
            fh.seek(start)
            data = fh.read() if end is None else fh.read(max(0, end - start))
        return [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
