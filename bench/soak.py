"""`make soak`: the relay under faults, kills and a dead webhook window on loopback, every event and result counted."""

from __future__ import annotations

import argparse
import contextlib
import itertools
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import boto3
import harness as h
import urllib3
from botocore.config import Config
from soak_moto import SOAK_AGENT

from tests.doubles.github_double import Reply
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer

HUD_TOKEN, WEBHOOK_SECRET = "soak-hud-token", "soak-webhook-secret"
# GitHub's faults on every request the relay makes, drawn from a fixed seed; timeouts only where something is created.
FAULT_502, FAULT_429, FAULT_403, FAULT_TIMEOUT = 0.05, 0.02, 0.01, 0.01
RETRY_AFTER_S = 2  # what the 429 and the secondary-limit 403 ask for
GITHUB_TIMEOUT_S = 2  # the relay's read timeout (CRCR_GITHUB_TIMEOUT_S); a hang outlasts it
HANG_S = GITHUB_TIMEOUT_S + 3
VISIBILITY_S, RECONCILE_INTERVAL_S, RETRY_BASE_S = 30, 10, 0.5
WRITE_RATES = "6000/60+600"  # per installation, 100 a second: GitHub.com's 75 a minute would take hours
# Events go in a few at a time while the relay's queues hold fewer messages (moto's receives grow with queue depth).
MAX_BACKLOG, FEEDERS = 150, 4
PUSH_EVERY = 5  # every fifth event is a push to main, the others open a pull request
# The disruptions, at these shares of the events fed: the webhook fails for a tenth of them (2 to 40) at 4 a second.
WINDOW_AT, WINDOW_MAX, WINDOW_RATE = 0.2, 40, 4.0
KILL_AT = (0.4, 0.7)
CALLBACK_WORKERS = 8
DUPLICATE_SHARE, OUT_OF_ORDER_SHARE, FAILURE_SHARE = 0.05, 0.05, 0.10
# The titled runs GitHub plays: cancelled, runners lost, `completed` webhooks lost, and reports never sent.
CANCEL_SHARE, LOST_RUNNER_SHARE, LOST_HOOK = 0.05, 0.05, 0.03
LOST_RUN_REPORTS, LOST_IN_PROGRESS, LOST_COMPLETED = 0.05, 0.10, 0.20
# The first runs played take one case each, so a small run has them all whatever the seed.
FORCED = ("whole_run", "cancelled", "lost_runner", "hook", "completed", "in_progress")
RUN_TIMEOUT_S, SWEEP_S, REPORT_SETTLE_S = 20, 5, 2  # a job not finished is asked about after 20 s (production 12 h)
MARKS = ("start", "fed", "settled", "reported", "drained")  # the phases between them: PHASES
PHASES = ("feed", "settle", "callbacks", "reporter_drain")
POLL_S = 1.0  # how often the soak looks whether the relay has settled or the reporter drained


def say(text: str) -> None:
    print(text, flush=True)


def aws(service: str, endpoint: str) -> Any:
    """A client of the soak's own (its calls are counted apart from the relay's)."""
    config = Config(user_agent_extra=SOAK_AGENT, retries={"mode": "standard", "max_attempts": 5})
    return boto3.client(
        service, endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
        aws_secret_access_key="testing", config=config,
    )  # fmt: skip


@dataclass
class RelayRun:
    pid: int
    started: float
    ready_s: float
    stopped: float | None = None
    cpu_s: float | None = None
    how: str = ""
    metrics: dict[str, int] = field(default_factory=dict)  # its tally, read just before it was stopped or killed


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
            log = self.logdir / f"relay-{len(self.runs)}.log"
            started = time.monotonic()

            def ready() -> bool:
                return b'{"event": "ready"' in log.read_bytes()

            with log.open("wb") as out:
                command = [sys.executable, "-m", "crcr.ops.cli", "local", "--port", str(self.port)]
                self.proc = h.started(command, ready, f"crcr local ({log})", 120, env=self.env, cwd=h.ROOT, stdout=out)
            self.runs.append(RelayRun(self.proc.pid, time.time(), round(time.monotonic() - started, 2)))

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
        """Every process's tally added up (a killed one's counts after its last read, milliseconds' worth, missing)."""
        return sum((Counter(run.metrics) for run in self.runs), Counter())

    def end(self, sig: int, how: str) -> None:
        with self.lock:
            assert self.proc is not None
            proc, run = self.proc, self.runs[-1]
            self.read_metrics()
            run.cpu_s = h.cpu_seconds(proc.pid)  # read before the process is gone
            h.end(proc, lambda: proc.send_signal(sig), timeout_s=30)
            run.stopped, run.how = time.time(), how

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.end(signal.SIGTERM, "SIGTERM at the end")

    def log_lines(self) -> list[str]:
        return [
            line
            for path in sorted(self.logdir.glob("relay-*.log"))
            for line in path.read_text(errors="replace").splitlines()
            if line.strip() and not line.startswith('{"event": "ready"')
        ]


@dataclass(frozen=True)
class Event:
    name: str  # pull_request | push
    guid: str
    body: bytes


def make_events(n: int) -> list[Event]:
    push = (h.ROOT / "examples" / "events" / "push.main.json").read_bytes()
    events = []
    for i in range(n):
        sha = uuid.uuid5(uuid.NAMESPACE_OID, f"soak-{i}").hex + f"{i:08x}"
        if i % PUSH_EVERY == PUSH_EVERY - 1:
            name, doc = "push", json.loads(push)
            doc["before"], doc["after"], doc["head_commit"]["id"] = doc["after"], sha, sha
            for commit in doc["commits"]:
                commit["id"] = sha
        else:
            name, doc = "pull_request", json.loads(h.event_body())
            doc["number"] = doc["pull_request"]["number"] = 200_000 + i
            doc["pull_request"]["head"] = doc["pull_request"]["head"] | {"sha": sha, "ref": f"soak-{i}"}
        events.append(Event(name, str(uuid.uuid4()), json.dumps(doc).encode()))
    return events


def carries_id(repo: str) -> bool:
    """Every other downstream's run-name carries the dispatch id: after an ambiguous answer the relay finds its run."""
    return int(repo.rsplit("-", 1)[1]) % 2 == 0


def github_double(key: h.AppKey, repos: list[tuple[str, int, int]], seed: int, timeouts: float) -> h.GitHubDouble:
    gh = h.github_double(key.public_pem, [*repos, (h.UPSTREAM, 7999, h.UPSTREAM_ID)])
    for repo, _, _ in repos:
        gh.set_dispatch_workflow(repo, h.run_name if carries_id(repo) else lambda body: "CI", jobs=["build"])
    faults = [
        (FAULT_502, Reply(502)),
        (FAULT_429, Reply.too_many_requests(retry_after=RETRY_AFTER_S)),
        (FAULT_403, Reply.secondary_rate_limit(retry_after=RETRY_AFTER_S)),
    ]
    if timeouts:
        # Whatever the draws, the first dispatch of the first downstream of each kind is carried out and answered late:
        # every run with timeouts takes the run lookup instead of a second send, and sends one duplicate to explain.
        for kind in (True, False):
            first = next((repo for repo, _, _ in repos if carries_id(repo) is kind), None)
            if first is not None:
                gh.script("POST", rf"/repos/{re.escape(first)}/dispatches", [Reply.accept_then_hang(HANG_S)])
    gh.chaos("POST", r".*", [*faults, (timeouts, Reply.accept_then_hang(HANG_S))], seed=seed)
    gh.chaos("GET", r".*", faults, seed=seed + 1)
    return gh


def played_run(rng: random.Random, force: str) -> tuple[str, str, list[str], bool]:
    """How a run GitHub plays goes: its fate, the job's conclusion, the reports its job sends, and whether GitHub's
    `completed` webhook is lost. `force` (one of FORCED) makes one case certain whatever the draws."""
    draw = rng.random() if not force else {"cancelled": 0.0, "lost_runner": CANCEL_SHARE}.get(force, 1.0)
    fate = "cancelled" if draw < CANCEL_SHARE else "lost_runner" if draw < CANCEL_SHARE + LOST_RUNNER_SHARE else ""
    conclusion = {"cancelled": "cancelled", "lost_runner": "failure"}.get(fate)
    conclusion = conclusion or ("failure" if rng.random() < FAILURE_SHARE else "success")
    order = [] if rng.random() < LOST_RUN_REPORTS or force == "whole_run" else ["in_progress", "completed"]
    if order and (rng.random() < LOST_IN_PROGRESS or force == "in_progress"):
        order.remove("in_progress")
    if "completed" in order and (fate == "lost_runner" or rng.random() < LOST_COMPLETED or force == "completed"):
        order.remove("completed")  # a lost runner runs no report step
    return fate or "finished", conclusion, order, rng.random() < LOST_HOOK or force == "hook"


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
    fate: str = ""  # a run GitHub plays: finished, cancelled or lost_runner ("": no run of it is bound)
    check_run_id: int | None = None  # GitHub's id of the job, sent as the report action sends `job.check_run_id`

    def body(self, status: str) -> bytes:
        conclusion = self.conclusion if status == "completed" else None
        body = h.report_body(self.ticket, self.repo, "build", self.run_id, status, conclusion)
        return json.dumps(body | ({"check_run_id": self.check_run_id} if self.check_run_id else {})).encode()


@dataclass
class Soak:
    events: list[Event]
    repos: list[tuple[str, int, int]]
    gh: h.GitHubDouble
    relay: Relay
    moto: h.MotoProcess
    deadline: float
    sqs: Any = None
    ddb: Any = None
    queue_urls: dict[str, str] = field(default_factory=dict)
    backlog: int = 0
    window: list[str] = field(default_factory=list)  # guids fed while the webhook failed
    kills: list[dict[str, Any]] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    aws_marks: dict[str, dict[str, Counter[str]]] = field(default_factory=dict)
    relay_cpu: dict[str, float] = field(default_factory=dict)  # at each mark
    stop_monitor: threading.Event = field(default_factory=threading.Event)
    callbacks_pool: Any = None

    def __post_init__(self) -> None:
        self.sqs, self.ddb = aws("sqs", self.moto.url), aws("dynamodb", self.moto.url)
        # The report action's sends, a connection kept per runner: 429, 5xx and dropped connections tried 12 times.
        retry = urllib3.Retry(total=11, backoff_factor=0.2, backoff_max=5, status_forcelist=(429, *range(500, 600)),
                              allowed_methods=None, raise_on_status=False)  # fmt: skip
        self.callbacks_pool = urllib3.PoolManager(maxsize=CALLBACK_WORKERS, timeout=30, retries=retry)

    @property
    def expected(self) -> set[tuple[str, str]]:
        return {(e.guid, repo.lower()) for e in self.events for repo, _, _ in self.repos}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def mark(self, name: str) -> None:
        self.phases[name] = time.monotonic()
        self.aws_marks[name] = self.moto.calls()
        proc = self.relay.proc
        running = h.cpu_seconds(proc.pid) if proc is not None and proc.poll() is None else 0.0
        self.relay_cpu[name] = sum(r.cpu_s or 0.0 for r in self.relay.runs[:-1]) + running

    def queue_url(self, logical: str) -> str:
        if logical not in self.queue_urls:
            self.queue_urls[logical] = self.sqs.get_queue_url(QueueName=f"crcr-local-{logical}")["QueueUrl"]
        return self.queue_urls[logical]

    def depth(self, *logicals: str) -> int:
        return sum(h.queue_depth(self.sqs, self.queue_url(logical)) for logical in logicals)

    def monitor(self) -> None:
        ticks = 0
        while not self.stop_monitor.wait(0.5):
            ticks += 1
            if ticks % 4 == 0:
                self.relay.read_metrics(wait=False)
            with contextlib.suppress(Exception):
                self.backlog = self.depth("EventsQueue", "DispatchQueue")

    def events_queue_limit(self, size: int) -> None:
        """The window's fault: EventsQueue refuses messages over `size` bytes, so the webhook answers 500."""
        url, attributes = self.queue_url("EventsQueue"), {"MaximumMessageSize": str(size)}
        self.sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)

    def feed(self) -> None:
        n = len(self.events)
        window_at, kills_at = int(n * WINDOW_AT), [int(n * k) for k in KILL_AT]
        i = 0
        with ThreadPoolExecutor(FEEDERS, thread_name_prefix="feed") as pool:
            while i < n:
                if self.left() < 0:
                    raise TimeoutError("the soak's time bound ran out while feeding")
                if i >= window_at and not self.window:
                    i = self.failing_window(i)
                elif kills_at and i >= kills_at[0]:
                    kills_at.pop(0)
                    self.kill_and_restart()
                else:
                    h.wait_until(lambda: self.backlog <= MAX_BACKLOG, self.left())
                    chunk = self.events[i : i + FEEDERS]
                    list(pool.map(lambda e: self.gh.deliver(e.name, e.body, guid=e.guid), chunk))
                    i += len(chunk)
                    if i % 200 < FEEDERS:
                        say(f"  fed {i}/{n} events, {len(self.landed())} dispatches accepted, backlog {self.backlog}")

    def failing_window(self, start: int) -> int:
        self.events_queue_limit(1024)
        end = min(start + max(2, min(WINDOW_MAX, len(self.events) // 10)), len(self.events))
        for event in self.events[start:end]:
            self.gh.deliver(event.name, event.body, guid=event.guid)
            self.window.append(event.guid)
            time.sleep(1 / WINDOW_RATE)
        self.events_queue_limit(262144)
        failed = sum(1 for g in self.window if not self.gh.deliveries_of(g)[0].ok)
        say(f"  webhook window: {len(self.window)} events while EventsQueue refused messages, {failed} failed")
        return end

    def kill_and_restart(self) -> None:
        # Mid-batch: dispatches are being sent right now (the double accepted one within the last 200 ms).
        h.wait_until(lambda: time.time() - self.last_accept() <= 0.2, 30, every_s=0.01)
        in_flight = self.backlog
        self.relay.end(signal.SIGKILL, "SIGKILL mid-batch")
        killed_at = time.time()
        # The (delivery, repository) rows the killed process had claimed: a 204 GitHub gave it may be unrecorded.
        sending = {
            (i["pk"]["S"].removeprefix("DLV#"), i["sk"]["S"].removeprefix("DSP#"))
            for i in h.scan(
                self.ddb,
                TableName="crcr-local-StateTable",
                FilterExpression="begins_with(sk, :dsp) AND #s = :sending",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={":dsp": {"S": "DSP#"}, ":sending": {"S": "sending"}},
                ProjectionExpression="pk, sk",
            )
        }
        self.relay.start()
        self.kills.append({
            "at_s": round(killed_at - self.phases["start_wall"], 1),
            "killed_at": killed_at,
            "queued_messages": in_flight,
            "ledger_rows_sending": len(sending),
            "sending": sending,
            "restart_ready_s": self.relay.runs[-1].ready_s,
        })  # fmt: skip
        say(f"  killed the relay mid-batch ({len(sending)} ledger rows sending); restarted")

    def last_accept(self) -> float:
        return next((r.time for r in reversed(self.gh.requests) if r.accepted and r.path.endswith("/dispatches")), 0.0)

    def dispatch_requests(self) -> list[h.RecordedRequest]:
        return [r for r in self.gh.requests if r.method == "POST" and r.path.endswith("/dispatches")]

    def landed(self) -> list[tuple[tuple[str, str], h.RecordedRequest]]:
        """Every dispatch GitHub accepted, by its (delivery, repository lower-case)."""
        return [((h.delivery_of(r), h.repo_of(r)), r) for r in self.dispatch_requests() if r.accepted]

    def settle(self) -> None:
        """Until every expected dispatch was accepted (the reconciler's redeliveries bring what the relay missed) and
        the queues are empty; not every event answered 2xx (one queued by a relay killed before answering never is)."""
        expected = self.expected
        quiet = looks = 0
        while self.left() > 0:
            ok = {d.guid for d in self.gh.hook_deliveries if d.ok}
            got = {pair for pair, _ in self.landed()}
            backlog = self.depth("EventsQueue", "DispatchQueue")
            quiet = quiet + 1 if expected <= got and backlog == 0 else 0
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

    def callbacks(self, issuer: OidcIssuer, seed: int) -> dict[str, Any]:
        """Every dispatched job reports as the report action does, from CALLBACK_WORKERS runners; the titled runs are
        played on GitHub first, their reports partly lost: the relay must take what they never said from GitHub."""
        rng = random.Random(seed)
        ids = {repo.lower(): (repo, repo_id) for repo, _, repo_id in self.repos}
        tickets = {pair: r.json["client_payload"] for pair, r in self.landed()}
        titled = {
            run["display_title"].rsplit(" ", 1)[-1]: run["id"]
            for repo, _, _ in self.repos
            if carries_id(repo)
            for run in self.gh.runs_of(repo)
        }
        jobs, lost_hooks, played = [], set(), 0
        for n, (pair, payload) in enumerate(sorted(tickets.items())):
            repo, repo_id = ids[pair[1]]
            run_id, fate, job_id = titled.get(payload["dispatch_id"]), "", None
            if run_id is None:  # no title to bind by: the reports are all the relay learns
                run_id, conclusion = 90_000_000 + n, "failure" if rng.random() < FAILURE_SHARE else "success"
                in_order = rng.random() >= OUT_OF_ORDER_SHARE
                order = ["in_progress", "completed"] if in_order else ["completed", "in_progress"]
            else:
                fate, conclusion, order, hook_lost = played_run(rng, FORCED[played] if played < len(FORCED) else "")
                played += 1
                if hook_lost:
                    lost_hooks.add(run_id)
                job_id = self.gh.jobs_of(repo, run_id)[0]["id"]
            twice = [rng.random() < DUPLICATE_SHARE for _ in order]
            jobs.append(Job(pair, repo, repo_id, payload["ticket"], run_id, conclusion, order, twice, [], fate, job_id))
        self.gh.drop_webhooks(
            lambda event, body: (
                event == "workflow_run" and body["action"] == "completed" and body["workflow_run"]["id"] in lost_hooks
            )
        )

        def report(job: Job, token: str, status: str, again: bool) -> None:
            for _ in range(2 if again else 1):
                job.answers.append((status, self.post_callback(job.body(status), token)))

        def run(job: Job) -> None:
            token = h.job_token(issuer, job.repo, job.repo_id, job.run_id)
            sends = dict(zip(job.order, job.twice, strict=True))
            if job.fate:  # the run starts, its job may say so, the run ends; then the job may report its end
                self.gh.start_run(job.repo, job.run_id)
                if "in_progress" in sends:
                    report(job, token, "in_progress", sends.pop("in_progress"))
                if job.fate == "cancelled":
                    self.gh.cancel_run(job.repo, job.run_id)
                else:
                    self.gh.finish_run(job.repo, job.run_id, job.conclusion)
            for status, again in sends.items():
                report(job, token, status, again)

        with ThreadPoolExecutor(CALLBACK_WORKERS, thread_name_prefix="callback") as pool:
            for k, _ in enumerate(pool.map(run, jobs), 1):
                if k % 2000 == 0:
                    say(f"  {k}/{len(jobs)} jobs reported")
            # The runs of downstreams whose titles do not carry the id run too: their events are dropped at the door.
            untitled = [
                (repo, run["id"]) for repo, _, _ in self.repos if not carries_id(repo) for run in self.gh.runs_of(repo)
            ]
            list(pool.map(lambda r: (self.gh.start_run(*r), self.gh.finish_run(*r)), untitled))
        answers = Counter(answer for job in jobs for _, answer in job.answers)
        return {"jobs": jobs, "answers": answers, "lost_hooks": len(lost_hooks)}

    def post_callback(self, body: bytes, token: str) -> str:
        """One report as the report action sends it: 429, 5xx and dropped connections retried with backoff."""
        headers = {"content-type": "application/json", "authorization": f"Bearer {token}", "user-agent": "crcr-soak"}
        try:
            resp = self.callbacks_pool.request("POST", f"{self.relay.url}/callback", body=body, headers=headers)
        except urllib3.exceptions.HTTPError:
            return "gave up"
        try:
            answer = json.loads(resp.data)
        except ValueError:
            return f"{resp.status} ?"
        return f"{resp.status} {answer.get('status') or answer.get('error')}"

    def wait_reporter(self, hud: HudDouble, jobs: int) -> None:
        """Until PyTorch's HUD holds a completed row per job, the pushes stop changing (the results stream is drained)
        and no run event waits (each run GitHub said completed has had its jobs listed)."""
        last, still, looks = -1, 0, 0
        while self.left() > 0:
            rows = sum(1 for row in hud.rows.values() if row.get("status") == "completed")
            pushes = len(hud.attempts)
            settled = rows >= jobs and pushes == last and self.depth("RunsQueue") == 0
            still = still + 1 if settled else 0
            if still >= 3:
                return
            last = pushes
            time.sleep(POLL_S)
            looks += 1
            if looks % 10 == 0:
                say(f"  reporter: {rows}/{jobs} HUD rows completed, {pushes} pushes")
        say("  the soak's time bound ran out while the reporter drained")


def duplicates(soak: Soak) -> list[dict[str, Any]]:
    """Every (delivery, repository) GitHub accepted more than once, each repeat with the ambiguous answer that caused
    it: a time-out after GitHub accepted, or a kill between GitHub's answer and the ledger's write."""
    by_pair: dict[tuple[str, str], list[h.RecordedRequest]] = {}
    for pair, rec in soak.landed():
        by_pair.setdefault(pair, []).append(rec)
    out = []
    for pair, recs in sorted(by_pair.items()):
        causes = [_cause(soak, pair, earlier) for earlier in recs[:-1]]
        if not causes:
            continue
        out.append({
            "delivery_id": pair[0],
            "repo": pair[1],
            "accepted": len(recs),
            "causes": causes,
            "explained": not any(c.startswith("unexplained") for c in causes),
            "run_name_carries_id": carries_id(pair[1]),
        })  # fmt: skip
    return out


def _cause(soak: Soak, pair: tuple[str, str], earlier: h.RecordedRequest) -> str:
    if earlier.fault == "timeout":
        return "timeout after GitHub accepted (answered after the relay's read timeout)"
    if earlier.answered_at is None:
        return f"GitHub accepted, and its answer was never written ({earlier.outcome})"
    if (took := earlier.answered_at - earlier.time) >= GITHUB_TIMEOUT_S - 0.05:
        return f"GitHub accepted, and answered after {took:.1f} s: past the relay's read timeout"
    kill = next((k for k in soak.kills if earlier.time <= k["killed_at"] and pair in k["sending"]), None)
    if kill is not None:
        return f"relay killed at {kill['at_s']} s between GitHub's {earlier.status} and the ledger write"
    return f"unexplained: earlier request answered {earlier.status} ({earlier.outcome})"


def result_rows(soak: Soak) -> dict[tuple[str, str], Any]:
    """The results table's rows (JobRecord) of the downstreams' jobs, by (delivery, repository lower-case)."""
    rows = map(h.from_item, h.scan(soak.ddb, TableName="crcr-local-ResultsTable", ConsistentRead=True))
    return {(row.delivery_id, row.repo.lower()): row for row in rows if row.job_name == "build"}


def results_recorded(soak: Soak, jobs: list[Job]) -> tuple[int, list[str]]:
    """Reports the relay took (200) whose effect is in the results table: a completed report's conclusion on the
    job's row; an in_progress one as the row's start, or (sent after the completion) as a no-op by the contract."""
    rows = result_rows(soak)
    recorded, problems = 0, []
    for job in jobs:
        row = rows.get(job.pair)
        firsts = {status: answer for status, answer in reversed(job.answers)}  # each report's first answer
        for n, status in enumerate(job.order):
            ok = row is not None and firsts.get(status, "").startswith("200 ")
            if ok and status == "completed":
                ok = row.state == "completed" and row.conclusion == job.conclusion
            elif ok:
                ok = row.started_at is not None or (n == 1 and row.state == "completed")
            recorded += ok
            if not ok and len(problems) < 20:
                problems.append(f"{job.pair} {status}: answered {firsts.get(status)}, row {row and row.state}")
    return recorded, problems


def runs_report(soak: Soak, jobs: list[Job], hud: HudDouble, lost_hooks: int) -> dict[str, Any]:
    """The runs GitHub played: each job's conclusion in the results table and in PyTorch's HUD against GitHub's own,
    and what the relay asked GitHub about them (at most one jobs listing per completed attempt)."""
    rows, played = result_rows(soak), [j for j in jobs if j.fate]
    hud_rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in hud.rows.values():
        hud_rows.setdefault((row["delivery_id"], row["downstream_repo"].lower()), []).append(row)
    wrong = []
    for job in played:
        truth = soak.gh.jobs_of(job.repo, job.run_id)[0]["conclusion"]
        row, pushed = rows.get(job.pair), hud_rows.get(job.pair) or [{}]
        ledger = row.conclusion if row is not None and row.state == "completed" else None
        shown = [r.get("conclusion") for r in pushed]
        if ledger != truth or shown != [truth]:
            wrong.append(f"{job.pair[1]} run {job.run_id}: GitHub {truth}, ledger {ledger}, HUD {shown}")
    listing = re.compile(r"/repos/([^/]+/[^/]+)/actions/runs/(\d+)/attempts/(\d+)/jobs")

    def kind_of(path: str) -> str:
        return "jobs_listing" if path.endswith("/jobs") else "runs_listing" if path.endswith("/runs") else "run"

    asked = [r for r in soak.gh.requests if r.method == "GET" and "/actions/runs" in r.path]
    listings = Counter(m.groups() for r in asked if r.status == 200 and (m := listing.match(r.path)))
    return {
        "played": len(played),
        "fates": dict(Counter(j.fate for j in played).most_common()),
        "reports_lost": {
            "whole_run": sum(1 for j in played if not j.order),
            "in_progress": sum(1 for j in played if "in_progress" not in j.order),
            "completed": sum(1 for j in played if "completed" not in j.order),
        },
        "completed_webhooks_lost": lost_hooks,
        "conclusions_not_githubs": wrong[:20],
        "conclusions_not_githubs_count": len(wrong),
        "false_timed_out": sum(1 for r in rows.values() if r.conclusion == "timed_out"),
        "hud_409": sum(1 for status, _ in hud.attempts if status == 409),
        # The relay's reads of runs per run played, by kind: with RUN_TIMEOUT_S at 20 s the sweeper asks about a
        # run still queued every 20 s (production: hourly), so `run` is the soak's compressed time, not a cost.
        "github_requests_per_run": {
            kind: round(sum(1 for r in asked if kind_of(r.path) == kind) / max(1, len(played)), 2)
            for kind in ("jobs_listing", "run", "runs_listing")
        },
        "jobs_listings": sum(listings.values()),
        "most_jobs_listings_per_attempt": max(listings.values(), default=0),
    }


def per(calls: Counter[str], n: int) -> dict[str, Any]:
    total, work = sum(calls.values()), sum(v for k, v in calls.items() if not h.is_polling(k))
    return {
        "calls": total, "per_unit": round(total / n, 2) if n else None, "without_polling": work,
        "without_polling_per_unit": round(work / n, 2) if n else None, "by_operation": dict(calls.most_common()),
    }  # fmt: skip


def window_report(soak: Soak) -> list[dict[str, Any]]:
    """Every event with a failed delivery (the dead window's, or a relay being restarted): its attempts, the
    reconciler's asks, and whether every target was first dispatched after a redelivery the reconciler asked for."""
    failed = {d.guid for d in soak.gh.hook_deliveries if not d.ok}
    asked = Counter(r.path.split("/")[4] for r in soak.gh.requests if r.path.endswith("/attempts") and r.accepted)
    first_dispatch: dict[tuple[str, str], float] = {}
    for pair, rec in soak.landed():
        first_dispatch.setdefault(pair, rec.time)
    start = soak.phases["start_wall"]
    out = []
    for event in (e for e in soak.events if e.guid in failed):
        tries = soak.gh.deliveries_of(event.guid)
        # A redelivery the relay queued may go unanswered (a kill before its answer): reaching the relay is what counts.
        recovered_at = min((d.delivered_at for d in tries if d.redelivery and d.ok), default=None)
        reached_at = min((d.delivered_at for d in tries if d.redelivery), default=None)
        firsts = [first_dispatch.get((event.guid, repo.lower())) for repo, _, _ in soak.repos]
        out.append({
            "delivery_id": event.guid,
            "event": event.name,
            "cause": "webhook window" if event.guid in soak.window else f"first attempt: {tries[0].status}",
            "attempts": [
                {"id": d.id, "status_code": d.status_code, "redelivery": d.redelivery,
                 "at_s": round(d.delivered_at - start, 1)}
                for d in tries
            ],
            "redeliveries_asked": sum(asked[str(d.id)] for d in tries),
            "first_2xx_redelivery_at_s": None if recovered_at is None else round(recovered_at - start, 1),
            "dispatched_targets": sum(1 for t in firsts if t is not None),
            "dispatched_by_reconciler": reached_at is not None
            and all(t is not None and t >= reached_at for t in firsts),
        })  # fmt: skip
    return out


def build_report(soak: Soak, args: argparse.Namespace, cb: dict[str, Any], hud: HudDouble) -> dict[str, Any]:
    accepted = {pair for pair, _ in soak.landed()}
    expected, dups, jobs, requests = soak.expected, duplicates(soak), cb["jobs"], soak.gh.requests
    recorded, problems = results_recorded(soak, jobs)
    dispatch_calls = soak.aws_marks["settled"]["relay"] - soak.aws_marks["start"]["relay"]
    callback_calls = soak.aws_marks["drained"]["relay"] - soak.aws_marks["settled"]["relay"]
    delivered, posts = len(expected & accepted), sum(cb["answers"].values())
    marks, cpu = soak.phases, soak.relay_cpu
    letters = [
        {"queue": dlq, **{k: letter[k] for k in ("delivery_id", "target_repo", "reason")}}
        for dlq in ("EventsDLQ", "DispatchDLQ", "ChecksDLQ", "RunsDLQ", "ReporterDLQ")
        for letter in h.list_dead_letters(soak.sqs, soak.queue_url(dlq), limit=1000)
    ]
    return {
        "config": {k: v for k, v in vars(args).items() if k != "out"} | {"level": "L2", "kills": len(KILL_AT)},
        "expected": len(expected),
        "delivered": delivered,
        "duplicates": dups,
        "duplicate_count": sum(d["accepted"] - 1 for d in dups),
        "unexplained_duplicates": sum(1 for d in dups if not d["explained"]),
        # A run whose run-name carries the dispatch id is found after an ambiguous answer: never started twice.
        "duplicates_by_kind": {
            "run_name_carries_id": sum(d["accepted"] - 1 for d in dups if d["run_name_carries_id"]),
            "no_id": sum(d["accepted"] - 1 for d in dups if not d["run_name_carries_id"]),
        },
        # Dispatches to id-carrying downstreams GitHub carried out but answered late: runs to find, not start again.
        "ambiguous_on_id_downstreams": sum(
            1 for r in soak.dispatch_requests() if r.fault == "timeout" and carries_id(h.repo_of(r))
        ),
        "lost": sorted(f"{g} -> {r}" for g, r in expected - accepted),
        "dead_lettered": letters,
        "jobs": len(jobs),
        "results_sent": sum(len(j.order) for j in jobs),
        "results_recorded": recorded,
        "results_problems": problems,
        "callbacks": {"posts": posts, "answers": dict(cb["answers"].most_common())},
        "hud_rows": len(hud.rows),
        "hud_refused": len(hud.refused),
        # Every push as PyTorch's HUD (the port, write-once after completion) answered it: 409 is a duplicate.
        "hud_answers": dict(sorted(Counter(str(status) for status, _ in hud.attempts).items())),
        "runs": runs_report(soak, jobs, hud, cb["lost_hooks"]),
        "window": window_report(soak),
        "webhook_window_events": len(soak.window),
        "reconciler": {
            "redeliveries_asked": sum(1 for r in requests if r.path.endswith("/attempts")),
            "redeliveries_accepted": sum(1 for r in requests if r.path.endswith("/attempts") and r.accepted),
        },
        "kills": [{k: v for k, v in kill.items() if k not in ("sending", "killed_at")} for kill in soak.kills],
        "github": {
            "requests": len(requests),
            "faults_injected": dict(Counter(r.fault for r in requests if r.fault).most_common()),
            "dispatch_posts": len(soak.dispatch_requests()),
            "unexpected_endpoints": len(soak.gh.unexpected),
            "double_internal_errors": len(soak.gh.internal_errors),
        },
        "aws_calls": {
            "dispatch_phase_per_dispatch": per(dispatch_calls, delivered),
            "callback_phase_per_report": per(callback_calls, posts),
        },
        "moto_cpu_s": round(h.cpu_seconds(soak.moto.pid), 1),
        "relay_cpu_ms_per_dispatch": round(1000 * (cpu["settled"] - cpu["start"]) / len(expected), 2),
        "phases_s": {
            name: round(marks[end] - marks[begin], 1)
            for name, (begin, end) in zip(PHASES, itertools.pairwise(MARKS), strict=True)
        },
        "relay_log": h.log_summary(soak.relay.log_lines()),
    }


def verdict(report: dict[str, Any]) -> int:
    r, runs = report, report["runs"]
    window = [w for w in r["window"] if w["cause"] == "webhook window"]
    missed = [w["delivery_id"] for w in window if not w["dispatched_by_reconciler"]]
    carrying, kills = r["duplicates_by_kind"]["run_name_carries_id"], r["config"]["kills"]
    unrecorded, unfailed = r["results_sent"] - r["results_recorded"], r["webhook_window_events"] - len(window)
    checks = [
        (r["lost"], f"{len(r['lost'])} dispatches lost"),
        (unrecorded, f"{unrecorded} results not recorded"),
        (carrying, f"{carrying} duplicate runs of downstreams whose run-name carries the dispatch id"),
        (r["unexplained_duplicates"], f"{r['unexplained_duplicates']} duplicates without an ambiguous answer"),
        (unfailed, f"{unfailed} window events did not fail"),
        (missed, f"{len(missed)} webhook window events not dispatched by the reconciler: {', '.join(missed[:5])}"),
        (len(r["kills"]) != kills, f"{len(r['kills'])} relay kills of {kills}"),
        (r["hud_rows"] != r["jobs"], f"{r['hud_rows']} HUD rows for {r['jobs']} jobs"),
        (r["hud_refused"], f"PyTorch's HUD refused {r['hud_refused']} pushes (answers: {r['hud_answers']})"),
        (runs["conclusions_not_githubs_count"], f"{runs['conclusions_not_githubs_count']} jobs not as GitHub says"),
        (runs["false_timed_out"], f"{runs['false_timed_out']} jobs timed out"),
        (runs["hud_409"], f"{runs['hud_409']} HUD pushes answered 409"),
        (runs["most_jobs_listings_per_attempt"] > 1, "a run attempt's jobs listed more than once"),
    ]
    problems = [text for failed, text in checks if failed]
    r["verdict"] = "pass" if not problems else "fail: " + "; ".join(problems)
    return 1 if problems else 0


def print_table(r: dict[str, Any]) -> None:
    pairs, unexplained = len(r["duplicates"]), r["unexplained_duplicates"]
    window = [w for w in r["window"] if w["cause"] == "webhook window"]
    others = [w for w in r["window"] if w["cause"] != "webhook window"]
    kinds = r["duplicates_by_kind"]
    rows = [
        ("expected dispatches", r["expected"]),
        ("delivered", r["delivered"]),
        ("lost", len(r["lost"])),
        ("duplicates (pairs explained)", f"{r['duplicate_count']} ({pairs - unexplained}/{pairs})"),
        ("duplicates: run-name carries the id / does not (runs found instead of sent)",
         f"{kinds['run_name_carries_id']} / {kinds['no_id']} ({r.get('dispatch_runs_found')})"),
        ("dead-lettered", len(r["dead_lettered"])),
        ("dead webhook window: events dispatched by the reconciler",
         f"{sum(w['dispatched_by_reconciler'] for w in window)}/{r['webhook_window_events']}"),
        ("other failed deliveries: dispatched (by the reconciler)",
         f"{sum(w['dispatched_targets'] == r['config']['targets'] for w in others)}/{len(others)}"
         f" ({sum(w['dispatched_by_reconciler'] for w in others)})"),
        ("redeliveries asked", r["reconciler"]["redeliveries_asked"]),
        ("relay kills", len(r["kills"])),
        ("results sent / recorded", f"{r['results_sent']} / {r['results_recorded']}"),
        ("HUD rows / jobs", f"{r['hud_rows']} / {r['jobs']}"),
        ("HUD answers by status (409: duplicate)", ", ".join(f"{k}: {v}" for k, v in r["hud_answers"].items())),
        ("runs GitHub played / jobs not as GitHub says / timed out",
         f"{r['runs']['played']} / {r['runs']['conclusions_not_githubs_count']} / {r['runs']['false_timed_out']}"),
        ("GitHub reads per run played (most jobs listings per attempt)",
         f"{r['runs']['github_requests_per_run']} ({r['runs']['most_jobs_listings_per_attempt']})"),
        ("relay CPU s (ms per dispatch, dispatch phase)", f"{r.get('relay_cpu_s')} ({r['relay_cpu_ms_per_dispatch']})"),
        ("paced re-queues per dispatch", r.get("requeues_per_dispatch")),
        *[
            (f"AWS calls per {unit}", f"{calls['per_unit']} ({calls['without_polling_per_unit']} w/o polling)")
            for unit, calls in (("dispatch", r["aws_calls"]["dispatch_phase_per_dispatch"]),
                                ("callback", r["aws_calls"]["callback_phase_per_report"]))
        ],
        ("phases s (feed, settle, callbacks, drain)", ", ".join(str(v) for v in r["phases_s"].values())),
        ("wall time s", r["duration_s"]),
        ("verdict", r["verdict"]),
    ]  # fmt: skip
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def main() -> int:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=int(env("SOAK_EVENTS") or 400), help="SOAK_EVENTS, default 400")
    parser.add_argument("--targets", type=int, default=int(env("SOAK_TARGETS") or 10), help="SOAK_TARGETS, default 10")
    parser.add_argument("--seed", type=int, default=int(env("SOAK_SEED") or 1), help="SOAK_SEED, default 1")
    parser.add_argument("--timeout-s", type=float, default=float(env("SOAK_TIMEOUT_S") or 7200), help="SOAK_TIMEOUT_S")
    parser.add_argument("--timeouts", type=float, default=FAULT_TIMEOUT, help="share of POSTs answered too late")
    parser.add_argument("--visibility-s", type=int, default=VISIBILITY_S, help="CRCR_LOCAL_VISIBILITY_TIMEOUT_S")
    parser.add_argument("--reconcile-s", type=float, default=RECONCILE_INTERVAL_S, help="CRCR_RECONCILE_INTERVAL_S")
    parser.add_argument("--write-rates", default=env("SOAK_WRITE_RATES") or WRITE_RATES, help="SOAK_WRITE_RATES")
    parser.add_argument("--out", type=Path, default=h.ROOT / "bench" / "soak.json")
    args = parser.parse_args()
    if args.events < 1 or args.targets < 1:
        parser.error(f"at least 1 event and 1 target (got {args.events} events x {args.targets} downstreams)")
    started = time.monotonic()
    context = h.run_start()
    say(f"soak: {args.events} events x {args.targets} downstreams, bound {args.timeout_s:.0f} s, seed {args.seed}")
    key = h.AppKey.generate()
    # One organization, so one installation, per downstream: (repository, installation id, repository id).
    repos = [(f"soak-org-{i}/repo-{i}", 8000 + i, 60_000 + i) for i in range(args.targets)]
    events = make_events(args.events)
    logdir = Path(tempfile.mkdtemp(prefix="crcr-soak-"))
    allowlist = logdir / "allowlist.yaml"
    allowlist.write_text("L2:\n" + "".join(f"  - {repo}\n" for repo, _, _ in repos))
    moto = h.MotoProcess().__enter__()
    gh = github_double(key, repos, args.seed, args.timeouts)
    issuer, hud = OidcIssuer(), HudDouble(HUD_TOKEN)
    env_vars = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))}
    env_vars |= h.relay_env(key, gh.url, allowlist, WEBHOOK_SECRET) | {
        "AWS_ENDPOINT_URL": moto.url,  # `crcr local` sets moto's credentials and region
        # Fixed across restarts: a ticket signed by one relay process must verify in the next.
        "CRCR_TICKET_SIGNING_KEY": h.generate_keys()["ticket_signing_key"],
        "CRCR_OIDC_ISSUER": issuer.url,
        "CRCR_OIDC_AUDIENCE": "crcr",
        "CRCR_HUD_URL": hud.url,
        "CRCR_HUD_TOKEN": HUD_TOKEN,
        "CRCR_CALLBACK_RATE_PER_MIN": "1000000",
        "CRCR_GITHUB_TIMEOUT_S": str(GITHUB_TIMEOUT_S),
        "CRCR_RETRY_BASE_S": str(RETRY_BASE_S),
        "CRCR_GITHUB_WRITE_RATES": args.write_rates,
        "CRCR_LOCAL_VISIBILITY_TIMEOUT_S": str(args.visibility_s),
        "CRCR_RECONCILE_INTERVAL_S": str(args.reconcile_s),
        "CRCR_RUN_TIMEOUT_S": str(RUN_TIMEOUT_S),
        # The soak's phases run one after another: a downstream reports an hour after its dispatch only because the
        # soak got to it then. No dispatch may time out for that within the soak's bound, nor past it by an hour.
        "CRCR_START_TIMEOUT_S": str(int(args.timeout_s) + 3600),
        "CRCR_RUN_CREATE_TIMEOUT_S": str(RUN_TIMEOUT_S),
        "CRCR_SWEEP_INTERVAL_S": str(SWEEP_S),
        "CRCR_RUN_REPORT_SETTLE_S": str(REPORT_SETTLE_S),
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    relay = Relay(env_vars, h.free_port(), logdir)
    soak = Soak(events, repos, gh, relay, moto, deadline=started + args.timeout_s)
    gh.set_webhook(f"{relay.url}/webhook", WEBHOOK_SECRET)
    status, report = 0, {}
    try:
        relay.start()
        soak.phases["start_wall"] = time.time()
        soak.mark("start")
        threading.Thread(target=soak.monitor, daemon=True).start()
        say("feeding events (a failing webhook window at 20 %, kills at 40 % and 70 %)")
        soak.feed()
        soak.mark("fed")
        say("settling: the reconciler's redeliveries, retries and delayed messages")
        soak.settle()
        soak.mark("settled")
        say("runs: GitHub plays the titled runs, their reports partly lost; every other downstream reports")
        cb = soak.callbacks(issuer, args.seed)
        soak.mark("reported")
        soak.wait_reporter(hud, len(cb["jobs"]))
        soak.mark("drained")
        report = build_report(soak, args, cb, hud) | {"logs": str(logdir)}
    except Exception as exc:
        say(f"soak failed: {type(exc).__name__}: {exc}")
        report = {"error": f"{type(exc).__name__}: {exc}", "relay_log": h.log_summary(relay.log_lines())}
        status = 2
    finally:
        soak.stop_monitor.set()
        relay.stop()
        for stop in (gh.stop, issuer.stop, hud.stop, moto.stop):
            with contextlib.suppress(Exception):  # best effort at the end
                stop()
    report = context | report
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["duration_s"] = round(time.monotonic() - started, 1)
    if "error" not in report:
        tally = relay.metrics()
        report["relay_cpu_s"] = round(sum(r.cpu_s or 0.0 for r in relay.runs), 1)
        report["relay_processes"] = [{k: v for k, v in r.__dict__.items() if k != "metrics"} for r in relay.runs]
        if report["relay_cpu_s"] and report["delivered"]:
            ms = 1000 * report["relay_cpu_s"] / report["delivered"]
            report["relay_cpu_ms_per_dispatch_and_its_reports"] = round(ms, 2)
        # Re-queues by reason (the relay's metric); `paced`: put back while the installation's write budget was full.
        by_reason = {k.split("=", 1)[1]: v for k, v in sorted(tally.items()) if k.startswith("DispatchRetried.reason=")}
        paced = by_reason.get("paced", 0)
        report["requeues_per_dispatch"] = round(paced / report["delivered"], 3) if report["delivered"] else None
        report["dispatch_requeues"] = {"paced": paced, "by_reason": by_reason, "dispatches": report["delivered"]}
        report["relay_metrics"] = dict(sorted(tally.items()))
        # Ambiguous answers the relay settled by finding the run a dispatch had started, instead of sending again.
        report["dispatch_runs_found"] = tally.get("DispatchRunFound", 0)
        status = verdict(report)
        print_table(report)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    say(f"wrote {args.out} ({report['duration_s']} s); relay logs in {logdir}")
    return status


if __name__ == "__main__":
    sys.exit(main())
