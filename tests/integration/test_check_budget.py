"""`check_runs: auto` end to end through ChecksFunction's handler, on real adapters: the state and results tables
on moto server, the pacer's cell in the state table, and check runs written to the GitHub double, all on one
simulated clock. Per-job runs while the installation's hourly window has room, the repository's run alone
once it has not, and per-job again once the window drained; the double shows every run completed."""

from __future__ import annotations

import heapq
import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.adapters.check_runs import DynamoCheckRuns
from crcr.adapters.github import GitHubApp, GitHubCheckRuns
from crcr.adapters.ledger import DynamoLedger
from crcr.adapters.pacer import DynamoPacer
from crcr.adapters.pulls import DynamoPullRequests
from crcr.adapters.results import DynamoResults
from crcr.app.checks import CheckDeps
from crcr.app.checks_booking import job_message
from crcr.app.ports.jobs import JobRecord
from crcr.contracts.check_messages import CheckSync
from crcr.contracts.messages import DispatchMessage
from crcr.domain.levels import Level
from crcr.domain.pacing import parse_rates
from crcr.domain.ticket import TicketClaims
from crcr.local.filters import passes
from crcr.local.pollers import StreamReader
from crcr.local.stack import Context
from crcr.local.template import StreamSource
from tests.conftest import APP_ID
from tests.doubles.github_double import GitHubDouble
from tests.integration.aws import checks_handler, dispatched_stream_source, dynamodb_and_streams, read_all
from tests.unit.fakes import FakeClock, RecordingMetrics, StaticAllowlist, door

UPSTREAM, REPO = "pytorch/pytorch", "org-four/L4-Repo"
# The installation's budget, small enough to fill with a few pull requests: 60 writes an hour (one a minute)
# plus bursts of 12, so detail writes stop at 6 booked; the minute's window never binds here.
RATES = "100/60+20,60/3600+12"
HOURLY_LIMIT = 72  # what the double lets through in any hour: count + burst, as the pacer promises


@pytest.fixture(scope="module")
def aws() -> Iterator[tuple[Any, Any]]:
    with dynamodb_and_streams(StateTable="state", ResultsTable="results") as clients:
        yield clients


@pytest.fixture(scope="module")
def ddb(aws: tuple[Any, Any]) -> Any:
    return aws[0]


@dataclass
class Checks:
    """ChecksQueue as SQS delays it (at most 15 minutes a hop), drained into the real handler on the clock."""

    handler: Callable[..., dict[str, Any]]
    clock: FakeClock
    stream: Callable[..., dict[str, Any]]  # DispatchedFunction's handler: the state table's stream
    deps: CheckDeps | None = None
    due: list[tuple[float, int, str]] = field(default_factory=list)
    seq: Iterator[int] = field(default_factory=itertools.count)
    dead: list[str] = field(default_factory=list)

    def send_checks(self, messages: list[CheckSync], delay_s: float = 0.0) -> None:
        for m in messages:
            heapq.heappush(self.due, (self.clock.t + min(900.0, delay_s), next(self.seq), m.model_dump_json()))

    def dead_letter(self, message: CheckSync, reason: str) -> None:
        self.dead.append(reason)

    def run_until(self, t: float) -> None:
        while self.due and self.due[0][0] <= t:
            at, _, body = heapq.heappop(self.due)
            self.clock.t = max(self.clock.t, at)
            record = {"messageId": str(uuid.uuid4()), "body": body}
            result = self.handler({"Records": [record]}, Context("ChecksFunction", 60), deps=self.deps)
            assert result == {"batchItemFailures": []}
        self.clock.t = max(self.clock.t, t)

    def take_stream(self, reader: StreamReader, source: StreamSource) -> int:
        """The state table's new stream records that pass the template's filter, handed over as Lambda does."""
        records = [r for r in read_all(reader) if passes(source.filters, r)]
        if records:
            result = self.stream({"Records": records}, Context("DispatchedFunction", 60), deps=self.deps)
            assert result == {"batchItemFailures": []}
        return len(records)


@dataclass
class World:
    ddb: Any
    github: GitHubDouble
    checks: Checks
    results: DynamoResults
    ledger: DynamoLedger
    metrics: RecordingMetrics
    clock: FakeClock
    stream: StreamReader
    prs: Iterator[int] = field(default_factory=lambda: itertools.count(1001))
    source: StreamSource = field(default_factory=dispatched_stream_source)

    def dispatch(self) -> tuple[str, str]:
        """A pull request's new head dispatched to the L4 repository, as the dispatcher records it: its ledger row
        marked sent reaches the check-run writer through the state table's stream."""
        pr = next(self.prs)
        sha, delivery = f"{pr:040x}", f"dlv-{pr}"
        self.github.add_commit(UPSTREAM, sha)
        message = DispatchMessage(
            delivery_id=delivery, event_type="pull_request", target_repo=REPO, level=Level.L4, upstream=UPSTREAM,
            pr_number=pr, head_sha=sha, payload={}, planned_at=self.clock.t,
        )  # fmt: skip
        claims = TicketClaims(
            sub=REPO, repo_id=5004, delivery_id=delivery, upstream=UPSTREAM, pr=pr, head_sha=sha, level=4,
            iat=int(self.clock.t), exp=int(self.clock.t) + 3600, jti=f"dsp-{pr}",
        )  # fmt: skip
        # As the dispatcher records it: the claim writes the dispatch's identity, the mark what the send changed.
        assert self.ledger.claim(message, f"dsp-{pr}", self.clock.t, 30.0, "bench", 5004, REPO).taken
        self.ledger.mark_dispatched(message, claims, self.clock.t)
        assert self.checks.take_stream(self.stream, self.source) == 1  # the mark, and no other write of the table
        self.checks.run_until(self.clock.t)
        return sha, f"dsp-{pr}"

    def job(self, sha: str, dispatch: str, name: str, state: str) -> None:
        """A job's callback recorded, then the reporter's message to the writer."""
        pr = int(sha, 16)
        done = state == "completed"
        row = JobRecord(
            dispatch_id=dispatch, run_id="777", run_attempt=1, job_name=name, workflow_name="CI", state=state,
            conclusion="success" if done else None, fingerprint=f"{name}-{state}",
            url=f"https://github.com/{REPO}/actions/runs/777", repo=REPO, repo_id=5004, level=4,
            delivery_id=f"dlv-{pr}", upstream=UPSTREAM, head_sha=sha, pr=pr, device=None,
            dispatched_at=self.clock.t - 60, started_at=self.clock.t - 30,
            completed_at=self.clock.t if done else None, callback_payload=json.dumps({"summary": name}),
            version=2 if done else 1, event_type="pull_request", check_run_id=f"crcr-{name}",
        )  # fmt: skip
        assert self.results.put_job(row, 1 if done else None)
        message = job_message(row)
        assert message is not None
        self.checks.send_checks([message])
        self.checks.run_until(self.clock.t + self.checks.deps.pass_settle_s)  # the commit's pass, once booked

    def runs(self, sha: str) -> dict[str, tuple[str, str | None]]:
        found = [r for r in self.github.check_runs(UPSTREAM) if r["head_sha"] == sha]
        by_name = {r["name"]: (r["status"], r["conclusion"]) for r in found}
        assert len(by_name) == len(found), "two check runs of one name on one commit"
        return by_name

    def summary(self, sha: str, name: str) -> str:
        [run] = [r for r in self.github.check_runs(UPSTREAM) if r["head_sha"] == sha and r["name"] == name]
        return str(run["output"]["summary"])


@pytest.fixture
def world(aws: tuple[Any, Any], app_key: rsa.RSAPrivateKey, app_key_pem: str) -> Iterator[World]:
    ddb, streams = aws
    [stream] = streams.list_streams(TableName="state")["Streams"]
    reader = StreamReader(streams, stream["StreamArn"])
    read_all(reader)  # what earlier tests of the module wrote
    clock = FakeClock(1_800_000_000.0)
    public = app_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with GitHubDouble(APP_ID, public, clock=clock.now, content_writes_per_hour=HOURLY_LIMIT) as github:
        github.install(UPSTREAM, installation_id=1, repo_id=65600975)
        metrics = RecordingMetrics()
        ledger, results = DynamoLedger(ddb, "state"), DynamoResults(ddb, "results")
        pacer = DynamoPacer(ddb, "state", rates=parse_rates(RATES))
        checks = Checks(
            checks_handler("crcr_fn_checks_budget"), clock, checks_handler("crcr_fn_dispatched", "dispatched")
        )
        checks.deps = CheckDeps(
            api=GitHubCheckRuns(GitHubApp(github.url, APP_ID, app_key_pem, clock.now)),
            store=DynamoCheckRuns(ddb, "state"), results=results, ledger=ledger, prs=DynamoPullRequests(ddb, "state"),
            queue=checks, pacer=pacer, allowlist=StaticAllowlist(
                parse_allowlist(f"L4:\n  - {REPO}\n")), metrics=metrics, clock=clock, settle_s=60.0, gauge=pacer,
            door=door(),
        )  # fmt: skip
        yield World(ddb, github, checks, results, ledger, metrics, clock, reader)
        assert github.internal_errors == []


def test_auto_switches_to_the_repositorys_run_and_back_and_every_run_ends_completed(world: World) -> None:
    repo_run = f"crcr/{REPO}"
    build, test = f"{repo_run}/CI/build", f"{repo_run}/CI/test"
    # A quiet hour: the first pull request's jobs get their own check runs.
    a, a_dsp = world.dispatch()
    world.job(a, a_dsp, "build", "in_progress")  # 3 writes booked in the hour: queued, the job's, in_progress
    world.clock.t += 120  # ... which drain at one a minute: 1 left
    b, b_dsp = world.dispatch()
    world.job(b, b_dsp, "build", "in_progress")
    world.job(b, b_dsp, "test", "in_progress")
    assert set(world.runs(a)) == {repo_run, build} and set(world.runs(b)) == {repo_run, build, test}
    assert world.metrics.counts["CheckRunSkipped"] == 0

    # 5 writes booked (b's queued, its two jobs' runs, its in_progress), then c's queued run (it goes at once):
    # a new per-job run, committing to 2 writes, or an in_progress would pass the 6 that detail may fill. The
    # next pull request gets its repository's run alone, and the first one's second job no run of its own;
    # what exists goes on.
    c, c_dsp = world.dispatch()
    world.job(c, c_dsp, "build", "in_progress")
    world.job(a, a_dsp, "test", "in_progress")
    assert world.runs(c) == {repo_run: ("queued", None)}  # queued while it goes at once; no in_progress
    assert set(world.runs(a)) == {repo_run, build}
    assert world.metrics.counts["CheckRunSkipped.need=detail"] == 3  # c's job and its in_progress, a's test

    # The jobs finish while the hour is still that full: results only (a job's run would be created completed if
    # there were room by then).
    for sha, dsp, jobs in ((a, a_dsp, ("build", "test")), (b, b_dsp, ("build", "test")), (c, c_dsp, ("build",))):
        for name in jobs:
            world.job(sha, dsp, name, "completed")
    world.checks.run_until(world.clock.t + 3600)  # the settle period, then the window drains
    assert world.runs(a) == {repo_run: ("completed", "success"), build: ("completed", "success")}
    assert "CI / build: **success**" in world.summary(a, repo_run)
    assert "CI / test: **success**" in world.summary(a, repo_run)  # the job without its own run is listed
    assert world.runs(c) == {repo_run: ("completed", "success")}
    assert set(world.runs(b)) == {repo_run, build, test}

    # Demand fell: an hour later, per-job runs again.
    d, d_dsp = world.dispatch()
    for name in ("build", "test"):
        world.job(d, d_dsp, name, "in_progress")
    world.clock.t += 300
    for name in ("build", "test"):
        world.job(d, d_dsp, name, "completed")
    world.checks.run_until(world.clock.t + 120)
    assert world.runs(d) == {run: ("completed", "success") for run in (repo_run, build, test)}

    every = world.github.check_runs(UPSTREAM)
    assert [r["name"] for r in every if r["status"] != "completed"] == []  # nothing left dangling
    writes = [r for r in world.github.requests if "/check-runs" in r.path and r.method in ("POST", "PATCH")]
    assert writes and all(r.status in (200, 201) for r in writes)  # never over GitHub's hourly limit
    assert world.checks.due == [] and world.checks.dead == []


class _Counting:
    """A DynamoDB client that notes each call's name before making it."""

    def __init__(self, client: Any, calls: list[str]) -> None:
        self._client, self._calls = client, calls

    def __getattr__(self, name: str) -> Any:
        self._calls.append(name)
        return getattr(self._client, name)


def test_many_slots_are_taken_in_one_write_and_never_more_than_the_budget(ddb: Any) -> None:
    calls: list[str] = []

    key = f"many-{uuid.uuid4().hex[:8]}"
    a, b = (
        DynamoPacer(_Counting(ddb, calls), "state", rates=parse_rates("60/60+4")),
        DynamoPacer(ddb, "state", rates=parse_rates("60/60+4")),
    )
    assert a.acquire_many(key, 1000.0, 3) == (3, 0.0) and calls == ["update_item", "update_item"]  # new cell: 2 tries
    calls.clear()
    # Another writer: what is left of the burst of 5, in one go; its third fits 1 s later.
    assert b.acquire_many(key, 1000.0, 3) == (2, 1.0)
    # Its copy was stale: the table told it so, in the one write; all 3 fit together 3 s later.
    assert a.acquire_many(key, 1000.0, 3) == (0, 3.0) and calls == ["update_item"]
    calls.clear()
    # 2.5 s later, 2 slots freed; the other 8 come back when a burst of 5 fits, 4.5 s on.
    assert a.acquire_many(key, 1002.5, 10) == (2, 4.5) and calls == ["update_item"]
    assert b.acquire(key, 1002.5) == 0.5  # the single-call pacer agrees: nothing free until 1003


def test_the_level_comes_from_the_pacers_own_booking_without_another_read(ddb: Any) -> None:
    calls: list[str] = []

    pacer = DynamoPacer(_Counting(ddb, calls), "state", rates=parse_rates(RATES))
    key = f"gauge-{uuid.uuid4().hex[:8]}"
    assert pacer.level(key, 1000.0).booked == 0.0 and calls == ["get_item"]  # nothing seen yet: one read
    for _ in range(3):
        assert pacer.acquire(key, 1000.0, reserve=True) == 0
    calls.clear()
    assert pacer.level(key, 1005.0).booked == pytest.approx(3 - 5 / 60)  # what the third booking stored
    assert calls == []
    other = DynamoPacer(ddb, "state", rates=parse_rates(RATES))
    assert other.level(key, 1005.0) == pacer.level(key, 1005.0)  # read from the table: the same cell
    assert pacer.level(key, 1040.0).booked == pytest.approx(3 - 40 / 60)
    assert calls == ["get_item"]  # past LEVEL_FRESH_S: read again
