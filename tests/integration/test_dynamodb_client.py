"""The relay's DynamoDB client against moto's server: the answers boto3's client gives, the errors it raises, its
retries, and a signature AWS would accept, checked on the bytes that went over the wire."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from crcr.adapters import dynamodb_client
from crcr.adapters.dynamodb_client import DynamoClient
from crcr.local.stack import free_port
from tests.doubles.aws_proxy import AwsProxy, Fault, make_tls, verify_sigv4
from tests.integration.aws import moto_server

TABLE = "t"
SECRET = "secret-key-for-the-signature"


@pytest.fixture(scope="module")
def reach() -> Iterator[dict[str, str]]:
    with moto_server() as reach:
        boto3.client("dynamodb", **reach).create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield reach


@pytest.fixture
def proxy(reach: dict[str, str]) -> Iterator[AwsProxy]:
    proxy = AwsProxy(reach["endpoint_url"])
    yield proxy
    proxy.stop()


def lean(url: str, **options: Any) -> DynamoClient:
    creds = Credentials("AKIDEXAMPLE", SECRET, token=options.pop("token", None))
    return DynamoClient(url, "us-east-1", creds, sleep=lambda _: None, **options)


def key(pk: str, sk: str = "a") -> dict[str, dict[str, str]]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def without_metadata(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "ResponseMetadata"}


def error_of(call: Any, **params: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as raised:
        call(**params)
    response = raised.value.response
    # botocore repeats the message at the top for modelled errors only; nothing reads it there
    return {"Error": {"Code": response["Error"]["Code"]}} | {
        k: v for k, v in response.items() if k not in {"Error", "ResponseMetadata", "message"}
    }


def test_answers_and_errors_are_the_ones_boto3_gives(reach: dict[str, str]) -> None:
    """The same requests through both clients, each on rows of its own: equal answers, equal errors."""
    ours = DynamoClient.like(boto3.client("dynamodb", **reach), Credentials("t", "t"))
    theirs = boto3.client("dynamodb", **reach)
    for client, pk in ((ours, "ours"), (theirs, "theirs")):
        client.put_item(TableName=TABLE, Item=key(pk) | {"n": {"N": "1"}, "l": {"L": [{"S": "x"}, {"NULL": True}]}})
        client.put_item(TableName=TABLE, Item=key(pk, "b") | {"n": {"N": "2"}})
    results: dict[str, list[Any]] = {}
    for client, pk in ((ours, "ours"), (theirs, "theirs")):
        out: list[Any] = []
        out.append(client.get_item(TableName=TABLE, Key=key(pk), ConsistentRead=True))
        out.append(client.get_item(TableName=TABLE, Key=key(pk, "absent")))
        out.append(
            client.update_item(
                TableName=TABLE,
                Key=key(pk),
                UpdateExpression="SET n = n + :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
                ReturnValues="ALL_NEW",
            )
        )
        out.append(
            client.query(
                TableName=TABLE,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": pk}},
                Limit=1,
            )
        )
        out.append(
            error_of(
                client.update_item,
                TableName=TABLE,
                Key=key(pk),
                UpdateExpression="SET n = :n",
                ConditionExpression="attribute_not_exists(pk)",
                ExpressionAttributeValues={":n": {"N": "9"}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        )
        out.append(
            error_of(
                client.transact_write_items,
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": TABLE,
                            "Key": key(pk, "b"),
                            "ConditionExpression": "n = :n",
                            "ExpressionAttributeValues": {":n": {"N": "7"}},
                        }
                    }
                ],
            )
        )
        out.append(error_of(client.get_item, TableName=TABLE, Key={"nope": {"S": "x"}}))
        results[pk] = out
    ours_out = [without_metadata(a) for a in results["ours"]]
    theirs_out = [without_metadata(a) for a in results["theirs"]]
    swap = {"ours": "theirs"}

    def normalised(value: Any) -> Any:  # each client wrote its own rows: compare them under one name
        if isinstance(value, dict):
            return {k: normalised(v) for k, v in value.items()}
        if isinstance(value, list):
            return [normalised(v) for v in value]
        return swap.get(value, value)

    assert normalised(ours_out) == theirs_out
    assert ours_out[4]["Error"]["Code"] == "ConditionalCheckFailedException"
    assert ours_out[4]["Item"]["n"] == {"N": "2"}  # the row that refused the write comes back with the refusal
    assert ours_out[5]["Error"]["Code"] == "TransactionCanceledException"
    assert ours_out[6]["Error"]["Code"] == "ValidationException"


def test_every_request_carries_a_signature_of_what_was_sent(proxy: AwsProxy) -> None:
    client = lean(proxy.url, token="session-token-1")
    client.put_item(TableName=TABLE, Item=key("signed") | {"text": {"S": "naïve ünïcode, spaces  and\ttabs"}})
    client.get_item(TableName=TABLE, Key=key("signed"))
    assert len(proxy.seen) == 2
    for seen in proxy.seen:
        assert verify_sigv4(seen, SECRET, service="dynamodb", region="us-east-1"), seen.header("authorization")
        assert "x-amz-security-token" in (seen.header("authorization") or "")
        assert seen.header("x-amz-security-token") == "session-token-1"
        assert (seen.header("x-amz-target") or "").startswith("DynamoDB_20120810.")
    # The verifier can say no: another secret, or a body changed after signing.
    first = proxy.seen[0]
    assert not verify_sigv4(first, "another-secret", service="dynamodb", region="us-east-1")
    changed = type(first)(first.method, first.path, first.headers, first.body.replace(b"signed", b"forged"))
    assert not verify_sigv4(changed, SECRET, service="dynamodb", region="us-east-1")


def test_throttling_and_server_errors_are_tried_three_times_in_all(reach: dict[str, str], proxy: AwsProxy) -> None:
    client = lean(proxy.url)
    proxy.faults = [Fault(400, "ProvisionedThroughputExceededException"), Fault(500, "InternalServerError")]
    client.put_item(TableName=TABLE, Item=key("retried"))
    assert len(proxy.seen) == 3
    assert "Item" in boto3.client("dynamodb", **reach).get_item(TableName=TABLE, Key=key("retried"))

    proxy.seen.clear()
    proxy.faults = [Fault(400, "ThrottlingException")] * 3
    with pytest.raises(ClientError) as raised:
        client.put_item(TableName=TABLE, Item=key("never"))
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
    assert len(proxy.seen) == 3
    assert "Item" not in boto3.client("dynamodb", **reach).get_item(TableName=TABLE, Key=key("never"))


def test_a_refusal_is_answered_at_once(proxy: AwsProxy) -> None:
    client = lean(proxy.url)
    client.put_item(TableName=TABLE, Item=key("once"))
    proxy.seen.clear()
    with pytest.raises(ClientError) as raised:
        client.put_item(TableName=TABLE, Item=key("once"), ConditionExpression="attribute_not_exists(pk)")
    assert raised.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    proxy.faults = [Fault(400, "ValidationException")]
    with pytest.raises(ClientError, match="ValidationException"):
        client.get_item(TableName=TABLE, Key=key("once"))
    assert len(proxy.seen) == 2  # one request each: neither is retried


def test_a_damaged_answer_is_asked_again(proxy: AwsProxy) -> None:
    client = lean(proxy.url)
    client.put_item(TableName=TABLE, Item=key("crc") | {"v": {"S": "kept"}})
    proxy.seen.clear()
    proxy.faults = [Fault(corrupt=True)]
    assert client.get_item(TableName=TABLE, Key=key("crc"))["Item"]["v"] == {"S": "kept"}
    assert len(proxy.seen) == 2


@pytest.mark.parametrize("crc32", ["1", "not-a-number", ""])
def test_an_answer_whose_checksum_does_not_hold_is_asked_again(proxy: AwsProxy, crc32: str) -> None:
    client = lean(proxy.url)
    client.put_item(TableName=TABLE, Item=key("crc-header") | {"v": {"S": "kept"}})
    proxy.seen.clear()
    proxy.faults = [Fault(corrupt=True, crc32=crc32)] * 2
    assert client.get_item(TableName=TABLE, Key=key("crc-header"))["Item"]["v"] == {"S": "kept"}
    assert len(proxy.seen) == 3


@pytest.mark.parametrize("body", [b"[]", b'"text"', b"<html>gateway</html>", b'{"Item": '])
def test_a_success_that_is_not_a_json_object_is_never_read_as_no_item(proxy: AwsProxy, body: bytes) -> None:
    client = lean(proxy.url)
    client.put_item(TableName=TABLE, Item=key("odd") | {"v": {"S": "kept"}})
    proxy.seen.clear()
    proxy.faults = [Fault(body=body)]
    assert client.get_item(TableName=TABLE, Key=key("odd"))["Item"]["v"] == {"S": "kept"}  # asked again
    proxy.faults = [Fault(body=body)] * 3
    with pytest.raises(ClientError) as raised:
        client.get_item(TableName=TABLE, Key=key("odd"))
    assert raised.value.response["Error"]["Code"] == "UnparsableResponse"
    assert len(proxy.seen) == 2 + 3


def test_a_stall_is_a_read_timeout_after_three_attempts(proxy: AwsProxy) -> None:
    client = lean(proxy.url, read_timeout_s=0.3)
    proxy.faults = [Fault(stall_s=1.0)] * 3
    with pytest.raises(ReadTimeoutError):
        client.get_item(TableName=TABLE, Key=key("slow"))
    assert len(proxy.seen) == 3


def test_nothing_listening_is_an_endpoint_connection_error() -> None:
    with pytest.raises(EndpointConnectionError):
        lean(f"http://127.0.0.1:{free_port()}").get_item(TableName=TABLE, Key=key("x"))


def test_observers_see_each_call_once_however_many_attempts(proxy: AwsProxy) -> None:
    seen: list[str] = []
    dynamodb_client.call_observers.append(seen.append)
    try:
        proxy.faults = [Fault(503, "ServiceUnavailable")]
        lean(proxy.url).update_item(
            TableName=TABLE,
            Key=key("observed"),
            UpdateExpression="SET v = :v",
            ExpressionAttributeValues={":v": {"N": "1"}},
        )
    finally:
        dynamodb_client.call_observers.remove(seen.append)
    assert seen == ["dynamodb.UpdateItem"]
    assert len(proxy.seen) == 2


@pytest.mark.parametrize("token", [None, "session/token+with=padding"])
@pytest.mark.parametrize(
    ("endpoint", "host"),
    [
        ("https://dynamodb.eu-west-1.amazonaws.com", "dynamodb.eu-west-1.amazonaws.com"),
        ("https://dynamodb.eu-west-1.amazonaws.com:443/", "dynamodb.eu-west-1.amazonaws.com"),
        ("http://127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://localhost:8000/prefix/", "localhost:8000"),
    ],
)
def test_the_signature_is_the_one_botocores_signer_makes(endpoint: str, host: str, token: str | None) -> None:
    """The same request, signed at the same moment by botocore's SigV4 signer from what it sees (the URL, the signed
    headers and the body): the same Authorization header."""
    moment = 1_796_191_234.0
    client = DynamoClient(endpoint, "eu-west-1", Credentials("AKIDEXAMPLE", SECRET, token=token), clock=lambda: moment)
    body = b'{"TableName":"t","Key":{"pk":{"S":"x y"}}}'
    ours = client._headers("GetItem", body)
    assert ours["host"] == host
    signed = {k: v for k, v in ours.items() if k not in {"authorization", "user-agent", "accept-encoding"}}
    request = AWSRequest(method="POST", url=client._url, data=body, headers=signed)
    request.context["timestamp"] = ours["x-amz-date"]
    signer = SigV4Auth(Credentials("AKIDEXAMPLE", SECRET, token=token), "dynamodb", "eu-west-1")
    canonical = signer.canonical_request(request)
    signature = signer.signature(signer.string_to_sign(request, canonical), request)
    assert ours["authorization"].endswith(f"Signature={signature}")
    assert ours["x-amz-date"] == "20261202T060034Z"
    assert "Credential=AKIDEXAMPLE/20261202/eu-west-1/dynamodb/aws4_request" in ours["authorization"]


@pytest.mark.parametrize("endpoint", ["ftp://dynamodb.example", "http:///nohost", "http://h:1/a%20b", "http://h:1/a b"])
def test_an_endpoint_it_cannot_sign_is_refused_at_once(endpoint: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        DynamoClient(endpoint, "us-east-1", Credentials("a", "b"))


def test_requests_go_through_the_proxy_the_environment_names(
    reach: dict[str, str], proxy: AwsProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As botocore does: HTTP(S)_PROXY for the endpoint's scheme, unless NO_PROXY names its host."""
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    lean(reach["endpoint_url"]).put_item(TableName=TABLE, Item=key("proxied"))
    assert [s.path for s in proxy.seen] == [reach["endpoint_url"] + "/"]  # a proxy is asked for the absolute URL
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert "Item" in lean(reach["endpoint_url"]).get_item(TableName=TABLE, Key=key("proxied"))
    assert len(proxy.seen) == 1


def test_a_connection_the_server_closed_while_idle_costs_no_attempt(proxy: AwsProxy) -> None:
    slept: list[float] = []
    client = DynamoClient(proxy.url, "us-east-1", Credentials("AKIDEXAMPLE", SECRET), sleep=slept.append)
    client.put_item(TableName=TABLE, Item=key("idle") | {"v": {"S": "kept"}})
    proxy.faults = [Fault(close_after=True)]
    client.get_item(TableName=TABLE, Key=key("idle"))  # answered, then the server closes the connection
    proxy.seen.clear()
    assert client.get_item(TableName=TABLE, Key=key("idle"))["Item"]["v"] == {"S": "kept"}
    assert len(proxy.seen) == 1 and slept == []  # a new connection, not a failed attempt and a backoff


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_tls(tmp_path_factory.mktemp("tls"))


def test_https_is_verified_against_the_ca_bundle_botocore_would_use(
    reach: dict[str, str], tls: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, cert, private = tls
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    endpoint = AwsProxy(reach["endpoint_url"], tls=(cert, private))
    try:
        monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
        with pytest.raises(EndpointConnectionError) as refused:  # signed by a CA nobody here trusts
            lean(endpoint.url).get_item(TableName=TABLE, Key=key("tls"))
        assert isinstance(refused.value.kwargs["error"], ssl.SSLCertVerificationError)
        monkeypatch.setenv("AWS_CA_BUNDLE", str(ca))
        client = lean(endpoint.url, token="session-token-2")
        client.put_item(TableName=TABLE, Item=key("tls") | {"v": {"S": "over TLS"}})
        assert client.get_item(TableName=TABLE, Key=key("tls"))["Item"]["v"] == {"S": "over TLS"}
        assert verify_sigv4(endpoint.seen[-1], SECRET, service="dynamodb", region="us-east-1")
    finally:
        endpoint.stop()


def test_https_goes_through_the_proxys_tunnel_with_its_credentials(
    reach: dict[str, str], proxy: AwsProxy, tls: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, cert, private = tls
    endpoint = AwsProxy(reach["endpoint_url"], tls=(cert, private))
    try:
        monkeypatch.setenv("AWS_CA_BUNDLE", str(ca))
        monkeypatch.setenv("HTTPS_PROXY", proxy.url.replace("http://", "http://relay:s%40cret@"))
        for name in ("NO_PROXY", "no_proxy", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        client = lean(endpoint.url)
        client.put_item(TableName=TABLE, Item=key("tunnel"))
        assert "Item" in client.get_item(TableName=TABLE, Key=key("tunnel"))
        assert [t.path for t in proxy.tunnels] == [endpoint.url.removeprefix("https://")]  # one tunnel, kept
        assert proxy.tunnels[0].header("Proxy-Authorization") == "Basic cmVsYXk6c0BjcmV0"  # relay:s@cret
        assert proxy.seen == [] and len(endpoint.seen) == 2  # the proxy saw no request: TLS ran end to end
    finally:
        endpoint.stop()
