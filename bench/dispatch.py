"""The dispatcher's own cost (see bench/README.md, section 10): AWS calls and relay CPU per warm dispatch, and the
re-queues a backlog costs under the per-installation pacer.

`warm`: one moto process, one local stack with no poller, and the GitHub double in a process of its own, so the
bench process is the relay alone. Webhooks go in through the stack's HTTP front and the bench runs the planner on
them; then it receives the dispatch queue in batches of up to 10, as Lambda's event source mapping does, and
calls functions/dispatch/handler.py itself, counting AWS calls (botocore hook) and this process's CPU during those
calls only.

`backlog`: `--backlog-events` events x `--backlog-repos` repositories, one installation each, all planned before
any is dispatched (a backlog), then drained by the local stack's own pollers. The stack runs with
`CRCR_GITHUB_WRITE_RATES` scaled down in time (`--backlog-rates`), so the pacing that takes hours with GitHub's
budget takes a minute here; the figure is re-queues (`DispatchRetried.reason=paced`) per paced dispatch.

    .venv/bin/python bench/dispatch.py [--events 14] [--targets 10] [--backlog-events 120] [--backlog-repos 5]
        [--baseline REF] [--out FILE]

`--baseline REF` also runs both scenarios against the code at git REF (exported to a temporary directory and run in
a subprocess), so the figures before and after a change come from the same run on the same machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent


def _code_root() -> Path:
    """The relay code this process measures: CRCR_BENCH_CODE_ROOT (a baseline's export) or this checkout."""
    return Path(os.environ.get("CRCR_BENCH_CODE_ROOT") or HERE.parent)


sys.path.insert(0, str(HERE))
if os.environ.get("CRCR_BENCH_CODE_ROOT"):
    sys.path.insert(0, str(_code_root() / "shared"))

from gitref import exported  # noqa: E402
from harness import (  # noqa: E402
    APP_ID,
    EVENT_FILE,
    UPSTREAM,
    AppKey,
    AwsCalls,
    MotoProcess,
    OutputCapture,
    clean_env,
    distinct,
    metrics_delta,
    observe_dynamodb,
    target_repos,
)
from write_units import StreamUnits, table_shapes  # noqa: E402

from crcr.adapters.observability import TOTALS, logger  # noqa: E402
from crcr.domain.signature import sign  # noqa: E402
from crcr.local.stack import Context, LocalStack, _sqs_record  # noqa: E402

DISPATCH = "DispatchFunction"
PLANNER = "PlannerFunction"
DISPATCH_QUEUE = "DispatchQueue"
EVENTS_QUEUE = "EventsQueue"
REPO_ID_BASE = 50_000
# GitHub.com's budget (60/60+15,440/3600+50) with every period divided by 4: the same shape, four times faster. The
# backlog's 120 dispatches per installation take 2.5 minutes to drain instead of 10, and the budget, not the local
# stack (about 9 dispatches a second here), still sets the pace: 2.4 a second over the five installations.
BACKLOG_RATES = "60/15+15,440/900+50"


# ---------------------------------------------------------------------------------------------------------------
# The GitHub double in a process of its own: the bench process's CPU is then the relay's alone.
# ---------------------------------------------------------------------------------------------------------------
def _serve_double() -> None:
    """Child side: read the set-up from stdin, print the double's URL, then answer commands, one JSON line each."""
    sys.path.insert(0, str(HERE.parent))
    from tests.doubles.github_double import GitHubDouble  # noqa: PLC0415

    setup = json.loads(sys.stdin.readline())
    double = GitHubDouble(app_id=setup["app_id"], app_public_key_pem=setup["public_key_pem"].encode())
    for repo, installation, repo_id in setup["installs"]:
        double.install(repo, installation_id=installation, repo_id=repo_id)
    print(json.dumps({"url": double.url}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)["cmd"]
        if cmd == "stop":
            break
        requests = double.requests
        kinds: Counter[str] = Counter()
        for r in requests:
            kind = "other"
            if r.path.endswith("/dispatches"):
                kind = "dispatches"
            elif r.path.endswith("/access_tokens"):
                kind = "access_tokens"
            elif r.path.endswith("/installation"):
                kind = "installation"
            kinds[kind] += 1
        accepted = [(r.path, r.time, (r.json or {}).get("client_payload") or {}) for r in requests if r.status == 204]
        landed = Counter((path.lower(), str(p.get("delivery_id"))) for path, _, p in accepted)
        by_repo: dict[str, list[float]] = {}
        for path, at, _ in accepted:
            by_repo.setdefault("/".join(path.split("/")[2:4]).lower(), []).append(at)
        reply = {
            "requests": dict(kinds),
            "dispatches": len(accepted),
            "duplicates": sum(c - 1 for c in landed.values() if c > 1),
            "refused": sum(1 for r in requests if (r.status or 0) >= 400),
            "unexpected": len(double.unexpected),
            "internal_errors": len(double.internal_errors),
        }
        if cmd == "times":
            reply["times_by_repo"] = by_repo
        print(json.dumps(reply), flush=True)
    double.stop()


class DoubleProcess:
    """Parent side of _serve_double."""

    def __init__(self, key: AppKey, installs: list[tuple[str, int, int]]) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve-github-double"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "CRCR_BENCH_CODE_ROOT"},
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        setup = {"app_id": APP_ID, "public_key_pem": key.public_pem.decode(), "installs": installs}
        self._proc.stdin.write(json.dumps(setup) + "\n")
        self._proc.stdin.flush()
        self.url: str = json.loads(self._proc.stdout.readline())["url"]
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def ask(self, cmd: str = "count") -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(json.dumps({"cmd": cmd}) + "\n")
            self._proc.stdin.flush()
            return dict(json.loads(self._proc.stdout.readline()))

    def stop(self) -> None:
        if self._proc.poll() is None and self._proc.stdin is not None:
            try:
                self._proc.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
                self._proc.stdin.flush()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()


class QuietStack(LocalStack):
    """No stream poller or schedule either: the bench alone invokes functions, until it starts the dispatch
    queue's pollers itself (`backlog`: once every event is planned, as after an outage or a burst)."""

    def _start_pollers(self) -> None:
        return None

    def start_dispatch_pollers(self, pollers: int = 2) -> None:
        fn = next(f for f in self.functions if f.logical_id == DISPATCH)
        for source in fn.sqs_sources:
            for i in range(pollers):
                thread = threading.Thread(
                    target=self._poll,
                    args=(fn, source.queue, source.batch_size, source.report_failures),
                    name=f"poll-{fn.logical_id}-{i}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)


@contextmanager
def dispatch_stack(
    key: AppKey, repos: int, installations: int, *, level: str = "L1", extra_env: dict[str, str] | None = None
) -> Iterator[tuple[QuietStack, DoubleProcess, MotoProcess, list[str]]]:
    with tempfile.TemporaryDirectory(prefix="crcr-bench-dispatch-") as tmp, MotoProcess() as moto:
        targets = target_repos(repos, installations)
        double = DoubleProcess(key, [(repo, inst, REPO_ID_BASE + i) for i, (repo, inst) in enumerate(targets)])
        try:
            allowlist = Path(tmp) / "allowlist.yaml"
            allowlist.write_text(f"{level}:\n" + "".join(f"  - {repo}\n" for repo, _ in targets))
            env = (
                clean_env()
                | {
                    "CRCR_UPSTREAM_REPO": UPSTREAM,
                    "CRCR_GITHUB_API_URL": double.url,
                    "CRCR_GITHUB_APP_ID": APP_ID,
                    "CRCR_GITHUB_APP_PRIVATE_KEY": key.private_pem,
                    "CRCR_ALLOWLIST": str(allowlist),
                    "CRCR_WEBHOOK_SECRET": uuid.uuid4().hex,
                    "AWS_ENDPOINT_URL": moto.url,
                    # As in Lambda (template.yaml): metrics on (EMF lines), INFO logs. Both go to the capture file.
                    "POWERTOOLS_METRICS_DISABLED": "false",
                    "POWERTOOLS_LOG_LEVEL": "INFO",
                }
                | (extra_env or {})
            )
            stack = QuietStack(port=0, env=env, pollers_per_queue=0, root=_code_root())
            stack.start()
            level = logger.log_level
            logger.setLevel("INFO")  # the logger was created at WARNING when crcr was first imported
            try:
                yield stack, double, moto, [repo for repo, _ in targets]
            finally:
                logger.setLevel(level)
                stack.stop()
        finally:
            double.stop()


def _post(stack: LocalStack, body: bytes) -> str:
    import http.client  # noqa: PLC0415

    delivery = str(uuid.uuid4())
    body = distinct(body, delivery)
    secret = stack.secrets["webhook_secret"].encode()
    conn = http.client.HTTPConnection(stack.host, stack.port, timeout=30)
    try:
        conn.request(
            "POST",
            "/webhook",
            body=body,
            headers={
                "content-type": "application/json",
                "x-github-event": "pull_request",
                "x-github-delivery": delivery,
                "x-hub-signature-256": sign(secret, body),
            },
        )
        status = conn.getresponse().status
    finally:
        conn.close()
    if status != 202:
        raise RuntimeError(f"webhook answered {status}")
    return delivery


def _receive(stack: LocalStack, queue: str, wait_s: int = 0) -> list[dict[str, Any]]:
    got = stack.client("sqs").receive_message(
        QueueUrl=stack.queue_urls[queue],
        MaxNumberOfMessages=10,
        WaitTimeSeconds=wait_s,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )
    return list(got.get("Messages") or [])


def _delete(stack: LocalStack, queue: str, messages: list[dict[str, Any]]) -> None:
    stack.client("sqs").delete_message_batch(
        QueueUrl=stack.queue_urls[queue],
        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
    )


def _invoke(stack: LocalStack, function: str, queue: str, messages: list[dict[str, Any]]) -> Any:
    arn = f"arn:aws:sqs:us-east-1:000000000000:crcr-local-{queue}"
    handler = stack.handlers[function]
    return handler({"Records": [_sqs_record(m, arn) for m in messages]}, Context(f"crcr-local-{function}", 60))


def _plan_all(stack: LocalStack, expected: int) -> None:
    """Run the planner on every event waiting (not measured)."""
    done = 0
    while done < expected:
        messages = _receive(stack, EVENTS_QUEUE, wait_s=1)
        if messages:
            _invoke(stack, PLANNER, EVENTS_QUEUE, messages)
            _delete(stack, EVENTS_QUEUE, messages)
            done += len(messages)


class Window:
    """AWS calls, CPU and wall time of this process during the handler calls only."""

    def __init__(self, aws: AwsCalls) -> None:
        self._aws = aws
        self.calls: Counter[str] = Counter()
        self.cpu_s = 0.0
        self.sys_s = 0.0
        self.gc_s = 0.0
        self.collections = 0
        self._gc_started: float | None = None
        self.wall_s = 0.0
        self.batches = 0
        self.batch_sizes: list[int] = []
        self.writes: Counter[str] = Counter()
        self.units: Counter[str] = Counter()
        self.units_by_row: Counter[str] = Counter()
        self.largest_item: dict[str, int] = {}

    def add_units(self, taken: dict[str, Any]) -> None:
        self.writes.update(taken["writes"])
        self.units.update(taken["by_destination"])
        self.units_by_row.update(taken["by_row"])
        for row, size in taken["largest_item_bytes_by_row"].items():
            self.largest_item[row] = max(self.largest_item.get(row, 0), size)

    @contextmanager
    def measure(self, size: int) -> Iterator[None]:
        before = self._aws.snapshot()
        cpu, wall, kernel = time.process_time(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
        gc.callbacks.append(self._collection)
        try:
            yield
        finally:
            gc.callbacks.remove(self._collection)
            self.cpu_s += time.process_time() - cpu
            self.sys_s += resource.getrusage(resource.RUSAGE_SELF).ru_stime - kernel
            self.wall_s += time.perf_counter() - wall
            after = self._aws.snapshot()
            after.subtract(before)
            self.calls.update({k: v for k, v in after.items() if v})
            self.batches += 1
            self.batch_sizes.append(size)

    def _collection(self, phase: str, info: dict[str, Any]) -> None:
        """The garbage collector's CPU in the window (it runs in the thread that triggered it)."""
        if phase == "start":
            self._gc_started = time.thread_time()
        elif self._gc_started is not None:
            self.gc_s += time.thread_time() - self._gc_started
            self.collections += 1
            self._gc_started = None

    def report(self, dispatches: int) -> dict[str, Any]:
        n = max(1, dispatches)
        return {
            "dispatches": dispatches,
            "batches": self.batches,
            "mean_batch_size": round(sum(self.batch_sizes) / max(1, self.batches), 2),
            "aws_calls": dict(sorted(self.calls.items())),
            "aws_calls_per_dispatch": {k: round(v / n, 3) for k, v in sorted(self.calls.items())},
            "aws_calls_per_dispatch_total": round(sum(self.calls.values()) / n, 3),
            "relay_cpu_ms_per_dispatch": round(self.cpu_s * 1000 / n, 3),
            "relay_cpu_kernel_ms_per_dispatch": round(self.sys_s * 1000 / n, 3),  # of which in the kernel
            "relay_cpu_gc_ms_per_dispatch": round(self.gc_s * 1000 / n, 3),  # and in the garbage collector
            "gc_collections": self.collections,
            "handler_wall_ms_per_dispatch": round(self.wall_s * 1000 / n, 3),
            # DynamoDB write request units of the state table's writes, from its stream (bench/write_units.py)
            "state_writes_per_dispatch": {k: round(v / n, 3) for k, v in sorted(self.writes.items())},
            "write_units_per_dispatch": round(sum(self.units.values()) / n, 3),
            "write_units_per_dispatch_by_destination": {k: round(v / n, 3) for k, v in sorted(self.units.items())},
            "write_units_per_dispatch_by_row": {k: round(v / n, 3) for k, v in sorted(self.units_by_row.items())},
            "largest_item_bytes_by_row": dict(sorted(self.largest_item.items())),
        }


def _drain_dispatches(
    stack: LocalStack, window: Window, expected: int, timeout_s: float, units: StreamUnits | None = None
) -> int:
    """Hand the dispatch queue to the handler in batches of up to 10 until `expected` have been handled; the state
    table's write units of those calls go to `window` when `units` reads its stream."""
    if units is not None:
        units.take()  # what the webhook and the planner wrote before
    handled = 0
    deadline = time.monotonic() + timeout_s
    while handled < expected and time.monotonic() < deadline:
        messages = _receive(stack, DISPATCH_QUEUE, wait_s=1)
        if not messages:
            continue
        with window.measure(len(messages)):
            result = _invoke(stack, DISPATCH, DISPATCH_QUEUE, messages)
        failed = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures") or []}
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            _delete(stack, DISPATCH_QUEUE, done)
        handled += len(done)
    if units is not None:
        window.add_units(units.take())
    return handled


def warm_cost(
    key: AppKey, aws: AwsCalls, out: OutputCapture, *, events: int, targets: int, timeout_s: float, level: str = "L1"
) -> dict[str, Any]:
    """One cold event, then `events` warm ones, each to `targets` repositories (at `level`) over min(targets, 10)
    installations: the dispatch handler's AWS calls and CPU per dispatch."""
    body = EVENT_FILE.read_bytes()
    installations = min(targets, 10)
    before = Counter(TOTALS)
    start_off = out.offset()
    with dispatch_stack(key, targets, installations, level=level) as (stack, double, moto, _):
        _post(stack, body)
        _plan_all(stack, 1)
        units = StreamUnits(
            stack.client("dynamodb"),
            stack.client("dynamodbstreams"),
            stack.function_env["CRCR_STATE_TABLE"],
            table_shapes(_code_root() / "template.yaml")["StateTable"],
        )
        cold = Window(aws)
        cold_handled = _drain_dispatches(stack, cold, targets, timeout_s, units)
        warm = Window(aws)
        warm_handled, moto_cpu, github_cpu = 0, 0.0, 0.0
        for _ in range(events):  # steady state: each event planned and its dispatches handed over as it arrives
            _post(stack, body)
            _plan_all(stack, 1)
            moto_before, github_before = _proc_cpu(moto.pid), _proc_cpu(double.pid)
            warm_handled += _drain_dispatches(stack, warm, targets, timeout_s, units)
            moto_cpu += _proc_cpu(moto.pid) - moto_before
            github_cpu += _proc_cpu(double.pid) - github_before
        call_cpu_ms = _one_call_cpu_ms(stack)
        time.sleep(1.0)  # a duplicate, if any, would land now
        seen = double.ask()
    lines = out.lines_between(start_off)
    expected = (1 + events) * targets
    result = {
        "events": events,
        "targets": targets,
        "installations": installations,
        "level": level,
        "cold": cold.report(cold_handled),
        "warm": warm.report(warm_handled)
        | {
            "moto_cpu_ms_per_dispatch": round(moto_cpu * 1000 / max(1, warm_handled), 2),
            "github_double_cpu_ms_per_dispatch": round(github_cpu * 1000 / max(1, warm_handled), 2),
        },
        # What one DynamoDB call costs this process here and now (a GetItem through the relay's own client, after
        # the run): the CPU figure above is about that times the calls, plus the rest of the dispatch.
        "one_aws_call_cpu_ms": call_cpu_ms,
        "dispatches_landed": seen["dispatches"],
        "dispatches_expected": expected,
        "duplicates": seen["duplicates"],
        "github_requests": seen["requests"],
        "refused": seen["refused"],
        "relay_metrics": {k: v for k, v in metrics_delta(before).items() if k.startswith("Dispatch")},
        "relay_errors": sum(1 for line in lines if '"level":"ERROR"' in line.replace(" ", "")),
    }
    return result


def _one_call_cpu_ms(stack: LocalStack, calls: int = 200) -> float:
    from crcr.composition import aws_client  # noqa: PLC0415

    ddb = aws_client("dynamodb")
    table = stack.function_env["CRCR_STATE_TABLE"]
    key = {"pk": {"S": "BENCH#calibration"}, "sk": {"S": "none"}}
    for _ in range(20):
        ddb.get_item(TableName=table, Key=key, ConsistentRead=True)
    start = time.process_time()
    for _ in range(calls):
        ddb.get_item(TableName=table, Key=key, ConsistentRead=True)
    return round((time.process_time() - start) * 1000 / calls, 3)


def _proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# ---------------------------------------------------------------------------------------------------------------
# backlog: re-queues per paced dispatch
# ---------------------------------------------------------------------------------------------------------------
class Outcomes:
    """Every dispatch outcome, recorded around the handler module's `dispatch`, and the AWS calls made inside it."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str]] = []  # (delivery, repo, result, reason head)
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._inside = threading.local()

    def wrap(self, handler_module: Any) -> None:
        """Wrap the use case where the handler reaches it: its own import (older code), or crcr.app.dispatch's
        module-level `dispatch` (the batch object calls that)."""
        module = handler_module if hasattr(handler_module, "dispatch") else sys.modules["crcr.app.dispatch"]
        inner = module.dispatch

        def dispatch(message: Any, *args: Any, **kwargs: Any) -> Any:
            self._inside.on = True
            try:
                outcome = inner(message, *args, **kwargs)
            finally:
                self._inside.on = False
            with self._lock:
                reason = str(outcome.reason).split(":", 1)[0]
                self.rows.append((message.delivery_id, message.target_repo.lower(), outcome.result.value, reason))
            return outcome

        module.dispatch = dispatch

    def on_call(self, model: Any, **_: Any) -> None:
        self.count(f"{model.service_model.service_name}.{model.name}")

    def count(self, name: str) -> None:
        if getattr(self._inside, "on", False):
            with self._lock:
                self.calls[name] += 1


def _within_budget(times_by_repo: dict[str, list[float]], rates: str) -> dict[str, Any]:
    """The most calls any installation made in any window of each rate's period, against count + burst. The rates
    are read here, not by the relay's own parser: a `--baseline` run measures code that may not have it."""
    windows = []
    for part in rates.split(","):
        count, _, rest = part.partition("/")
        period_s, _, burst = rest.partition("+")
        rate = SimpleNamespace(count=int(count), period_s=float(period_s), burst=int(burst or 0))
        most = 0
        for times in times_by_repo.values():
            ordered = sorted(times)
            lo = 0
            for hi, t in enumerate(ordered):
                while t - ordered[lo] >= rate.period_s:
                    lo += 1
                most = max(most, hi - lo + 1)
        windows.append({"period_s": rate.period_s, "allowed": rate.count + rate.burst, "most_in_any_window": most})
    return {"windows": windows, "within": all(w["most_in_any_window"] <= w["allowed"] for w in windows)}


def backlog(
    key: AppKey, out: OutputCapture, *, events: int, repos: int, rates: str, timeout_s: float
) -> dict[str, Any]:
    """`events` PR events to `repos` repositories, one installation each, all planned before the dispatch
    queue's pollers start (a backlog); then the pollers drain it under the per-installation budget `rates`."""
    import boto3  # noqa: PLC0415

    body = EVENT_FILE.read_bytes()
    before = Counter(TOTALS)
    start_off = out.offset()
    outcomes = Outcomes()
    assert boto3.DEFAULT_SESSION is not None  # AwsCalls.install set it up
    boto3.DEFAULT_SESSION.events.register("before-call", outcomes.on_call)
    observe_dynamodb(outcomes.count)
    try:
        with dispatch_stack(key, repos, repos, extra_env={"CRCR_GITHUB_WRITE_RATES": rates}) as (
            stack,
            double,
            _moto,
            _,
        ):
            outcomes.wrap(sys.modules[f"crcr_fn_{DISPATCH}"])
            for _ in range(events):
                _post(stack, body)
            _plan_all(stack, events)
            t0 = time.time()
            stack.start_dispatch_pollers()
            expected = events * repos
            deadline = time.monotonic() + timeout_s
            seen = double.ask()
            while seen["dispatches"] < expected and time.monotonic() < deadline:
                time.sleep(1.0)
                seen = double.ask()
            drained_s = time.time() - t0
            time.sleep(2.0)  # a duplicate, if any, would land now
            seen = double.ask("times")
            invocations = dict(stack.invocations)
    finally:
        boto3.DEFAULT_SESSION.events.unregister("before-call", outcomes.on_call)
    rows = outcomes.rows
    reasons = Counter(reason for _, _, result, reason in rows if result == "rescheduled")
    paced = {(d, r) for d, r, result, reason in rows if result == "rescheduled" and reason == "paced"}
    landed = seen["dispatches"]
    metrics = metrics_delta(before)
    lines = out.lines_between(start_off)
    return {
        "events": events,
        "repositories": repos,
        "installations": repos,
        "rates": rates,
        "dispatches_expected": events * repos,
        "dispatches": landed,
        "duplicates": seen["duplicates"],
        "refused": seen["refused"],
        "paced_requeues": reasons.get("paced", 0),
        "paced_dispatches": len(paced),
        "requeues_per_paced_dispatch": round(reasons.get("paced", 0) / len(paced), 3) if paced else 0.0,
        "requeues_by_reason": dict(reasons),
        "handler_calls": len(rows),
        "dispatch_invocations": invocations.get(DISPATCH, 0),
        "dispatch_invocations_per_dispatch": round(invocations.get(DISPATCH, 0) / max(1, landed), 2),
        "sqs_sends_per_dispatch": round(
            sum(v for k, v in outcomes.calls.items() if k.startswith("sqs.Send")) / max(1, landed), 2
        ),
        "aws_calls_per_dispatch": round(sum(outcomes.calls.values()) / max(1, landed), 2),
        "aws_calls_by_operation": dict(sorted(outcomes.calls.items())),
        "budget": _within_budget(seen.get("times_by_repo") or {}, rates),
        "drain_s": round(drained_s, 1),
        "relay_metrics": {k: v for k, v in metrics.items() if k.startswith("Dispatch")},
        "relay_errors": sum(1 for line in lines if '"level":"ERROR"' in line.replace(" ", "")),
    }


# ---------------------------------------------------------------------------------------------------------------
def measure(args: argparse.Namespace, key: AppKey, aws: AwsCalls, out: OutputCapture) -> dict[str, Any]:
    levels = [level.strip() for level in args.levels.split(",") if level.strip()]
    result: dict[str, Any] = {}
    for level in levels:
        out.say(
            f"   warm: {args.events} events x {args.targets} {level} repositories, handler called by the bench, "
            f"{args.repeats} times"
        )
        # The machine's speed drifts between runs (a DynamoDB call's CPU moved by half within an hour here): each
        # level is measured `repeats` times on fresh stacks, and the run with the median CPU is the figure.
        runs = [
            warm_cost(key, aws, out, events=args.events, targets=args.targets, timeout_s=args.timeout, level=level)
            for _ in range(max(1, args.repeats))
        ]
        runs.sort(key=lambda r: float(r["warm"]["relay_cpu_ms_per_dispatch"]))
        run = runs[len(runs) // 2]
        run["repeats_relay_cpu_ms_per_dispatch"] = [r["warm"]["relay_cpu_ms_per_dispatch"] for r in runs]
        run["repeats_one_aws_call_cpu_ms"] = [r["one_aws_call_cpu_ms"] for r in runs]
        result["warm" if level == levels[0] else f"warm_{level}"] = run
    if not args.skip_backlog:
        out.say(
            f"   backlog: {args.backlog_events} events x {args.backlog_repos} repositories, rates {args.backlog_rates}"
        )
        result["backlog"] = backlog(
            key,
            out,
            events=args.backlog_events,
            repos=args.backlog_repos,
            rates=args.backlog_rates,
            timeout_s=args.backlog_timeout,
        )
    return result


def baseline(ref: str, args: argparse.Namespace, say: Any) -> dict[str, Any]:
    """The same measurements on the code at git `ref`, in a subprocess with that code first on its path."""
    with exported(ref, "crcr-bench-baseline-") as code:
        if code is None:
            return {"skipped": True, "reason": f"{ref} is not a commit here"}
        commit, tree = code
        say(f"   baseline {ref} ({commit[:12]}), in a subprocess")
        result = fresh(args, tree)
        return result if result.get("skipped") else {"ref": ref, "commit": commit} | result


def fresh(args: argparse.Namespace, code_root: Path | None = None) -> dict[str, Any]:
    """This section in a process of its own, as a dispatcher runs in a Lambda execution environment of its own: not in
    the bench's process, whose heap (every earlier section's objects) makes each garbage collection inside the
    measured window dearer. `code_root`: another checkout's relay code (a baseline)."""
    with tempfile.TemporaryDirectory(prefix="crcr-bench-dispatch-") as tmp:
        out_file = Path(tmp) / "result.json"
        argv = [sys.executable, str(Path(__file__).resolve()), "--out", str(out_file), "--quiet"]
        argv += [f"--{k.replace('_', '-')}={v}" for k, v in _passed(args).items()]
        if args.skip_backlog:
            argv.append("--skip-backlog")
        env = {k: v for k, v in os.environ.items() if k != "CRCR_BENCH_CODE_ROOT"}
        if code_root is not None:
            env["CRCR_BENCH_CODE_ROOT"] = str(code_root)
        proc = subprocess.run(argv, env=env, check=False)
        if proc.returncode != 0 or not out_file.exists():
            return {"skipped": True, "reason": f"the run exited with {proc.returncode}"}
        return dict(json.loads(out_file.read_text()))


def _passed(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("events", "targets", "levels", "repeats", "timeout", "backlog_events", "backlog_repos", "backlog_rates")
    keys += ("backlog_timeout",)
    return {k: getattr(args, k) for k in keys}


def add_arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The options of this section; bench/run.py passes `prefix` "dispatch-" (e.g. --dispatch-events)."""
    parser.add_argument(f"--{prefix}events", type=int, default=14, help="warm events (after one cold one)")
    parser.add_argument(f"--{prefix}targets", type=int, default=10, help="repositories per warm event")
    parser.add_argument(
        f"--{prefix}levels", default="L1", help="allowlist levels of the warm run, comma-separated (L3/L4: check runs)"
    )
    parser.add_argument(f"--{prefix}repeats", type=int, default=3, help="warm runs per level; the median is reported")
    parser.add_argument(f"--{prefix}timeout", type=float, default=120.0, help="seconds to wait for the warm run")
    parser.add_argument(f"--{prefix}backlog-events", type=int, default=120, help="events in the backlog run")
    parser.add_argument(f"--{prefix}backlog-repos", type=int, default=5, help="repositories (installations) there")
    parser.add_argument(
        f"--{prefix}backlog-rates",
        default=BACKLOG_RATES,
        help="CRCR_GITHUB_WRITE_RATES for the backlog run (default: GitHub.com's, four times faster)",
    )
    parser.add_argument(f"--{prefix}backlog-timeout", type=float, default=600.0, help="seconds to drain the backlog")
    parser.add_argument(f"--{prefix}skip-backlog", action="store_true", help="leave out the backlog run")
    parser.add_argument(
        f"--{prefix}baseline",
        default=None,
        help="also measure the code at this git ref (e.g. a commit before a change), in the same run",
    )


def strip_prefix(args: argparse.Namespace, prefix: str) -> argparse.Namespace:
    attr = prefix.replace("-", "_")
    return argparse.Namespace(**{k[len(attr) :]: v for k, v in vars(args).items() if k.startswith(attr)})


def run_section(args: argparse.Namespace, say: Any) -> dict[str, Any]:
    """Section 10 for bench/run.py: this checkout, then the baseline if asked, each in a process of its own."""
    result = fresh(args)
    if result.get("skipped"):
        raise RuntimeError(f"section 10: {result['reason']}")
    if args.baseline:
        result["baseline"] = baseline(args.baseline, args, say)
    return result


def print_section(result: dict[str, Any] | None) -> None:
    if not result:
        return
    print("\n10. the dispatcher: AWS calls and relay CPU per warm dispatch; re-queues under a backlog")
    runs = [("now", result)]
    if isinstance(result.get("baseline"), dict) and not result["baseline"].get("skipped"):
        runs.insert(0, (f"baseline {result['baseline']['ref']}", result["baseline"]))
    elif result.get("baseline"):
        print(f"   baseline skipped: {result['baseline'].get('reason')}")
    print(
        f"   {'code':22} {'level':5} {'AWS calls':>9} {'CPU ms':>7} {'(range)':>13} {'1 call':>7}  "
        "by operation (per warm dispatch; CPU: the median run)"
    )
    for name, run in runs:
        for section in sorted(k for k in run if k.startswith("warm")):
            w = run[section]["warm"]
            ops = ", ".join(f"{k.split('.')[1]} {v}" for k, v in w["aws_calls_per_dispatch"].items())
            spread = run[section].get("repeats_relay_cpu_ms_per_dispatch") or [w["relay_cpu_ms_per_dispatch"]]
            span = f"{min(spread):.2f}-{max(spread):.2f}"
            one_call = run[section].get("one_aws_call_cpu_ms", "-")
            print(
                f"   {name:22} {run[section].get('level', 'L1'):5} {w['aws_calls_per_dispatch_total']:>9} "
                f"{w['relay_cpu_ms_per_dispatch']:>7} {span:>13} {one_call:>7}  {ops}"
            )
    if "backlog" in result:
        b = result["backlog"]
        print(
            f"   backlog {b['events']} events x {b['repositories']} repositories (one installation each), rates "
            f"{b['rates']}:"
        )
        print(
            f"   {'code':22} {'sent':>5} {'dup':>4} {'paced':>6} {'re-queues':>9} {'/paced':>7} {'SQS/disp':>8}  budget"
        )
        for name, run in runs:
            b = run.get("backlog")
            if not b:
                continue
            print(
                f"   {name:22} {b['dispatches']:>5} {b['duplicates']:>4} {b['paced_dispatches']:>6} "
                f"{b['paced_requeues']:>9} {b['requeues_per_paced_dispatch']:>7} {b['sqs_sends_per_dispatch']:>8}  "
                f"{'kept' if b['budget']['within'] else 'EXCEEDED'}"
            )


def main() -> int:
    if "--serve-github-double" in sys.argv:
        _serve_double()
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quiet", action="store_true", help="no table (a baseline run writes --out only)")
    args = parser.parse_args()
    key = AppKey.generate()
    aws = AwsCalls().install()
    with OutputCapture() as out:
        result = measure(args, key, aws, out)  # this process is a fresh one already
        if args.baseline:
            result["baseline"] = baseline(args.baseline, args, out.say)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if not args.quiet:
        print_section(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
