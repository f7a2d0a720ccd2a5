"""Adapters against real services over HTTP: moto server (S3, DynamoDB) and the GitHub double."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from crcr.adapters.allowlist_source import CachedAllowlist, fetcher_for
from crcr.adapters.dynamo import DynamoPacer
from crcr.adapters.github import GitHubApp
from crcr.local.stack import free_port
from tests.conftest import APP_ID, ROOT, http
from tests.doubles.github_double import GitHubDouble
from tests.unit.fakes import RecordingMetrics

GOOD = b"L1:\n  - org-one/l1-repo\nL4:\n  - org-four/L4-Repo: oncall\n"
BAD = b"L1:\n  - org-one/l1-repo\n  - org-one/L1-REPO\n"


@pytest.fixture(scope="module")
def aws() -> Iterator[dict[str, Any]]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    http("POST", f"{url}/moto-api/reset")
    kwargs = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "t", "aws_secret_access_key": "t"}
    yield {"s3": boto3.client("s3", **kwargs), "dynamodb": boto3.client("dynamodb", **kwargs)}
    server.stop()


def test_allowlist_from_s3_refreshes_and_refuses_bad_edits(aws: dict[str, Any]) -> None:
    s3 = aws["s3"]
    s3.create_bucket(Bucket="config")
    s3.put_object(Bucket="config", Key="crcr/allowlist.yaml", Body=GOOD)
    cached = CachedAllowlist(
        fetcher_for("s3://config/crcr/allowlist.yaml", lambda: s3, lambda: None), RecordingMetrics(), time.time, 0
    )
    assert len(cached.current()) == 2
    s3.put_object(Bucket="config", Key="crcr/allowlist.yaml", Body=BAD)
    assert len(cached.current()) == 2
    s3.put_object(Bucket="config", Key="crcr/allowlist.yaml", Body=GOOD + b"L2: [org-two/l2-repo]\n")
    assert len(cached.current()) == 3


def test_allowlist_from_github_uses_the_app_token_and_etags(github: GitHubDouble, app_key_pem: str) -> None:
    github.install("pytorch/test-infra", installation_id=9, repo_id=77)
    github.put_file("pytorch/test-infra", "crcr/allowlist.yaml", "main", GOOD)
    app = GitHubApp(github.url, APP_ID, app_key_pem, time.time)
    metrics = RecordingMetrics()
    source = "github:pytorch/test-infra/crcr/allowlist.yaml@main"
    cached = CachedAllowlist(fetcher_for(source, lambda: None, lambda: app), metrics, time.time, 0)
    assert cached.current().get("org-four/l4-repo") is not None
    assert cached.current().get("org-four/l4-repo") is not None
    contents = [r for r in github.requests if "/contents/" in r.path]
    assert [r.status for r in contents] == [200, 304]  # the second read cost no rate limit
    token = github.token_info(contents[0].headers["authorization"].split()[-1])
    assert token is not None and token.permissions.get("contents") == "read"
    assert token.repository_ids == frozenset({77})
    github.put_file("pytorch/test-infra", "crcr/allowlist.yaml", "main", BAD)
    assert len(cached.current()) == 2 and metrics.counts["AllowlistRejected"] == 1


def test_pacer_shares_one_budget_across_workers(aws: dict[str, Any]) -> None:
    ddb = aws["dynamodb"]
    ddb.create_table(
        TableName="pace",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    workers = [DynamoPacer(ddb, "pace"), DynamoPacer(ddb, "pace")]
    waits = [workers[i % 2].acquire(installation_id=1, now=1000.0) for i in range(20)]
    assert waits[:16] == [0.0] * 16 and all(w > 0 for w in waits[16:])
    assert workers[0].acquire(installation_id=2, now=1000.0) == 0.0  # another installation, its own budget


def test_allowlist_check_prints_the_level_table(tmp_path: Any) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_bytes(GOOD)
    bad.write_bytes(BAD)
    run = [sys.executable, "-m", "crcr.cli", "allowlist", "check"]
    ok = subprocess.run([*run, str(good)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert ok.returncode == 0
    assert "org-four/L4-Repo  L4" in ok.stdout and "2 repositories" in ok.stdout
    broken = subprocess.run([*run, str(bad)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert broken.returncode == 1
    assert "line 3: org-one/L1-REPO is listed twice (first at line 2)" in broken.stderr
