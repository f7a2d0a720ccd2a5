"""`crcr dlq` as an operator runs it in an incident, against `crcr local` with its ready line's env: one line and a
non-zero exit for every bad input; redrive only to the queue the DLQ is paired with (or --any-queue), each message
checked against that queue's contract first, invalid ones left and listed; --dry-run; a list that hides nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from crcr.contracts.messages import DispatchMessage
from crcr.local.stack import LocalStack
from tests.conftest import ROOT

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    allowlist = tmp_path_factory.mktemp("dlq") / "allowlist.yaml"
    allowlist.write_text("L2:\n  - org/repo\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_ENDPOINT"))}
    with LocalStack(port=0, env=env | {"CRCR_ALLOWLIST": str(allowlist)}, root=ROOT) as running:
        yield running


@pytest.fixture
def queues(stack: LocalStack) -> Iterator[dict[str, str]]:
    yield stack.queue_urls
    sqs = stack.client("sqs")
    for url in (stack.queue_urls["DispatchDLQ"], stack.queue_urls["EventsQueue"]):  # PurgeQueue: once a minute
        while got := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
            for message in got:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def dlq(stack: LocalStack, *args: str, drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))}
    env |= {k: v for k, v in stack.operator_env().items() if k not in drop}
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "dlq", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def dispatch(repo: str = "org/repo", attempt: int = 7) -> str:
    return DispatchMessage(
        delivery_id="d-1",
        event_type="pull_request",
        target_repo=repo,
        level=2,
        upstream="pytorch/pytorch",
        pr_number=1,
        head_sha="a" * 40,
        payload={},
        planned_at=time.time(),
        attempt=attempt,
    ).model_dump_json()


def visible(stack: LocalStack, url: str) -> int:
    got = stack.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(got["Attributes"]["ApproximateNumberOfMessages"])


@pytest.mark.parametrize(
    ("args", "drop", "line"),
    [
        (["list", "crcr-local-DispatchDLQ"], (), "crcr dlq: QUEUE 'crcr-local-DispatchDLQ' is not a queue URL"),
        (["list", ""], (), "crcr dlq: QUEUE '' is not a queue URL"),
        (["redrive", "DLQ", "--to", "x"], (), "crcr dlq: DLQ 'DLQ' is not a queue URL"),
        (["list", "{endpoint}/123456789012/nope"], (), "crcr dlq: no such queue: "),
        (["list", "{DispatchDLQ}"], ("AWS_REGION", "AWS_DEFAULT_REGION"), "crcr dlq: no AWS region: set AWS_REGION"),
        (["list", "{DispatchDLQ}", "--max", "0"], (), "usage: crcr dlq list"),
    ],
    ids=["a-name", "empty", "redrive-name", "unknown-url", "no-region", "max-0"],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    stack: LocalStack, queues: dict[str, str], args: list[str], drop: tuple[str, ...], line: str
) -> None:
    filled = [a.format(endpoint=stack.env["AWS_ENDPOINT_URL"], **queues) for a in args]

    done = dlq(stack, *filled, drop=drop)

    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    if line.startswith("usage"):
        assert done.stderr.startswith(line) and "--max: '0' is not a whole number of at least 1" in done.stderr
        return
    assert done.stderr.startswith(line), done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_redrive_refuses_the_wrong_pair_unless_overridden_and_then_checks_that_queues_contract(
    stack: LocalStack, queues: dict[str, str]
) -> None:
    sqs = stack.client("sqs")
    sqs.send_message(QueueUrl=queues["DispatchDLQ"], MessageBody=dispatch())

    wrong = dlq(stack, "redrive", queues["DispatchDLQ"], "--to", queues["EventsQueue"])

    assert wrong.returncode == 2 and wrong.stdout == ""
    assert wrong.stderr.startswith(
        f"crcr dlq: --to {queues['EventsQueue']} is not the queue {queues['DispatchDLQ']} takes dead letters from "
        "(its queue is "
    )
    assert wrong.stderr.endswith("/crcr-local-DispatchQueue); --any-queue sends there anyway\n")
    assert len(wrong.stderr.splitlines()) == 1

    forced = dlq(stack, "redrive", queues["DispatchDLQ"], "--to", queues["EventsQueue"], "--any-queue", "--json")

    # A dispatch is no EventMessage: it stays where it was, listed, and nothing reaches the planner.
    assert forced.returncode == 1, forced.stderr
    result = json.loads(forced.stdout)
    assert result["moved"] == 0 and result["left"][0]["reason"].startswith("not a EventMessage (")
    assert visible(stack, queues["DispatchDLQ"]) == 1 and visible(stack, queues["EventsQueue"]) == 0


def test_redrive_sends_valid_messages_to_the_paired_queue_and_leaves_malformed_ones_listed(
    stack: LocalStack, queues: dict[str, str]
) -> None:
    sqs = stack.client("sqs")
    good = sqs.send_message(QueueUrl=queues["DispatchDLQ"], MessageBody=dispatch(repo="org/repo"))["MessageId"]
    bad = sqs.send_message(QueueUrl=queues["DispatchDLQ"], MessageBody='{"target_repo": "org/repo"}')["MessageId"]

    dry = dlq(stack, "redrive", queues["DispatchDLQ"], "--dry-run")

    assert dry.returncode == 1, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0].startswith("would redrive 1 messages to ") and lines[0].endswith(
        "; 1 left in the dead-letter queue (below)"
    )
    assert lines[1].startswith(f"  left  {bad}  not a DispatchMessage (")
    assert visible(stack, queues["DispatchDLQ"]) == 2  # a dry run moves nothing and hides nothing
    assert good not in dry.stdout

    # No --to: the queue whose redrive policy names the DLQ. The relay's poller takes what arrives there.
    done = dlq(stack, "redrive", queues["DispatchDLQ"], "--json")

    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["moved"] == 1 and [row["message_id"] for row in result["left"]] == [bad]
    assert result["to"].endswith("/crcr-local-DispatchQueue")
    left = sqs.receive_message(QueueUrl=queues["DispatchDLQ"], MaxNumberOfMessages=10)["Messages"]
    assert [m["MessageId"] for m in left] == [bad]


def test_a_dispatch_naming_a_path_a_huge_attempt_or_a_control_character_is_never_redriven(
    stack: LocalStack, queues: dict[str, str]
) -> None:
    sqs = stack.client("sqs")
    valid = json.loads(dispatch())
    bodies = {
        "target_repo": valid | {"target_repo": "../../x"},  # would aim the App's JWT at GET /..%2Fx/installation
        "attempt": valid | {"attempt": 10**30},
        "delivery_id": valid | {"delivery_id": "d-1\x1b]0;owned\x07"},
        "upstream": valid | {"upstream": "pytorch/pytorch/../x"},
    }
    ids = {
        field: sqs.send_message(QueueUrl=queues["DispatchDLQ"], MessageBody=json.dumps(body))["MessageId"]
        for field, body in bodies.items()
    }

    done = dlq(stack, "redrive", queues["DispatchDLQ"], "--json")

    result = json.loads(done.stdout)
    assert done.returncode == 1 and result["moved"] == 0, done.stdout
    left = {row["message_id"]: row for row in result["left"]}
    for field, message_id in ids.items():
        assert field in json.dumps(left[message_id]), left[message_id]  # named: what is wrong with it
    assert visible(stack, queues["DispatchDLQ"]) >= len(ids)


def test_a_listing_shows_each_dead_letter_once_and_leaves_it_visible(stack: LocalStack, queues: dict[str, str]) -> None:
    sqs = stack.client("sqs")
    for _ in range(3):
        sqs.send_message(QueueUrl=queues["DispatchDLQ"], MessageBody=dispatch())

    first = dlq(stack, "list", queues["DispatchDLQ"], "--json")
    second = dlq(stack, "list", queues["DispatchDLQ"], "--json")

    assert first.returncode == second.returncode == 0
    rows = [json.loads(line) for line in first.stdout.splitlines()]
    again = [json.loads(line) for line in second.stdout.splitlines()]
    assert len(rows) == len({r["message_id"] for r in rows}) == 3
    # Each listing receives each message exactly once and says so: the count before the listing.
    assert [r["receive_count"] for r in rows] == [0, 0, 0] and [r["receive_count"] for r in again] == [1, 1, 1]
    assert visible(stack, queues["DispatchDLQ"]) == 3
    table = dlq(stack, "list", queues["DispatchDLQ"])
    assert table.stdout.splitlines()[0].split() == ["message", "delivery", "repository", "received", "reason"]
    assert table.stderr == "3 dead letters\n"
