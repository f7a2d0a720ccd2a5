"""A HUD endpoint double: records pushes (with their headers) and answers from a script."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class HudDouble:
    def __init__(self, token: str) -> None:
        self.token = token
        self.pushes: list[dict[str, Any]] = []  # accepted (2xx) pushes
        self.attempts: list[tuple[int, dict[str, Any]]] = []  # every push with the status answered
        self._script: list[int] = []
        self._lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                with double._lock:
                    if self.headers.get("x-hud-internal-bot") != double.token:
                        status = 401
                    else:
                        status = double._script.pop(0) if double._script else 200
                    double.attempts.append((status, body))
                    if status < 300:
                        double.pushes.append(body)
                data = json.dumps({"ok": status < 300}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/api/crcr/results"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def script(self, *statuses: int) -> None:
        with self._lock:
            self._script.extend(statuses)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
