"""AWS's JSON protocol (DynamoDB's API, and SQS's since botocore speaks JSON to it) over kept-alive connections,
signed with Signature Version 4: the AWS calls of every function, without botocore's per-call machinery.

Each function's warm work is a few AWS calls, and botocore spent about half of each call's CPU around the
request (event hooks, parameter validation, serialisation, parsing, a general-purpose signer). These APIs are
JSON in, JSON out, in the very shapes the boto3 client takes and returns, so this client sends the request as
given and hands back the answer as parsed, signing it with a key derived once a day (SigV4 as AWS documents it;
tests check it against botocore's signer and verify every request from its wire bytes). What botocore does that
matters is kept: its credential chain (refreshed credentials included) and the endpoint and region it resolves
(AWS_ENDPOINT_URL included), its standard retry mode (3 attempts, throttling and transient errors, full-jitter
backoff), the body's CRC32 check where the service sends one, and its exceptions (`ClientError` with the error
code and the error's fields, such as the `Item` that refused a conditional write; connection errors as botocore
raises them). Not kept, as nothing here uses them: `ResponseMetadata` on a success, base64 for binary values,
and botocore's correction of a skewed clock.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import re
import time
import zlib
from collections.abc import Callable
from typing import Any, Self
from urllib.parse import urlsplit

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.httpsession import get_cert_path

from crcr.adapters.http_connections import (
    Connections,
    ConnectTimeout,
    ReadTimeout,
    TransportError,
    proxy_for,
)

CONTENT_TYPE = "application/x-amz-json-1.0"
USER_AGENT = "crcr-relay/0.1 aws-json"
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

# Instrumentation: each is called with "<service>.<Operation>" once per call (not per attempt), as botocore's
# "before-call" event is (the bench counts AWS calls through both).
call_observers: list[Callable[[str], None]] = []


class _Retry(Exception):
    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class JsonApiClient:
    """One AWS service's JSON API: `call(operation, params)` takes and returns what the boto3 client's method would."""

    service = ""  # the signing name, as in the endpoint's credential scope ("dynamodb", "sqs")
    target_prefix = ""  # X-Amz-Target's, before the operation ("DynamoDB_20120810.", "AmazonSQS.")

    def __init__(
        self,
        endpoint_url: str,
        region: str,
        credentials: Any,
        *,
        connect_timeout_s: float = 2.0,
        read_timeout_s: float = 10.0,
        max_attempts: int = 3,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        parts = urlsplit(endpoint_url)
        if parts.scheme not in {"https", "http"} or not parts.hostname:
            raise ValueError(f"not an http(s) endpoint: {endpoint_url!r}")
        self._path = parts.path.rstrip("/") + "/"
        if not re.fullmatch(r"[A-Za-z0-9/._~-]+", self._path):
            raise ValueError(f"an endpoint path needs URI encoding, which this client does not sign: {endpoint_url!r}")
        self._url = f"{parts.scheme}://{parts.netloc}{self._path}"
        self._region = region
        self._credentials = credentials
        self._keys: dict[tuple[str, str], bytes] = {}  # the signing key of a (secret, day): it changes once a day
        self._max_attempts = max_attempts
        self._connections = Connections(
            self._url,
            proxy=proxy_for(self._url),  # HTTPS_PROXY / HTTP_PROXY and NO_PROXY, as botocore reads them
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
            # The CA bundle botocore verifies with: AWS_CA_BUNDLE, else its own default (certifi's).
            cafile=(os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True)) if parts.scheme == "https" else None,
        )
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self.observers: list[Callable[[str], None]] = []  # this client's calls only; `call_observers`: every client's

    @classmethod
    def like(cls, client: Any, credentials: Any, **options: Any) -> Self:
        """Reaching what a boto3 client of the service reaches (its endpoint and region), with its session's
        credentials."""
        return cls(client.meta.endpoint_url, client.meta.region_name, credentials, **options)

    # -- one call ---------------------------------------------------------------------------------------
    def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        name = f"{self.service}.{operation}"
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

    def _signing_key(self, secret: str, day: str) -> bytes:
        key = self._keys.get((secret, day))
        if key is None:
            key = hmac.new(f"AWS4{secret}".encode(), day.encode(), hashlib.sha256).digest()
            for part in (self._region, self.service, "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._keys = {(secret, day): key}  # yesterday's key, or a rotated secret's, is not needed again
        return key

    def _headers(self, operation: str, body: bytes) -> dict[str, str]:
        """The request's headers with its Signature Version 4 `Authorization`: the canonical request (method, path,
        no query, the signed headers lowercased and sorted, the body's SHA-256), the string to sign over the day's
        scope, and an HMAC with the day's derived key."""
        if self._credentials is None:
            raise NoCredentialsError()
        creds = self._credentials.get_frozen_credentials()
        if not creds.access_key or not creds.secret_key:
            raise NoCredentialsError()
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._clock()))
        day = amz_date[:8]
        signed = {
            "content-type": CONTENT_TYPE,
            "host": self._connections.host,
            "x-amz-date": amz_date,
            "x-amz-target": self.target_prefix + operation,
        }
        if creds.token:
            signed["x-amz-security-token"] = creds.token
        names = sorted(signed)
        signed_names = ";".join(names)
        canonical = "\n".join(
            [
                "POST",
                self._path,
                "",
                "".join(f"{name}:{signed[name]}\n" for name in names),
                signed_names,
                hashlib.sha256(body).hexdigest(),
            ]
        )
        scope = f"{day}/{self._region}/{self.service}/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(creds.secret_key, day), to_sign.encode(), hashlib.sha256).hexdigest()
        return signed | {
            "authorization": (
                f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
                f"SignedHeaders={signed_names}, Signature={signature}"
            ),
            "user-agent": USER_AGENT,
            "accept-encoding": "identity",
        }

    def _attempt(self, operation: str, body: bytes) -> dict[str, Any]:
        headers = self._headers(operation, body)
        try:
            status, data, answer_headers = self._connections.request("POST", self._path, body, headers)
        except ConnectTimeout as exc:
            raise _Retry(ConnectTimeoutError(endpoint_url=self._url, error=exc.error)) from exc
        except ReadTimeout as exc:
            raise _Retry(ReadTimeoutError(endpoint_url=self._url, error=exc.error)) from exc
        except TransportError as exc:  # refused, unreachable, reset, closed mid-answer, a garbled answer
            raise _Retry(EndpointConnectionError(endpoint_url=self._url, error=exc.error)) from exc
        crc = answer_headers.get("x-amz-crc32")
        if crc is not None and str(zlib.crc32(data)) != crc.strip():
            # A body damaged on the way (or its header): botocore retries it, and so does this client.
            error = ClientError(
                {"Error": {"Code": "Crc32Mismatch", "Message": "response body CRC32 mismatch"}}, operation
            )
            raise _Retry(error)
        try:
            parsed: Any = json.loads(data) if data else {}
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            if status < 300:
                # An answer that is not the API's JSON object must not read as "no item": retried, then raised.
                error = ClientError(
                    {"Error": {"Code": "UnparsableResponse", "Message": "response body is not a JSON object"}},
                    operation,
                )
                raise _Retry(error)
            parsed = {}
        answer: dict[str, Any] = parsed
        if status < 300:
            return answer
        error = self._error(operation, status, answer, answer_headers)
        code = error.response["Error"]["Code"]
        if code in RETRY_CODES or status in RETRY_STATUSES:
            raise _Retry(error)
        raise error

    @staticmethod
    def _error(operation: str, status: int, parsed: dict[str, Any], headers: Any) -> ClientError:
        """As botocore builds it: the code after the `#` of `__type` (for a service that kept its query-protocol
        codes, as SQS did, the one `x-amzn-query-error` names) and the message under `Error`, and the body's
        fields at the top of the response, where botocore puts an error's modelled fields (`Item`,
        `CancellationReasons`)."""
        code = str(parsed.get("__type") or headers.get("x-amzn-errortype") or status).rpartition("#")[2]
        code = code.split(":", 1)[0]
        query_code = headers.get("x-amzn-query-error", "").split(";", 1)[0]
        code = query_code or code
        message = str(parsed.get("message") or parsed.get("Message") or "")
        fields = {k: v for k, v in parsed.items() if k != "__type"}
        metadata = {"HTTPStatusCode": status, "RequestId": headers.get("x-amzn-requestid", "")}
        return ClientError(
            {**fields, "Error": {"Code": code, "Message": message}, "ResponseMetadata": metadata}, operation
        )
