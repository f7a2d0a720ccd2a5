"""Fixtures of the integration tests: an in-process moto server for the tests of crcr local's moto patches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from crcr.local.stack import free_port


@pytest.fixture
def ddb() -> Iterator[tuple[Any, Any]]:
    """DynamoDB and DynamoDB Streams clients of a moto server of the test's own."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    kwargs = {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"}
    kwargs |= {"aws_access_key_id": "t", "aws_secret_access_key": "t"}
    yield boto3.client("dynamodb", **kwargs), boto3.client("dynamodbstreams", **kwargs)
    server.stop()
