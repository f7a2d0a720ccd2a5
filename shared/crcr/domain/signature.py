"""Webhook signature check: HMAC-SHA256 over the raw body bytes, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac

from crcr.domain.errors import BadSignature

_PREFIX = "sha256="


def verify_signature(secrets: tuple[bytes, ...], body: bytes, header: str | None) -> None:
    """Accept when any configured secret (current or rotating-out) signed the body; raise otherwise."""
    if not header:
        raise BadSignature("missing X-Hub-Signature-256", field="X-Hub-Signature-256")
    if not header.startswith(_PREFIX):
        raise BadSignature("X-Hub-Signature-256 must start with sha256=", field="X-Hub-Signature-256")
    given = header[len(_PREFIX) :].strip().encode("ascii", "replace")
    ok = False
    for secret in secrets:
        expected = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
        # Evaluate every secret so the time taken does not tell which one (or none) matched.
        ok = hmac.compare_digest(expected, given) | ok
    if not ok:
        raise BadSignature("signature does not match the body", field="X-Hub-Signature-256")


def sign(secret: bytes, body: bytes) -> str:
    return _PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()
