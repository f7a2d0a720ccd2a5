"""The one webhook sender (`crcr send`, `crcr replay`, the demo, the sandbox's runs): GitHub's headers and signature,
one kept connection for many deliveries, and a relay that does not answer said in one line."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from crcr.domain.signature import verify_signature
from crcr.local.webhook_sender import Unreachable, WebhookSender, webhook_url

SECRET = "s3cret"


class Relay(ThreadingHTTPServer):
    """A relay's webhook route: records each request and the client port it came from; answers as told."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.answer: tuple[int, bytes] = (202, b'{"status": "accepted"}')

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as API Gateway and crcr local's front end

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        relay: Relay = self.server  # type: ignore[assignment]
        relay.requests.append(
            {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body,
             "port": self.client_address[1]}
        )  # fmt: skip
        status, data = relay.answer
        self.send_response(status)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def relay() -> Iterator[Relay]:
    server = Relay()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_delivery_carries_githubs_headers_and_a_signature_the_relay_verifies(relay: Relay) -> None:
    sender = WebhookSender(relay.url, SECRET, agent="GitHub-Hookshot/test")
    body = json.dumps({"action": "opened"}).encode()

    answer = sender.post("pull_request", body, "d-1")

    assert (answer.status, answer.json()) == (202, {"status": "accepted"})
    [got] = relay.requests
    assert got["path"] == "/webhook" and got["body"] == body
    headers = got["headers"]
    assert (headers["x-github-event"], headers["x-github-delivery"]) == ("pull_request", "d-1")
    assert headers["user-agent"] == "GitHub-Hookshot/test" and headers["content-type"] == "application/json"
    verify_signature((SECRET.encode(),), body, headers["x-hub-signature-256"])  # raises when it does not match


def test_many_deliveries_go_over_one_kept_connection(relay: Relay) -> None:
    sender = WebhookSender(relay.url, SECRET, agent="GitHub-Hookshot/test", connections=1)
    for n in range(20):
        assert sender.post("push", b"{}", f"d-{n}").status == 202
    assert len(relay.requests) == 20
    assert len({r["port"] for r in relay.requests}) == 1  # one TCP connection, not one per delivery


@pytest.mark.parametrize(
    ("given", "route"),
    [
        ("http://relay:8787", "http://relay:8787/webhook"),
        ("http://relay:8787/", "http://relay:8787/webhook"),
        (
            "https://x.execute-api.us-east-1.amazonaws.com/webhook",
            "https://x.execute-api.us-east-1.amazonaws.com/webhook",
        ),
        ("https://relay.example/prod/", "https://relay.example/prod/webhook"),
    ],
)
def test_the_route_is_the_relays_webhook_whether_given_its_base_or_the_route(given: str, route: str) -> None:
    assert webhook_url(given) == route


def test_an_answer_that_is_not_a_json_object_is_kept_as_its_text(relay: Relay) -> None:
    sender = WebhookSender(relay.url, SECRET, agent="GitHub-Hookshot/test")
    relay.answer = (502, b"<html>Bad Gateway</html>")
    assert sender.post("push", b"{}", "d-1").json() == {"message": "<html>Bad Gateway</html>"}
    relay.answer = (200, b"[1, 2]")
    assert sender.post("push", b"{}", "d-2").json() == {"message": "[1, 2]"}


def test_a_relay_that_does_not_listen_is_unreachable_in_one_line_naming_the_socket_error() -> None:
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sender = WebhookSender(f"http://127.0.0.1:{port}", SECRET, agent="GitHub-Hookshot/test", timeout_s=2)
        with pytest.raises(Unreachable) as refused:
            sender.post("push", b"{}", "d-1")
    assert "Connection refused" in str(refused.value) and "\n" not in str(refused.value)
