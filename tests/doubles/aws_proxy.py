"""A proxy in front of moto's server (or another HTTP API, such as the GitHub double): the requests a client sent,
as they came over the wire, and the faults AWS documents (throttling, 5xx, a damaged body, a stall), played before
the request reaches moto.

moto answers every request it is given; what a client does when AWS throttles it, fails or stalls cannot be
seen against moto alone. This proxy keeps each request whole (method, path, headers, body) and forwards it to
moto (asked directly, or as a forward proxy with the whole URL on the request line), unless a scripted fault
answers first in the shape DynamoDB uses for errors
(`{"__type": "com.amazonaws.dynamodb.v20120810#<Code>", "message": ...}`).

With `tls` (a certificate and key file) it answers over HTTPS, as AWS's endpoints do; as a forward proxy it also
opens `CONNECT` tunnels to wherever it is asked (`tunnels` records each), as an HTTPS proxy does. `make_tls`
writes a certificate authority and a certificate it signed for 127.0.0.1 and localhost.

`verify_sigv4` checks a recorded request's Signature Version 4 from its own bytes, written from AWS's
documentation of the algorithm (canonical request, string to sign, the derived key), not from botocore.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import ipaddress
import re
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

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
    """`status` with a DynamoDB error `code`; or `corrupt`: moto's answer with its CRC32 header made wrong (`crc32`,
    a number or not); or `body`: moto's status with this body instead, and no CRC32 header (as a middlebox that
    rewrote it would send); or `stall_s`: no answer for that long (a read timeout on the client's side)."""

    status: int = 0
    code: str = ""
    corrupt: bool = False
    crc32: str = "1"
    body: bytes | None = None
    stall_s: float = 0.0
    close_after: bool = False


class AwsProxy:
    def __init__(self, upstream: str, tls: tuple[Path, Path] | None = None) -> None:
        self.upstream = urlsplit(upstream)
        self.seen: list[Seen] = []
        self.tunnels: list[Seen] = []  # CONNECT requests, with their headers
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
                    headers = [(k, v) for k, v in headers if k.lower() != "x-amz-crc32"] + [
                        ("x-amz-crc32", fault.crc32)
                    ]
                if fault is not None and fault.body is not None:
                    headers, reply = [(k, v) for k, v in headers if k.lower() != "x-amz-crc32"], fault.body
                self._send(status, headers, reply)
                if fault is not None and fault.close_after:
                    self.wfile.flush()
                    self.close_connection = True

            do_GET = do_PATCH = do_POST  # as a forward proxy for a REST API (GitHub's), every method alike

            def do_CONNECT(self) -> None:
                with proxy._lock:
                    proxy.tunnels.append(Seen(self.command, self.path, list(self.headers.items()), b""))
                host, _, port = self.path.rpartition(":")
                try:
                    far = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
                except OSError:
                    self.send_error(502)
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                near = self.connection
                try:
                    while True:
                        readable, _, _ = select.select([near, far], [], [], 10)
                        if not readable:
                            break
                        for sock in readable:
                            data = sock.recv(65536)
                            if not data:
                                return
                            (far if sock is near else near).sendall(data)
                except OSError:
                    return
                finally:
                    far.close()
                    self.close_connection = True

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
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        if path.startswith("http://"):  # asked as a forward proxy is: the whole URL on the request line
            asked = urlsplit(path)
            path = asked.path + (f"?{asked.query}" if asked.query else "")
        conn = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=30)
        hop_by_hop = {"proxy-authorization", "proxy-connection", "connection", "keep-alive"}  # the proxy's alone
        try:
            conn.request(method, path, body=body, headers={k: v for k, v in headers if k.lower() not in hop_by_hop})
            response = conn.getresponse()
            return response.status, list(response.getheaders()), response.read()
        finally:
            conn.close()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def make_tls(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) files: a CA, and a certificate it signed for 127.0.0.1 and
    localhost, both valid for a day."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crcr test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (folder / "ca.pem", folder / "server.pem", folder / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


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
