"""Operator tool behind `crcr replay`: recorded webhook deliveries sent through a relay again, re-signed, in GitHub's
delivery order, to rehearse on `crcr local` or feed a shadow deployment (docs/contracts.md, `crcr replay`)."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crcr.domain.text import control_in
from crcr.local.webhook_sender import Unreachable, WebhookSender
from crcr.ops.input_file import Caps, json_entries, one_line, size

TIMEOUT_S = 10.0  # GitHub's own delivery timeout
MAX_BODY_BYTES = 10 * 1024 * 1024  # the relay's own webhook body limit (crcr.composition.webhook.MAX_WEBHOOK_BYTES)
# A day of an App's deliveries is tens of thousands of a few tens of KB each; a larger file is split, never held.
CAPS = Caps(total_bytes=256 * 1024 * 1024, entry_bytes=MAX_BODY_BYTES, entries=100_000)
MAX_HEADER_CHARS = 200


class ReplayError(Exception):
    """What stopped a replay before anything was sent, in one line (exit code 2)."""


@dataclass(frozen=True)
class Delivery:
    guid: str
    event: str
    body: bytes
    at: str = ""  # when GitHub delivered it (ISO 8601), for the order
    redelivery: bool = False


@dataclass
class Replayed:
    sent: int = 0
    answers: Counter[int] = field(default_factory=Counter)
    refused: list[str] = field(default_factory=list)  # "<guid>: <status> <reason>", the first few
    skipped: list[str] = field(default_factory=list)  # entries with nothing to send

    def to_json(self) -> dict[str, Any]:
        answers = {str(status): n for status, n in sorted(self.answers.items())}
        return {"sent": self.sent, "answers": answers, "refused": self.refused, "skipped": self.skipped}

    def line(self) -> str:
        answers = ", ".join(f"{n} answered {status}" for status, n in sorted(self.answers.items()))
        skipped = f"; {len(self.skipped)} skipped (no payload recorded)" if self.skipped else ""
        return f"replayed {self.sent} deliveries: {answers or 'none'}{skipped}"


def _kind(value: Any) -> str:
    """A JSON value's type, as a refusal names it."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, dict | list | str):
        return "an object" if isinstance(value, dict) else "an array" if isinstance(value, list) else "a string"
    return "a number"


def _header(where: str, name: str, value: Any) -> str:
    """A recorded header's value, as it would be sent: a string of printable ASCII on one line."""
    if not isinstance(value, str):
        raise ReplayError(f"{where}: {name} must be a string, not {_kind(value)}")
    if "\r" in value or "\n" in value:
        raise ReplayError(f"{where}: {name} holds a line break (CR or LF): a header value cannot carry one")
    if (bad := control_in(value)) is not None or not value.isascii():
        raise ReplayError(f"{where}: {name} holds {bad or 'a character other than ASCII'}: not a header value")
    if len(value) > MAX_HEADER_CHARS:
        raise ReplayError(f"{where}: {name} is longer than {MAX_HEADER_CHARS} characters")
    return value


def _recorded_headers(where: str, headers: Any, name: str) -> dict[str, str]:
    if not isinstance(headers, dict):
        raise ReplayError(f"{where}: {name} must be an object, not {_kind(headers)}")
    return {str(k): _header(where, f"{name}.{one_line(k)[:60]}", v) for k, v in headers.items()}


def _optional(where: str, doc: dict[str, Any], name: str, kind: type) -> Any:
    value = doc.get(name)
    if value is not None and not isinstance(value, kind):
        wanted = "true or false" if kind is bool else "a string"
        raise ReplayError(f"{where}: {name} must be {wanted}, not {_kind(value)}")
    return value


def _entry(where: str, doc: Any, skipped: list[str]) -> Delivery | None:
    if not isinstance(doc, dict):
        raise ReplayError(f"{where}: a JSON object, GitHub's delivery log entry or {{headers, body}}")
    at = _optional(where, doc, "delivered_at", str) or ""
    if len(at) > 64:
        raise ReplayError(f"{where}: delivered_at is longer than an ISO 8601 time")
    if "request" in doc:  # GitHub's delivery log
        request = doc.get("request") or {}
        if not isinstance(request, dict):
            raise ReplayError(f"{where}: request must be an object, not {_kind(request)}")
        if "headers" in request:
            _recorded_headers(where, request["headers"], "request.headers")
        if not doc.get("guid") or not doc.get("event"):
            raise ReplayError(f"{where}: a delivery log entry needs guid and event")
        guid, event = _header(where, "guid", doc["guid"]), _header(where, "event", doc["event"])
        redelivery = bool(_optional(where, doc, "redelivery", bool))
        payload = request.get("payload")
        if payload is None:
            skipped.append(guid)
            return None
        if not isinstance(payload, dict):
            raise ReplayError(f"{where}: request.payload must be an object (a webhook's body), not {_kind(payload)}")
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        return Delivery(guid, event, _capped(where, body), at, redelivery)
    headers, raw = doc.get("headers"), doc.get("body")
    if headers is None or raw is None:
        raise ReplayError(f"{where}: needs request.payload (a delivery log entry) or headers and body")
    sent = {k.lower(): v for k, v in _recorded_headers(where, headers, "headers").items()}
    if not isinstance(raw, str):
        raise ReplayError(f"{where}: body must be a string (the body as sent), not {_kind(raw)}")
    delivery_id, event_name = sent.get("x-github-delivery"), sent.get("x-github-event")
    if not delivery_id or not event_name:
        raise ReplayError(f"{where}: its headers need X-GitHub-Delivery and X-GitHub-Event")
    return Delivery(delivery_id, event_name, _capped(where, raw.encode()), at)


def _capped(where: str, body: bytes) -> bytes:
    if len(body) > MAX_BODY_BYTES:
        raise ReplayError(f"{where}: its body is over {size(MAX_BODY_BYTES)}, the relay's limit")
    return body


def read(path: Path) -> tuple[list[Delivery], list[str]]:
    """The deliveries in the order GitHub made them (their `delivered_at`, else the file's), and the guids of entries
    with no payload recorded: read as a stream (gzip or not) within CAPS, every entry checked before any is sent."""
    skipped: list[str] = []
    found = []
    for where, doc in json_entries(path, CAPS):
        delivery = _entry(f"{path}: {where}", doc, skipped)
        if delivery is not None:
            found.append(delivery)
    if not found and not skipped:
        raise ReplayError(f"{path}: no deliveries in it")
    order = {id(d): i for i, d in enumerate(found)}
    return sorted(found, key=lambda d: (d.at, order[id(d)])), skipped


def replay(deliveries: list[Delivery], url: str, secret: str, rate: float = 0.0) -> Replayed:
    """Send each delivery to the relay's webhook in turn, as GitHub sends it; `rate` deliveries a second at most (0:
    one after another). A refusal is reported, never retried: the relay's answer is the result."""
    done = Replayed()
    sender = WebhookSender(url, secret, agent="GitHub-Hookshot/crcr-replay", timeout_s=TIMEOUT_S, connections=1)
    started = time.monotonic()
    for n, d in enumerate(deliveries):
        if rate > 0:
            time.sleep(max(0.0, started + n / rate - time.monotonic()))
        try:
            answer = sender.post(d.event, d.body, d.guid)
            status, reason = answer.status, answer.body[:200].decode("utf-8", "replace")
        except Unreachable as exc:
            status, reason = 0, str(exc)
        done.sent += 1
        done.answers[status] += 1
        if status not in (200, 202) and len(done.refused) < 20:
            done.refused.append(f"{d.guid}: {status} {reason}".strip())
    sender.close()
    return done
