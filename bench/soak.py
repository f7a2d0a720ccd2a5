"""`make soak`: the relay under faults, kills and a dead webhook window on loopback, every event and result accounted.

.venv/bin/python bench/soak.py [--events N] [--targets N] [--seed N] [--out bench/soak.json]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import boto3
import flood
from botocore.config import Config
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from harness import (
    APP_ID,
    AUDIENCE,
    ROOT,
    UPSTREAM,
    UPSTREAM_ID,
    AppKey,
    GitHubDouble,
    MotoProcess,
    RecordedRequest,
    cpu_seconds,
    free_port,
    git_info,
    job_token,
    list_dead_letters,
    log_summary,
    machine,
    relay_env,
    report_body,
)
from soak_moto import SOAK_AGENT

from tests.doubles.github_double import Reply
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer

HUD_TOKEN = "soak-hud-token"
WEBHOOK_SECRET = "soak-webhook-secret"
REGION = "us-east-1"

# The GitHub double's faults on every request the relay makes (dispatches, tokens, installations, the App's
# delivery list and redeliveries), drawn at random from a fixed seed; timeouts only where something is created.
FAULT_502, FAULT_429, FAULT_403, FAULT_TIMEOUT = 0.05, 0.02, 0.01, 0.01
RETRY_AFTER_S = 2  # what the 429 and secondary-limit 403 ask for
GITHUB_TIMEOUT_S = 2  # the relay's read timeout (CRCR_GITHUB_TIMEOUT_S); a hang outlasts it
HANG_S = GITHUB_TIMEOUT_S + 3
# The relay's settings for the run (each documented in bench/README.md).
VISIBILITY_S = 30  # a killed worker's messages come back after this
RECONCILE_INTERVAL_S = 10
RETRY_BASE_S = 0.5
WRITE_RATES = "6000/60+600"  # per installation: 100/s; GitHub.com's 75 a minute would take hours (README)
# The feed: events go in while the relay's queues hold fewer messages than this (moto's receive cost grows
# with queue depth), a few at a time, as GitHub's deliveries would.
MAX_BACKLOG = 150
FEEDERS = 4
PUSH_EVERY = 5  # every fifth event is a push to main, the others open a pull request
# The disruptions, at these fractions of the events fed.
# The webhook fails for a tenth of the events (at most 40, at least 2) at 4 a second.
WINDOW_AT, WINDOW_MAX, WINDOW_RATE = 0.2, 40, 4.0
KILL_AT = (0.4, 0.7)
# The downstreams' reports.
CALLBACK_WORKERS = 8
DUPLICATE_SHARE, OUT_OF_ORDER_SHARE, FAILURE_SHARE = 0.05, 0.05, 0.10
POLL_S = 1.0  # how often the soak looks whether the relay has settled or the reporter drained
POLLING = {
    "SQS.ReceiveMessage",
    "DynamoDBStreams.GetRecords",
    "DynamoDBStreams.DescribeStream",
    "DynamoDBStreams.GetShardIterator",
}


def say(text: str) -> None:
    print(text, flush=True)


def aws(service: str, endpoint: str) -> Any:
    config = Config(user_agent_extra=SOAK_AGENT, retries={"mode": "standard", "max_attempts": 5})
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=config,
    )


# ------------------------------------------------------------------------------------------------ processes


@dataclass
class RelayRun:
    pid: int
    started: float
    ready_s: float
    stopped: float | None = None
    cpu_s: float | None = None
    how: str = ""
    # The process's metric tally (GET /_crcr/status), read last just before it was stopped or killed.
    metrics: dict[str, int] = field(default_factory=dict)


class Relay:
    """`crcr local` as a subprocess on a fixed port, as tests/e2e/test_crash.py runs it: killed and restarted."""

    def __init__(self, env: dict[str, str], port: int, logdir: Path) -> None:
        self.env, self.port, self.logdir = env, port, logdir
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs: list[RelayRun] = []
        self.lock = threading.RLock()  # the monitor reads the tally while the feeder may kill and restart

    def start(self) -> None:
        with self.lock:
            self._start()

    def _start(self) -> None:
        log = self.logdir / f"relay-{len(self.runs)}.log"
        started = time.monotonic()
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "crcr.ops.cli", "local", "--port", str(self.port)],
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"crcr local exited with {self.proc.returncode}; see {log}")
            if b'{"event": "ready"' in log.read_bytes():
                self.runs.append(RelayRun(self.proc.pid, time.time(), round(time.monotonic() - started, 2)))
                return
            time.sleep(0.1)
        raise RuntimeError(f"crcr local was not ready within 120 s; see {log}")

    def read_metrics(self, *, wait: bool = True) -> None:
        """The running process's metric tally (`crcr local` keeps metrics in a tally, not EMF lines)."""
        if not self.lock.acquire(blocking=wait):
            return  # being killed or restarted: the feeder reads it
        try:
            if not self.runs or self.proc is None or self.proc.poll() is not None or self.runs[-1].stopped:
                return
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(self.url + "/_crcr/status", timeout=10) as resp,
            ):
                self.runs[-1].metrics = dict(json.load(resp).get("metrics") or {})
        finally:
            self.lock.release()

    def metrics(self) -> Counter[str]:
        """Every process's tally added up. A killed process's counts after its last read (a few milliseconds'
        worth: it is read just before the signal) are missing."""
        total: Counter[str] = Counter()
        for run in self.runs:
            total.update(run.metrics)
        return total

    def _end(self, sig: int, how: str) -> None:
        with self.lock:
            self._signal(sig, how)

    def _signal(self, sig: int, how: str) -> None:
        assert self.proc is not None
        run = self.runs[-1]
        self.read_metrics()
        run.cpu_s = cpu_seconds(self.proc.pid)  # read before the process is gone
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        run.stopped, run.how = time.time(), how

    def kill(self) -> None:
        self._end(signal.SIGKILL, "SIGKILL mid-batch")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._end(signal.SIGTERM, "SIGTERM at the end")

    def log_lines(self) -> list[str]:
        lines: list[str] = []
        for path in sorted(self.logdir.glob("relay-*.log")):
            lines += [
                line
                for line in path.read_text(errors="replace").splitlines()
                if line.strip() and not line.startswith('{"event": "ready"')
            ]
        return lines


# ------------------------------------------------------------------------------------------------ the world


@dataclass(frozen=True)
class Event:
    index: int
    name: str  # pull_request | push
    guid: str
    body: bytes


def make_events(n: int) -> list[Event]:
    pr_doc = json.loads((ROOT / "examples" / "events" / "pull_request.opened.json").read_text())
    push_doc = json.loads((ROOT / "examples" / "events" / "push.main.json").read_text())
    events = []
    for i in range(n):
        sha = uuid.uuid5(uuid.NAMESPACE_OID, f"soak-{i}").hex + f"{i:08x}"
        if i % PUSH_EVERY == PUSH_EVERY - 1:
            doc = json.loads(json.dumps(push_doc))
            doc["before"], doc["after"] = doc["after"], sha
            for commit in doc.get("commits") or []:
                commit["id"] = sha
            if doc.get("head_commit"):
                doc["head_commit"]["id"] = sha
            name = "push"
        else:
            doc = json.loads(json.dumps(pr_doc))
            number = 200_000 + i
            doc["number"] = doc["pull_request"]["number"] = number
            doc["pull_request"]["head"] = doc["pull_request"]["head"] | {"sha": sha, "ref": f"soak-{i}"}
            name = "pull_request"
        events.append(Event(i, name, str(uuid.uuid4()), json.dumps(doc).encode()))
    return events


def window_size(events: int) -> int:
    return max(2, min(WINDOW_MAX, events // 10))


def targets(n: int) -> list[tuple[str, int, int]]:
    """(repository, installation id, repository id): one organization, so one installation, each."""
    return [(f"soak-org-{i}/repo-{i}", 8000 + i, 60_000 + i) for i in range(n)]


def carries_id(repo: str) -> bool:
    """Every other downstream's workflow sets `run-name` to carry the dispatch id (as the example workflow does):
    after an ambiguous answer the relay finds its run instead of sending again. The others' titles do not."""
    return int(repo.rsplit("-", 1)[1]) % 2 == 0


def github_double(key: AppKey, repos: list[tuple[str, int, int]], seed: int, timeouts: float) -> GitHubDouble:
    gh = GitHubDouble(app_id=APP_ID, app_public_key_pem=key.public_pem)
    for repo, installation, repo_id in repos:
        gh.install(repo, installation_id=installation, repo_id=repo_id)
        if carries_id(repo):
            gh.set_dispatch_workflow(
                repo, lambda body: f"crcr {body['event_type']} {body['client_payload']['dispatch_id']}"
            )
        else:
            gh.set_dispatch_workflow(repo, lambda body: "CI")
    gh.install(UPSTREAM, installation_id=7999, repo_id=UPSTREAM_ID)
    faults = [
        (FAULT_502, Reply(502)),
        (FAULT_429, Reply.too_many_requests(retry_after=RETRY_AFTER_S)),
        (FAULT_403, Reply.secondary_rate_limit(retry_after=RETRY_AFTER_S)),
    ]
    if timeouts:
        # However the draws fall, the first id-carrying downstream's first dispatch is carried out and answered
        # late: every run with timeouts exercises the run lookup that stands in for a second send.
        first = next(repo for repo, _, _ in repos if carries_id(repo))
        gh.script("POST", rf"/repos/{re.escape(first)}/dispatches", [Reply.accept_then_hang(HANG_S)])
    gh.chaos("POST", r".*", [*faults, (timeouts, Reply.accept_then_hang(HANG_S))], seed=seed)
    gh.chaos("GET", r".*", faults, seed=seed + 1)
    return gh


# ------------------------------------------------------------------------------------------------ phases


@dataclass
class Soak:
    events: list[Event]
    repos: list[tuple[str, int, int]]
    gh: GitHubDouble
    relay: Relay
    moto: MotoProcess
    deadline: float
    sqs: Any = None
    ddb: Any = None
    queue_urls: dict[str, str] = field(default_factory=dict)
    backlog: int = 0
    window: list[str] = field(default_factory=list)  # guids fed while the webhook failed
    window_span: tuple[float, float] = (0.0, 0.0)
    kills: list[dict[str, Any]] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    aws_marks: dict[str, dict[str, Counter[str]]] = field(default_factory=dict)
    cpu_marks: dict[str, dict[str, float]] = field(default_factory=dict)
    stop_monitor: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.sqs = aws("sqs", self.moto.url)
        self.ddb = aws("dynamodb", self.moto.url)

    @property
    def expected(self) -> set[tuple[str, str]]:
        return {(e.guid, repo.lower()) for e in self.events for repo, _, _ in self.repos}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def mark(self, name: str) -> None:
        self.phases[name] = time.monotonic()
        self.aws_marks[name] = self.moto.calls()
        proc = self.relay.proc
        self.cpu_marks[name] = {
            "relay": sum(r.cpu_s or 0.0 for r in self.relay.runs[:-1])
            + (cpu_seconds(proc.pid) if proc is not None and proc.poll() is None else 0.0),
            "moto": cpu_seconds(self.moto.pid),
            "soak": cpu_seconds(),
        }

    # -- the relay's queues ------------------------------------------------------------------------
    def queue_url(self, logical: str) -> str:
        if logical not in self.queue_urls:
            self.queue_urls[logical] = self.sqs.get_queue_url(QueueName=f"crcr-local-{logical}")["QueueUrl"]
        return self.queue_urls[logical]

    def depth(self, *logicals: str) -> int:
        total = 0
        for logical in logicals:
            attrs = self.sqs.get_queue_attributes(
                QueueUrl=self.queue_url(logical),
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )["Attributes"]
            total += sum(int(v) for v in attrs.values())
        return total

    def monitor(self) -> None:
        ticks = 0
        while not self.stop_monitor.wait(0.5):
            ticks += 1
            if ticks % 4 == 0:
                self.relay.read_metrics(wait=False)
            try:
                self.backlog = self.depth("EventsQueue", "DispatchQueue")
            except Exception:
                continue

    def set_events_queue_limit(self, size: int) -> None:
        """The window's fault: EventsQueue refuses every message over `size` bytes, so the webhook's enqueue
        fails and it answers 500 (GitHub shows the delivery failed); the planner keeps draining the queue."""
        self.sqs.set_queue_attributes(
            QueueUrl=self.queue_url("EventsQueue"), Attributes={"MaximumMessageSize": str(size)}
        )

    # -- feeding --------------------------------------------------------------------------------------
    def feed(self) -> None:
        n = len(self.events)
        window_at = int(n * WINDOW_AT)
        kills_at = [int(n * k) for k in KILL_AT]
        pool = ThreadPoolExecutor(FEEDERS, thread_name_prefix="feed")
        i = 0
        while i < n:
            if self.left() < 0:
                raise TimeoutError("the soak's time bound ran out while feeding")
            if i >= window_at and not self.window:
                i = self.failing_window(i)
                continue
            if kills_at and i >= kills_at[0]:
                kills_at.pop(0)
                self.kill_and_restart()
                continue
            while self.backlog > MAX_BACKLOG and self.left() > 0:
                time.sleep(0.05)
            chunk = self.events[i : i + FEEDERS]
            list(pool.map(lambda e: self.gh.deliver(e.name, e.body, guid=e.guid), chunk))
            i += len(chunk)
            if i % 200 < FEEDERS:
                say(f"  fed {i}/{n} events, {self.accepted()} dispatches accepted, backlog {self.backlog}")
        pool.shutdown()

    def failing_window(self, start: int) -> int:
        self.set_events_queue_limit(1024)
        began = time.time()
        end = min(start + window_size(len(self.events)), len(self.events))
        for event in self.events[start:end]:
            self.gh.deliver(event.name, event.body, guid=event.guid)
            self.window.append(event.guid)
            time.sleep(1 / WINDOW_RATE)
        self.set_events_queue_limit(262144)
        self.window_span = (began, time.time())
        failed = sum(1 for g in self.window if not self.gh.deliveries_of(g)[0].ok)
        say(
            f"  webhook window: {len(self.window)} events delivered while EventsQueue refused messages, {failed} failed"
        )
        return end

    def kill_and_restart(self) -> None:
        # Mid-batch: dispatches are being sent right now (the double accepted one within the last 200 ms).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and time.time() - self.last_accept() > 0.2:
            time.sleep(0.01)
        in_flight = self.backlog
        self.relay.kill()
        killed_at = time.time()
        sending = self.ledger_sending()
        self.relay.start()
        self.kills.append(
            {
                "at_s": round(killed_at - self.phases["start_wall"], 1),
                "killed_at": killed_at,
                "queued_messages": in_flight,
                "ledger_rows_sending": len(sending),
                "sending": sending,
                "restart_ready_s": self.relay.runs[-1].ready_s,
            }
        )
        say(f"  killed the relay mid-batch ({len(sending)} ledger rows sending); restarted")

    def last_accept(self) -> float:
        for rec in reversed(self.gh.requests):
            if rec.accepted and rec.path.endswith("/dispatches"):
                return rec.time
        return 0.0

    def ledger_sending(self) -> set[tuple[str, str]]:
        """(delivery, repository) rows the killed process had claimed: a 204 GitHub gave it may be unrecorded."""
        out: set[tuple[str, str]] = set()
        kwargs: dict[str, Any] = {
            "TableName": "crcr-local-StateTable",
            "FilterExpression": "begins_with(sk, :dsp) AND #s = :sending",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": {":dsp": {"S": "DSP#"}, ":sending": {"S": "sending"}},
            "ProjectionExpression": "pk, sk",
        }
        while True:
            page = self.ddb.scan(**kwargs)
            out |= {(i["pk"]["S"].removeprefix("DLV#"), i["sk"]["S"].removeprefix("DSP#")) for i in page["Items"]}
            if "LastEvaluatedKey" not in page:
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # -- settling -------------------------------------------------------------------------------------
    def dispatch_requests(self) -> list[RecordedRequest]:
        return [r for r in self.gh.requests if r.method == "POST" and r.path.endswith("/dispatches")]

    def accepted(self) -> int:
        return sum(1 for r in self.dispatch_requests() if r.accepted)

    def settle(self) -> None:
        """Until every event was answered 2xx once (the reconciler's redeliveries), every expected dispatch was
        accepted, and the relay's queues are empty (no delayed retry left to make a duplicate)."""
        expected = self.expected
        quiet = looks = 0
        while self.left() > 0:
            ok = {d.guid for d in self.gh.hook_deliveries if d.ok}
            got = {(_delivery(r), _repo(r)) for r in self.dispatch_requests() if r.accepted}
            backlog = self.depth("EventsQueue", "DispatchQueue")
            done = all(e.guid in ok for e in self.events) and expected <= got and backlog == 0
            quiet = quiet + 1 if done else 0
            if quiet >= 3:
                return
            time.sleep(POLL_S)
            looks += 1
            if looks % 10 == 0:
                say(
                    f"  settling: {len(ok & {e.guid for e in self.events})}/{len(self.events)} events answered 2xx, "
                    f"{len(expected & got)}/{len(expected)} dispatched, backlog {backlog}"
                )
        say("  the soak's time bound ran out while settling")

    # -- callbacks ------------------------------------------------------------------------------------
    def callbacks(self, issuer: OidcIssuer, seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        ids = {repo.lower(): (repo, repo_id) for repo, _, repo_id in self.repos}
        tickets: dict[tuple[str, str], str] = {}
        for rec in self.dispatch_requests():
            if rec.accepted:
                tickets[(_delivery(rec), _repo(rec))] = rec.json["client_payload"]["ticket"]
        jobs = []
        for n, (pair, ticket) in enumerate(sorted(tickets.items())):
            repo, repo_id = ids[pair[1]]
            conclusion = "failure" if rng.random() < FAILURE_SHARE else "success"
            order = ["completed", "in_progress"] if rng.random() < OUT_OF_ORDER_SHARE else ["in_progress", "completed"]
            twice = [rng.random() < DUPLICATE_SHARE for _ in order]
            jobs.append(Job(pair, repo, repo_id, ticket, 90_000_000 + n, conclusion, order, twice))
        tally: Counter[str] = Counter()
        lock = threading.Lock()
        url = self.relay.url
        local = threading.local()

        def run(job: Job) -> None:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection("127.0.0.1", self.relay.port, timeout=30)
            token = job_token(issuer, job.repo, job.repo_id, job.run_id)
            for status, again in zip(job.order, job.twice, strict=True):
                body = job.body(status)
                for _ in range(2 if again else 1):
                    answer, conn = _post_callback(conn, url, body, token, self)
                    local.conn = conn
                    job.answers.append((status, answer))
                    with lock:
                        tally[answer] += 1

        with ThreadPoolExecutor(CALLBACK_WORKERS, thread_name_prefix="callback") as pool:
            for k, _ in enumerate(pool.map(run, jobs), 1):
                if k % 2000 == 0:
                    say(f"  {k}/{len(jobs)} jobs reported")
        return {"jobs": jobs, "answers": tally}

    def wait_reporter(self, hud: HudDouble, jobs: int) -> None:
        """Until PyTorch's HUD holds a row per job and the pushes stop changing (the results stream is drained)."""
        last, still, looks = -1, 0, 0
        while self.left() > 0:
            rows, pushes = len(hud.rows), len(hud.attempts)
            still = still + 1 if (rows >= jobs and pushes == last) else 0
            if still >= 3:
                return
            last = pushes
            time.sleep(POLL_S)
            looks += 1
            if looks % 10 == 0:
                say(f"  reporter: {rows}/{jobs} HUD rows, {pushes} pushes")
        say("  the soak's time bound ran out while the reporter drained")


@dataclass
class Job:
    pair: tuple[str, str]  # (delivery, repository lower-case)
    repo: str
    repo_id: int
    ticket: str
    run_id: int
    conclusion: str
    order: list[str]
    twice: list[bool]
    answers: list[tuple[str, str]] = field(default_factory=list)

    def body(self, status: str) -> bytes:
        conclusion = self.conclusion if status == "completed" else None
        return json.dumps(report_body(self.ticket, self.repo, "build", self.run_id, status, conclusion)).encode()


def _post_callback(
    conn: http.client.HTTPConnection, url: str, body: bytes, token: str, soak: Soak
) -> tuple[str, http.client.HTTPConnection]:
    """One report as the downstream action sends it: 429, 5xx and dropped connections retried with backoff."""
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}", "user-agent": "crcr-soak"}
    delay = 0.2
    for _ in range(12):
        try:
            conn.request("POST", "/callback", body=body, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", soak.relay.port, timeout=30)
            time.sleep(delay)
            delay = min(delay * 2, 5)
            continue
        if resp.status == 429 or resp.status >= 500:
            time.sleep(float(resp.getheader("retry-after") or delay))
            delay = min(delay * 2, 5)
            continue
        try:
            status = json.loads(raw).get("status") or json.loads(raw).get("error")
        except ValueError:
            status = "?"
        return f"{resp.status} {status}", conn
    return "gave up", conn


def _delivery(rec: RecordedRequest) -> str:
    return str(rec.json["client_payload"]["delivery_id"])


def _repo(rec: RecordedRequest) -> str:
    return "/".join(rec.path.split("/")[2:4]).lower()


# ------------------------------------------------------------------------------------------------ the report


def duplicates(soak: Soak) -> list[dict[str, Any]]:
    """Every (delivery, repository) GitHub accepted more than once, each repeat with the ambiguous answer that
    caused it: the earlier accepted request timed out (accepted, answered after the relay's timeout), or the
    relay was killed after that request was sent and before its ledger row said dispatched."""
    by_pair: dict[tuple[str, str], list[RecordedRequest]] = {}
    for rec in soak.dispatch_requests():
        if rec.accepted:
            by_pair.setdefault((_delivery(rec), _repo(rec)), []).append(rec)
    out = []
    for pair, recs in sorted(by_pair.items()):
        if len(recs) < 2:
            continue
        causes = []
        for earlier in recs[:-1]:
            if earlier.fault == "timeout":
                causes.append("timeout after GitHub accepted (answered after the relay's read timeout)")
                continue
            if earlier.answered_at is None:
                causes.append(f"GitHub accepted, and its answer was never written ({earlier.outcome})")
                continue
            took = earlier.answered_at - earlier.time
            if took >= GITHUB_TIMEOUT_S - 0.05:
                causes.append(f"GitHub accepted, and answered after {took:.1f} s: past the relay's read timeout")
                continue
            kill = next(
                (k for k in soak.kills if earlier.time <= k["killed_at"] and pair in k["sending"]),
                None,
            )
            if kill is not None:
                causes.append(
                    f"relay killed at {kill['at_s']} s between GitHub's {earlier.status} and the ledger write"
                )
            else:
                causes.append(f"unexplained: earlier request answered {earlier.status} ({earlier.outcome})")
        start = soak.phases.get("start_wall", 0.0)
        out.append(
            {
                "delivery_id": pair[0],
                "repo": pair[1],
                "accepted": len(recs),
                # Each accepted request: when it came (s into the run), what GitHub answered and how long it took.
                "requests": [
                    {
                        "at_s": round(rec.time - start, 3),
                        "status": rec.status,
                        "answered_after_s": round(rec.answered_at - rec.time, 3) if rec.answered_at else None,
                        "fault": rec.fault,
                    }
                    for rec in recs
                ],
                "causes": causes,
                "explained": not any(c.startswith("unexplained") for c in causes),
                "run_name_carries_id": carries_id(pair[1]),
            }
        )
    return out


def results_recorded(soak: Soak, jobs: list[Job]) -> tuple[int, list[str]]:
    """Reports the relay took (200) whose effect is in the results table: a completed report's conclusion on the
    job's row; an in_progress one as the row's start, or (sent after the completion) as a no-op by the contract."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    kwargs: dict[str, Any] = {"TableName": "crcr-local-ResultsTable", "ConsistentRead": True}
    while True:
        page = soak.ddb.scan(**kwargs)
        for item in page["Items"]:
            if item.get("job_name", {}).get("S") == "build":
                rows[(item["delivery_id"]["S"], item["repo"]["S"].lower())] = item
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    recorded, problems = 0, []
    for job in jobs:
        row = rows.get(job.pair)
        firsts = {status: answer for status, answer in reversed(job.answers)}  # each report's first answer
        for n, status in enumerate(job.order):
            ok = firsts.get(status, "").startswith("200 ")
            if row is None:
                ok = False
            elif status == "completed":
                done = row.get("state", {}).get("S") == "completed"
                ok = ok and done and row.get("conclusion", {}).get("S") == job.conclusion
            else:
                started = "N" in row.get("started_at", {})
                ok = ok and (started or (n == 1 and row.get("state", {}).get("S") == "completed"))
            if ok:
                recorded += 1
            elif len(problems) < 20:
                problems.append(f"{job.pair} {status}: answered {firsts.get(status)}, row {row and row.get('state')}")
    return recorded, problems


def dead_letters(soak: Soak) -> list[dict[str, Any]]:
    out = []
    for logical in ("EventsDLQ", "DispatchDLQ", "ChecksDLQ", "ReporterDLQ"):
        for letter in list_dead_letters(soak.sqs, soak.queue_url(logical), limit=1000):
            out.append({"queue": logical, **{k: letter[k] for k in ("delivery_id", "target_repo", "reason")}})
    return out


def aws_delta(later: dict[str, Counter[str]], earlier: dict[str, Counter[str]]) -> Counter[str]:
    return later["relay"] - earlier["relay"]


def per(calls: Counter[str], n: int) -> dict[str, Any]:
    total = sum(calls.values())
    work = sum(v for k, v in calls.items() if k not in POLLING)
    return {
        "calls": total,
        "per_unit": round(total / n, 2) if n else None,
        "without_polling": work,
        "without_polling_per_unit": round(work / n, 2) if n else None,
        "by_operation": dict(calls.most_common()),
    }


def window_report(soak: Soak) -> list[dict[str, Any]]:
    """Every event with a failed delivery: the dead webhook window's, and any other (a redelivery that reached a
    relay being restarted, an answer later than GitHub's 10 s): its attempts, the reconciler's asks, and whether
    every target was dispatched for the first time after the first redelivery the reconciler asked for, one of
    which was answered 2xx (so by the reconciler). An attempt that failed only at GitHub's end may have been
    queued all the same, and be dispatched without a redelivery: the others are held to being dispatched, the
    window's to the reconciler."""
    failed = {d.guid for d in soak.gh.hook_deliveries if not d.ok}
    asked = Counter(r.path.split("/")[4] for r in soak.gh.requests if r.path.endswith("/attempts") and r.accepted)
    first_dispatch: dict[tuple[str, str], float] = {}
    for rec in soak.dispatch_requests():
        if rec.accepted:
            first_dispatch.setdefault((_delivery(rec), _repo(rec)), rec.time)
    start = soak.phases["start_wall"]
    out = []
    for event in soak.events:
        if event.guid not in failed:
            continue
        tries = soak.gh.deliveries_of(event.guid)
        # Only the relay's reconciler asks the double for redeliveries in the soak.
        recovered_at = min((d.delivered_at for d in tries if d.redelivery and d.ok), default=None)
        # A redelivery the relay queued may still go unanswered (a kill before its answer): GitHub lists it as
        # failed and the reconciler asks again, so the targets may be dispatched before the 2xx one.
        reached_at = min((d.delivered_at for d in tries if d.redelivery), default=None)
        firsts = [first_dispatch.get((event.guid, repo.lower())) for repo, _, _ in soak.repos]
        out.append(
            {
                "delivery_id": event.guid,
                "event": event.name,
                "cause": "webhook window" if event.guid in soak.window else f"first attempt: {tries[0].status}",
                "attempts": [
                    {
                        "id": d.id,
                        "status_code": d.status_code,
                        "redelivery": d.redelivery,
                        "at_s": round(d.delivered_at - start, 1),
                    }
                    for d in tries
                ],
                "redeliveries_asked": sum(asked[str(d.id)] for d in tries),
                "first_2xx_redelivery_at_s": None if recovered_at is None else round(recovered_at - start, 1),
                "dispatched_targets": sum(1 for t in firsts if t is not None),
                "dispatched_by_reconciler": recovered_at is not None
                and reached_at is not None
                and all(t is not None and t >= reached_at for t in firsts),
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=int(os.environ.get("SOAK_EVENTS") or 400))
    parser.add_argument("--targets", type=int, default=int(os.environ.get("SOAK_TARGETS") or 10))
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=float(os.environ.get("SOAK_TIMEOUT_S") or 7200),
        help="the run's time bound (SOAK_TIMEOUT_S, default 7200): past it the soak stops and reports what it has",
    )
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED") or 1), help="SOAK_SEED, default 1")
    parser.add_argument(
        "--timeouts",
        type=float,
        default=FAULT_TIMEOUT,
        help=f"share of GitHub POSTs carried out and answered only after the relay's timeout (default {FAULT_TIMEOUT})",
    )
    parser.add_argument(
        "--visibility-s", type=int, default=VISIBILITY_S, help="CRCR_LOCAL_VISIBILITY_TIMEOUT_S for the relay"
    )
    parser.add_argument(
        "--reconcile-s", type=float, default=RECONCILE_INTERVAL_S, help="CRCR_RECONCILE_INTERVAL_S for the relay"
    )
    parser.add_argument(
        "--write-rates",
        default=os.environ.get("SOAK_WRITE_RATES") or WRITE_RATES,
        help=f"CRCR_GITHUB_WRITE_RATES for the relay (SOAK_WRITE_RATES, default {WRITE_RATES})",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "soak.json")
    parser.add_argument(
        "--flood-jobs",
        type=int,
        default=int(os.environ.get("SOAK_FLOOD_JOBS") or 300),
        help="the flood phase's failed jobs on one dispatch (SOAK_FLOOD_JOBS, default 300; 0 skips the phase)",
    )
    args = parser.parse_args()
    if args.events < 1 or args.targets < 1:
        parser.error(f"at least 1 event and 1 target (got {args.events} events x {args.targets} downstreams)")

    started = time.monotonic()
    context = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_info(),
        "machine": machine(),
    }
    say(f"soak: {args.events} events x {args.targets} downstreams, bound {args.timeout_s:.0f} s, seed {args.seed}")
    key = AppKey.generate()
    repos = targets(args.targets)
    events = make_events(args.events)
    logdir = Path(tempfile.mkdtemp(prefix="crcr-soak-"))
    allowlist = logdir / "allowlist.yaml"
    allowlist.write_text("L2:\n" + "".join(f"  - {repo}\n" for repo, _, _ in repos))
    ticket_key = (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    moto = MotoProcess().__enter__()
    gh = github_double(key, repos, args.seed, args.timeouts)
    issuer = OidcIssuer()
    hud = HudDouble(HUD_TOKEN)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))}
    env |= relay_env(key, gh.url, allowlist, WEBHOOK_SECRET) | {
        "AWS_ENDPOINT_URL": moto.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        # Fixed across restarts: a ticket signed by one relay process must verify in the next.
        "CRCR_TICKET_SIGNING_KEY": ticket_key,
        "CRCR_OIDC_ISSUER": issuer.url,
        "CRCR_OIDC_AUDIENCE": AUDIENCE,
        "CRCR_HUD_URL": hud.url,
        "CRCR_HUD_TOKEN": HUD_TOKEN,
        "CRCR_CALLBACK_RATE_PER_MIN": "1000000",
        "CRCR_GITHUB_TIMEOUT_S": str(GITHUB_TIMEOUT_S),
        "CRCR_RETRY_BASE_S": str(RETRY_BASE_S),
        "CRCR_GITHUB_WRITE_RATES": args.write_rates,
        "CRCR_LOCAL_VISIBILITY_TIMEOUT_S": str(args.visibility_s),
        "CRCR_RECONCILE_INTERVAL_S": str(args.reconcile_s),
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    relay = Relay(env, port, logdir)
    soak = Soak(events, repos, gh, relay, moto, deadline=started + args.timeout_s)
    gh.set_webhook(f"{relay.url}/webhook", WEBHOOK_SECRET)
    status = 0
    report: dict[str, Any] = {}
    monitor = threading.Thread(target=soak.monitor, daemon=True)
    try:
        relay.start()
        soak.phases["start_wall"] = time.time()
        soak.mark("start")
        monitor.start()
        say("feeding events (a failing webhook window at 20 %, kills at 40 % and 70 %)")
        soak.feed()
        soak.mark("fed")
        say("settling: the reconciler's redeliveries, retries and delayed messages")
        soak.settle()
        soak.mark("settled")
        say("callbacks: every downstream reports in_progress and completed")
        cb = soak.callbacks(issuer, args.seed)
        soak.mark("reported")
        soak.wait_reporter(hud, len(cb["jobs"]))
        soak.mark("drained")
        report = build_report(soak, args, cb, hud, started, logdir)
    except Exception as exc:
        say(f"soak failed: {type(exc).__name__}: {exc}")
        report = {"error": f"{type(exc).__name__}: {exc}", "relay_log": log_summary(relay.log_lines())}
        status = 2
    finally:
        soak.stop_monitor.set()
        relay.stop()
        for stop in (gh.stop, issuer.stop, hud.stop, moto.stop):
            with contextlib.suppress(Exception):  # best effort at the end
                stop()
    if "error" not in report:
        report["relay_cpu_s"] = round(sum(r.cpu_s or 0.0 for r in relay.runs), 1)
        report["relay_processes"] = [{k: v for k, v in r.__dict__.items() if k != "metrics"} for r in relay.runs]
        if report["relay_cpu_s"] and report["delivered"]:
            report["relay_cpu_ms_per_dispatch_and_its_reports"] = round(
                1000 * report["relay_cpu_s"] / report["delivered"], 2
            )
        report.update(requeues(relay.metrics(), report["delivered"]))
        # Ambiguous answers the relay settled by finding the run a dispatch had started, instead of sending again.
        report["dispatch_runs_found"] = relay.metrics().get("DispatchRunFound", 0)
    report = context | report
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["duration_s"] = round(time.monotonic() - started, 1)
    if "error" not in report and args.flood_jobs > 0:
        say(f"flood phase: one downstream floods its dispatch with {args.flood_jobs} jobs beside a normal one")
        report["flood"] = flood.flood_phase(jobs=args.flood_jobs, shas=max(1, args.flood_jobs // 3))
    if "error" not in report:
        status = verdict(report)
        print_table(report)
        if "flood" in report:
            flood.print_phase(report["flood"])
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    say(f"wrote {args.out} ({report['duration_s']} s); relay logs in {logdir}")
    return status


def build_report(
    soak: Soak, args: argparse.Namespace, cb: dict[str, Any], hud: HudDouble, started: float, logdir: Path
) -> dict[str, Any]:
    accepted_pairs: Counter[tuple[str, str]] = Counter(
        (_delivery(r), _repo(r)) for r in soak.dispatch_requests() if r.accepted
    )
    expected = soak.expected
    dups = duplicates(soak)
    jobs: list[Job] = cb["jobs"]
    recorded, problems = results_recorded(soak, jobs)
    faults = Counter(r.fault for r in soak.gh.requests if r.fault)
    marks = soak.aws_marks
    phases = soak.phases
    dispatch_calls = aws_delta(marks["settled"], marks["start"])
    callback_calls = aws_delta(marks["drained"], marks["settled"])
    moto_cpu = cpu_seconds(soak.moto.pid)
    return {
        "config": {
            "events": args.events,
            "targets": args.targets,
            "level": "L2",
            "pushes_every": PUSH_EVERY,
            "seed": args.seed,
            "faults": {
                "on": "every request the relay makes to GitHub; timeouts on POSTs only",
                "502": FAULT_502,
                "429_retry_after": [FAULT_429, RETRY_AFTER_S],
                "secondary_403_retry_after": [FAULT_403, RETRY_AFTER_S],
                "timeout_after_accepted": [args.timeouts, f"answered after {HANG_S} s"],
            },
            "relay": {
                "CRCR_GITHUB_TIMEOUT_S": GITHUB_TIMEOUT_S,
                "CRCR_RETRY_BASE_S": RETRY_BASE_S,
                "CRCR_GITHUB_WRITE_RATES": args.write_rates,
                "CRCR_LOCAL_VISIBILITY_TIMEOUT_S": args.visibility_s,
                "CRCR_RECONCILE_INTERVAL_S": args.reconcile_s,
            },
            "window": {"events": window_size(args.events), "per_s": WINDOW_RATE, "at": WINDOW_AT},
            "kills_at": list(KILL_AT),
            "kills": len(KILL_AT),
            "callbacks": {
                "sent_twice": DUPLICATE_SHARE,
                "out_of_order": OUT_OF_ORDER_SHARE,
                "failures": FAILURE_SHARE,
            },
            "max_backlog": MAX_BACKLOG,
        },
        "expected": len(expected),
        "delivered": len(expected & set(accepted_pairs)),
        "duplicates": dups,
        "duplicate_count": sum(d["accepted"] - 1 for d in dups),
        "unexplained_duplicates": sum(1 for d in dups if not d["explained"]),
        # The two kinds of downstream: a workflow whose run-name carries the dispatch id can be found after an
        # ambiguous answer, so it must never be started twice; the others may be, with an ambiguous answer.
        "duplicates_by_kind": {
            "run_name_carries_id": sum(d["accepted"] - 1 for d in dups if d["run_name_carries_id"]),
            "no_id": sum(d["accepted"] - 1 for d in dups if not d["run_name_carries_id"]),
        },
        # Dispatches to id-carrying downstreams that GitHub carried out but answered late: each is a run the
        # relay must find rather than start again.
        "ambiguous_on_id_downstreams": sum(
            1
            for r in soak.gh.requests
            if r.method == "POST" and r.path.endswith("/dispatches") and r.fault == "timeout" and carries_id(_repo(r))
        ),
        "lost": sorted(f"{g} -> {r}" for g, r in expected - set(accepted_pairs)),
        "dead_lettered": dead_letters(soak),
        "jobs": len(jobs),
        "results_sent": sum(len(j.order) for j in jobs),
        "results_recorded": recorded,
        "results_problems": problems,
        "callbacks": {"posts": sum(cb["answers"].values()), "answers": dict(cb["answers"].most_common())},
        "hud_rows": len(hud.rows),
        "hud_pushes": len(hud.pushes),
        "hud_refused": len(hud.refused),
        # Every push as PyTorch's HUD (the port, write-once after completion) answered it: 409 is a duplicate.
        "hud_answers": dict(sorted(Counter(str(status) for status, _ in hud.attempts).items())),
        "hud_duplicates": len(hud.duplicates),
        "window": window_report(soak),
        "webhook_window_events": len(soak.window),
        "reconciler": {
            "redeliveries_asked": sum(1 for r in soak.gh.requests if r.path.endswith("/attempts")),
            "redeliveries_accepted": sum(1 for r in soak.gh.requests if r.path.endswith("/attempts") and r.accepted),
            "delivery_list_pages": sum(1 for r in soak.gh.requests if r.path == "/app/hook/deliveries"),
        },
        "kills": [{k: v for k, v in kill.items() if k not in ("sending", "killed_at")} for kill in soak.kills],
        "github": {
            "requests": len(soak.gh.requests),
            "faults_injected": dict(faults.most_common()),
            "dispatch_posts": len(soak.dispatch_requests()),
            "unexpected_endpoints": len(soak.gh.unexpected),
            "double_internal_errors": len(soak.gh.internal_errors),
        },
        "aws_calls": {
            "dispatch_phase_per_dispatch": per(dispatch_calls, len(expected & set(accepted_pairs))),
            "callback_phase_per_report": per(callback_calls, sum(cb["answers"].values())),
        },
        "moto_cpu_s": round(moto_cpu, 1),
        "aws_calls_per_dispatch": per(dispatch_calls, len(expected & set(accepted_pairs)))["per_unit"],
        "relay_cpu_ms_per_dispatch": round(
            1000 * (soak.cpu_marks["settled"]["relay"] - soak.cpu_marks["start"]["relay"]) / max(1, len(expected)), 2
        ),
        "cpu_s_by_phase": {
            phase: {
                who: round(soak.cpu_marks[end][who] - soak.cpu_marks[begin][who], 1)
                for who in ("relay", "moto", "soak")
            }
            for phase, begin, end in (
                ("feed_and_settle", "start", "settled"),
                ("callbacks", "settled", "reported"),
                ("reporter_drain", "reported", "drained"),
            )
        },
        "phases_s": {
            "feed": round(phases["fed"] - phases["start"], 1),
            "settle": round(phases["settled"] - phases["fed"], 1),
            "callbacks": round(phases["reported"] - phases["settled"], 1),
            "reporter_drain": round(phases["drained"] - phases["reported"], 1),
        },
        "relay_log": log_summary(soak.relay.log_lines()),
        "logs": str(logdir),
    }


def requeues(tally: Counter[str], dispatches: int) -> dict[str, Any]:
    """The dispatch queue's re-queues from the relay's own metric (`DispatchRetried`, by reason): `paced` are the
    messages put back because their installation's write budget had no slot yet."""
    prefix = "DispatchRetried.reason="
    by_reason = {k.removeprefix(prefix): v for k, v in sorted(tally.items()) if k.startswith(prefix)}
    paced = by_reason.get("paced", 0)
    return {
        "requeues_per_dispatch": round(paced / dispatches, 3) if dispatches else None,
        "dispatch_requeues": {"paced": paced, "by_reason": by_reason, "dispatches": dispatches},
        "relay_metrics": dict(sorted(tally.items())),
    }


def verdict(report: dict[str, Any]) -> int:
    problems = []
    if report["lost"]:
        problems.append(f"{len(report['lost'])} dispatches lost")
    if report["results_recorded"] != report["results_sent"]:
        problems.append(f"{report['results_sent'] - report['results_recorded']} results not recorded")
    if report["duplicates_by_kind"]["run_name_carries_id"]:
        problems.append(
            f"{report['duplicates_by_kind']['run_name_carries_id']} duplicate runs of downstreams whose run-name "
            "carries the dispatch id"
        )
    if report["unexplained_duplicates"]:
        problems.append(f"{report['unexplained_duplicates']} duplicates without an ambiguous answer")
    window = [w for w in report["window"] if w["cause"] == "webhook window"]
    if len(window) != report["webhook_window_events"]:
        problems.append(
            f"{report['webhook_window_events'] - len(window)} webhook window events did not fail (no fault)"
        )
    missed = [w["delivery_id"] for w in window if not w["dispatched_by_reconciler"]]
    if missed:
        problems.append(
            f"{len(missed)} webhook window events not dispatched by the reconciler: {', '.join(missed[:5])}"
        )
    if len(report["kills"]) != report["config"]["kills"]:
        problems.append(f"{len(report['kills'])} relay kills of {report['config']['kills']}")
    if report["hud_rows"] != report["jobs"]:
        problems.append(f"{report['hud_rows']} HUD rows for {report['jobs']} jobs")
    if report["hud_refused"]:
        problems.append(f"PyTorch's HUD refused {report['hud_refused']} pushes (answers: {report['hud_answers']})")
    if "flood" in report and not report["flood"]["ok"]:
        problems.append("flood phase: " + "; ".join(report["flood"]["problems"]))
    report["verdict"] = "pass" if not problems else "fail: " + "; ".join(problems)
    return 1 if problems else 0


def print_table(r: dict[str, Any]) -> None:
    per_dispatch, per_report = (
        r["aws_calls"]["dispatch_phase_per_dispatch"],
        r["aws_calls"]["callback_phase_per_report"],
    )
    pairs, unexplained = len(r["duplicates"]), r["unexplained_duplicates"]
    window = [w for w in r["window"] if w["cause"] == "webhook window"]
    recovered = sum(w["dispatched_by_reconciler"] for w in window)
    others = [w for w in r["window"] if w["cause"] != "webhook window"]
    m = r["machine"]
    rows = [
        ("expected dispatches", r["expected"]),
        ("delivered", r["delivered"]),
        ("lost", len(r["lost"])),
        ("duplicates (pairs explained)", f"{r['duplicate_count']} ({pairs - unexplained}/{pairs})"),
        (
            "duplicates: run-name carries the id / does not (runs found instead of sent)",
            f"{r['duplicates_by_kind']['run_name_carries_id']} / {r['duplicates_by_kind']['no_id']}"
            f" ({r.get('dispatch_runs_found')})",
        ),
        ("dead-lettered", len(r["dead_lettered"])),
        ("dead webhook window: events dispatched by the reconciler", f"{recovered}/{r['webhook_window_events']}"),
        (
            "other failed deliveries: dispatched (by the reconciler)",
            f"{sum(w['dispatched_targets'] == r['config']['targets'] for w in others)}/{len(others)}"
            f" ({sum(w['dispatched_by_reconciler'] for w in others)})",
        ),
        ("redeliveries asked", r["reconciler"]["redeliveries_asked"]),
        ("relay kills", len(r["kills"])),
        ("results sent / recorded", f"{r['results_sent']} / {r['results_recorded']}"),
        ("HUD rows / jobs", f"{r['hud_rows']} / {r['jobs']}"),
        ("HUD answers by status (409: duplicate)", ", ".join(f"{k}: {v}" for k, v in r["hud_answers"].items())),
        ("relay CPU s (ms per dispatch, dispatch phase)", f"{r.get('relay_cpu_s')} ({r['relay_cpu_ms_per_dispatch']})"),
        ("paced re-queues per dispatch", r.get("requeues_per_dispatch")),
        (
            "AWS calls per dispatch",
            f"{per_dispatch['per_unit']} ({per_dispatch['without_polling_per_unit']} w/o polling)",
        ),
        ("AWS calls per callback", f"{per_report['per_unit']} ({per_report['without_polling_per_unit']} w/o polling)"),
        ("phases s (feed, settle, callbacks, drain)", ", ".join(str(v) for v in r["phases_s"].values())),
        ("wall time s", r["duration_s"]),
        (
            "machine",
            f"{m['cpu_count']} cores ({m['cpu_model']}), load {m['load_average_at_start'][0]} -> "
            f"{m['load_average_at_end'][0]}, Python {m['python']}, {m['platform']}",
        ),
        ("verdict", r["verdict"]),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    sys.exit(main())
