"""crcr local's HTTP front end, driven with raw sockets: framing, sizes, bursts and slow clients as API Gateway's
HTTP API answers them (docs/local-stack.md)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from crcr.domain.signature import sign
from crcr.local.front import FrontEnd, Limits
from crcr.local.stack import LocalStack
from crcr.settings import ConfigError
from tests.conftest import DEFAULT_ALLOWLIST, ROOT, event_body

pytestmark = pytest.mark.e2e
LIMIT = 10 * 1024 * 1024
BAD_REQUEST = {"message": "Bad Request"}
TOO_LARGE = {"message": "Request Entity Too Large"}
NOT_FOUND = {"message": "Not Found"}


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    closed: bool  # the server closed the connection after this answer

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One `crcr local` (sandbox GitHub) for the module: these tests look at its edge, not at the relay."""
    allowlist = tmp_path_factory.mktemp("front") / "allowlist.yaml"
    allowlist.write_text(DEFAULT_ALLOWLIST)
    env = {"CRCR_UPSTREAM_REPO": "pytorch/pytorch", "CRCR_ALLOWLIST": str(allowlist), "PATH": "/usr/bin:/bin"}
    with LocalStack(port=0, env=env, root=ROOT) as local:
        yield local


@dataclass
class Bare:
    """A front end with short limits before a route that records its calls; `/hold` waits for `gate`."""

    server: FrontEnd
    calls: list[tuple[str, str, str, dict[str, str], bytes]]
    gate: threading.Event


@pytest.fixture
def front() -> Iterator[Callable[..., Bare]]:
    made: list[Bare] = []

    def make(**limits: Any) -> Bare:
        calls: list[tuple[str, str, str, dict[str, str], bytes]] = []
        gate = threading.Event()

        def route(method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Any:
            calls.append((method, path, query, headers, body))
            if path == "/boom":
                raise RuntimeError("the handler crashed")
            if path == "/hold":
                gate.wait(10)
            return 200, json.dumps({"bytes": len(body)}).encode(), {"content-type": "application/json"}

        bare = Bare(FrontEnd(("127.0.0.1", 0), route, Limits(**limits)), calls, gate)
        threading.Thread(target=bare.server.serve_forever, daemon=True).start()
        made.append(bare)
        return bare

    yield make
    for bare in made:
        bare.gate.set()
        bare.server.shutdown()
        bare.server.server_close()


def address(where: LocalStack | FrontEnd) -> tuple[str, int]:
    port = where.port if isinstance(where, LocalStack) else where.server_address[1]
    return "127.0.0.1", int(port)


def connect(where: LocalStack | FrontEnd) -> socket.socket:
    return socket.create_connection(address(where), timeout=10)


def read_answer(sock: socket.socket, method: str = "POST") -> Answer:
    response = http.client.HTTPResponse(sock, method=method)
    response.begin()
    body = response.read()
    headers = {k.lower(): v for k, v in response.getheaders()}
    closed = False
    if headers.get("connection") == "close":
        sock.settimeout(5)
        closed = sock.recv(1) == b""  # an orderly close (FIN) right after the answer, not a reset
    return Answer(response.status, headers, body, closed)


def exchange(where: LocalStack | FrontEnd, raw: bytes, method: str = "POST") -> Answer:
    with connect(where) as sock:
        sock.sendall(raw)
        return read_answer(sock, method)


def read_head(sock: socket.socket) -> bytes:
    """Bytes up to the end of the first response head (an interim 100 Continue included)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


def stats(stack: LocalStack) -> dict[str, int]:
    return dict(stack.status()["http"])


def post(path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in ({"host": "crcr.local"} | headers).items())
    return f"POST {path} HTTP/1.1\r\n{head}\r\n".encode() + body


def chunked(body: bytes, size: int) -> bytes:
    parts = [
        b"%x;piece=%d\r\n%s\r\n" % (len(body[i : i + size]), i, body[i : i + size]) for i in range(0, len(body), size)
    ]
    return b"".join(parts) + b"0\r\nx-trailer: dropped\r\n\r\n"


def signed_ping(stack: LocalStack, delivery: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"zen": "Design for failure.", "hook_id": 7}).encode()
    headers = {
        "x-github-event": "ping",
        "x-github-delivery": delivery,
        "x-hub-signature-256": sign(stack.secrets["webhook_secret"].encode(), body),
    }
    return body, headers


# -- framing ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "framing",
    [
        {"content-length": "abc"},
        {"content-length": "-1"},
        {"content-length": "+5"},
        {"content-length": "5, 5"},
        {"content-length": ""},
        {"content-length": "0x05"},
        {"content-length": "5", "Content-Length": "5"},
        {"content-length": "5", "transfer-encoding": "chunked"},
        {"transfer-encoding": "identity"},
        {"transfer-encoding": "chunked, chunked"},
    ],
    ids=["word", "negative", "signed", "list", "empty", "hex", "duplicate", "both", "not-chunked", "chunked-twice"],
)
def test_bad_framing_is_400_json_and_the_connection_closes(stack: LocalStack, framing: dict[str, str]) -> None:
    before = dict(stack.invocations)
    # `dict` cannot hold the same name twice: the duplicate is spelled in another case, as a client may send it.
    answer = exchange(stack, post("/webhook", framing, b"hello0\r\n\r\n"))
    assert (answer.status, answer.json, answer.closed) == (400, BAD_REQUEST, True)
    assert answer.headers["content-type"] == "application/json"
    assert stack.invocations == before  # refused at the edge: no function ran


def test_field_syntax_two_parsers_could_read_two_ways_is_400(stack: LocalStack) -> None:
    for head in (b"content-length : 5\r\n", b"x-a: 1\r\n folded\r\n", b"x-a: 1\rcontent-length: 99\r\n"):
        answer = exchange(stack, b"POST /webhook HTTP/1.1\r\nhost: x\r\n" + head + b"\r\nhello")
        assert (answer.status, answer.json, answer.closed) == (400, BAD_REQUEST, True), head
    answer = exchange(stack, b"GET /hud\r\n\r\n")  # HTTP/0.9: no version, no status line to answer with
    assert (answer.status, answer.closed) == (400, True)


def test_a_chunked_webhook_reaches_the_function_byte_for_byte(stack: LocalStack) -> None:
    """The signature covers the decoded body, so a 200 proves the function got exactly the bytes that were sent;
    the second request on the same connection proves the chunks were not read as a next request."""
    body, headers = signed_ping(stack, "front-chunked")
    with connect(stack) as sock:
        sock.sendall(post("/webhook", headers | {"transfer-encoding": "chunked"}, chunked(body, 7)))
        answer = read_answer(sock)
        assert (answer.status, answer.json) == (200, {"status": "pong", "delivery_id": "front-chunked"})
        assert not answer.closed
        sock.sendall(b"GET /.well-known/jwks.json HTTP/1.1\r\nhost: x\r\n\r\n")
        assert read_answer(sock, "GET").status == 200


def test_expect_100_continue_is_answered_before_the_body_is_sent(stack: LocalStack) -> None:
    body, headers = signed_ping(stack, "front-expect")
    with connect(stack) as sock:
        sock.sendall(post("/webhook", headers | {"content-length": str(len(body)), "expect": "100-continue"}))
        assert read_head(sock) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        assert read_answer(sock).status == 200


# -- sizes -----------------------------------------------------------------------------------------------------------
def test_a_declared_200_mb_body_is_refused_without_being_read(stack: LocalStack) -> None:
    declared = 200 * 1024 * 1024
    before = stats(stack)
    with connect(stack) as sock:
        sock.sendall(post("/webhook", {"content-length": str(declared)}, b"z" * 65536))  # and the rest never
        answer = read_answer(sock)
    assert (answer.status, answer.json, answer.closed) == (413, TOO_LARGE, True)
    after = stats(stack)
    # The head and whatever one read of the socket brought along; the 64 KiB sent were drained, never kept.
    assert after["received_bytes"] - before["received_bytes"] <= 16 * 1024
    assert after["discarded_bytes"] - before["discarded_bytes"] <= 65536


def test_an_over_limit_body_is_refused_before_100_continue(stack: LocalStack) -> None:
    with connect(stack) as sock:
        sock.sendall(post("/webhook", {"content-length": str(LIMIT + 1), "expect": "100-continue"}))
        assert read_head(sock).startswith(b"HTTP/1.1 413 ")


def test_a_body_streamed_past_the_limit_is_read_no_further(stack: LocalStack) -> None:
    """A client that sends its whole oversized body without waiting still reads the 413; the server keeps none of
    it and stops draining after about the limit, so 200 MB never all cross."""
    before = stats(stack)
    sent = 0
    with connect(stack) as sock:
        sock.sendall(post("/webhook", {"content-length": str(200 * 1024 * 1024)}))
        sock.settimeout(10)
        try:
            while sent < 200 * 1024 * 1024:
                sent += sock.send(b"z" * 1024 * 1024)
        except OSError:  # the server closed after draining for a moment: the reset ends the upload
            pass
        assert sock.recv(12) == b"HTTP/1.1 413"
    after = stats(stack)
    assert after["received_bytes"] - before["received_bytes"] <= 16 * 1024
    assert after["discarded_bytes"] - before["discarded_bytes"] <= 11 * 1024 * 1024 + 65536
    assert sent < 100 * 1024 * 1024


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(stack: LocalStack) -> None:
    before = stats(stack)
    with connect(stack) as sock:
        sock.sendall(post("/webhook", {"transfer-encoding": "chunked"}))
        for _ in range(10):
            sock.sendall(b"100000\r\n" + b"z" * 0x100000 + b"\r\n")  # exactly the limit, 1 MiB at a time
        sock.sendall(b"1\r\nz\r\n")  # one byte over: refused without reading it
        answer = read_answer(sock)
    assert (answer.status, answer.json, answer.closed) == (413, TOO_LARGE, True)
    read = stats(stack)["received_bytes"] - before["received_bytes"]
    assert LIMIT <= read <= LIMIT + 16 * 1024  # the limit's worth of chunks, never more

    with connect(stack) as sock:  # a single chunk declared past the limit: refused before any of it arrives
        sock.sendall(post("/webhook", {"transfer-encoding": "chunked"}, b"%x\r\n" % (LIMIT + 1)))
        answer = read_answer(sock)
    assert (answer.status, answer.json, answer.closed) == (413, TOO_LARGE, True)


def test_request_line_and_headers_over_api_gateways_quota_are_refused(stack: LocalStack) -> None:
    big = exchange(stack, post("/webhook", {"x-padding": "p" * 10_240, "content-length": "0"}))
    assert (big.status, big.json, big.closed) == (431, {"message": "Request Header Fields Too Large"}, True)
    long = exchange(stack, b"GET /hud/" + b"a" * 10_240 + b" HTTP/1.1\r\nhost: x\r\n\r\n", "GET")
    assert (long.status, long.closed) == (414, True)
    within = exchange(stack, post("/nowhere", {"x-padding": "p" * 9_000, "content-length": "0"}))
    assert (within.status, within.json) == (404, NOT_FOUND)


# -- routes ----------------------------------------------------------------------------------------------------------
def test_a_method_without_a_route_is_api_gateways_404_on_any_path(stack: LocalStack) -> None:
    for request in (
        b"GET /webhook HTTP/1.1\r\nhost: x\r\n\r\n",
        b"PUT /callback HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}",
        b"OPTIONS /webhook HTTP/1.1\r\nhost: x\r\n\r\n",
        b"DELETE /nowhere HTTP/1.1\r\nhost: x\r\n\r\n",
    ):
        answer = exchange(stack, request)
        assert (answer.status, answer.json, answer.closed) == (404, NOT_FOUND, False), request


def test_head_gets_the_answer_without_a_body_and_the_connection_stays_usable(stack: LocalStack) -> None:
    with connect(stack) as sock:
        sock.sendall(b"HEAD /hud HTTP/1.1\r\nhost: x\r\n\r\n")
        head = read_answer(sock, "HEAD")
        assert (head.status, head.body, head.headers["content-length"]) == (404, b"", "23")
        sock.sendall(b"GET /hud/ HTTP/1.1\r\nhost: x\r\n\r\n")
        assert read_answer(sock, "GET").status == 200


# -- bursts and slow clients -----------------------------------------------------------------------------------------
def test_a_burst_of_300_connections_is_answered_without_a_reset(stack: LocalStack) -> None:
    clients = 300
    ready = threading.Barrier(clients)

    def one(_: int) -> int:
        with socket.socket() as sock:
            sock.settimeout(60)
            ready.wait(timeout=60)
            sock.connect(address(stack))
            sock.sendall(b"GET /.well-known/jwks.json HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            return read_answer(sock, "GET").status  # a reset raises ConnectionResetError here

    with ThreadPoolExecutor(clients) as pool:
        statuses = list(pool.map(one, range(clients)))
    assert statuses == [200] * clients


def test_connections_past_the_cap_wait_in_the_backlog_not_in_memory(front: Callable[..., Bare]) -> None:
    bare = front(max_connections=2)
    server = bare.server
    held = [connect(server), connect(server)]  # two requests in flight take both workers
    for sock in held:
        sock.sendall(post("/hold", {"content-length": "0"}))
    while len(bare.calls) < 2:
        time.sleep(0.01)
    with connect(server) as third:  # the kernel completes the handshake: it waits in the listen backlog
        third.sendall(b"GET /x HTTP/1.1\r\nhost: x\r\n\r\n")
        third.settimeout(1.5)
        with pytest.raises(TimeoutError):
            third.recv(1)  # no thread for it yet (busy workers are never taken from their requests)
        bare.gate.set()  # the workers free up: the waiting connection is served, not reset
        third.settimeout(10)
        assert read_answer(third, "GET").status == 200
    for sock in held:
        assert read_answer(sock).status == 200
        sock.close()


def test_idle_connections_give_their_workers_up_to_waiting_ones(front: Callable[..., Bare]) -> None:
    """300 idle sockets once took the 256 workers: a page waited for the idle timeout (30 s and more)."""
    bare = front(max_connections=4, idle_s=60.0, evict_idle_after_s=0.2)
    idle = [connect(bare.server) for _ in range(12)]  # connected, never a byte sent
    with connect(bare.server) as waiting:
        waiting.sendall(b"GET /hud/ HTTP/1.1\r\nhost: x\r\n\r\n")
        waiting.settimeout(10)  # far below the idle timeout: only closing idle connections lets it through
        assert read_answer(waiting, "GET").status == 200
    assert bare.server.stats()["evicted_idle_connections"] >= 1
    closed = 0
    for sock in idle:
        sock.settimeout(0.2)
        with contextlib.suppress(TimeoutError):
            closed += sock.recv(1) == b""  # closed quietly, no 408 for a request never sent
        sock.close()
    assert 1 <= closed <= 12


def test_slow_uploads_hold_what_they_sent_not_what_they_declared(front: Callable[..., Bare]) -> None:
    """Six chunked uploads and a slow 4 MiB body once reserved 64 MiB between them (10 MiB per chunked body): every
    webhook then waited 30 s for a 503. Now each holds the bytes it has sent, and other requests go on."""
    bare = front(request_s=30.0)
    slow = [connect(bare.server) for _ in range(7)]
    for sock in slow[:6]:
        sock.sendall(post("/webhook", {"transfer-encoding": "chunked"}, b"10\r\n" + b"z" * 16))  # then nothing
    slow[6].sendall(post("/webhook", {"content-length": str(4 * 1024 * 1024)}, b"z" * 1024))
    deadline = time.monotonic() + 10
    while bare.server.stats()["body_bytes_held"] < 6 * 16 and time.monotonic() < deadline:
        time.sleep(0.01)
    held = bare.server.stats()["body_bytes_held"]
    assert held <= 7 * 64 * 1024  # a piece each at most, where 64 MiB were reserved before
    answer = exchange(bare.server, post("/webhook", {"content-length": "5"}, b"hello"))
    assert (answer.status, answer.json) == (200, {"bytes": 5})
    for sock in slow:
        sock.close()


def test_a_client_trickling_its_request_is_cut_off_at_the_deadline(front: Callable[..., Bare]) -> None:
    """A byte every 50 ms would keep a per-read timeout happy forever; the request has one deadline."""
    bare = front(request_s=0.5)
    request = b"POST /webhook HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n" + b"z" * 1000
    answered = b""
    with connect(bare.server) as sock:
        sock.settimeout(0.05)
        for byte in request:
            sock.sendall(bytes([byte]))
            try:
                answered = sock.recv(1, socket.MSG_PEEK)
                break
            except TimeoutError:
                continue
        assert answered, "the whole request went out a byte at a time without being cut off"
        sock.settimeout(10)
        answer = read_answer(sock)
    assert (answer.status, answer.json, answer.closed) == (408, {"message": "Request Timeout"}, True)
    assert bare.calls == []


def test_a_slowloris_cannot_hold_the_workers_from_other_requests(front: Callable[..., Bare]) -> None:
    """Red team: 300 connections sending a header byte every 5 s stalled every route until the request deadline
    (30 s). Under pressure a request arriving slower than slow_rate_bps is cut off for a waiting one, as an idle
    connection is; and a request's head has a deadline of its own."""
    bare = front(max_connections=4, request_s=300.0, head_s=300.0, evict_idle_after_s=0.2)
    slow = [connect(bare.server) for _ in range(12)]
    stop = threading.Event()

    def trickle() -> None:
        head = b"POST /webhook HTTP/1.1\r\nhost: x\r\nx-pad: " + b"z" * 10_000
        for byte in head:
            for sock in slow:
                with contextlib.suppress(OSError):
                    sock.send(bytes([byte]))
            if stop.wait(0.3):
                return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)  # the slow requests have the workers
        with connect(bare.server) as waiting:
            waiting.sendall(b"GET /hud/ HTTP/1.1\r\nhost: x\r\n\r\n")
            waiting.settimeout(10)  # far below the request deadline: only cutting slow requests lets it through
            assert read_answer(waiting, "GET").status == 200
        assert bare.server.stats()["cut_slow_requests"] >= 1
    finally:
        stop.set()
        thread.join(timeout=5)
        for sock in slow:
            sock.close()
    # Without pressure, a trickled head still ends at its own deadline, whatever the whole request's.
    bare = front(request_s=300.0, head_s=0.5)
    with connect(bare.server) as sock:
        sock.settimeout(0.05)
        answered = b""
        for byte in b"POST /webhook HTTP/1.1\r\nhost: x\r\nx-pad: " + b"z" * 400:
            sock.sendall(bytes([byte]))
            with contextlib.suppress(TimeoutError):
                answered = sock.recv(1, socket.MSG_PEEK)
                break
        assert answered, "a head trickled for longer than head_s was never cut off"
        sock.settimeout(10)
        assert read_answer(sock).status == 408


def test_an_idle_keep_alive_connection_is_closed_quietly(front: Callable[..., Bare]) -> None:
    server = front(idle_s=0.2).server
    with connect(server) as sock:
        sock.sendall(b"GET /x HTTP/1.1\r\nhost: x\r\n\r\n")
        assert read_answer(sock, "GET").status == 200
        assert sock.recv(1) == b""  # no 408 for a connection with no request in flight: it just ends


def test_bodies_in_memory_are_bounded_across_connections(front: Callable[..., Bare]) -> None:
    """With room for one body, a second body waits for it and gets 503 at its deadline rather than more memory."""
    bare = front(max_body=1000, body_budget=1000, request_s=0.5)
    with connect(bare.server) as first, connect(bare.server) as second:
        first.sendall(post("/hold", {"content-length": "1000"}, b"z" * 1000))  # its route holds the budget
        while not bare.calls:
            time.sleep(0.01)
        second.sendall(post("/b", {"content-length": "1000"}, b"z" * 1000))
        answer = read_answer(second)
        assert (answer.status, answer.json, answer.closed) == (503, {"message": "Service Unavailable"}, True)
        bare.gate.set()
        assert read_answer(first).status == 200
    assert [path for _, path, *_ in bare.calls] == ["/hold"]


# -- what the route is given ---------------------------------------------------------------------------------------
def test_the_route_gets_the_request_as_before(front: Callable[..., Bare]) -> None:
    bare = front()
    request = b"POST /callback?a=1&b=2 HTTP/1.1\r\nHost: x\r\nX-Custom: Yes\r\nContent-Length: 3\r\n\r\nabc"
    assert exchange(bare.server, request).json == {"bytes": 3}
    [(method, path, query, headers, body)] = bare.calls
    assert (method, path, query, body) == ("POST", "/callback", "a=1&b=2", b"abc")
    assert headers == {"Host": "x", "X-Custom": "Yes", "Content-Length": "3"}


def test_a_crashed_route_is_api_gateways_500_not_a_dropped_connection(front: Callable[..., Bare]) -> None:
    answer = exchange(front().server, post("/boom", {"content-length": "0"}))
    assert (answer.status, answer.json, answer.closed) == (500, {"message": "Internal Server Error"}, True)


def test_the_status_page_shows_what_was_dispatched_but_no_ticket(stack: LocalStack) -> None:
    """A ticket lets its holder report for its dispatch: `/_crcr/status` printed every one the sandbox received."""
    body = event_body("pull_request.opened.json")
    headers = {
        "x-github-event": "pull_request",
        "x-github-delivery": "front-status",
        "x-hub-signature-256": sign(stack.secrets["webhook_secret"].encode(), body),
        "content-length": str(len(body)),
    }
    assert exchange(stack, post("/webhook", headers, body)).status == 202
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with connect(stack) as sock:
            sock.sendall(b"GET /_crcr/status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            answer = read_answer(sock, "GET")
        shown = [d for d in answer.json["dispatches"] if d["delivery_id"] == "front-status"]
        if shown:
            break
        time.sleep(0.2)
    assert shown and {"repo", "event_type", "delivery_id", "at"} == set(shown[0])
    assert b"ticket" not in answer.body and b"eyJ" not in answer.body  # no JWT of any kind


def test_a_stack_that_cannot_take_its_port_fails_at_once_and_leaves_the_process_as_it_was(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port in use is named before anything starts; and when it is taken between that check and the bind (another
    process was quicker), the start fails at the bind, before anything else, stops what it started and puts the
    process environment back (a failed start once left another stack's endpoint for the next one)."""
    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text(DEFAULT_ALLOWLIST)
    env = {"CRCR_UPSTREAM_REPO": "pytorch/pytorch", "CRCR_ALLOWLIST": str(allowlist), "PATH": "/usr/bin:/bin"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        before = dict(os.environ)
        with pytest.raises(ConfigError, match=f"--port {port}: 127.0.0.1:{port} is in use"):
            LocalStack(port=port, env=env, root=ROOT).start()
        assert dict(os.environ) == before
        monkeypatch.setattr("crcr.local.stack.port_problem", lambda host, port: None)  # the check saw it free
        with pytest.raises(OSError):
            LocalStack(port=port, env=env, root=ROOT).start()
        assert dict(os.environ) == before
