"""HudFunction: GET /hud/... -> the HUD pages (static files shipped here) and the documents the reporter keeps."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from crcr.app.pages import Compose, serve
from crcr.composition import build_hud_pages, kept
from crcr.settings import Settings

STATIC = Path(__file__).resolve().parent / "static"
_ready: tuple[Any, dict[str, bytes], Compose | None] | None = None


def lambda_handler(
    event: dict[str, Any], context: Any, deps: tuple[Any, dict[str, bytes], Compose | None] | None = None
) -> dict[str, Any]:
    global _ready
    # No secrets here (the pages are public): Settings straight from the environment.
    docs, assets, compose = deps or _ready or (_ready := kept(_build()))
    answer = serve(str(event.get("rawPath") or "/hud/"), docs, assets, compose)
    return {
        "statusCode": answer.status,
        "headers": answer.headers,
        "body": base64.b64encode(answer.body).decode(),
        "isBase64Encoded": True,
    }


def _build() -> tuple[Any, dict[str, bytes], Compose | None]:
    docs, compose = build_hud_pages(Settings.from_env())
    return docs, _assets(), compose


def _assets() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in STATIC.iterdir() if path.is_file()}
