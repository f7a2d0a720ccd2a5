"""The HUD pages over documents seeded in memory, served as HudFunction serves them (its own handler, called with an
HTTP API event per request): for browser tests of states a scripted relay run would take minutes to reach, and for
the pages bench. The documents are written by the relay's own code (crcr.app.summaries), never by hand."""

from __future__ import annotations

import base64
import importlib.util
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from crcr.app.page_compose import composer
from crcr.app.ports.jobs import NewestJobs

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "functions" / "hud" / "static"


class MemoryDocs:
    """PageDocs and PageDocReader in memory: versioned, conditional puts, bytes as S3PageDocs stores them."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, int] = {}

    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        doc = self.docs.get(key)
        return (doc, str(self.versions[key])) if doc is not None else (None, None)

    def put(self, key: str, doc: dict[str, Any], tag: str | None) -> bool:
        current = self.versions.get(key)
        if (current is None and tag is not None) or (current is not None and tag != str(current)):
            return False
        self.docs[key] = doc
        self.versions[key] = (current or 0) + 1
        return True

    def read(self, key: str) -> bytes | None:
        doc = self.docs.get(key)
        return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode() if doc is not None else None


def hud_handler() -> Any:
    """functions/hud/handler.py, loaded as Lambda loads it."""
    spec = importlib.util.spec_from_file_location("crcr_hud_handler", ROOT / "functions" / "hud" / "handler.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.lambda_handler


@dataclass
class Served:
    url: str
    fetched: list[tuple[str, int]] = field(default_factory=list)  # (path, body bytes) of every answer

    def reset(self) -> None:
        self.fetched.clear()


@contextmanager
def serve_docs(docs: MemoryDocs, rows: NewestJobs | None = None) -> Iterator[Served]:
    """`rows`: the results table's rows the repository pages read their job attempts from."""
    handler = hud_handler()
    assets = {path.name: path.read_bytes() for path in STATIC.iterdir() if path.is_file()}
    compose = composer(docs, rows)
    served = Served(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name for it
            path = self.path.split("?", 1)[0]
            event = {"rawPath": path, "requestContext": {"http": {"method": "GET"}}}
            answer = handler(event, None, (docs, assets, compose, None))
            body = base64.b64decode(answer["body"]) if answer.get("isBase64Encoded") else answer["body"].encode()
            with lock:
                served.fetched.append((path, len(body)))
            self.send_response(answer["statusCode"])
            for name, value in answer["headers"].items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
