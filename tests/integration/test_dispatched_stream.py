"""The state table's stream as DispatchedFunction's source: the ledger's own writes over moto server, read as Lambda
reads the stream, through the filter template.yaml declares. An L3/L4 dispatch marked sent is the one record
that passes, once, and it is the check-run request the dispatcher used to send to ChecksQueue."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from crcr.adapters.ledger import DynamoLedger, dispatched_row
from crcr.adapters.pacer import DynamoPacer
from crcr.app.ports.ledger import LedgerState
from crcr.contracts.check_messages import CheckSync, DispatchChanged, read_check_sync
from crcr.contracts.messages import DispatchMessage
from crcr.domain.levels import Level
from crcr.domain.ticket import TicketClaims
from crcr.local.filters import passes
from crcr.local.pollers import StreamReader
from crcr.local.stack import Context
from crcr.ops.dlq import redrive
from tests.integration.aws import checks_handler, dispatched_stream_source, dynamodb_and_streams, moto_server, read_all
from tests.unit.fakes import FakeChecksQueue, RecordingMetrics
from tests.unit.test_checks import _deps, _job

TABLE = "state"
UPSTREAM = "pytorch/pytorch"


@pytest.fixture
def aws() -> Iterator[tuple[DynamoLedger, StreamReader, Any]]:
    with dynamodb_and_streams(StateTable=TABLE) as (ddb, streams):
        [stream] = streams.list_streams(TableName=TABLE)["Streams"]
        yield DynamoLedger(ddb, TABLE, start_timeout_s=600.0), StreamReader(streams, stream["StreamArn"]), ddb


def message(delivery: str, repo: str, level: Level) -> DispatchMessage:
    return DispatchMessage(
        delivery_id=delivery, event_type="pull_request", action="synchronize", target_repo=repo, level=level,
        upstream=UPSTREAM, pr_number=5, head_sha="c" * 40, payload={}, planned_at=0.0,
    )  # fmt: skip


def send(state: DynamoLedger, m: DispatchMessage, now: float) -> None:
    """As the dispatcher records a send: the claim, then the mark."""
    assert state.claim(m, f"dsp-{m.target_repo}", now, 30.0, "worker", 7, m.target_repo).taken
    claims = TicketClaims(
        sub=m.target_repo, repo_id=7, delivery_id=m.delivery_id, upstream=UPSTREAM, pr=5, head_sha=m.head_sha,
        level=int(m.level), iat=int(now), exp=int(now) + 3600, jti=f"dsp-{m.target_repo}",
    )  # fmt: skip
    state.mark_dispatched(m, claims, now)


def test_only_an_l3_or_l4_dispatch_marked_sent_reaches_the_check_run_writer_and_only_once(
    aws: tuple[DynamoLedger, StreamReader, Any],
) -> None:
    state, reader, ddb = aws
    source = dispatched_stream_source()
    assert source.filters and source.on_failure_queue == "ChecksDLQ"
    levels = {"o/one": Level.L1, "o/two": Level.L2, "o/three": Level.L3, "o/four": Level.L4}
    for repo, level in levels.items():
        send(state, message("g-1", repo, level), 1000.0)
    # An L4 dispatch that first had to wait (RETRYING), then was sent: one request, for the send.
    late = message("g-2", "o/four", Level.L4)
    assert state.claim(late, "dsp-late", 1000.0, 30.0, "first", 7, "o/four").taken
    state.mark(late, LedgerState.RETRYING, "paced", 1000.0, "first", settled=True)
    send(state, late, 1100.0)
    # What follows a send writes the sent row again and passes nothing: a repeated mark, the start watch ending.
    send_again = message("g-1", "o/four", Level.L4)
    state.mark_dispatched(send_again, TicketClaims(
        sub="o/four", repo_id=7, delivery_id="g-1", upstream=UPSTREAM, pr=5, head_sha="c" * 40, level=4,
        iat=1000, exp=4600, jti="dsp-o/four"), 1001.0)  # fmt: skip
    ddb.update_item(
        TableName=TABLE,
        Key={"pk": {"S": "DLV#g-1"}, "sk": {"S": "DSP#o/three"}},
        UpdateExpression="REMOVE sweep_pk, sweep_at",
    )
    DynamoPacer(ddb, TABLE).acquire(42, 1000.0)  # another kind of row on the same table

    records = read_all(reader)
    passed = [r for r in records if passes(source.filters, r)]
    rows = [dispatched_row(r) for r in passed]
    assert [(row.delivery_id, row.repo, row.level, row.head_sha, row.upstream) for row in rows if row] == [
        ("g-1", "o/three", 3, "c" * 40, UPSTREAM),
        ("g-1", "o/four", 4, "c" * 40, UPSTREAM),
        ("g-2", "o/four", 4, "c" * 40, UPSTREAM),
    ]
    # The handler's own reading agrees with the filter on every record the table wrote.
    assert [r for r in records if dispatched_row(r) is not None] == passed
    assert len(records) > 3 * len(passed)  # the filter is what keeps the writer from seeing every ledger write


def _record(repo: str, sequence: str, sha: str = "a" * 40) -> dict[str, Any]:
    """A stream record of the ledger row `x`/`repo` marked sent at L4 (the row tests.unit.test_checks' deps hold)."""
    row = {
        "pk": {"S": "DLV#x"}, "sk": {"S": f"DSP#{repo}"}, "repo": {"S": repo}, "level": {"N": "4"},
        "upstream": {"S": UPSTREAM}, "head_sha": {"S": sha}, "dispatch_id": {"S": f"d-{repo}"},
    }  # fmt: skip
    return {
        "eventSource": "aws:dynamodb",
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"pk": row["pk"], "sk": row["sk"]},
            "NewImage": row | {"state": {"S": "dispatched"}},
            "OldImage": row | {"state": {"S": "sending"}},
            "SequenceNumber": sequence,
        },
    }


def test_a_pass_the_writer_cannot_run_goes_to_checks_queue_and_only_one_sqs_refuses_is_retried_by_the_stream() -> None:
    handler = checks_handler("crcr_fn_checks_stream", "dispatched")
    deps, api, _ = _deps(_job("in_progress", None))
    event = {"Records": [_record("o/r", "100")]}
    assert handler(event, Context("DispatchedFunction", 60), deps=deps) == {"batchItemFailures": []}
    # The commit's pass, at once, from the latest recorded state (the fake results hold a job in progress already).
    assert [(kind, f["name"], f["status"]) for kind, f in api.calls] == [
        ("create", "crcr/o/r", "in_progress"),
        ("create", "crcr/o/r/CI/build", "in_progress"),
    ]

    class TableDown:
        def __getattr__(self, name: str) -> Any:
            raise ConnectionError("DynamoDB unreachable")

    queue, metrics = FakeChecksQueue(), RecordingMetrics()
    broken = dataclasses.replace(deps, results=TableDown(), queue=queue, metrics=metrics)
    other = {"Records": [_record("o/r", "150", sha="b" * 40)]}
    assert handler(other, Context("DispatchedFunction", 60), deps=broken) == {"batchItemFailures": []}
    assert [(m.kind, m.head_sha) for m, _ in queue.sent] == [("head", "b" * 40)]
    assert metrics.counts["CheckRequestQueued"] == 1

    class QueueDown(FakeChecksQueue):
        def send_checks(self, messages: list[CheckSync], delay_s: float = 0.0) -> None:
            raise ConnectionError("SQS unreachable")

    both = dataclasses.replace(broken, queue=QueueDown())
    two = {"Records": [_record("o/r", "200", sha="c" * 40), _record("o/s", "201", sha="c" * 40)]}
    result = handler(two, Context("DispatchedFunction", 60), deps=both)
    assert result == {"batchItemFailures": [{"itemIdentifier": "200"}, {"itemIdentifier": "201"}]}
    assert metrics.counts["CheckRequestFailed"] == 1
    # The booking nobody would run was dropped: the stream's retry books and runs a pass of its own.
    assert handler(two, Context("DispatchedFunction", 60), deps=deps) == {"batchItemFailures": []}
    assert ("crcr/o/s", "queued") in {(f["name"], f["status"]) for _, f in api.calls if f["head_sha"] == "c" * 40}


def test_redrive_moves_check_run_messages_back_and_leaves_a_stream_batchs_record_in_the_dlq() -> None:
    with moto_server() as reach:
        sqs = boto3.client("sqs", **reach)
        dlq, queue = (sqs.create_queue(QueueName=n)["QueueUrl"] for n in ("crcr-ChecksDLQ", "crcr-ChecksQueue"))
        request = DispatchChanged(upstream=UPSTREAM, head_sha="a" * 40, delivery_id="x", repo="o/r")
        # Lambda's on-failure record of a state-table stream batch DispatchedFunction could not take.
        batch = {"requestContext": {"condition": "RetryAttemptsExhausted"}, "DDBStreamBatchInfo": {"batchSize": 1}}
        sqs.send_message(QueueUrl=dlq, MessageBody=request.model_dump_json())
        batch_id = sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(batch))["MessageId"]
        done = redrive(sqs, dlq, queue)
        assert done.moved == 1 and [row["message_id"] for row in done.left] == [batch_id]
        [moved] = sqs.receive_message(QueueUrl=queue)["Messages"]
        assert read_check_sync(moved["Body"]) == request
        attributes = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])
        assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "1"  # still there, and visible
