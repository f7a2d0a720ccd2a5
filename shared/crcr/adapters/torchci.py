"""PyTorch's HUD (torchci) push client: POST a job change with its `x-hud-internal-bot` header."""

from __future__ import annotations

import json
from typing import Any

import urllib3

from crcr.adapters.http_pool import pool_for
from crcr.app.outbound import HUD, Permit, require
from crcr.app.ports.torchci import TorchciRejected, TorchciUnavailable


class TorchciClient:
    def __init__(self, url: str, token: str, *, timeout_s: float = 10.0) -> None:
        self._url = url
        self._token = token
        self._timeout = urllib3.Timeout(connect=3.0, read=timeout_s)
        self._http = pool_for(url, maxsize=4)

    def push(self, envelope: dict[str, Any], *, permit: Permit) -> None:
        require(permit, HUD, "hud_push")  # the outbound door's word (crcr.app.outbound), or nothing is sent
        try:
            resp = self._http.request(
                "POST",
                self._url,
                body=json.dumps(envelope, separators=(",", ":"), allow_nan=False).encode(),  # JavaScript reads it
                headers={"content-type": "application/json", "x-hud-internal-bot": self._token},
                timeout=self._timeout,
                redirect=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise TorchciUnavailable(f"HUD unreachable: {type(exc).__name__}") from exc
        if resp.status >= 500 or resp.status == 429:
            raise TorchciUnavailable(f"HUD answered {resp.status}")
        if resp.status >= 400:
            raise TorchciRejected(resp.status, resp.data[:500].decode("utf-8", "replace"))
