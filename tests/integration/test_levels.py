"""The level check on its real adapters: jobs in the results table (moto), the allowlist and its demotion PR on the
GitHub double, the level status in the HUD bucket as the HUD function serves it, and the check-run writer holding
back new check runs of a demoted repository until its PR is closed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from crcr.adapters.allowlist_pulls import GitHubAllowlistPulls
from crcr.adapters.allowlist_source import CachedAllowlist, GitHubFetcher, parse_allowlist
from crcr.adapters.check_runs import DynamoCheckRuns
from crcr.adapters.github import GitHubApp, GitHubCheckRuns
from crcr.adapters.ledger import DynamoLedger
from crcr.adapters.levels import CachedDemotions, DynamoLevels
from crcr.adapters.pacer import DynamoPacer
from crcr.adapters.pulls import DynamoPullRequests
from crcr.adapters.results import DynamoResults
from crcr.adapters.s3 import S3PageDocs
from crcr.app.checks import CheckDeps, sync
from crcr.app.checks_booking import ask_head, head_message
from crcr.app.levels import LevelDeps, check_levels
from crcr.app.pages import serve
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.ledger import LedgerRow, LedgerState
from tests.conftest import APP_ID
from tests.doubles.github_double import GitHubDouble
from tests.integration.aws import create_tables, moto_server
from tests.unit.fakes import FakeClock, RecordingMetrics, door

UPSTREAM = "pytorch/pytorch"
MAIN = "2" * 40
ALLOWLIST = """\
L2:
  - org/steady
L3:
  npu:
    org/npu-ci: [npu-oncall]
"""


@dataclass
class World:
    github: GitHubDouble
    results: DynamoResults
    prs: DynamoPullRequests
    ledger: DynamoLedger
    deps: LevelDeps
    checks: CheckDeps
    clock: FakeClock
    s3: Any
    metrics: RecordingMetrics
    ddb: Any

    def report(self, n: int, conclusion: str, *, at: float) -> JobRecord:
        job = JobRecord(
            dispatch_id=f"dsp-{n}", run_id=str(5000 + n), run_attempt=1, job_name="test", workflow_name="CI",
            state="completed", conclusion=conclusion, fingerprint="f",
            url="https://github.com/org/npu-ci/actions/runs/1",
            repo="org/npu-ci", repo_id=11, level=3, delivery_id=f"d-{n}", upstream=UPSTREAM, head_sha=f"{n:040x}",
            pr=100 + n, device="npu", dispatched_at=at, started_at=at + 60, completed_at=at + 660,
            callback_payload="{}", version=1, event_type="pull_request",
        )  # fmt: skip
        assert self.results.put_job(job, None)
        self.github.add_commit(UPSTREAM, job.head_sha)
        return job


@pytest.fixture
def world(app_key_pem: str, app_key: Any) -> Iterator[World]:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    public = app_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    clock = FakeClock(time.time())
    with moto_server() as reach, GitHubDouble(APP_ID, public) as github:
        ddb = boto3.client("dynamodb", **reach)
        create_tables(ddb, StateTable="state", ResultsTable="results")
        s3 = boto3.client("s3", **reach)
        s3.create_bucket(Bucket="hud")
        permissions = {"contents": "write", "pull_requests": "write", "checks": "write", "metadata": "read"}
        github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=permissions)
        github.add_commit(UPSTREAM, MAIN, branch="main")
        github.put_file(UPSTREAM, ".github/allowlist.yml", MAIN, ALLOWLIST)
        app = GitHubApp(github.url, APP_ID, app_key_pem, clock.now)
        results, metrics = DynamoResults(ddb, "results"), RecordingMetrics()
        prs, ledger = DynamoPullRequests(ddb, "state"), DynamoLedger(ddb, "state")
        allowlist = CachedAllowlist(GitHubFetcher(app, UPSTREAM, ".github/allowlist.yml", "main"), metrics, clock.now)
        levels = DynamoLevels(ddb, "state", results.first_l2_job)
        deps = LevelDeps(
            allowlist=allowlist, jobs=results, history=levels, demotions=levels, docs=S3PageDocs(s3, "hud"),
            metrics=metrics, clock=clock, parse=parse_allowlist,
            pulls=GitHubAllowlistPulls(app, UPSTREAM, ".github/allowlist.yml", "main"), door=door()
        )  # fmt: skip
        checks = CheckDeps(
            api=GitHubCheckRuns(app), store=DynamoCheckRuns(ddb, "state"), results=results, ledger=ledger, prs=prs,
            queue=_NoQueue(),
            pacer=DynamoPacer(ddb, "state"), allowlist=allowlist, metrics=metrics, clock=clock,
            demotions=CachedDemotions(DynamoLevels(ddb, "state"), clock.now, ttl_s=0.0), door=door()
        )  # fmt: skip
        yield World(github, results, prs, ledger, deps, checks, clock, s3, metrics, ddb)
        assert github.internal_errors == [] and github.unexpected == []


class _NoQueue:
    def send_checks(self, messages: list[Any], delay_s: float = 0.0) -> None:
        return  # settling repository runs come back later: not what this test looks at

    def dead_letter(self, message: Any, reason: str) -> None:
        raise AssertionError(reason)


def _pass(world: World, job: JobRecord) -> None:
    """The reporter's ask for the job's commit, and that commit's check-run pass (ChecksQueue's delay left out)."""
    ticket = ask_head(world.checks.ask, job.upstream, job.head_sha, due_in=0.0)
    assert ticket is not None
    sync(head_message(job.upstream, job.head_sha, ticket, 0.0, world.clock.now()), world.checks)


def _check_runs(world: World, sha: str) -> list[str]:
    return sorted(r["name"] for r in world.github.check_runs(UPSTREAM) if r["head_sha"] == sha)


def test_the_demotion_pr_is_opened_once_then_closed_and_check_runs_stop_and_resume(world: World) -> None:
    now = world.clock.now()
    for n in range(20):  # 10 of 20 pass over the last week (a PR takes at least 20 finished jobs)
        world.report(n, "success" if n % 2 else "failure", at=now - 3 * 86_400 + n * 600)
    outcome = check_levels(world.deps)
    assert outcome.failed == []

    # The level status, served as PyTorch's GET /api/crcr/level-status.
    answer = serve("/hud/api/crcr/level-status", S3PageDocs(world.s3, "hud"), {})
    body = json.loads(answer.body)
    npu = next(r for r in body["repos"] if r["repo"] == "org/npu-ci")
    assert (answer.status, npu["change"], npu["windowDays"], npu["noData"]) == (200, "demote", 7, False)
    assert {"criterion": "Job Pass Rate", "measured": "50.0%", "target": "≥ 90%", "met": False} in npu["criteria"]
    steady = next(r for r in body["repos"] if r["repo"] == "org/steady")
    assert (steady["noData"], steady["change"]) == (True, None)

    [pull] = world.github.pulls(UPSTREAM)
    assert pull["head"]["ref"] == "crcr-demotion/org/npu-ci" and pull["base"]["ref"] == "main"
    assert [lab["name"] for lab in pull["labels"]] == ["crcr-auto-demotion"] and "@npu-oncall" in pull["body"]
    edited = world.github.file_at(UPSTREAM, ".github/allowlist.yml", "crcr-demotion/org/npu-ci")
    assert edited is not None
    moved = parse_allowlist(edited).get("org/npu-ci")
    assert moved is not None and moved.level.name == "L2"
    assert world.github.file_at(UPSTREAM, ".github/allowlist.yml", "main") == ALLOWLIST.encode()  # never merged

    # While it is open: a new job's check runs are not created.
    fresh = world.report(25, "failure", at=now + 10)
    world.prs.record_pr_head(UPSTREAM, fresh.pr or 0, fresh.head_sha, "2026-12-01T00:00:00Z", ("ciflow/crcr/npu",))
    _mark_sent(world, fresh)
    _pass(world, fresh)
    assert _check_runs(world, fresh.head_sha) == [] and world.metrics.counts["CheckRunSuppressed"] >= 1

    # The next run: the same PR, not a second one.
    check_levels(world.deps)
    assert len(world.github.pulls(UPSTREAM)) == 1
    assert sum(1 for r in world.github.requests if r.method == "POST" and r.path.endswith("/pulls")) == 1

    # It recovers: the PR is closed with a word why, and new jobs get their check runs again.
    for n in range(30, 130):
        world.report(n, "success", at=now + n)
    check_levels(world.deps)
    [closed] = world.github.pulls(UPSTREAM)
    assert closed["state"] == "closed"
    comments = world.github.comments(UPSTREAM, closed["number"])
    assert any("back within its L3 targets" in c["body"] for c in comments)
    later = world.report(195, "success", at=now + 200)
    world.prs.record_pr_head(UPSTREAM, later.pr or 0, later.head_sha, "2026-12-01T00:00:00Z", ("ciflow/crcr/npu",))
    _mark_sent(world, later)
    _pass(world, later)
    assert _check_runs(world, later.head_sha) == ["crcr/org/npu-ci", "crcr/org/npu-ci/CI/test"]

    # Its figures swing back under the targets at once: the status says demote, and no second PR is opened within a
    # day of the relay closing the first (a repository about a threshold must not churn PRs).
    for n in range(200, 300):
        world.report(n, "failure", at=now + n)
    check_levels(world.deps)
    body = json.loads(serve("/hud/api/crcr/level-status", S3PageDocs(world.s3, "hud"), {}).body)
    assert next(r for r in body["repos"] if r["repo"] == "org/npu-ci")["change"] == "demote"
    assert len(world.github.pulls(UPSTREAM)) == 1


def _mark_sent(world: World, job: JobRecord) -> None:
    """The ledger row of the job's dispatch, as the dispatcher leaves it once sent."""
    row = LedgerRow(
        job.delivery_id, job.repo, LedgerState.DISPATCHED, job.dispatch_id, dispatched_at=job.dispatched_at,
        repo_id=job.repo_id, upstream=UPSTREAM, head_sha=job.head_sha, pr=job.pr, level=3, device="npu",
        event_type="pull_request",
    )  # fmt: skip
    world.ddb.put_item(  # the row as the table holds it
        TableName="state",
        Item={
            "pk": {"S": f"DLV#{row.delivery_id}"}, "sk": {"S": f"DSP#{row.repo}"}, "state": {"S": "dispatched"},
            "dispatch_id": {"S": row.dispatch_id}, "dispatched_at": {"N": str(row.dispatched_at)},
            "repo": {"S": row.repo}, "repo_full_name": {"S": row.repo}, "repo_id": {"N": "11"},
            "upstream": {"S": UPSTREAM}, "head_sha": {"S": row.head_sha}, "pr": {"N": str(row.pr)},
            "level": {"N": "3"}, "device": {"S": "npu"}, "event_type": {"S": "pull_request"},
        },
    )  # fmt: skip
    assert world.ledger.get(row.delivery_id, row.repo) is not None
