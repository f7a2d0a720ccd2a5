"""The bench's one harness: the stacks and doubles every section runs the relay on, and the counters it reads."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib
import itertools
import json
import multiprocessing
import os
import platform
import re
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# A `--baseline` run measures the relay code of another commit, exported there; the bench's own code stays this one.
CODE_ROOT = Path(os.environ.get("CRCR_BENCH_CODE_ROOT") or ROOT)
# Powertools reads the level when crcr's logger is created (first import): keep the relay quiet.
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
if str(ROOT) not in sys.path:  # tests.doubles lives at the project root, next to bench/
    sys.path.insert(0, str(ROOT))
if CODE_ROOT != ROOT or str(ROOT / "shared") not in sys.path:
    sys.path.insert(0, str(CODE_ROOT / "shared"))

from cryptography.hazmat.primitives import serialization  # noqa: E402
from write_units import StreamUnits, table_shapes  # noqa: E402

from crcr.adapters.observability import TOTALS, logger  # noqa: E402
from crcr.domain.signature import sign  # noqa: E402
from crcr.local.pollers import StreamReader, poll_queue, sqs_record  # noqa: E402
from crcr.local.resources import table_spec  # noqa: E402
from crcr.local.stack import Context, LocalStack, free_port, generate_keys  # noqa: E402
from crcr.local.template import resources_of  # noqa: E402
from tests.doubles.github_double import GitHubDouble, RecordedRequest  # noqa: E402
from tests.doubles.oidc_issuer import OidcIssuer  # noqa: E402

# Product internals the sections use, looked up when first used: a baseline run imports only what its section touches.
INTERNALS = {
    "crcr.app.ports.jobs": "JobRecord",
    "crcr.adapters.branch": "DynamoBranch",
    "crcr.adapters.regressions": "DynamoRegressions",
    "crcr.domain.regressions": "BranchCommit",
    "crcr.app.ports.ledger": "LedgerRow LedgerState",
    "crcr.adapters.pacer": "DynamoPacer",
    "crcr.adapters.job_items": "from_item to_item",
    "crcr.adapters.s3": "S3PageDocs",
    "crcr.app.summaries": "PR_COMMITS SummaryDeps _with_commits summary_of update_summaries with_index",
    "crcr.app.page_entries": "job_key",
    "crcr.app.page_notes": "PlanNote note_plan",
    "crcr.adapters.github": "GitHubApp GitHubCheckRuns",
    "crcr.adapters.allowlist_source": "parse_allowlist",
    "crcr.composition": "build_report_deps load_settings",
    "crcr.app.dispatch": "dispatch_id",
    "crcr.contracts.check_messages": "DispatchChanged",
    "crcr.app.checks_booking": "job_message",
    "crcr.domain.checks": "SWEPT",
    "crcr.domain.pacing": "CONTENT_RATES parse_rates",
    "crcr.ops.dlq": "list_dead_letters",
    "crcr.app.checks": "CheckDeps sync",
}


def __getattr__(name: str) -> Any:
    module = next((m for m, names in INTERNALS.items() if name in names.split()), None)
    if module is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(module), name)


APP_ID = "271828"
UPSTREAM, UPSTREAM_ID = "pytorch/pytorch", 65600975
EVENT_FILE = ROOT / "examples" / "events" / "pull_request.opened.json"
REPO_ID_BASE = 50_000  # target i has the repository id REPO_ID_BASE + i
MAX_INSTALLATIONS = 10  # targets spread round-robin over at most this many App installations (orgs)
AUDIENCE = "crcr"
POLLING = ("ReceiveMessage", "dynamodbstreams.")  # calls the pollers make whether or not there is work
_KINDS = (
    ("access_tokens", re.compile(r"/app/installations/\d+/access_tokens")),
    ("installation", re.compile(r"/repos/[^/]+/[^/]+/installation")),
    ("dispatches", re.compile(r"/repos/[^/]+/[^/]+/dispatches")),
)


def percentile(values: list[float], q: int) -> float:
    """Linear interpolation between the nearest ranks (numpy's default), q in 1..99."""
    if len(values) < 2:  # statistics.quantiles wants two (before Python 3.13)
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def summary_ms(values_s: list[float]) -> dict[str, Any]:
    ms = [v * 1000.0 for v in values_s]
    stats = {"p50": percentile(ms, 50), "p99": percentile(ms, 99), "mean": statistics.fmean(ms)} if ms else {}
    stats |= {"min": min(ms), "max": max(ms)} if ms else {}
    return {"samples": len(ms)} | {f"{k}_ms": round(v, 2) for k, v in stats.items()}


def metrics_delta(before: Counter[str], prefixes: tuple[str, ...] = ("",)) -> dict[str, int]:
    """The relay's metric tally since `before`, the names starting with one of `prefixes`."""
    return {k: v for k, v in sorted((Counter(TOTALS) - before).items()) if k.startswith(prefixes)}


def is_polling(operation: str) -> bool:
    """A poller's call (botocore's `dynamodbstreams.GetRecords` or soak_moto's `DynamoDBStreams.GetRecords`)."""
    return operation.endswith(POLLING[0]) or operation.lower().startswith(POLLING[1])


def per_unit(counts: Counter[str] | dict[str, int], n: int) -> dict[str, float]:
    """Each count per unit (`n` of them), and their `total` per unit."""
    return {k: round(v / n, 3) for k, v in sorted(counts.items())} | {"total": round(sum(counts.values()) / n, 3)}


def calls_per(before: Counter[str], after: Counter[str], n: int, unit: str) -> dict[str, Any]:
    """AWS calls per `unit` between two snapshots, leaving out polling."""
    ops = {k: v for k, v in sorted((after - before).items()) if not is_polling(k)}
    per = {k: round(v / max(1, n), 2) for k, v in ops.items()}
    return {f"per_{unit}": per, f"total_per_{unit}": round(sum(ops.values()) / max(1, n), 2)}


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


def errors_in(lines: list[str]) -> int:
    return sum(1 for line in lines if '"level":"ERROR"' in line.replace(" ", ""))


def request_kind(rec: RecordedRequest) -> str:
    return next((kind for kind, pattern in _KINDS if pattern.fullmatch(rec.path)), "other")


def breakdown(requests: list[RecordedRequest]) -> dict[str, int]:
    counts = Counter(request_kind(r) for r in requests)
    return {kind: counts.get(kind, 0) for kind in ("access_tokens", "installation", "dispatches", "other")}


def repo_of(rec: RecordedRequest) -> str:
    """The repository of a request on /repos/<owner>/<name>/..., lower-case."""
    return "/".join(rec.path.split("/")[2:4]).lower()


def delivery_of(rec: RecordedRequest) -> str:
    """The webhook delivery a dispatch was sent for."""
    return str(((rec.json or {}).get("client_payload") or {}).get("delivery_id"))


def github_tally(double: GitHubDouble, *, times: bool = False) -> dict[str, Any]:
    """What the relay asked of the GitHub double: requests by kind, dispatches accepted, repeated and refused."""
    requests = double.requests
    accepted = [r for r in requests if r.status == 204]
    landed = Counter((r.path.lower(), delivery_of(r)) for r in accepted)
    tally: dict[str, Any] = {
        "requests": {k: v for k, v in breakdown(requests).items() if v},
        "dispatches": len(accepted),
        "duplicates": sum(c - 1 for c in landed.values() if c > 1),
        "refused": sum(1 for r in requests if (r.status or 0) >= 400),
    }
    if times:
        by_repo: dict[str, list[float]] = {}
        for r in accepted:
            by_repo.setdefault(repo_of(r), []).append(r.time)
        tally["times_by_repo"] = by_repo
    return tally


def most_in_any(times: list[float], window_s: float) -> int:
    """The most of `times` (seconds) that fall in any `window_s`."""
    ordered, best, lo = sorted(times), 0, 0
    for hi, t in enumerate(ordered):
        while ordered[lo] <= t - window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def scan(ddb: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Every item a Scan returns, page after page."""
    return [item for page in ddb.get_paginator("scan").paginate(**kwargs) for item in page["Items"]]


def queue_depth(sqs: Any, url: str) -> int:
    """Messages waiting, delayed or in flight on a queue."""
    names = [f"ApproximateNumberOfMessages{kind}" for kind in ("", "NotVisible", "Delayed")]
    return sum(int(v) for v in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"].values())


def upstream_writes(double: GitHubDouble, path: str = "") -> list[RecordedRequest]:
    """Content-creating requests (POST, PATCH) on the upstream repository, under `path` if given."""
    prefix = f"/repos/{UPSTREAM}/{path}"
    return [q for q in double.requests if q.method in ("POST", "PATCH") and q.path.startswith(prefix)]


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time of this process (all threads) or of another process (from /proc)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class AwsCalls:
    """AWS API calls by service.Operation, overall and by thread, from a botocore hook on every client made after it."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        # Keyed by the thread itself: a thread id is reused once its thread ends, a Thread object kept here is not.
        self.by_thread: dict[threading.Thread, Counter[str]] = {}
        self._lock = threading.Lock()

    def install(self) -> AwsCalls:
        on_every_call(lambda model, **_: self._count(f"{model.service_model.service_name}.{model.name}"))
        return self

    def _count(self, name: str) -> None:
        thread = threading.current_thread()
        with self._lock:
            self.counts[name] += 1
            self.by_thread.setdefault(thread, Counter())[name] += 1

    def of_threads(self, threads: list[threading.Thread]) -> Counter[str]:
        with self._lock:
            return sum((self.by_thread.get(thread, Counter()) for thread in threads), Counter())

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


def on_every_call(hook: Callable[..., None], event: str = "before-call") -> Callable[[], None]:
    """A botocore hook on boto3's default session (so on every client made after it); returns its removal."""
    import boto3  # noqa: PLC0415

    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    events = boto3.DEFAULT_SESSION.events
    events.register(event, hook)
    return lambda: events.unregister(event, hook)


class FunctionWork:
    """A function's (or a few's) invocations on a stack, the records they were handed, and the CPU and AWS calls of the
    threads that ran them (the invoking thread and its `crcr.sqs_batch` workers), not what others do meanwhile."""

    def __init__(self, stack: LocalStack, function: str | tuple[str, ...], aws: AwsCalls) -> None:
        functions = (function,) if isinstance(function, str) else function
        self.invocations = self.records = 0
        self.records_by_source: Counter[str] = Counter()  # aws:sqs (a queue), aws:dynamodb (a table's stream)
        self.cpu_s = self.wall_s = 0.0
        self.calls: Counter[str] = Counter()
        self._aws = aws
        self._lock = threading.Lock()
        invoke = stack.invoke

        def counted(logical_id: str, event: dict[str, Any]) -> Any:
            if logical_id not in functions:
                return invoke(logical_id, event)
            cpu, calls, wall = self._cpu(), self._aws.of_threads(self._threads()), time.perf_counter()
            try:
                return invoke(logical_id, event)
            finally:
                spent_cpu, spent_calls = self._cpu(), self._aws.of_threads(self._threads()) - calls
                records = (event or {}).get("Records") or []
                with self._lock:
                    self.invocations += 1
                    self.records += len(records)
                    self.records_by_source.update(str(r.get("eventSource", "?")) for r in records)
                    self.cpu_s += sum(v - cpu.get(t, 0.0) for t, v in spent_cpu.items())  # a new worker from 0
                    self.wall_s += time.perf_counter() - wall
                    self.calls.update(spent_calls)

        stack.invoke = counted  # type: ignore[method-assign]

    @staticmethod
    def _threads() -> list[threading.Thread]:
        from crcr import sqs_batch  # noqa: PLC0415

        pools = sqs_batch._pools.__dict__.get("by_size", {})
        return [threading.current_thread(), *(t for pool in pools.values() for t in list(pool._threads))]

    def _cpu(self) -> dict[threading.Thread, float]:
        return {
            t: time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            for t in self._threads()
            if t.ident is not None and t.is_alive()
        }


class OutputCapture:
    """Sends fd 1 and 2 (the relay's Powertools logs, stray prints) to a file; `say` still reaches the terminal."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkstemp(prefix="crcr-bench-log-")[1])
        self._saved: list[int] = []
        self._lock = threading.Lock()

    def __enter__(self) -> OutputCapture:
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = [os.dup(1), os.dup(2)]
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

    def say(self, text: str) -> None:
        with self._lock:
            os.write(self._saved[0], f"{text}\n".encode())

    def offset(self) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        return self.path.stat().st_size

    def lines_between(self, start: int, end: int | None = None) -> list[str]:
        with self.path.open("rb") as fh:
            fh.seek(start)
            data = fh.read() if end is None else fh.read(max(0, end - start))
        return [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]


@dataclass
class Bench:
    """What every section is handed: the App's key, the AWS call counter and the captured output."""

    key: AppKey
    aws: AwsCalls
    out: OutputCapture


@dataclass(frozen=True)
class AppKey:
    private_pem: str  # PKCS#1, as GitHub issues App keys
    public_pem: bytes

    @classmethod
    def generate(cls) -> AppKey:
        private = generate_keys()["github_app_private_key"]
        public = serialization.load_pem_private_key(private.encode(), None).public_key()
        pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(private, pem)


class MotoProcess:
    """bench/soak_moto.py in a process of its own, one per stack: moto's CPU stays out of the relay's GIL, and a stack's
    queue URLs (the port is in them) are its own, so a poller left over can never reach the next stack."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None  # once started

    def __enter__(self) -> MotoProcess:
        argv = [sys.executable, str(Path(__file__).with_name("soak_moto.py")), str(self.port)]
        self._proc = started(argv, self._answers, "moto_server", 30)
        self.pid = self._proc.pid
        return self

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/moto-api/data.json", timeout=2):
            return True
        return False

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def calls(self) -> dict[str, Counter[str]]:
        with urllib.request.urlopen(self.url + "/_soak/aws-calls", timeout=10) as resp:
            return {who: Counter(c) for who, c in json.load(resp).items()}

    def stop(self) -> None:
        if self._proc is not None:
            end(self._proc, self._proc.terminate)


def wait_until(done: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    """Whether `done()` came true within `timeout_s`, asked every `every_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(every_s)
    return False


def started(argv: list[str], ready: Callable[[], bool], what: str, wait_s: float, **kw: Any) -> subprocess.Popen[Any]:
    """`argv` in a process of its own, returned once `ready()`; ended, and an error, if it exits or is not ready."""
    proc = subprocess.Popen(argv, **{"stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT} | kw)

    def up() -> bool:
        if ready():
            return True
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        return False

    try:
        if not wait_until(up, wait_s, 0.1):
            raise RuntimeError(f"{what} was not ready within {wait_s:g} s")
    except RuntimeError:
        end(proc, proc.terminate)
        raise
    return proc


def end(proc: subprocess.Popen[Any], ask: Callable[[], None], timeout_s: float = 10) -> None:
    """Ask a child process to end, and kill it if it has not within `timeout_s`."""
    if proc.poll() is None:
        try:
            ask()
            proc.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


class GitHubProcess:
    """The GitHub double in a process of its own, so the bench process's CPU is the relay's; `ask`: its tally."""

    def __init__(self, key: AppKey, installs: list[tuple[str, int, int]]) -> None:
        spawn = multiprocessing.get_context("spawn")
        self._pipe, child = spawn.Pipe()
        self._proc = spawn.Process(target=serve_github_double, args=(child, key.public_pem, installs), daemon=True)
        self._proc.start()
        self.url: str = self._pipe.recv()
        self._lock = threading.Lock()

    def ask(self, *, times: bool = False) -> dict[str, Any]:
        with self._lock:
            self._pipe.send(times)
            return dict(self._pipe.recv())

    def stop(self) -> None:
        self._pipe.close()  # the child's next receive fails: it stops its double and ends
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()


def github_double(public_pem: bytes, installs: list[tuple[str, int, int]], **kwargs: Any) -> GitHubDouble:
    """A GitHub double serving the bench's App, installed on each (repository, installation id, repository id)."""
    double = GitHubDouble(app_id=APP_ID, app_public_key_pem=public_pem, **kwargs)
    for repo, installation, repo_id in installs:
        double.install(repo, installation_id=installation, repo_id=repo_id)
    return double


def serve_github_double(pipe: Any, public_pem: bytes, installs: list[tuple[str, int, int]]) -> None:
    """GitHubProcess's child: the double's URL, then its tally each time it is asked, until the pipe closes."""
    double = github_double(public_pem, installs)
    pipe.send(double.url)
    with contextlib.suppress(EOFError):
        while True:
            pipe.send(github_tally(double, times=pipe.recv()))
    double.stop()


class QuietStack(LocalStack):
    """No poller at all, not even the streams' and schedules': the bench invokes the functions, or starts a queue's."""

    def _start_pollers(self) -> None:
        return None

    def start_pollers(self, function: str, pollers: int = 2) -> None:
        fn = next(f for f in self.functions if f.logical_id == function)
        for source, i in itertools.product(fn.sqs_sources, range(pollers)):
            args = (self, fn, source.queue, source.batch_size, source.report_failures)
            thread = threading.Thread(target=poll_queue, args=args, name=f"poll-{function}-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)


def run_name(body: dict[str, Any]) -> str:
    """A dispatched run's title as the example workflow's `run-name` makes it, the dispatch id last."""
    return f"crcr {body['event_type']} {body['client_payload']['dispatch_id']}"


def report_body(ticket: str, repo: str, job: str, run_id: int, status: str, conclusion: str | None) -> dict[str, Any]:
    """A downstream job's report (POST /callback), as the report action sends it."""
    body: dict[str, Any] = {
        "schema_version": 1,
        "ticket": ticket,
        "status": status,
        "workflow_name": "CI",
        "job_name": job,
        "run_id": run_id,
        "run_attempt": 1,
        "url": f"https://github.com/{repo}/actions/runs/{run_id}",
    }
    return body | ({"conclusion": conclusion} if conclusion else {})


def job_token(issuer: OidcIssuer, repo: str, repo_id: int, run_id: int, **claims: Any) -> str:
    """The job's OIDC token, with the claims the relay checks against the dispatch."""
    return issuer.token(repository=repo, repository_id=repo_id, run_id=run_id, lifetime=3600, **claims)


@dataclass
class Relay:
    """A local stack on its own moto process and GitHub double, and the repositories it relays to."""

    stack: LocalStack
    github: Any  # a GitHubDouble in this process, a GitHubProcess, or None
    moto: MotoProcess
    repos: list[str]
    issuer: OidcIssuer | None = None
    posted: dict[str, float] = field(default_factory=dict)  # delivery id -> wall time the POST started
    pollers_exited: bool | None = None
    stop_s: float | None = None
    _conn: http.client.HTTPConnection | None = None

    def post(self, body: bytes, event: str = "pull_request", *, keep_alive: bool = False) -> tuple[int, float, str]:
        """One signed webhook, as GitHub delivers it: (status, round trip seconds, delivery id)."""
        delivery = str(uuid.uuid4())
        body = distinct(body, delivery)
        headers = {
            "content-type": "application/json",
            "x-github-event": event,
            "x-github-delivery": delivery,
            "x-hub-signature-256": sign(self.stack.secrets["webhook_secret"].encode(), body),
            "user-agent": "GitHub-Hookshot/crcr-bench",
        }
        self.posted[delivery] = time.time()
        status, elapsed, _ = self._send("/webhook", body, headers, keep_alive=keep_alive)
        return status, elapsed, delivery

    def callback(self, body: bytes, token: str) -> tuple[int, float, bytes]:
        """One POST /callback over a new connection (each job reports from its own runner)."""
        headers = {"content-type": "application/json", "user-agent": "crcr-bench-downstream"}
        return self._send("/callback", body, headers | {"authorization": f"Bearer {token}"}, keep_alive=False)

    def report(self, i: int, ticket: str, job: str, run_id: int, status: str, conclusion: str | None = None) -> None:
        """Target i's job reports, with a fresh token from the issuer; anything but 200 stops the section."""
        body = json.dumps(report_body(ticket, self.repos[i], job, run_id, status, conclusion)).encode()
        assert self.issuer is not None
        code, _, reply = self.callback(body, job_token(self.issuer, self.repos[i], REPO_ID_BASE + i, run_id))
        if code != 200:
            raise RuntimeError(f"callback answered {code}: {reply[:200]!r}")

    def _send(self, path: str, body: bytes, headers: dict[str, str], *, keep_alive: bool) -> tuple[int, float, bytes]:
        """One POST, tried twice; a new connection each unless `keep_alive`, so threads may send side by side."""
        for attempt in (1, 2):
            conn = (keep_alive and self._conn) or http.client.HTTPConnection(self.stack.host, self.stack.port, 30)
            start = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                return resp.status, time.perf_counter() - start, data
            except (ConnectionError, http.client.HTTPException):
                conn.close()  # a kept connection closed this way connects again on its next request
                if attempt == 2:
                    raise
            finally:
                if keep_alive:
                    self._conn = conn
                else:
                    conn.close()
        raise AssertionError("unreachable")

    def wait_for_dispatches(self, expected: int, timeout_s: float, settle_s: float = 1.5) -> bool:
        """Poll until `expected` dispatches were accepted (204), then wait `settle_s` for any extra (duplicates)."""

        def accepted() -> int:
            return sum(1 for r in self.github.requests if r.status == 204 and request_kind(r) == "dispatches")

        landed = wait_until(lambda: accepted() >= expected, timeout_s)
        time.sleep(settle_s if landed else 0.0)
        return landed

    def tickets(self) -> list[tuple[int, int, str]]:
        """(target, its k-th dispatch, ticket) of every dispatch each target received."""
        return [
            (i, k, sent["client_payload"]["ticket"])
            for i, repo in enumerate(self.repos)
            for k, sent in enumerate(self.github.dispatches(repo))
        ]

    def wait_idle(self, timeout_s: float, queue: str = "ChecksQueue") -> bool:
        """Until the queue's function has nothing left: the queue empty twice in a row, a second apart."""
        deadline = time.monotonic() + timeout_s
        empty = 0
        while time.monotonic() < deadline:
            empty = empty + 1 if queue_depth(self.stack.client("sqs"), self.stack.queue_urls[queue]) == 0 else 0
            if empty >= 2:
                return True
            time.sleep(1.0)
        return False

    def units(self, *tables: str, row_of: Callable[[dict[str, Any]], str] | None = None) -> dict[str, StreamUnits]:
        """The write units of each named table (template.yaml's logical id), from its stream (bench/write_units.py)."""
        shapes, streams = table_shapes(CODE_ROOT / "template.yaml"), self.stack.client("dynamodbstreams")
        return {t: StreamUnits(StreamReader(streams, self.stack.stream_arns[t]), shapes[t], row_of) for t in tables}

    def results_copy(self, name: str) -> tuple[str, StreamReader]:
        """A copy of the results table (indexes and stream as in template.yaml), and a reader at its stream's start."""
        ddb = self.stack.client("dynamodb")
        copy = f"{self.stack.function_env['CRCR_RESULTS_TABLE']}-{name}"
        ddb.create_table(**table_spec(copy, resources_of(self.stack.template, "AWS::DynamoDB::Table")["ResultsTable"]))
        arn = ddb.describe_table(TableName=copy)["Table"]["LatestStreamArn"]
        return copy, StreamReader(self.stack.client("dynamodbstreams"), arn)

    def receive(self, queue: str, wait_s: int = 0) -> list[dict[str, Any]]:
        got = self.stack.client("sqs").receive_message(
            QueueUrl=self.stack.queue_urls[queue],
            MaxNumberOfMessages=10,
            WaitTimeSeconds=wait_s,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(got.get("Messages") or [])

    def delete(self, queue: str, messages: list[dict[str, Any]]) -> None:
        self.stack.client("sqs").delete_message_batch(
            QueueUrl=self.stack.queue_urls[queue],
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
        )

    def invoke(self, function: str, queue: str, messages: list[dict[str, Any]]) -> Any:
        """The function's handler called with `messages` as its queue's event source mapping would hand them."""
        arn = f"arn:aws:sqs:us-east-1:000000000000:crcr-local-{queue}"
        event = {"Records": [sqs_record(m, arn) for m in messages]}
        return self.stack.handlers[function](event, Context(f"crcr-local-{function}", 60))

    def plan_all(self, expected: int) -> None:
        """Run the planner on every event waiting (not measured)."""
        done = 0
        while done < expected:
            messages = self.receive("EventsQueue", wait_s=1)
            if messages:
                self.invoke("PlannerFunction", "EventsQueue", messages)
                self.delete("EventsQueue", messages)
                done += len(messages)

    def close(self) -> None:
        """Stop the stack, then its moto, so a poller still inside an invocation fails fast; wait for it to be gone."""
        if self._conn is not None:
            self._conn.close()
        start = time.perf_counter()
        try:
            self.stack.stop()
            self.moto.stop()
            self.pollers_exited = wait_until(
                lambda: not any(t.name.startswith("poll-") and t.is_alive() for t in threading.enumerate()), 60.0
            )
        finally:
            if self.github is not None:
                self.github.stop()
            self.stop_s = round(time.perf_counter() - start, 2)


def relay_env(key: AppKey, github_url: str, allowlist: Path, secret: str) -> dict[str, str]:
    """The relay's configuration on a GitHub double."""
    return {
        "CRCR_UPSTREAM_REPO": UPSTREAM,
        "CRCR_GITHUB_API_URL": github_url,
        "CRCR_GITHUB_APP_ID": APP_ID,
        "CRCR_GITHUB_APP_PRIVATE_KEY": key.private_pem,
        "CRCR_ALLOWLIST": str(allowlist),
        "CRCR_WEBHOOK_SECRET": secret,
    }


@contextlib.contextmanager
def relay(
    key: AppKey | None,
    targets: int = 0,
    *,
    installations: int = MAX_INSTALLATIONS,
    level: str = "L1",
    repo_settings: str = "",
    allowlist: str | None = None,
    pollers: int | None = 2,
    github: str | None = "here",
    oidc: bool = False,
    as_lambda: bool = False,
    env: dict[str, str] | None = None,
) -> Iterator[Relay]:
    """A fresh stack, moto process and GitHub double ("here", in a "process" of its own, or None), `targets` repos
    allowlisted at `level` (or the `allowlist` text); `pollers` per queue, or None for none at all; `as_lambda`:
    metrics (EMF lines) and INFO logs, into the capture file."""
    with contextlib.ExitStack() as hold:
        workdir = Path(hold.enter_context(tempfile.TemporaryDirectory(prefix="crcr-bench-")))
        moto = hold.enter_context(MotoProcess())
        k = max(1, min(targets, installations))  # round-robin over k installations, one org each
        repos = [(f"bench-org-{i % k}/repo-{i}", 7000 + i % k) for i in range(targets)]
        installs = [(repo, inst, REPO_ID_BASE + i) for i, (repo, inst) in enumerate(repos)]
        text = allowlist or f"{level}:\n" + "".join(f"  - {r}\n" for r, _ in repos)
        if repo_settings:  # the same per-repository settings for every target, e.g. "check_runs: per_repo"
            text += "repos:\n" + "".join(f"  {r}:\n    {repo_settings}\n" for r, _ in repos)
        (allowlist_file := workdir / "allowlist.yaml").write_text(text)
        config = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_ENDPOINT"))}
        config |= {"POWERTOOLS_LOG_LEVEL": "WARNING", "AWS_ENDPOINT_URL": moto.url, "CRCR_UPSTREAM_REPO": UPSTREAM}
        # No double: any URL keeps the stack from starting its sandbox GitHub and HUD; no App id, no check runs.
        config |= {"CRCR_ALLOWLIST": str(allowlist_file), "CRCR_GITHUB_API_URL": "http://127.0.0.1:9"}
        double: Any = None
        if github is not None:  # "here" (this process) or "process"
            assert key is not None
            double = GitHubProcess(key, installs) if github == "process" else github_double(key.public_pem, installs)
            hold.callback(double.stop)
            config |= relay_env(key, double.url, allowlist_file, uuid.uuid4().hex)
        issuer = hold.enter_context(OidcIssuer()) if oidc else None
        if issuer is not None:
            config |= {"CRCR_OIDC_ISSUER": issuer.url, "CRCR_OIDC_AUDIENCE": AUDIENCE}
        if as_lambda:
            config |= {"POWERTOOLS_METRICS_DISABLED": "false", "POWERTOOLS_LOG_LEVEL": "INFO"}
        config |= env or {}
        kind = QuietStack if pollers is None else LocalStack
        stack = kind(port=0, env=config, pollers_per_queue=pollers or 0, root=CODE_ROOT).start()  # stops if it fails
        the_relay = Relay(stack, double, moto, [r for r, _ in repos], issuer)
        hold.callback(the_relay.close)
        hold.callback(logger.setLevel, logger.log_level)
        if as_lambda:
            logger.setLevel("INFO")  # the logger was created at WARNING when crcr was first imported
        yield the_relay


def event_body() -> bytes:
    return EVENT_FILE.read_bytes()


def pr_event(n: int) -> tuple[bytes, int, str]:
    """The n-th pull request of a run: (body, number, head SHA), each PR its own."""
    doc = json.loads(event_body())
    pr, head = 9000 + n, f"{n + 1:040x}"
    doc["number"] = doc["pull_request"]["number"] = pr
    doc["pull_request"]["head"]["sha"] = head
    return json.dumps(doc).encode(), pr, head


def distinct(body: bytes, delivery: str) -> bytes:
    """The body (a JSON object) as an event of its own: GitHub never sends two events alike to the byte, and the relay
    takes the same signed bytes under a new delivery id for a replay. A field the relay does not read, put in front."""
    return b'{"crcr_bench_delivery": "' + delivery.encode() + b'", ' + body[1:]


def machine() -> dict[str, Any]:
    model = None
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_model": model or platform.processor() or None,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def run_start() -> dict[str, Any]:
    """When a run (the bench's, the soak's) started, on which commit and machine."""
    return {"timestamp": datetime.now(UTC).isoformat(timespec="seconds"), "git": git_info(), "machine": machine()}


def git_info() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(status), "modified": status.splitlines()[:20]}


def in_own_process(script: str, argv: list[str], code_root: Path | None = None) -> dict[str, Any]:
    """A section in a process of its own (as a function runs in its own execution environment: the bench's heap makes
    each garbage collection dearer), on another commit's relay code with `code_root`; `child_main` there answers."""
    with tempfile.TemporaryDirectory(prefix="crcr-bench-child-") as tmp:
        out_file, env = Path(tmp) / "result.json", {k: v for k, v in os.environ.items() if k != "CRCR_BENCH_CODE_ROOT"}
        env |= {"CRCR_BENCH_CODE_ROOT": str(code_root)} if code_root is not None else {}
        proc = subprocess.run([sys.executable, script, str(out_file), *argv], env=env, check=False)
        if proc.returncode != 0 or not out_file.exists():
            return {"skipped": True, "reason": f"the run exited with {proc.returncode}"}
        return dict(json.loads(out_file.read_text()))


def child_main(add_arguments: Callable[[Any], None], measure: Callable[[Bench, Any], dict[str, Any]]) -> int:
    """The child `in_own_process` starts: measures, writes the section's JSON to the file named first."""
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--full", action="store_true")
    add_arguments(parser)
    with OutputCapture() as out:
        args = parser.parse_args()
        result = measure(Bench(AppKey.generate(), AwsCalls().install(), out), args)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def at_baseline(ref: str, measure: Callable[[str, Path], dict[str, Any]]) -> dict[str, Any]:
    """`measure(commit, folder)` of the code at a git ref, exported to a temporary folder (skipped if no commit)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    if not commit:
        return {"skipped": True, "reason": f"{ref} is not a commit here"}
    with tempfile.TemporaryDirectory(prefix="crcr-bench-baseline-") as tmp:
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        then = measure(commit, Path(tmp))
    return then if then.get("skipped") else {"ref": ref, "commit": commit} | then
