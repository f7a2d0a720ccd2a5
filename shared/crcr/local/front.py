"""crcr local's HTTP front end: API Gateway's HTTP API at the edge (framing, size limits, bursts) before `route`,
stdlib only, with the bounds docs/local-stack.md describes."""

from __future__ import annotations

import contextlib
import io
import json
import re
import socket
import socketserver
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

Route = Callable[[str, str, str, dict[str, str], bytes], tuple[int, bytes, dict[str, str]]]

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
# RFC 9112 §3: method SP request-target SP HTTP-version; §5.1: no whitespace before the colon, no obs-fold.
_REQUEST_LINE = re.compile(_TOKEN + rb" [^\s]+ HTTP/[1-9]\.[0-9]\r?\n")
_FIELD_LINE = re.compile(_TOKEN + rb":[^\r\n\x00]*\r?\n")
_DIGITS = re.compile(r"[0-9]+")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_MAX_HEAD_READ = 65536  # raw bytes of request line + fields read at most (http.server's own line limit)
_MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions
# API Gateway's own answers are `{"message": <reason>}`; the phrases as it spells them, whatever Python's version.
_MESSAGES = {
    400: "Bad Request",
    404: "Not Found",
    408: "Request Timeout",
    413: "Request Entity Too Large",
    414: "Request-URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


@dataclass(frozen=True)
class Limits:
    # API Gateway HTTP API quotas: payload 10 MB (it refuses 10,485,760 + 1 bytes), request line and header
    # values 10,240 bytes together.
    max_body: int = 10 * 1024 * 1024
    max_head: int = 10240
    backlog: int = 1024  # listen(2) queue: a burst waits for a worker instead of being reset
    max_connections: int = 256  # threads; past this, connections wait in the backlog
    # Request bodies held in memory at once, across connections: each request holds what it has received so far
    # (never what it declares), and a request that finds no room within `budget_wait_s` is answered 503.
    body_budget: int = 64 * 1024 * 1024
    budget_wait_s: float = 1.0
    idle_s: float = 60.0  # a keep-alive connection with no request in flight
    # With every worker taken, a connection idle this long (no request in flight, or none sent yet since it
    # connected) is closed for a waiting one: idle sockets cannot hold the workers from requests.
    evict_idle_after_s: float = 1.0
    request_s: float = 30.0  # the whole request, first byte to last, however slowly it trickles in
    head_s: float = 10.0  # its request line and fields, first byte to blank line (a slowloris sends them forever)
    # With every worker taken, a request arriving slower than this many bytes a second (after evict_idle_after_s)
    # is cut off for a waiting connection, as an idle one is: a byte every few seconds cannot hold a worker.
    slow_rate_bps: float = 1024.0
    write_s: float = 30.0  # the whole response, to a client that stops reading
    linger_s: float = 2.0  # after a refusal, drain what the client still sends so it reads the answer, not a reset
    linger_bytes: int = 11 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.body_budget < self.max_body:
            raise ValueError("body_budget must hold at least one body of max_body bytes")


class _Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Gone(Exception):
    """The client closed the connection mid-request: there is no one to answer."""


class _Budget:
    """Bytes of request bodies held at once: a flood of large bodies waits (or gets 503), it cannot exhaust memory."""

    def __init__(self, total: int) -> None:
        self._free = total
        self._cond = threading.Condition()

    @property
    def free(self) -> int:
        with self._cond:
            return self._free

    def take(self, n: int, deadline: float) -> bool:
        with self._cond:
            if not self._cond.wait_for(lambda: self._free >= n, max(0.0, deadline - time.monotonic())):
                return False
            self._free -= n
            return True

    def give(self, n: int) -> None:
        with self._cond:
            self._free += n
            self._cond.notify_all()


_PIECE = 64 * 1024  # a body is read, and its budget taken, this much at a time


class _DeadlineReader(io.RawIOBase):
    """The socket read against one deadline per request: a client that trickles a byte at a time still runs out."""

    def __init__(self, sock: socket.socket, front: FrontEnd) -> None:
        self.sock = sock
        self.front = front
        self.deadline = 0.0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request deadline passed")
        self.sock.settimeout(left)
        n = self.sock.recv_into(buffer)
        self.front.count(received=n, sock=self.sock)
        return n


class _Handler(BaseHTTPRequestHandler):
    """One connection: each request read as API Gateway reads it, then handed to the route."""

    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.1"  # a refusal before the version is read still gets a status line
    server: FrontEnd

    def setup(self) -> None:
        self.connection = self.request
        # headers and body go out separately: don't wait for delayed ACKs
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self.reader = _DeadlineReader(self.connection, self.server)
        self.buffered = io.BufferedReader(self.reader)
        self.rfile = self.buffered
        self.wfile = self.connection.makefile("wb")
        self.linger = False

    def log_message(self, format: str, *args: Any) -> None:
        return

    def handle_one_request(self) -> None:
        limits = self.server.limits
        self.close_connection = True
        self.command, self.requestline, self.request_version = "", "", self.default_request_version
        self.reader.deadline = time.monotonic() + limits.idle_s
        self.server.idle(self.connection, True)
        try:
            if not self.buffered.peek(1):
                return  # the client closed its idle connection (or the server did, for a waiting one)
        except OSError:  # an idle keep-alive connection times out (or resets) without a word, as servers do
            return
        finally:
            self.server.idle(self.connection, False)
        started = time.monotonic()
        self.reader.deadline = started + min(limits.request_s, limits.head_s)
        self._continue = False
        self.held = 0
        self.server.reading(self.connection, True)
        try:
            framing = self._read_head()
            if framing is None:
                return
            self.reader.deadline = started + limits.request_s
            chunked, length = framing
            if length > limits.max_body:
                raise _Refused(413)  # before reading a byte of it (and before any 100 Continue)
            if self._continue and (chunked or length):
                self.send_response_only(HTTPStatus.CONTINUE)
                self.end_headers()
                self.wfile.flush()
            body = self._read_chunked() if chunked else self._read_exact(length)
            self.server.reading(self.connection, False)  # read whole: the route's time is not the client's
            self._answer(body)
        except _Refused as refusal:
            self._refuse(refusal.status)
        except TimeoutError:
            self._refuse(408)
        except _Gone:
            self.close_connection = True
        finally:
            self.server.reading(self.connection, False)
            if self.held:
                self.server.budget.give(self.held)

    def _hold(self, n: int) -> None:
        """Room for `n` more body bytes in memory, or 503 once `budget_wait_s` (or the request's deadline) passes."""
        limits = self.server.limits
        if not self.server.budget.take(n, min(self.reader.deadline, time.monotonic() + limits.budget_wait_s)):
            raise _Refused(503)
        self.held += n

    def _read_exact(self, n: int) -> bytes:
        """`n` body bytes, a piece at a time, each piece's room taken before it is read."""
        parts = []
        while n > 0:
            piece = min(n, _PIECE)
            self._hold(piece)
            data = self.rfile.read(piece)
            if len(data) < piece:
                raise _Gone
            parts.append(data)
            n -= piece
        return b"".join(parts)

    def _read_head(self) -> tuple[bool, int] | None:
        """Request line and fields within API Gateway's quota, parsed by http.server; then the body's framing."""
        left = _MAX_HEAD_READ
        request_line = b""
        fields: list[bytes] = []
        while True:
            line = self.rfile.readline(left + 1)
            left -= len(line)
            if not line.endswith(b"\n"):
                if left < 0:
                    raise _Refused(431 if request_line else 414)
                raise _Gone
            if not request_line:
                if line in (b"\r\n", b"\n"):
                    continue  # RFC 9112 §2.2: empty lines before a request line are ignored
                if len(line.rstrip(b"\r\n")) > self.server.limits.max_head:
                    raise _Refused(414)
                if not _REQUEST_LINE.fullmatch(line):
                    raise _Refused(400)
                request_line = line
            elif line in (b"\r\n", b"\n"):
                break
            elif not _FIELD_LINE.fullmatch(line):
                raise _Refused(400)
            else:
                fields.append(line)
        # http.server's parser (version, `Connection`, path clean-up) reads the head from memory: it is all here.
        self.raw_requestline = request_line
        socket_file, self.rfile = self.rfile, io.BytesIO(b"".join(fields) + b"\r\n")
        try:
            parsed = self.parse_request()
        finally:
            self.rfile = socket_file
        if not parsed:  # already answered (400, 431, 505) and closing
            self.linger = True
            return None
        quota = len(request_line.rstrip(b"\r\n")) + sum(len(str(v)) for v in self.headers.values())
        if quota > self.server.limits.max_head:
            raise _Refused(431)
        return self._framing()

    def handle_expect_100(self) -> bool:
        self._continue = True  # answered once the framing and size are known to be acceptable
        return True

    def _framing(self) -> tuple[bool, int]:
        """(chunked, length) per RFC 9112 §6.3, refusing anything two parsers could read two ways."""
        codings = [c.strip().lower() for v in self.headers.get_all("transfer-encoding") or [] for c in v.split(",")]
        lengths = self.headers.get_all("content-length") or []
        if codings and lengths:
            raise _Refused(400)
        if codings:
            if self.request_version == "HTTP/1.0" or codings[-1] != "chunked" or "chunked" in codings[:-1]:
                raise _Refused(400)
            if len(codings) > 1:
                raise _Refused(501)  # a transfer coding we don't know (gzip, ...) under the chunking
            return True, 0
        if not lengths:
            return False, 0
        if len(lengths) > 1 or not _DIGITS.fullmatch(str(lengths[0]).strip()):
            raise _Refused(400)
        digits = str(lengths[0]).strip().lstrip("0") or "0"
        return False, int(digits) if len(digits) <= 18 else self.server.limits.max_body + 1

    def _read_chunked(self) -> bytes:
        """The decoded body; refused as soon as a chunk would take it past the limit, before that chunk is read."""
        limit = self.server.limits.max_body
        body = bytearray()
        while True:
            line = self.rfile.readline(_MAX_CHUNK_LINE + 1)
            if not line.endswith(b"\n"):
                if len(line) > _MAX_CHUNK_LINE:
                    raise _Refused(400)
                raise _Gone
            size_field = line.split(b";", 1)[0].strip()  # chunk extensions are ignored
            if not _HEX.fullmatch(size_field):
                raise _Refused(400)
            size_field = size_field.lstrip(b"0") or b"0"
            if len(size_field) > 15 or len(body) + int(size_field, 16) > limit:
                raise _Refused(413)
            size = int(size_field, 16)
            if size == 0:
                break
            body += self._read_exact(size)
            end = self.rfile.read(1)
            if end == b"\r":
                end = self.rfile.read(1)
            if end != b"\n":
                if end:
                    raise _Refused(400)
                raise _Gone
        left = _MAX_HEAD_READ  # trailer fields: read and dropped
        while True:
            line = self.rfile.readline(left + 1)
            left -= len(line)
            if not line.endswith(b"\n"):
                if left < 0:
                    raise _Refused(431)
                raise _Gone
            if line in (b"\r\n", b"\n"):
                return bytes(body)
            if not _FIELD_LINE.fullmatch(line):
                raise _Refused(400)

    def _answer(self, body: bytes) -> None:
        parts = urlsplit(self.path)
        try:
            status, out, headers = self.server.route(self.command, parts.path, parts.query, dict(self.headers), body)
        except Exception:
            traceback.print_exc()  # as Lambda logs it; the caller gets API Gateway's answer to a failed integration
            raise _Refused(500) from None
        try:
            self.connection.settimeout(self.server.limits.write_s)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(out)
            self.wfile.flush()
        except OSError:
            self.close_connection = True  # the client stopped reading or went away

    def _refuse(self, status: int) -> None:
        self.linger = True
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.send_error(status)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """API Gateway's own answer: JSON `{"message": ...}`; the connection is closed after it."""
        body = json.dumps({"message": _MESSAGES.get(code) or HTTPStatus(code).phrase}, separators=(",", ":")).encode()
        self.connection.settimeout(self.server.limits.write_s)
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()


class FrontEnd(socketserver.TCPServer):
    """One thread per connection up to `max_connections`; beyond that, connections wait in the listen backlog."""

    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], route: Route, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.route = route
        self.request_queue_size = self.limits.backlog
        self.budget = _Budget(self.limits.body_budget)
        self.received = 0  # bytes read from clients into requests
        self.discarded = 0  # bytes drained and dropped after a refusal
        self.evicted = 0  # idle connections closed for a connection waiting for a worker
        self._idle: dict[socket.socket, float] = {}  # connections waiting for a request, since when
        self._reading: dict[socket.socket, list[float]] = {}  # requests being read: [since when, bytes received]
        self.cut_slow = 0  # requests arriving slower than slow_rate_bps, closed for a waiting connection
        self._slots = threading.BoundedSemaphore(self.limits.max_connections)
        self._closing = threading.Event()
        self._serving = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        super().__init__(address, _Handler)

    def server_activate(self) -> None:
        super().server_activate()
        self.socket.settimeout(0.5)  # accept() never blocks serve_forever for long (a client may vanish first)

    def count(self, *, received: int = 0, discarded: int = 0, sock: socket.socket | None = None) -> None:
        with self._lock:
            self.received += received
            self.discarded += discarded
            if sock is not None and sock in self._reading:
                self._reading[sock][1] += received

    def reading(self, sock: socket.socket, active: bool) -> None:
        """A request is being read on `sock` (its start and the bytes received so far), or no longer."""
        with self._lock:
            if active:
                self._reading[sock] = [time.monotonic(), 0]
            else:
                self._reading.pop(sock, None)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "open_connections": len(self._open),
                "idle_connections": len(self._idle),
                "evicted_idle_connections": self.evicted,
                "cut_slow_requests": self.cut_slow,
                "received_bytes": self.received,
                "discarded_bytes": self.discarded,
                "body_bytes_held": self.limits.body_budget - self.budget.free,
            }

    def idle(self, sock: socket.socket, waiting: bool) -> None:
        with self._lock:
            if waiting:
                self._idle[sock] = time.monotonic()
            else:
                self._idle.pop(sock, None)

    def _evict_idle(self) -> None:
        """Close the connection idle longest, if it has been idle a while, or else the slowest request arriving slower
        than `slow_rate_bps`: its worker is free for a waiting one."""
        now = time.monotonic()
        with self._lock:
            oldest = next(iter(self._idle.items()), None)
            if oldest is not None and now - oldest[1] >= self.limits.evict_idle_after_s:
                sock = oldest[0]
                del self._idle[sock]
                self.evicted += 1
            else:
                rates = [
                    (got / (now - since), sock)
                    for sock, (since, got) in self._reading.items()
                    if now - since >= self.limits.evict_idle_after_s
                ]
                slowest = min(rates, key=lambda rate: rate[0], default=None)
                if slowest is None or slowest[0] >= self.limits.slow_rate_bps:
                    return
                sock = slowest[1]
                del self._reading[sock]
                self.cut_slow += 1
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # its worker's wait for a request (or the rest of it) ends now

    def get_request(self) -> tuple[Any, Any]:
        # Every slot busy: close an idle connection for it, or else accept nothing, so later clients wait in the
        # kernel's backlog (a delay, not a reset).
        while not self._slots.acquire(timeout=0.05):
            if self._closing.is_set():
                raise OSError("stopping")
            self._evict_idle()
        try:
            return self.socket.accept()
        except OSError:
            self._slots.release()
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._connection, args=(request, client_address), name="crcr-http-conn", daemon=True
        )
        try:
            thread.start()
        except BaseException:
            self._slots.release()
            raise

    def _connection(self, request: socket.socket, client_address: Any) -> None:
        with self._lock:
            self._open.add(request)
        try:
            handler = _Handler(request, client_address, self)
            if handler.linger:
                self._linger(request)
        except OSError:
            pass  # the client went away mid-answer
        except Exception:
            self.handle_error(request, client_address)
        finally:
            with self._lock:
                self._open.discard(request)
            self.shutdown_request(request)
            self._slots.release()

    def _linger(self, sock: socket.socket) -> None:
        """Drop what the client still sends after a refusal, for a moment: closing a socket with unread bytes makes
        the kernel reset the connection, and a client still writing its body would never read the answer."""
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + self.limits.linger_s
        left = self.limits.linger_bytes
        while left > 0 and (wait := deadline - time.monotonic()) > 0:
            sock.settimeout(wait)
            try:
                data = sock.recv(min(left, 65536))
            except TimeoutError:
                return
            if not data:
                return
            left -= len(data)
            self.count(discarded=len(data))

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._serving.set()
        super().serve_forever(poll_interval)

    def shutdown(self) -> None:
        self._closing.set()
        if self._serving.is_set():  # a server bound but never served has no loop to wait for
            super().shutdown()

    def server_close(self) -> None:
        super().server_close()
        with self._lock:
            open_connections = list(self._open)
        for sock in open_connections:  # idle keep-alive connections end now, not at their timeout
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
