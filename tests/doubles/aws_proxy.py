"""A proxy in front of moto's server: the requests a client sent, as they came over the wire, and the faults AWS
documents (throttling, 5xx, a damaged body, a stall), played before the request reaches moto.

moto answers every request it is given; what a client does when AWS throttles it, fails or stalls cannot be
seen against moto alone. This proxy keeps each request whole (method, path, headers, body) and forwards it to
moto (asked directly, or as a forward proxy with the whole URL on the request line), unless a scripted fault
answers first in the shape DynamoDB uses for errors
(`{"__type": "com.amazonaws.dynamodb.v20120810#<Code>", "message": ...}`).

`verify_sigv4` checks a recorded request's Signature Version 4 from its own bytes, written from AWS's
documentation of the algorithm (canonical request, string to sign, the derived key), not from botocore.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, urlsplit

DYNAMODB_ERROR_PREFIX = "com.amazonaws.dynamodb.v20120810#"


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: list[tuple[str, str]]  # as sent, in order, with their own spelling
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


@dataclass(frozen=True)
class Fault:
    """`status` with a DynamoDB error `code`; or `corrupt`: moto's answer with its CRC32 header made wrong; or
    `stall_s`: no answer for that long (a read timeout on the client's side)."""

    status: int = 0
    code: str = ""
    corrupt: bool = False
    stall_s: float = 0.0


class AwsProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.seen: list[Seen] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with proxy._lock:
                    proxy.seen.append(Seen(self.command, self.path, list(self.headers.items()), body))
                    fault = proxy.faults.pop(0) if proxy.faults else None
                if fault is not None and fault.stall_s:
                    time.sleep(fault.stall_s)
                    self.close_connection = True
                    return
                if fault is not None and fault.status:
                    reply = (
                        f'{{"__type":"{DYNAMODB_ERROR_PREFIX}{fault.code}","message":"injected {fault.code}"}}'.encode()
                    )
                    self._send(fault.status, [("content-type", "application/x-amz-json-1.0")], reply)
                    return
                status, headers, reply = proxy._forward(self.command, self.path, list(self.headers.items()), body)
                if fault is not None and fault.corrupt:
                    headers = [(k, v) for k, v in headers if k.lower() != "x-amz-crc32"] + [("x-amz-crc32", "1")]
                self._send(status, headers, reply)

            def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in {"content-length", "connection", "transfer-encoding", "server", "date"}:
                        self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        if path.startswith("http://"):  # asked as a forward proxy is: the whole URL on the request line
            asked = urlsplit(path)
            path = asked.path + (f"?{asked.query}" if asked.query else "")
        conn = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=dict(headers))
            response = conn.getresponse()
            return response.status, list(response.getheaders()), response.read()
        finally:
            conn.close()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def verify_sigv4(seen: Seen, secret_key: str, *, service: str, region: str) -> bool:
    """True when the request's Authorization header is the AWS Signature Version 4 of exactly what was sent.

    From AWS's documentation: the canonical request is the method, the URI-encoded path, the sorted query, each
    signed header as `lowercase-name:trimmed-value`, the list of signed headers, and the hex SHA-256 of the body;
    the string to sign is `AWS4-HMAC-SHA256`, the X-Amz-Date, the scope and the hex SHA-256 of the canonical
    request; the key is HMAC-SHA256 chained over the date, region, service and `aws4_request`, starting from
    `AWS4` + the secret key.
    """
    auth = seen.header("authorization") or ""
    match = re.fullmatch(
        r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
        r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})",
        auth,
    )
    if match is None:
        return False
    _, day, scope_region, scope_service, signed, signature = match.groups()
    if (scope_region, scope_service) != (region, service):
        return False
    names = signed.split(";")
    if "host" not in names or "x-amz-date" not in names:
        return False
    values: dict[str, list[str]] = {}
    for name, value in seen.headers:
        values.setdefault(name.lower(), []).append(" ".join(value.split()))
    if any(name not in values for name in names):
        return False
    amz_date = values["x-amz-date"][0]
    if not amz_date.startswith(day):
        return False
    path, _, query = seen.path.partition("?")
    canonical_query = "&".join(sorted(query.split("&"))) if query else ""
    canonical = "\n".join(
        [
            seen.method,
            quote(path, safe="/~"),
            canonical_query,
            "".join(f"{name}:{','.join(values[name])}\n" for name in names),
            signed,
            hashlib.sha256(seen.body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), service), "aws4_request")
    return hmac.compare_digest(hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), signature)
