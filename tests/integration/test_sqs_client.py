"""The relay's SQS client (its sends, on AWS's JSON protocol) against moto's server: what boto3's client answers
and raises, messages a boto3 consumer reads as sent, and a signature of the bytes that went over the wire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from crcr.adapters import aws_json
from crcr.adapters.sqs_client import SqsClient
from tests.doubles.aws_proxy import AwsProxy, verify_sigv4
from tests.integration.aws import moto_server


@pytest.fixture(scope="module")
def reach() -> Iterator[dict[str, str]]:
    with moto_server() as reach:
        yield reach


def both(reach: dict[str, str]) -> tuple[SqsClient, Any]:
    theirs = boto3.client("sqs", **reach)
    return SqsClient.like(theirs, Credentials("t", "t")), theirs


def test_sends_answer_as_boto3_does_and_a_consumer_reads_what_was_sent(reach: dict[str, str]) -> None:
    ours, theirs = both(reach)
    url = theirs.create_queue(QueueName="sends")["QueueUrl"]
    attributes = {"delivery_id": {"DataType": "String", "StringValue": "d-1 ü"}}
    one = ours.send_message(QueueUrl=url, MessageBody='{"x": "ünï"}', MessageAttributes=attributes)
    reference = theirs.send_message(QueueUrl=url, MessageBody='{"x": "ünï"}', MessageAttributes=attributes)
    assert one.keys() - {"ResponseMetadata"} == reference.keys() - {"ResponseMetadata"}
    assert one["MD5OfMessageBody"] == reference["MD5OfMessageBody"]
    assert one["MD5OfMessageAttributes"] == reference["MD5OfMessageAttributes"]
    batch = ours.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": f"m{i}", "DelaySeconds": 0} for i in range(3)],
    )
    assert sorted(s["Id"] for s in batch["Successful"]) == ["0", "1", "2"]
    assert not batch.get("Failed")
    read = theirs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    while len(read) < 5:
        more = theirs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
        assert more.get("Messages"), "a sent message never arrived"
        read += more["Messages"]
    assert sorted(m["Body"] for m in read) == sorted(['{"x": "ünï"}', '{"x": "ünï"}', "m0", "m1", "m2"])
    assert {m["MessageAttributes"]["delivery_id"]["StringValue"] for m in read if "MessageAttributes" in m} == {"d-1 ü"}


def test_errors_carry_the_codes_botocore_gives(reach: dict[str, str]) -> None:
    ours, theirs = both(reach)
    missing = reach["endpoint_url"] + "/123456789012/no-such-queue"
    codes = []
    for client in (ours, theirs):
        with pytest.raises(ClientError) as raised:
            client.send_message(QueueUrl=missing, MessageBody="x")
        codes.append(raised.value.response["Error"]["Code"])
    assert codes[0] == codes[1]
    url = theirs.create_queue(QueueName="errors")["QueueUrl"]
    with pytest.raises(ClientError) as raised:
        ours.send_message_batch(QueueUrl=url, Entries=[])
    assert raised.value.response["Error"]["Code"] == "AWS.SimpleQueueService.EmptyBatchRequest"


def test_every_send_is_signed_for_sqs_and_counted_once(reach: dict[str, str]) -> None:
    url = boto3.client("sqs", **reach).create_queue(QueueName="signed")["QueueUrl"]
    proxy = AwsProxy(reach["endpoint_url"])
    seen: list[str] = []
    aws_json.call_observers.append(seen.append)
    try:
        client = SqsClient(proxy.url, "us-east-1", Credentials("AKIDEXAMPLE", "secret", token="tok"))
        client.send_message(QueueUrl=url, MessageBody="signed")
        client.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "b"}])
    finally:
        aws_json.call_observers.remove(seen.append)
        proxy.stop()
    assert seen == ["sqs.SendMessage", "sqs.SendMessageBatch"]
    assert [r.header("x-amz-target") for r in proxy.seen] == ["AmazonSQS.SendMessage", "AmazonSQS.SendMessageBatch"]
    for request in proxy.seen:
        assert verify_sigv4(request, "secret", region="us-east-1", service="sqs")
