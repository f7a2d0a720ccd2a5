"""The relay's AWS clients as the composition root builds them (boto3 with the relay's `Config`), seen on the wire
through a recording proxy in front of moto's server: a traced invocation's DynamoDB and SQS calls carry X-Ray's
trace header, every request is signed, and throttling and transient errors are retried as botocore's standard
mode does, three attempts in all."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from crcr import composition
from crcr.app.ingest import Outcome, ingest
from crcr.composition.base import load_settings
from crcr.composition.webhook import build_ingest_deps
from crcr.domain.signature import sign
from tests.conftest import ROOT
from tests.doubles.aws_proxy import AwsProxy, Fault, verify_sigv4
from tests.integration.aws import create_tables, moto_server

SECRET = "webhook-secret"
EVENT = ROOT / "examples" / "events" / "pull_request.opened.json"
TRACE = "Root=1-6752f0a1-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[AwsProxy, Any]]:
    """A proxy in front of a fresh moto server, named by AWS_ENDPOINT_URL as the functions' environment names it;
    the webhook function's dependencies built through the composition root against it."""
    with moto_server() as reach:
        create_tables(boto3.client("dynamodb", **reach), StateTable="state")
        queue = boto3.client("sqs", **reach).create_queue(QueueName="events")["QueueUrl"]
        proxy = AwsProxy(reach["endpoint_url"])
        for name, value in {
            "AWS_ENDPOINT_URL": proxy.url,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "relay-secret",
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
        # A cold start's session: credentials and region from this environment (boto3 keeps the first it made), and
        # clients of its own (the composition keeps one per endpoint, and an earlier test's endpoint may have had
        # this proxy's port, with other credentials).
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
        composition.base.client_for.cache_clear()
        env = {
            "CRCR_WEBHOOK_SECRET": SECRET,
            "CRCR_STATE_TABLE": "state",
            "CRCR_EVENTS_QUEUE_URL": queue,
            "CRCR_BODIES_BUCKET": "bodies",
        }
        try:
            yield proxy, build_ingest_deps(load_settings(env))
        finally:
            proxy.stop()


def deliver(deps: Any) -> Outcome:
    """A pull_request delivery GitHub signed: a conditional write of its delivery id, then an SQS send."""
    delivery = str(uuid.uuid4())
    # A body of its own (the relay refuses a body it accepted under another delivery id: a replay).
    body = EVENT.read_bytes().rstrip().removesuffix(b"}") + f', "crcr_test": "{delivery}"}}'.encode()
    headers = {
        "x-github-event": "pull_request",
        "x-github-delivery": delivery,
        "x-hub-signature-256": sign(SECRET.encode(), body),
    }
    return ingest(body, headers, deps).outcome


def operations(proxy: AwsProxy) -> list[str]:
    return [seen.header("x-amz-target") or "?" for seen in proxy.seen]


def test_a_traced_invocations_aws_calls_carry_its_trace_header(
    wire: tuple[AwsProxy, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy, deps = wire
    # What Lambda sets for an invocation of a function with `Tracing: Active`.
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "crcr-WebhookFunction")
    monkeypatch.setenv("_X_AMZN_TRACE_ID", TRACE)
    assert deliver(deps) is Outcome.ACCEPTED
    services = {operation.split(".")[0] for operation in operations(proxy)}
    assert services == {"DynamoDB_20120810", "AmazonSQS"}  # the delivery's record and its message
    assert {seen.header("x-amzn-trace-id") for seen in proxy.seen} == {TRACE}
    # The next invocation has a trace of its own: the kept clients send that one.
    following = TRACE.replace("Parent=53995c3f42cd8ad8", "Parent=0f1e2d3c4b5a6978")
    monkeypatch.setenv("_X_AMZN_TRACE_ID", following)
    proxy.seen.clear()
    assert deliver(deps) is Outcome.ACCEPTED
    assert proxy.seen and {seen.header("x-amzn-trace-id") for seen in proxy.seen} == {following}


def test_every_request_is_signed_for_its_service_with_the_functions_credentials(wire: tuple[AwsProxy, Any]) -> None:
    proxy, deps = wire
    assert deliver(deps) is Outcome.ACCEPTED
    signing_names = {"DynamoDB_20120810": "dynamodb", "AmazonSQS": "sqs"}
    checked = [
        verify_sigv4(seen, "relay-secret", service=signing_names[operation.split(".")[0]], region="us-east-1")
        for seen, operation in zip(proxy.seen, operations(proxy), strict=True)
    ]
    assert checked and all(checked)


def test_throttling_and_transient_errors_are_retried_three_attempts_in_all(wire: tuple[AwsProxy, Any]) -> None:
    proxy, deps = wire
    proxy.faults = [Fault(status=500, code="InternalServerError"), Fault(status=500, code="InternalServerError")]
    assert deliver(deps) is Outcome.ACCEPTED
    first = operations(proxy)[0]
    assert first.startswith("DynamoDB_20120810.") and operations(proxy)[:3] == [first] * 3
    proxy.seen.clear()
    proxy.faults = [Fault(status=500, code="InternalServerError")] * 3
    with pytest.raises(ClientError, match="InternalServerError"):
        deliver(deps)
    assert operations(proxy) == [first] * 3  # and nothing queued: the webhook answers 500, GitHub shows it failed


def test_a_refused_write_is_not_retried(wire: tuple[AwsProxy, Any]) -> None:
    proxy, deps = wire
    proxy.faults = [Fault(status=400, code="ValidationException")]
    with pytest.raises(ClientError, match="ValidationException"):
        deliver(deps)
    assert len(operations(proxy)) == 1
