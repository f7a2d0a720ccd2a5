"""The edge: API Gateway (HTTP API, payload v2) requests in, JSON responses out; the one error->status map."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from crcr.domain.errors import (
    AllowlistError,
    BadRequest,
    BadSignature,
    Conflict,
    CrcrError,
    Forbidden,
    PayloadTooLarge,
    RetryLater,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)

STATUS: dict[type[CrcrError], int] = {
    BadSignature: 401,
    Unauthorized: 401,
    Forbidden: 403,
    BadRequest: 400,
    PayloadTooLarge: 413,
    Conflict: 409,
    TooManyRequests: 429,
    Unavailable: 503,
    AllowlistError: 400,
}


def json_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json", **(headers or {})},
        "body": json.dumps(body, separators=(",", ":"), allow_nan=False),
    }


def error_response(exc: CrcrError) -> dict[str, Any]:
    status = next((code for kind, code in STATUS.items() if isinstance(exc, kind)), 400)
    body: dict[str, Any] = {"error": exc.reason, "message": exc.message}
    if exc.field:
        body["field"] = exc.field
    if exc.limit:
        body["limit"] = exc.limit
    headers = {}
    if isinstance(exc, RetryLater):
        headers["retry-after"] = str(exc.retry_after_s)
    return json_response(status, body, headers)


def internal_error() -> dict[str, Any]:
    return json_response(500, {"error": "internal", "message": "the relay could not process the request"})


def raw_body(event: dict[str, Any]) -> bytes:
    """The exact bytes GitHub signed. Decoded here: Powertools' decoded_body fails on non-UTF-8 bytes."""
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest("body is not valid base64", field="body") from exc
    return body.encode("utf-8", "surrogateescape") if isinstance(body, str) else bytes(body)


def lower_headers(event: dict[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
