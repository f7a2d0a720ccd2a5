"""PyTorch's HUD endpoint as an HTTP double: the port of torchci's results route judges every push.

It answers what PyTorch's HUD would (401, 413, 400 for a missing job name or check-run id, 500 for a
push without `workflow`, 409 for a write to a row already completed) and keeps the rows it would write. A
script can force statuses first, to play an outage; a 409 is kept in `duplicates` (the relay counts it and
moves on), any other push the port refuses in `refused`, which the fixture requires empty.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from crcr.local.torchci import TorchciHud


class HudDouble:
    def __init__(self, token: str) -> None:
        self.port = TorchciHud(token)
        self.pushes: list[dict[str, Any]] = []  # accepted (2xx) pushes
        self.attempts: list[tuple[int, dict[str, Any]]] = []  # every push with the status answered
        self.refused: list[tuple[int, dict[str, Any], dict[str, Any]]] = []  # (status, reply, push) from the port
        self.duplicates: list[dict[str, Any]] = []  # pushes to a row already completed (409)
        self._script: list[int] = []
        self._lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                with double._lock:
                    scripted = double._script.pop(0) if double._script else None
                if scripted is not None:
                    status, reply = scripted, {"error": "scripted"}
                else:
                    status, reply = double.port.handle("POST", dict(self.headers), raw)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsable": raw[:200].decode("utf-8", "replace")}
                with double._lock:
                    double.attempts.append((status, body))
                    if status < 300:
                        double.pushes.append(body)
                    elif scripted is None and status == 409:
                        double.duplicates.append(body)
                    elif scripted is None:
                        double.refused.append((status, reply, body))
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/api/crcr/results"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def rows(self) -> dict[str, dict[str, Any]]:
        """`torchci-oot-workflow-job` as PyTorch's HUD would hold it, by dynamoKey."""
        return dict(self.port.table)

    def script(self, *statuses: int) -> None:
        with self._lock:
            self._script.extend(statuses)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
