"""crcr local's stream pollers against an in-process moto: what moto keeps between polls stays bounded, and one
partition's records never hold the others' turn (ParallelizationFactor)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodbstreams.models import dynamodbstreams_backends

from crcr.local.aws import forget_spent_shard_iterators, transactions_without_table_copies
from crcr.local.pollers import ParallelStream, StreamReader
from crcr.local.template import FunctionDecl, StreamSource
from tests.integration.aws import read_all


def test_polling_a_stream_keeps_one_shard_iterator_not_one_per_poll(ddb: tuple[Any, Any]) -> None:
    forget_spent_shard_iterators()
    forget_spent_shard_iterators()  # idempotent
    client, streams = ddb
    table = client.create_table(
        TableName="polled",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    reader = StreamReader(streams, table["TableDescription"]["LatestStreamArn"])
    kept = dynamodbstreams_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].shard_iterators
    before = len(kept)
    seen: list[str] = []
    for poll in range(200):  # a poller's life: mostly empty polls, a write now and then
        if poll % 20 == 0:
            client.put_item(TableName="polled", Item={"pk": {"S": f"item-{poll}"}})
        seen += [r["dynamodb"]["Keys"]["pk"]["S"] for r in read_all(reader)]
    assert seen == [f"item-{poll}" for poll in range(0, 200, 20)]  # every record, once, in order
    assert len(kept) - before <= 1  # the shard's current iterator, not 200 of them


class Lambda:
    """What ParallelStream needs of the stack (crcr.local.pollers.Host): the stream, the stop flag, and the function
    (recording its batches; a batch holding `hold_key` waits for `release`)."""

    def __init__(self, streams: Any, arn: str, hold_key: str) -> None:
        self.streams, self.stream_arns = streams, {"Jobs": arn}
        self.stopping = threading.Event()
        self.batches: list[list[str]] = []
        self.release, self.hold_key = threading.Event(), hold_key
        self.lock = threading.Lock()

    def client(self, service: str) -> Any:
        return self.streams

    def invoke(self, logical_id: str, event: dict[str, Any]) -> Any:
        keys = [f"{r['dynamodb']['Keys']['pk']['S']}/{r['dynamodb']['Keys']['sk']['S']}" for r in event["Records"]]
        with self.lock:
            self.batches.append(keys)
        if any(k.startswith(self.hold_key) for k in keys):
            self.release.wait(10)
        return {"batchItemFailures": []}


def test_a_partition_with_hundreds_of_records_holds_one_batch_at_a_time_never_the_others_turn(
    ddb: tuple[Any, Any],
) -> None:
    """ParallelizationFactor: one dispatch's 300 job rows go in order, one batch at a time, while another
    dispatch's row is handled at once beside them."""
    client, streams = ddb
    table = client.create_table(
        TableName="jobs",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    for i in range(300):
        client.put_item(TableName="jobs", Item={"pk": {"S": "DSP#flood"}, "sk": {"S": f"JOB#{i:03d}"}})
    client.put_item(TableName="jobs", Item={"pk": {"S": "DSP#normal"}, "sk": {"S": "JOB#build"}})
    fake = Lambda(streams, table["TableDescription"]["LatestStreamArn"], "DSP#flood")
    source = StreamSource(table="Jobs", batch_size=10, parallelization=10)
    fn = FunctionDecl(logical_id="ReporterFunction", code_uri="", handler="", timeout=60, environment={})
    poller = threading.Thread(target=ParallelStream(fake, fn, source).run, daemon=True)  # type: ignore[arg-type]
    poller.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ["DSP#normal/JOB#build"] not in fake.batches:
        time.sleep(0.01)
    with fake.lock:
        seen = list(fake.batches)
    assert ["DSP#normal/JOB#build"] in seen  # handled while the flood's first batch is still out
    assert len([b for b in seen if b[0].startswith("DSP#flood")]) == 1  # the flood: one batch at a time
    fake.release.set()
    while time.monotonic() < deadline + 20 and sum(len(b) for b in fake.batches) < 301:
        time.sleep(0.01)
    fake.stopping.set()
    poller.join(15)
    flood = [key for batch in fake.batches for key in batch if key.startswith("DSP#flood")]
    assert flood == [f"DSP#flood/JOB#{i:03d}" for i in range(300)]  # every record once, in order


def test_a_cancelled_transaction_puts_its_items_back_and_the_stream_goes_on(ddb: tuple[Any, Any]) -> None:
    """moto copied a transaction's whole tables and, when it was cancelled, swapped the copy in: the pollers'
    iterators read a stream no write reached again (and every transaction cost the table)."""
    transactions_without_table_copies()
    transactions_without_table_copies()  # idempotent
    client, streams = ddb
    table = client.create_table(
        TableName="claims",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    reader = StreamReader(streams, table["TableDescription"]["LatestStreamArn"])

    def claim(body: str, delivery: str) -> None:
        client.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": "claims",
                        "Item": {"pk": {"S": f"BODY#{body}"}, "sk": {"S": "META"}, "d": {"S": delivery}},
                        "ConditionExpression": "attribute_not_exists(pk) OR d = :d",
                        "ExpressionAttributeValues": {":d": {"S": delivery}},
                    }
                },
                {
                    "Put": {
                        "TableName": "claims",
                        "Item": {"pk": {"S": f"DLV#{delivery}"}, "sk": {"S": "META"}, "body": {"S": body}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )

    claim("x", "D")
    assert sorted(r["dynamodb"]["Keys"]["pk"]["S"] for r in read_all(reader)) == ["BODY#x", "DLV#D"]
    with pytest.raises(client.exceptions.TransactionCanceledException):
        claim("y", "D")  # the body's put passes, the delivery's fails: neither stays
    assert "Item" not in client.get_item(TableName="claims", Key={"pk": {"S": "BODY#y"}, "sk": {"S": "META"}})
    assert read_all(reader) == []  # nothing of it reached the stream
    client.put_item(TableName="claims", Item={"pk": {"S": "later"}, "sk": {"S": "META"}})
    claim("y", "E")
    assert sorted(r["dynamodb"]["Keys"]["pk"]["S"] for r in read_all(reader)) == ["BODY#y", "DLV#E", "later"]
