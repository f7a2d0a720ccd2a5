"""Webhook deliveries signed as GitHub signs them and posted to a relay's /webhook over kept connections (urllib3):
the one sender of `crcr send`, `crcr replay`, the demo and the sandbox's runs on `crcr local`."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import urllib3

from crcr.adapters.http_pool import pool_for
from crcr.domain.signature import sign


class Unreachable(Exception):
    """The relay gave no answer (refused, reset, timed out); the message says why, in one line."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> dict[str, Any]:
        """The relay's answer as a JSON object; anything else as `{"message": <its start>}`."""
        try:
            reply = json.loads(self.body or b"{}")
        except ValueError:
            return {"message": self.body[:200].decode("utf-8", "replace")}
        return reply if isinstance(reply, dict) else {"message": str(reply)}


def webhook_url(url: str) -> str:
    """The relay's webhook route under `url`: its base URL, or the route itself (the stack's WebhookUrl)."""
    path = urllib.parse.urlsplit(url).path
    return url if path.rstrip("/").endswith("/webhook") else url.rstrip("/") + "/webhook"


class WebhookSender:
    """Posts to one relay's webhook as GitHub does: the event, delivery id and HMAC-SHA256 signature as headers. It
    never retries: the relay's answer (or its silence) is the result, and a redelivery is the caller's choice."""

    def __init__(self, url: str, secret: str, *, agent: str, timeout_s: float = 10.0, connections: int = 4) -> None:
        self.url = webhook_url(url)
        self._secret = secret.encode()
        self._agent = agent
        self._timeout = urllib3.Timeout(total=timeout_s)
        self._pool = pool_for(self.url, maxsize=connections)

    def post(self, event: str, body: bytes, delivery_id: str) -> Answer:
        headers = {
            "content-type": "application/json",
            "user-agent": self._agent,
            "x-github-event": event,
            "x-github-delivery": delivery_id,
            "x-hub-signature-256": sign(self._secret, body),
        }
        try:
            got = self._pool.request(
                "POST", self.url, body=body, headers=headers, timeout=self._timeout, redirect=False
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unreachable(_reason(exc)) from None
        return Answer(got.status, got.data)

    def close(self) -> None:
        self._pool.clear()


def _reason(exc: BaseException) -> str:
    """What went wrong on the wire: the socket's own error when there is one ("[Errno 111] Connection refused")."""
    cause = exc.__cause__ or exc.__context__
    shown = cause if isinstance(cause, OSError) and not isinstance(cause, urllib3.exceptions.HTTPError) else exc
    return " ".join(str(shown).split()) or type(exc).__name__
