"""JwksFunction: GET /.well-known/jwks.json -> the public keys that verify dispatch tickets."""

from __future__ import annotations

from typing import Any

from crcr.adapters.tickets import Ed25519Tickets
from crcr.api import json_response
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.callback import build_jwks

_keys: Ed25519Tickets | None = None


def lambda_handler(event: dict[str, Any], context: Any, keys: Ed25519Tickets | None = None) -> dict[str, Any]:
    global _keys
    # The keys, not their document, are kept: a rotated secret shows here within CRCR_SECRETS_MAX_AGE_S.
    keys = keys or _keys or (_keys := freeze_gc(build_jwks(load_settings())))
    return json_response(200, keys.jwks(), {"cache-control": "public, max-age=300"})
