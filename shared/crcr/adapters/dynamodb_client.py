"""DynamoDB's JSON API over urllib3, signed by botocore's SigV4: the table calls of every function, without
botocore's per-call machinery.

Each function's warm work is a few DynamoDB calls, and botocore spends about half of each call's CPU around the
request (event hooks, parameter validation, serialisation, parsing: 0.9 ms against this client's 0.45 to 0.7 ms
per call on the bench's machine). DynamoDB's low-level API is JSON in, JSON out, in the very shapes the boto3
client takes and returns, so this client sends the request as given and hands back the answer as parsed. What
botocore does that matters is kept: its credential chain and SigV4 signer, the endpoint it resolves
(AWS_ENDPOINT_URL included), its standard retry mode (3 attempts, throttling and transient errors, full-jitter
backoff), the body's CRC32 check, and its exceptions (`ClientError` with the error code and the error's fields,
such as the `Item` that refused a conditional write; connection errors as botocore raises them). Not kept, as
nothing here uses them: `ResponseMetadata` on a success, and base64 for binary (`B`) attribute values.
"""

from __future__ import annotations

import json
import random
import socket
import time
import zlib
from collections.abc import Callable
from typing import Any

import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"
USER_AGENT = "crcr-relay/0.1 dynamodb-json"
# botocore's standard retry mode: these codes are throttling or transient, and so are these HTTP statuses.
RETRY_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalServerError",
    }
)
RETRY_STATUSES = frozenset({500, 502, 503, 504})
MAX_BACKOFF_S = 20.0

# Instrumentation: each is called with "dynamodb.<Operation>" once per call (not per attempt), as botocore's
# "before-call" event is (the bench counts AWS calls through both).
call_observers: list[Callable[[str], None]] = []


class _Retry(Exception):
    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class DynamoClient:
    """The boto3 DynamoDB client's low-level methods the relay uses, same arguments, same answers."""

    def __init__(
        self,
        endpoint_url: str,
        region: str,
        credentials: Any,
        *,
        connect_timeout_s: float = 2.0,
        read_timeout_s: float = 10.0,
        max_attempts: int = 3,
        pool: urllib3.PoolManager | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._url = endpoint_url.rstrip("/") + "/"
        self._region = region
        self._credentials = credentials
        self._timeout = urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s)
        self._max_attempts = max_attempts
        keepalive = [
            *urllib3.connection.HTTPConnection.default_socket_options,
            (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        ]
        # One connection per thread that may call at once (a batch's records run side by side), kept alive.
        self._http = pool or urllib3.PoolManager(num_pools=1, maxsize=16, retries=False, socket_options=keepalive)
        self._sleep = sleep
        self._rand = rand
        self.observers: list[Callable[[str], None]] = []  # this client's calls only; `call_observers`: every client's

    @classmethod
    def like(cls, client: Any, credentials: Any, **options: Any) -> DynamoClient:
        """Reaching what a boto3 DynamoDB client reaches (its endpoint and region), with its session's credentials."""
        return cls(client.meta.endpoint_url, client.meta.region_name, credentials, **options)

    # -- the boto3 client's methods -------------------------------------------------------------------
    def get_item(self, **params: Any) -> dict[str, Any]:
        return self.call("GetItem", params)

    def put_item(self, **params: Any) -> dict[str, Any]:
        return self.call("PutItem", params)

    def update_item(self, **params: Any) -> dict[str, Any]:
        return self.call("UpdateItem", params)

    def delete_item(self, **params: Any) -> dict[str, Any]:
        return self.call("DeleteItem", params)

    def query(self, **params: Any) -> dict[str, Any]:
        return self.call("Query", params)

    def scan(self, **params: Any) -> dict[str, Any]:
        return self.call("Scan", params)

    def batch_get_item(self, **params: Any) -> dict[str, Any]:
        return self.call("BatchGetItem", params)

    def batch_write_item(self, **params: Any) -> dict[str, Any]:
        return self.call("BatchWriteItem", params)

    def transact_write_items(self, **params: Any) -> dict[str, Any]:
        return self.call("TransactWriteItems", params)

    # -- one call ---------------------------------------------------------------------------------------
    def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        name = f"dynamodb.{operation}"
        for observe in (*call_observers, *self.observers):
            observe(name)
        body = json.dumps(params, separators=(",", ":")).encode()
        attempt = 1
        while True:
            try:
                return self._attempt(operation, body)
            except _Retry as retry:
                if attempt >= self._max_attempts:
                    raise retry.error from None
                self._sleep(self._rand() * min(MAX_BACKOFF_S, 2.0 ** (attempt - 1)))
                attempt += 1

    def _headers(self, operation: str, body: bytes) -> dict[str, str]:
        if self._credentials is None:
            raise NoCredentialsError()
        request = AWSRequest(
            method="POST",
            url=self._url,
            data=body,
            headers={
                "Content-Type": CONTENT_TYPE,
                "X-Amz-Target": TARGET_PREFIX + operation,
                "User-Agent": USER_AGENT,
                "Accept-Encoding": "identity",
            },
        )
        SigV4Auth(self._credentials.get_frozen_credentials(), "dynamodb", self._region).add_auth(request)
        return dict(request.headers.items())

    def _attempt(self, operation: str, body: bytes) -> dict[str, Any]:
        headers = self._headers(operation, body)
        try:
            response = self._http.request(
                "POST", self._url, body=body, headers=headers, timeout=self._timeout, retries=False
            )
        except urllib3.exceptions.NewConnectionError as exc:  # refused (urllib3 makes it a kind of connect timeout)
            raise _Retry(EndpointConnectionError(endpoint_url=self._url, error=exc)) from exc
        except urllib3.exceptions.ConnectTimeoutError as exc:
            raise _Retry(ConnectTimeoutError(endpoint_url=self._url, error=exc)) from exc
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
            raise _Retry(ReadTimeoutError(endpoint_url=self._url, error=exc)) from exc
        except urllib3.exceptions.HTTPError as exc:  # refused, reset, closed mid-answer
            raise _Retry(EndpointConnectionError(endpoint_url=self._url, error=exc)) from exc
        data = response.data
        crc = response.headers.get("x-amz-crc32")
        if crc is not None and zlib.crc32(data) != int(crc):
            # A body damaged on the way: botocore retries it, and so does this client.
            error = ClientError(
                {"Error": {"Code": "Crc32Mismatch", "Message": "response body CRC32 mismatch"}}, operation
            )
            raise _Retry(error)
        try:
            parsed: dict[str, Any] = json.loads(data) if data else {}
        except ValueError:
            parsed = {}
        if response.status < 300:
            return parsed
        error = self._error(operation, response.status, parsed, response.headers)
        code = error.response["Error"]["Code"]
        if code in RETRY_CODES or response.status in RETRY_STATUSES:
            raise _Retry(error)
        raise error

    @staticmethod
    def _error(operation: str, status: int, parsed: dict[str, Any], headers: Any) -> ClientError:
        """As botocore builds it: the code after the `#` of `__type` and the message under `Error`, and the body's
        fields at the top of the response, where botocore puts an error's modelled fields (`Item`,
        `CancellationReasons`)."""
        code = str(parsed.get("__type") or headers.get("x-amzn-errortype") or status).rpartition("#")[2]
        code = code.split(":", 1)[0]
        message = str(parsed.get("message") or parsed.get("Message") or "")
        fields = {k: v for k, v in parsed.items() if k != "__type"}
        metadata = {"HTTPStatusCode": status, "RequestId": headers.get("x-amzn-requestid", "")}
        return ClientError(
            {**fields, "Error": {"Code": code, "Message": message}, "ResponseMetadata": metadata}, operation
        )
