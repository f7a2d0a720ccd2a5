"""A relay process killed with SIGKILL mid-batch: its messages come back and nothing is dispatched twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from crcr.domain.signature import sign
from crcr.local.stack import free_port
from tests.conftest import APP_ID, DEFAULT_ALLOWLIST, LISTED, ROOT, WEBHOOK_SECRET, event_body, http
from tests.doubles.github_double import GitHubDouble, Reply

pytestmark = pytest.mark.e2e


@pytest.fixture
def moto_url() -> Iterator[str]:
    """An AWS that outlives the relay process, as the real one does."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    http("POST", f"http://127.0.0.1:{port}/moto-api/reset")
    yield f"http://127.0.0.1:{port}"
    server.stop()


def ledger_dispatched(moto_url: str, delivery: str) -> list[str]:
    ddb = boto3.client(
        "dynamodb", endpoint_url=moto_url, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    try:
        items = ddb.query(
            TableName="crcr-local-StateTable",
            KeyConditionExpression="pk = :pk AND begins_with(sk, :dsp)",
            ExpressionAttributeValues={":pk": {"S": f"DLV#{delivery}"}, ":dsp": {"S": "DSP#"}},
        )["Items"]
    except ddb.exceptions.ResourceNotFoundException:
        return []
    # moto applies an UpdateItem's SET clauses one by one to the stored item, so a query running beside a
    # first write can see the new row before its state: such a row is not dispatched yet.
    return [i["sk"]["S"].removeprefix("DSP#") for i in items if i.get("state", {}).get("S") == "dispatched"]


def start_relay(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "crcr.ops.cli", "local", "--port", "0"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith('{"event": "ready"'):
            return proc, json.loads(line)["url"]
    raise AssertionError(f"crcr local exited with {proc.wait()} before it was ready")


def test_killed_mid_batch_redelivers_without_duplicates(
    github: GitHubDouble, app_key_pem: str, moto_url: str, tmp_path: Path
) -> None:
    for i, repo in enumerate(LISTED):
        github.install(repo, installation_id=100 + i, repo_id=5000 + i)
    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text(DEFAULT_ALLOWLIST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))} | {
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "CRCR_UPSTREAM_REPO": "pytorch/pytorch",
        "CRCR_GITHUB_API_URL": github.url,
        "CRCR_GITHUB_APP_ID": APP_ID,
        "CRCR_GITHUB_APP_PRIVATE_KEY": app_key_pem,
        "CRCR_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "CRCR_ALLOWLIST": str(allowlist),
        "CRCR_GITHUB_TIMEOUT_S": "3",
        "CRCR_LOCAL_VISIBILITY_TIMEOUT_S": "2",
    }
    # One repository's GitHub call hangs, so the worker is mid-batch when it dies; the hung call fails.
    github.script("POST", r"/repos/org-three/l3-repo/dispatches", [Reply.slow(6, then=Reply(502))])
    proc, url = start_relay(env)
    try:
        body = event_body("pull_request.opened.json")
        headers = {
            "x-github-event": "pull_request",
            "x-github-delivery": "crash-delivery-1",
            "x-hub-signature-256": sign(WEBHOOK_SECRET.encode(), body),
        }
        assert http("POST", f"{url}/webhook", body, headers)[0] == 202
        others = [r for r in LISTED if r != "org-three/l3-repo"]
        # Kill once the other three are sent AND recorded: GitHub's 204 and the ledger write are two
        # steps, and a death between them is the one repeat the relay accepts (docs/decisions.md).
        deadline = time.time() + 20
        while time.time() < deadline and len(ledger_dispatched(moto_url, "crash-delivery-1")) < len(others):
            time.sleep(0.05)
        assert sorted(ledger_dispatched(moto_url, "crash-delivery-1")) == sorted(r.lower() for r in others)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    # A new relay process on the same AWS: SQS hands the unfinished batch back after its visibility timeout.
    proc, url = start_relay(env)
    try:
        deadline = time.time() + 40
        while time.time() < deadline and not github.dispatches("org-three/l3-repo"):
            time.sleep(0.2)
        time.sleep(3)  # time enough for a duplicate to show
        assert {r: len(github.dispatches(r)) for r in LISTED} == dict.fromkeys(LISTED, 1)
        status, doc = http("GET", f"{url}/_crcr/status")
        assert status == 200 and doc["metrics"].get("DispatchDuplicate", 0) >= 1  # redelivered, recognised
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
