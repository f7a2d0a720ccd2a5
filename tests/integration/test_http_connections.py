"""The transport under the DynamoDB and GitHub clients, against a TCP server that answers with the bytes each test
scripts: every way HTTP/1.1 may frame an answer is read whole, a connection is kept only when the answer says it
may be, a garbled or cut answer is an error that says the request may have been acted on, and a request that
would split into two (a line break in a header, a space in its target) is never sent."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from crcr.adapters.http_connections import (
    ConnectFailed,
    Connections,
    ExchangeFailed,
    ReadTimeout,
    TransportError,
)
from crcr.local.stack import free_port


class Scripted:
    """Accepts connections and, for each request it reads (up to its blank line and any Content-Length body),
    sends the next scripted answer on that connection; `None` closes the connection instead of answering, and
    the connection is closed after the last answer."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        with conn:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = next(
                    (int(h.split(b":", 1)[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")),
                    0,
                )
                with self._lock:
                    self.requests.append(head + reader.read(length))
                    answer = self.answers.pop(0) if self.answers else None
                    last = not self.answers
                if answer is None:
                    return
                conn.sendall(answer)
                if last:
                    return

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Scripted]:
    scripted = Scripted(request.param)
    yield scripted
    scripted.close()


def connections(url: str, read_timeout_s: float = 5.0) -> Connections:
    return Connections(url, proxy=None, connect_timeout_s=2.0, read_timeout_s=read_timeout_s)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Thing: a\r\n\r\n{}"


@pytest.mark.parametrize(
    ("server", "body", "headers"),
    [
        pytest.param([OK], b"{}", {"x-thing": "a", "content-length": "2"}, id="content-length"),
        pytest.param(
            [b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\nT: x\r\n\r\n'],
            b'{"a":1}',
            {"transfer-encoding": "chunked"},
            id="chunked-with-extension-and-trailer",
        ),
        pytest.param(
            [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx"],
            b"x",
            {"content-length": "1"},
            id="interim-100-skipped",
        ),
        pytest.param(
            [
                b'HTTP/1.1 200 OK\r\nLink: <a>; rel="next"\r\nlink: <b>; rel="last"\r\nX-Long: one\r\n two\r\n'
                b"Content-Length: 0\r\n\r\n"
            ],
            b"",
            {"link": '<a>; rel="next", <b>; rel="last"', "x-long": "one two"},
            id="repeated-and-folded-headers",
        ),
        pytest.param([b'HTTP/1.1 304 Not Modified\r\nETag: "e"\r\n\r\n'], b"", {"etag": '"e"'}, id="304-no-body"),
    ],
    indirect=["server"],
)
def test_every_framing_of_an_answer_is_read_whole_and_the_connection_kept(
    server: Scripted, body: bytes, headers: dict[str, str]
) -> None:
    server.answers.append(OK)  # the next request goes over the same connection
    conns = connections(server.url)
    _, data, answer = conns.request("POST", "/x", b"{}", {"Content-Type": "application/json"})
    assert data == body
    assert headers.items() <= answer.items()
    assert conns.request("POST", "/x", b"{}", {})[1] == b"{}"
    assert server.connections == 1


@pytest.mark.parametrize(
    "server",
    [[b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na", OK]],
    indirect=True,
)
def test_an_answer_that_says_close_is_not_reused(server: Scripted) -> None:
    conns = connections(server.url)
    assert conns.request("GET", "/a", None, {})[1] == b"a"
    assert conns.request("GET", "/b", None, {})[1] == b"{}"
    assert server.connections == 2


@pytest.mark.parametrize(
    "server",
    [[b"HTTP/1.0 200 OK\r\n\r\nuntil the end"]],
    indirect=True,
)
def test_a_body_without_a_length_is_read_until_the_server_closes(server: Scripted) -> None:
    assert connections(server.url).request("GET", "/", None, {})[1] == b"until the end"


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        pytest.param([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"], "IncompleteRead", id="cut-body"),
        pytest.param([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"], "chunk size", id="bad-chunk"),
        pytest.param([b"SMTP ready\r\n\r\n"], "BadStatusLine", id="not-http"),
        pytest.param([b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"], "malformed header", id="bad-header"),
        pytest.param([None], "RemoteDisconnected", id="closed-without-answer"),
        pytest.param([b"HTTP/1.1 200 OK\r\nContent-"], "RemoteDisconnected", id="closed-in-headers"),
    ],
    indirect=["server"],
)
def test_a_garbled_or_cut_answer_is_an_error_that_may_have_been_acted_on(server: Scripted, problem: str) -> None:
    with pytest.raises(ExchangeFailed) as caught:
        connections(server.url).request("POST", "/", b"{}", {})
    assert caught.value.maybe_sent
    assert problem in f"{type(caught.value.error).__name__} {caught.value.error}"


@pytest.mark.parametrize("server", [[b"HTTP/1.1 200 OK\r\n", OK]], indirect=True)
def test_an_answer_that_stops_is_a_read_timeout(server: Scripted) -> None:
    with pytest.raises(ReadTimeout) as caught:
        connections(server.url, read_timeout_s=0.3).request("POST", "/", b"{}", {})
    assert caught.value.maybe_sent


def test_nothing_listening_is_a_failure_to_connect_that_sent_nothing() -> None:
    with pytest.raises(ConnectFailed) as caught:
        connections(f"http://127.0.0.1:{free_port()}").request("POST", "/", b"{}", {})
    assert not caught.value.maybe_sent
    assert isinstance(caught.value, TransportError)


@pytest.mark.parametrize("server", [[OK]], indirect=True)
def test_the_request_is_one_message_with_one_host_and_its_length(server: Scripted) -> None:
    conns = connections(server.url)
    conns.request("PATCH", "/repos/o/r?x=1", "ü".encode(), {"host": "signed.example", "X-A": "1"})
    sent = server.requests[0]
    assert sent.startswith(b"PATCH /repos/o/r?x=1 HTTP/1.1\r\n")
    head = sent.split(b"\r\n\r\n", 1)[0].lower().split(b"\r\n")
    assert [h for h in head if h.startswith(b"host:")] == [b"host: signed.example"]  # the signed one, alone
    assert b"content-length: 2" in head and b"accept-encoding: identity" in head
    assert sent.endswith("ü".encode())


@pytest.mark.parametrize("server", [[OK]], indirect=True)
@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/a b", {}),
        ("/a\r\nX-Injected: 1", {}),
        ("/", {"X-A": "1\r\nX-Injected: 1"}),
        ("/", {"X-A\n": "1"}),
    ],
)
def test_a_request_that_would_split_in_two_is_refused_before_sending(
    server: Scripted, target: str, headers: dict[str, str]
) -> None:
    with pytest.raises(ValueError):
        connections(server.url).request("GET", target, None, headers)
    assert server.requests == []
