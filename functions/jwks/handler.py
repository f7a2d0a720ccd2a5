"""JwksFunction: GET /.well-known/jwks.json -> the public keys that verify dispatch tickets."""

from __future__ import annotations

from typing import Any

from crcr.api import json_response
from crcr.composition import build_jwks, load_settings

_jwks: dict[str, Any] | None = None


def lambda_handler(event: dict[str, Any], context: Any, jwks: dict[str, Any] | None = None) -> dict[str, Any]:
    global _jwks
    jwks = jwks or _jwks or (_jwks := build_jwks(load_settings()))
    return json_response(200, jwks, {"cache-control": "public, max-age=300"})
