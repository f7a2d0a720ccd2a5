"""Kept-alive HTTP/1.1 connections to one origin: the transport of the clients on a warm dispatch's path
(DynamoDB's JSON API, GitHub's REST API).

Each such call is one small request and one small answer, and the CPU around them was most of the call's: a
pool manager's layers above `http.client` (URL parsing, header containers, timeout objects, response wrappers)
were a third of it, and `http.client` spent most of the rest building the request a header at a time, sending
headers and body in two writes, and reading the answer's header block through the `email` package. So
`http.client` only makes the connection here (the TCP connect, a proxy's `CONNECT` tunnel, the TLS handshake
with the hostname checked); the exchange is written and read by `Connections` itself: the request in one
write, the status line, header block and body (fixed length, chunked, or until the connection closes) read
from one buffered reader kept with the connection. Proxies (HTTP(S)_PROXY and NO_PROXY, with credentials), the
CA bundle to verify against, and connect and read timeouts are kept. Failures are raised as `TransportError`s
that say whether the request may have reached the server.
"""

from __future__ import annotations

import base64
import http.client
import re
import select
import socket
import ssl
import threading
import urllib.request
from typing import Any
from urllib.parse import unquote, urlsplit

MAX_LINE = 65536  # http.client's bound on a status or header line
MAX_HEADERS = 100  # and on the header lines of one answer


class TransportError(Exception):
    """The exchange did not complete. `maybe_sent`: the request may have reached the server (and been acted on)."""

    maybe_sent = True

    def __init__(self, url: str, error: BaseException) -> None:
        super().__init__(f"{type(self).__name__} on {url}: {error}")
        self.url = url
        self.error = error


class ConnectTimeout(TransportError):
    """No connection within the connect timeout: nothing was sent."""

    maybe_sent = False


class ConnectFailed(TransportError):
    """Refused, unreachable, or a proxy tunnel or certificate refused: nothing was sent."""

    maybe_sent = False


class ReadTimeout(TransportError):
    """The request went out and no answer came within the read timeout."""


class ExchangeFailed(TransportError):
    """The connection was reset or closed mid-exchange, or the answer was not HTTP as it should be."""


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTPS_PROXY / HTTP_PROXY unless NO_PROXY covers its host)."""
    parts = urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


class Connections:
    """Up to `IDLE_KEPT` idle connections to the origin of `url` (scheme, host, port), one per thread calling at
    once. An idle connection the server has closed is noticed before it is used, so no request is lost to it."""

    IDLE_KEPT = 16

    def __init__(
        self,
        url: str,
        *,
        proxy: str | None,
        connect_timeout_s: float,
        read_timeout_s: float,
        cafile: str | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in {"https", "http"} or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._scheme, self._host = parts.scheme, parts.hostname
        default_port = {"https": 443, "http": 80}[parts.scheme]
        self._port = parts.port or default_port
        self._origin = f"{parts.scheme}://{parts.netloc}"
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"  # an IPv6 address
        # The Host header's value (the port only when it is not the scheme's), for a client that signs it.
        self.host = host if parts.port in (None, default_port) else f"{host}:{parts.port}"
        self._connect_timeout_s, self._read_timeout_s = connect_timeout_s, read_timeout_s
        # The CA bundle given (a client's own setting, such as AWS_CA_BUNDLE), else the system's.
        self._context = ssl.create_default_context(cafile=cafile) if parts.scheme == "https" else None
        self._proxy: tuple[str, int] | None = None
        self._proxy_headers: dict[str, str] = {}
        if proxy is not None:
            proxy_parts = urlsplit(proxy if "//" in proxy else f"http://{proxy}")
            self._proxy = (proxy_parts.hostname or "", proxy_parts.port or 80)
            if proxy_parts.username is not None:
                userinfo = f"{unquote(proxy_parts.username)}:{unquote(proxy_parts.password or '')}"
                self._proxy_headers["Proxy-Authorization"] = "Basic " + base64.b64encode(userinfo.encode()).decode()
        # A plain-HTTP proxy is sent the whole URL and the proxy's credentials; HTTPS goes through a tunnel.
        self._through_proxy = self._proxy is not None and parts.scheme == "http"
        self._idle: list[_Link] = []
        self._lock = threading.Lock()

    def request(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes, dict[str, str]]:
        """One request to `target` (a path and query on the origin) and its whole answer: (status, body, headers
        by lowercase name, a repeated header's values joined with ", ")."""
        if self._through_proxy:
            target, headers = self._origin + target, headers | self._proxy_headers
        message = _request_bytes(method, target, self.host, headers, body)
        link = self._take()
        try:
            link.sock.sendall(message)
            status, data, answer, will_close = _answer(link.rfile, method)
        except TimeoutError as exc:
            link.close()
            raise ReadTimeout(self._origin, exc) from exc
        except (OSError, http.client.HTTPException) as exc:  # reset, closed mid-answer, a short or garbled answer
            link.close()
            raise ExchangeFailed(self._origin, exc) from exc
        if will_close:
            link.close()
        else:
            self._give(link)
        return status, data, answer

    def _take(self) -> _Link:
        while True:
            with self._lock:
                link = self._idle.pop() if self._idle else None
            if link is None:
                return self._connect()
            if not link.dropped():
                return link
            link.close()  # the server closed it while idle: take another

    def _give(self, link: _Link) -> None:
        with self._lock:
            if len(self._idle) < self.IDLE_KEPT:
                self._idle.append(link)
                return
        link.close()

    def _connect(self) -> _Link:
        host, port = self._proxy or (self._host, self._port)
        conn: http.client.HTTPConnection
        if self._context is not None:
            conn = http.client.HTTPSConnection(host, port, timeout=self._connect_timeout_s, context=self._context)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self._connect_timeout_s)
        if self._proxy is not None and self._scheme == "https":
            conn.set_tunnel(self._host, self._port, headers=self._proxy_headers)
        try:
            conn.connect()  # and, for HTTPS, the tunnel and the TLS handshake: all within the connect timeout
        except TimeoutError as exc:
            conn.close()
            raise ConnectTimeout(self._origin, exc) from exc
        except (OSError, http.client.HTTPException) as exc:  # refused, unreachable, a tunnel or certificate refused
            conn.close()
            raise ConnectFailed(self._origin, exc) from exc
        sock = conn.sock
        assert sock is not None
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self._read_timeout_s)
        return _Link(sock)


class _Link:
    """One open connection and the buffered reader its answers are read from (kept with it: an answer that came
    in with the one before it is not lost)."""

    __slots__ = ("rfile", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rfile = sock.makefile("rb")

    def dropped(self) -> bool:
        """Something to read on an idle connection: the server closed it (or it is out of step): not reusable."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        try:
            return bool(poller.poll(0))
        except OSError:
            return True

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()


_BAD_TARGET = re.compile(r"[\x00-\x20\x7f]")
_BAD_VALUE = re.compile(r"[\r\n\x00]")


def _request_bytes(method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request line, headers and body, to be sent in one write: `Host` (unless `headers` name it, as a signed
    request does), `Accept-Encoding: identity` (unless they ask for another) and the body's length added. A target
    or header that would split the request (a space or control character in the target, a line break in a header)
    is refused."""
    if _BAD_TARGET.search(target):
        raise ValueError(f"a request target may not hold spaces or control characters: {target!r}")
    lines = [f"{method} {target} HTTP/1.1"]
    named = set()
    for name, value in headers.items():
        if _BAD_VALUE.search(name) or _BAD_VALUE.search(value):
            raise ValueError(f"header {name!r}: a name or value may not hold a line break")
        lines.append(f"{name}: {value}")
        named.add(name.lower())
    if "host" not in named:
        lines.append(f"Host: {host}")
    if "accept-encoding" not in named:
        lines.append("Accept-Encoding: identity")  # the body as it is (no compression asked for)
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    lines += ["", ""]
    return "\r\n".join(lines).encode("latin-1") + (body or b"")


def _answer(rfile: Any, method: str) -> tuple[int, bytes, dict[str, str], bool]:
    """(status, body, headers, whether the connection closes after it) of the next answer on `rfile`."""
    while True:  # an interim 1xx answer (100 Continue) is skipped, its headers with it
        version, status = _status_line(rfile)
        headers = _header_block(rfile)
        if status >= 200:
            break
    connection = headers.get("connection", "").lower()
    will_close = "close" in connection if version != "HTTP/1.0" else "keep-alive" not in connection
    if status in (204, 304) or status < 200 or method == "HEAD":
        return status, b"", headers, will_close
    if headers.get("transfer-encoding", "").strip().lower() == "chunked":
        return status, _chunked(rfile), headers, will_close
    length = headers.get("content-length", "").strip()
    if length.isdigit():
        data = rfile.read(int(length))
        if len(data) < int(length):
            raise http.client.IncompleteRead(data, int(length) - len(data))
        return status, data, headers, will_close
    return status, rfile.read(), headers, True  # a body that ends when the connection does


def _line(rfile: Any, what: str) -> bytes:
    line: bytes = rfile.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise http.client.LineTooLong(what)
    return line


def _status_line(rfile: Any) -> tuple[str, int]:
    line = _line(rfile, "status line")
    if not line:
        raise http.client.RemoteDisconnected("the server closed the connection without an answer")
    version, _, rest = line.decode("iso-8859-1").partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit() or rest[3:4] not in ("", " ", "\r", "\n"):
        raise http.client.BadStatusLine(repr(line))
    return version, int(code)


def _header_block(rfile: Any) -> dict[str, str]:
    headers: dict[str, str] = {}
    name = ""
    for _ in range(MAX_HEADERS + 1):
        line = _line(rfile, "header line")
        if line in (b"\r\n", b"\n"):
            return headers
        if not line.endswith(b"\n"):  # the stream ended, at a line's start or inside it
            raise http.client.RemoteDisconnected("the server closed the connection inside the header block")
        text = line.decode("iso-8859-1").rstrip("\r\n")
        if text[:1] in (" ", "\t") and name:  # an obsolete folded continuation of the line before
            headers[name] += " " + text.strip()
            continue
        field, colon, value = text.partition(":")
        name = field.lower()
        if not colon or not name or name != name.strip():
            raise http.client.HTTPException(f"malformed header line {line!r}")
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    raise http.client.HTTPException(f"more than {MAX_HEADERS} header lines")


def _chunked(rfile: Any) -> bytes:
    """A chunked body: each chunk's size in hex (extensions after a `;` ignored), its bytes and a line end, then
    a zero-size chunk and the trailer lines up to an empty one."""
    parts: list[bytes] = []
    while True:
        line = _line(rfile, "chunk size")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise http.client.HTTPException(f"bad chunk size line {line!r}") from None
        if size < 0:
            raise http.client.HTTPException(f"bad chunk size line {line!r}")
        if size == 0:
            break
        chunk = rfile.read(size)
        if len(chunk) < size:
            raise http.client.IncompleteRead(b"".join(parts) + chunk, size - len(chunk))
        parts.append(chunk)
        if _line(rfile, "chunk end") not in (b"\r\n", b"\n"):
            raise http.client.HTTPException("a chunk longer than its size")
    while _line(rfile, "trailer") not in (b"\r\n", b"\n", b""):
        pass
    return b"".join(parts)
