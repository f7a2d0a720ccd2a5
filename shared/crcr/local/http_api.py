"""API Gateway's HTTP API in front of `crcr local`'s functions: its route matching, the proxy event (payload format
2.0) a route's function is invoked with, and the answer mapped back from what the function returns."""

from __future__ import annotations

import base64
import uuid
from typing import Any, TypeVar

Answer = tuple[int, bytes, dict[str, str]]
JSON = {"content-type": "application/json"}
NOT_FOUND: Answer = (404, b'{"message":"Not Found"}', JSON)  # an HTTP API's answer where no route matches
Target = TypeVar("Target")


def match_route(
    routes: dict[tuple[str, str], Target], method: str, path: str
) -> tuple[Target, str, dict[str, str]] | None:
    """API Gateway's matching: an exact route first (HTTP APIs route `/x/` to `GET /x` as well), then a
    greedy `{name+}` one (longest prefix; it never matches an empty rest)."""
    for exact in (path, path.rstrip("/")):
        if (method, exact) in routes:
            return routes[(method, exact)], exact, {}
    best: tuple[Target, str, dict[str, str]] | None = None
    for (m, route), target in routes.items():
        prefix, brace, rest = route.partition("{")
        if m != method or not brace or not rest.endswith("+}") or not path.startswith(prefix):
            continue
        value = path[len(prefix) :]
        if value and (best is None or len(prefix) > len(best[1].partition("{")[0])):
            best = (target, route, {rest[:-2]: value})
    return best


def proxy_event(
    method: str, path: str, route_key: str, params: dict[str, str], query: str, headers: dict[str, str], body: bytes
) -> dict[str, Any]:
    return {
        "version": "2.0",
        "routeKey": f"{method} {route_key}",
        "rawPath": path,
        "pathParameters": params,
        "rawQueryString": query,
        "headers": {k.lower(): v for k, v in headers.items()},
        "requestContext": {
            "http": {"method": method, "path": path, "sourceIp": "127.0.0.1"},
            "requestId": str(uuid.uuid4()),
            "stage": "$default",
        },
        # API Gateway base64-encodes bodies it cannot pass as text; do the same for every body.
        "body": base64.b64encode(body).decode(),
        "isBase64Encoded": True,
    }


def proxy_answer(result: dict[str, Any]) -> Answer:
    out = result.get("body", "")
    data = base64.b64decode(out) if result.get("isBase64Encoded") else str(out).encode()
    return int(result.get("statusCode", 200)), data, dict(result.get("headers") or {})
