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


def waiting(moto_url: str, queue_url: str) -> int:
    """Every message the queue holds: visible, received and not deleted (in flight), or delayed."""
    sqs = boto3.client(
        "sqs", endpoint_url=moto_url, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[name]) for name in names)


def start_relay(env: dict[str, str]) -> tuple[subprocess.Popen[str], str, dict[str, str]]:
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
            ready = json.loads(line)
            return proc, ready["url"], ready["env"]
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
        # Longer than any answer of the double, however loaded the machine: a dispatch that timed out would be sent
        # again (an ambiguous answer, which no run-name settles here), and that repeat is not what this test is about.
        "CRCR_GITHUB_TIMEOUT_S": "10",
        "CRCR_LOCAL_VISIBILITY_TIMEOUT_S": "2",
    }
    # One repository's GitHub call hangs, so the worker is mid-batch when it dies; the hung call fails.
    github.script("POST", r"/repos/org-three/l3-repo/dispatches", [Reply.slow(6, then=Reply(502))])
    proc, url, stack_env = start_relay(env)
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
    # What the dead process left: its unfinished batches (each record of which is back in the queue, the ones it sent
    # included, however the pollers had split the four messages), and the re-sends it had scheduled. Exactly one of them
    # sends org-three's dispatch; every other one is a message of a dispatch already sent.
    queue = stack_env["CRCR_DISPATCH_QUEUE_URL"]
    left = waiting(moto_url, queue)
    assert left >= 1  # org-three's dispatch, never sent, is never dropped

    # A new relay process on the same AWS: SQS hands the unfinished batch back after its visibility timeout.
    proc, url, _ = start_relay(env)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and (waiting(moto_url, queue) or not github.dispatches("org-three/l3-repo")):
            time.sleep(0.2)
        assert waiting(moto_url, queue) == 0
        assert {r: len(github.dispatches(r)) for r in LISTED} == dict.fromkeys(LISTED, 1)
        status, doc = http("GET", f"{url}/_crcr/status")
        # Every message of an already sent dispatch that came back was recognised as one (redelivered, not re-sent).
        # SQS delivers at least once: a message a worker held past the 2 s visibility timeout comes back as a second
        # copy, told apart the same way, so there can be more than those the dead process left.
        assert status == 200 and doc["metrics"].get("DispatchDuplicate", 0) >= left - 1, left
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
