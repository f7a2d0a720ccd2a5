"""`crcr health` against moto server: the results table's by_repo index as template.yaml declares it, and
the command as an operator runs it (environment in, one table or JSON out, one line when something is wrong)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from crcr.adapters.results import DynamoResults
from crcr.app.ports.jobs import JobRecord
from crcr.local.stack import free_port
from crcr.local.template import load_template, resources_of
from tests.conftest import ROOT, http

TABLE = "results"
DAY = 86_400.0
NOW = float(int(time.time()))  # whole seconds: the table keeps six decimals


@dataclass
class Aws:
    url: str
    ddb: Any

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "AWS_ENDPOINT_URL": self.url,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "t",
            "AWS_SECRET_ACCESS_KEY": "t",
        } | extra


@pytest.fixture(scope="module")
def aws() -> Iterator[Aws]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    http("POST", f"{url}/moto-api/reset")
    ddb = boto3.client(
        "dynamodb", endpoint_url=url, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    # The table exactly as the stack declares it, indexes and projections included.
    props = resources_of(load_template(ROOT / "template.yaml"), "AWS::DynamoDB::Table")["ResultsTable"]
    ddb.create_table(
        TableName=TABLE,
        KeySchema=props["KeySchema"],
        AttributeDefinitions=props["AttributeDefinitions"],
        GlobalSecondaryIndexes=props["GlobalSecondaryIndexes"],
        BillingMode="PAY_PER_REQUEST",
    )
    yield Aws(url, ddb)
    server.stop()


class CountingClient:
    """The DynamoDB client, counting the Query calls (pages) it answers."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pages = 0

    def query(self, **kwargs: Any) -> Any:
        self.pages += 1
        return self.client.query(**kwargs)


def job(repo: str, name: str, conclusion: str, dispatched_at: float, **changes: Any) -> JobRecord:
    base = JobRecord(
        dispatch_id=f"dsp-{repo}-{int(dispatched_at)}", run_id=str(int(dispatched_at) % 100_000 + 1), run_attempt=1,
        job_name=name, workflow_name="CI", state="completed", conclusion=conclusion, fingerprint="fp",
        url=f"https://github.com/{repo}/actions/runs/1", repo=repo, repo_id=42, level=3, delivery_id="dlv",
        upstream="pytorch/pytorch", head_sha="a" * 40, pr=170001, device="gpu", dispatched_at=dispatched_at,
        started_at=dispatched_at + 90, completed_at=dispatched_at + 900, callback_payload="{}", version=2,
        event_type="pull_request", check_run_id=f"crcr-{name}", reported_started_at="2026-11-30T10:00:00Z",
    )  # fmt: skip
    return replace(base, **changes)


def test_a_repositorys_jobs_come_from_by_repo_every_page_without_their_payloads(aws: Aws) -> None:
    results = DynamoResults(aws.ddb, TABLE)
    # Bodies of 200 KB make moto page every few rows (it counts whole items against its 1 MB page), and
    # jobs of one dispatch share a dispatch time across page boundaries, as real ones do.
    payload = json.dumps({"summary": "x" * 200_000})
    mine = [
        job("Org/Backend", f"job-{i}", "success", NOW - (i // 3) * DAY, callback_payload=payload) for i in range(15)
    ]
    too_old = job("Org/Backend", "ancient", "failure", NOW - 20 * DAY)
    someone_else = job("org/other", "job-0", "failure", NOW)
    for record in [*mine, too_old, someone_else]:
        assert results.put_job(record, None)
    counting = CountingClient(aws.ddb)
    found = DynamoResults(counting, TABLE).jobs_of_repo("org/backend", NOW - 14 * DAY)
    assert counting.pages > 1
    assert sorted(j.job_name for j in found) == sorted(j.job_name for j in mine)
    assert [j.dispatched_at for j in found] == sorted(j.dispatched_at for j in found)  # oldest dispatch first
    got = {j.job_name: j for j in found}
    for record in mine:
        # Everything a reader of a repository's history needs, but neither the body nor the fingerprint.
        assert got[record.job_name] == replace(record, callback_payload="", fingerprint="")


class CountingBatches:
    """The DynamoDB client, keeping every BatchGetItem request and the items it answered."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.requests: list[dict[str, Any]] = []
        self.items = 0

    def batch_get_item(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        got = self.client.batch_get_item(**kwargs)
        self.items += sum(len(items) for items in got.get("Responses", {}).values())
        return got


def test_a_jobs_attempts_are_read_by_key_without_the_dispatchs_other_jobs_or_payloads(aws: Aws) -> None:
    results = DynamoResults(aws.ddb, TABLE)
    payload = json.dumps({"summary": "x" * 100_000})
    crowd = [
        job("org/flood", f"shard-{i}", "failure", NOW, dispatch_id="dsp-flood", callback_payload=payload)
        for i in range(60)
    ]
    attempts = [
        job("org/flood", "shard-7", "failure" if n < 3 else "success", NOW, dispatch_id="dsp-flood", run_attempt=n)
        for n in (2, 3, 5)
    ]
    for record in [*crowd, *attempts]:
        assert results.put_job(replace(record, callback_payload=payload), None)
    counting = CountingBatches(aws.ddb)
    found = DynamoResults(counting, TABLE).attempts_of_job("dsp-flood", crowd[7].run_id, "shard-7")
    assert [j.run_attempt for j in found] == [1, 2, 3, 5]  # attempt 4 was never reported
    assert found[1] == replace(attempts[0], callback_payload="", fingerprint="")
    [request] = counting.requests  # one request of the 51 keys an attempt may have, whatever the dispatch holds
    assert len(request["RequestItems"][TABLE]["Keys"]) == 51 and counting.items == 4


def test_a_jobs_baseline_history_holds_its_branch_results_only(aws: Aws) -> None:
    """PR jobs, other jobs and other repositories never carry the by_baseline key: a flood of them costs nothing."""
    results = DynamoResults(aws.ddb, TABLE)
    branch = [job("org/base", "test", "failure", NOW - i * DAY, event_type="push", pr=None) for i in range(3)]
    nightly = job("org/base", "test", "success", NOW - 4 * DAY, event_type="nightly", pr=None)
    noise = [job("org/base", "test", "failure", NOW, dispatch_id=f"pr-{i}") for i in range(40)]  # PR jobs
    noise += [job("org/base", "build", "success", NOW, event_type="push", pr=None)]  # another job
    noise += [job("org/elsewhere", "test", "success", NOW, event_type="push", pr=None)]  # another repository
    noise += [job("org/base", "test", "success", NOW - 30 * DAY, event_type="push", pr=None)]  # too old
    for record in [*branch, nightly, *noise]:
        assert results.put_job(record, None)
    found = results.baseline_jobs("Org/Base", "CI", "test", NOW - 14 * DAY)
    assert sorted(j.dispatch_id for j in found) == sorted(j.dispatch_id for j in [*branch, nightly])
    assert found[-1] == replace(branch[0], callback_payload="", fingerprint="")


def test_health_prints_a_table_and_json_for_the_allowlist(aws: Aws, tmp_path: Path) -> None:
    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text("L1:\n  - org/dispatch-only\nL3:\n  gpu:\n    Org/Accel: [oncall]\nL4:\n  - org/steady\n")
    results = DynamoResults(aws.ddb, TABLE)
    rows = [job("Org/Accel", f"fail-{i}", "failure", NOW - DAY) for i in range(3)]
    rows += [job("Org/Accel", f"ok-{i}", "success", NOW - DAY) for i in range(5)]
    rows += [job("org/steady", f"ok-{i}", "success", NOW - 2 * DAY) for i in range(12)]
    # ok-0 passed on its re-run: the latest attempt counts (still 12 jobs, all passed), and it is flaky.
    rows[-12] = replace(rows[-12], run_attempt=2, check_run_id="crcr-ok-0-2")
    rows.append(job("org/steady", "ok-0", "failure", NOW - 2 * DAY))
    for record in rows:
        assert results.put_job(record, None)
    env = aws.env(CRCR_RESULTS_TABLE=TABLE, CRCR_ALLOWLIST=str(allowlist))

    table = crcr_health(env, "--min-jobs", "5")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert " ".join(lines[0].split()) == "repository level jobs pass timeout flaky avg queue p50 e2e max exec verdict"
    assert lines[1].split() == ["org/dispatch-only", "L1", "0", "-", "-", "0", "-", "-", "-", "insufficient_data"]
    assert lines[2].split() == ["Org/Accel", "L3", "8", "62.5%", "0.0%", "0", "1m30s", "15m00s", "13m30s", "demote"]
    assert lines[3].split() == ["org/steady", "L4", "12", "100.0%", "0.0%", "1", "1m30s", "15m00s", "13m30s", "keep"]
    assert "Org/Accel: pass rate 62.5% < 90% required" in table.stdout
    assert "org/dispatch-only: L1 records no results: nothing to judge" in table.stdout

    as_json = crcr_health(env, "--json", "--min-jobs", "10")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    accel = next(r for r in doc if r["repo"] == "Org/Accel")
    assert accel == {
        "repo": "Org/Accel",
        "level": "L3",
        "jobs": 8,
        "pass_rate": 0.625,
        "timeout_rate": 0.0,
        "avg_queue_s": 90.0,
        "p50_end_to_end_s": 900.0,
        "max_execution_s": 810.0,
        "verdict": "insufficient_data",
        "reasons": ["8 finished jobs in 14 days < 10 required"],
        "flaky": 0,
        "flaky_jobs": {},
        "dispatch_dedupe": "unknown",  # the level check has not looked at its runs
        "not_started": 0,  # no dispatch GitHub started no run for
        "not_started_reason": "",
    }
    steady = next(r for r in doc if r["repo"] == "org/steady")
    assert (steady["jobs"], steady["pass_rate"], steady["flaky"], steady["flaky_jobs"]) == (12, 1.0, 1, {"CI/ok-0": 1})


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"CRCR_RESULTS_TABLE": ""}, "crcr health: missing configuration: CRCR_RESULTS_TABLE"),
        ({"CRCR_ALLOWLIST": "/nowhere/allowlist.yaml"}, "crcr health: /nowhere/allowlist.yaml: No such file"),
        ({"CRCR_RESULTS_TABLE": "no-such-table"}, "crcr health: results table no-such-table: ResourceNotFound"),
        ({"AWS_DEFAULT_REGION": ""}, "crcr health: no AWS region: set AWS_REGION or AWS_DEFAULT_REGION"),
        (
            {"CRCR_HEALTH_THRESHOLDS": '{"L4": {"pass_rat": 0.99}}'},
            "crcr health: invalid configuration: CRCR_HEALTH_THRESHOLDS: L4.pass_rat: unknown key",
        ),
    ],
)
def test_what_is_missing_or_wrong_is_one_line(aws: Aws, tmp_path: Path, change: dict[str, str], problem: str) -> None:
    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text("L4:\n  - org/steady\n")
    env = {k: v for k, v in (aws.env(CRCR_RESULTS_TABLE=TABLE, CRCR_ALLOWLIST=str(allowlist)) | change).items() if v}
    run = crcr_health(env)
    assert run.returncode == 2
    assert run.stdout == ""
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith(problem), run.stderr


def crcr_health(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "health", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
        timeout=60,
    )
