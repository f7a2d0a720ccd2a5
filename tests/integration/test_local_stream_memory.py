"""crcr local's stream pollers against an in-process moto: what moto keeps between polls stays bounded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodbstreams.models import dynamodbstreams_backends
from moto.server import ThreadedMotoServer

from crcr.local.stack import StreamReader, forget_spent_shard_iterators, free_port


@pytest.fixture
def ddb() -> Iterator[tuple[Any, Any]]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    kwargs = {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"}
    kwargs |= {"aws_access_key_id": "t", "aws_secret_access_key": "t"}
    yield boto3.client("dynamodb", **kwargs), boto3.client("dynamodbstreams", **kwargs)
    server.stop()


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
        seen += [r["dynamodb"]["Keys"]["pk"]["S"] for r in reader.read_all()]
    assert seen == [f"item-{poll}" for poll in range(0, 200, 20)]  # every record, once, in order
    assert len(kept) - before <= 1  # the shard's current iterator, not 200 of them
