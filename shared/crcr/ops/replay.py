"""Operator tool behind `crcr replay`: recorded webhook deliveries sent through a relay again, in the order GitHub
delivered them, signed with the relay's own webhook secret; for a rehearsal of a day of traffic on `crcr local`, or a
shadow deployment fed what the relay in service received.

A file holds GitHub's delivery log entries (`GET /app/hook/deliveries/{id}`: `guid`, `event`, `delivered_at`,
`redelivery` and `request.payload`), or raw deliveries (`headers` with `X-GitHub-Event` and `X-GitHub-Delivery`, and
`body` as sent), as a JSON array or one per line. Each keeps its delivery id, so a redelivery is one again."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3

from crcr.domain.signature import sign

TIMEOUT_S = 10.0  # GitHub's own delivery timeout


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


def _header(headers: dict[str, Any], name: str) -> str:
    return str(next((v for k, v in headers.items() if k.lower() == name), "") or "")


def _entry(n: int, doc: Any, skipped: list[str]) -> Delivery | None:
    if not isinstance(doc, dict):
        raise ReplayError(f"entry {n}: a JSON object, GitHub's delivery log entry or {{headers, body}}")
    if "request" in doc:  # GitHub's delivery log
        request = doc.get("request") or {}
        payload = request.get("payload") if isinstance(request, dict) else None
        guid, event = str(doc.get("guid") or ""), str(doc.get("event") or "")
        if not guid or not event:
            raise ReplayError(f"entry {n}: a delivery log entry needs guid and event")
        if payload is None:
            skipped.append(guid)
            return None
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        return Delivery(guid, event, body, str(doc.get("delivered_at") or ""), bool(doc.get("redelivery")))
    headers, raw = doc.get("headers"), doc.get("body")
    if not isinstance(headers, dict) or not isinstance(raw, str):
        raise ReplayError(f"entry {n}: needs request.payload (a delivery log entry) or headers and body")
    guid, event = _header(headers, "x-github-delivery"), _header(headers, "x-github-event")
    if not guid or not event:
        raise ReplayError(f"entry {n}: its headers need X-GitHub-Delivery and X-GitHub-Event")
    return Delivery(guid, event, raw.encode(), str(doc.get("delivered_at") or ""))


def read(path: Path) -> tuple[list[Delivery], list[str]]:
    """The deliveries in the order GitHub made them (their `delivered_at`, else the file's), and the guids of entries
    with no payload recorded."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReplayError(f"{path}: {exc.strerror}") from None
    try:
        stripped = text.lstrip()
        docs = (
            json.loads(stripped)
            if stripped.startswith("[")
            else [json.loads(x) for x in text.splitlines() if x.strip()]
        )
    except ValueError as exc:
        raise ReplayError(f"{path}: not JSON (an array, or one entry per line): {exc}") from None
    skipped: list[str] = []
    found = [d for n, doc in enumerate(docs, 1) if (d := _entry(n, doc, skipped)) is not None]
    order = {id(d): i for i, d in enumerate(found)}
    return sorted(found, key=lambda d: (d.at, order[id(d)])), skipped


def replay(deliveries: list[Delivery], url: str, secret: str, rate: float = 0.0) -> Replayed:
    """Send each delivery to the relay's webhook in turn, as GitHub sends it; `rate` deliveries a second at most (0:
    one after another). A refusal is reported, never retried: the relay's answer is the result."""
    done = Replayed()
    pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=TIMEOUT_S))
    started = time.monotonic()
    for n, d in enumerate(deliveries):
        if rate > 0:
            time.sleep(max(0.0, started + n / rate - time.monotonic()))
        headers = {
            "content-type": "application/json",
            "user-agent": "GitHub-Hookshot/crcr-replay",
            "x-github-event": d.event,
            "x-github-delivery": d.guid,
            "x-hub-signature-256": sign(secret.encode(), d.body),
        }
        try:
            answer = pool.request("POST", f"{url.rstrip('/')}/webhook", body=d.body, headers=headers)
            status, reason = answer.status, answer.data[:200].decode("utf-8", "replace")
        except urllib3.exceptions.HTTPError as exc:
            status, reason = 0, type(exc).__name__
        done.sent += 1
        done.answers[status] += 1
        if status not in (200, 202) and len(done.refused) < 20:
            done.refused.append(f"{d.guid}: {status} {reason}".strip())
    return done
