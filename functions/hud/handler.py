"""HudFunction: GET /hud/... -> the HUD pages (static files shipped here) and the documents the reporter keeps."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from crcr.app.pages import Compose, Shadow, serve
from crcr.composition.base import freeze_gc
from crcr.composition.pages import build_pages
from crcr.settings import Settings

STATIC = Path(__file__).resolve().parent / "static"
Built = tuple[Any, dict[str, bytes], Compose | None, Shadow | None]
_ready: Built | None = None


def lambda_handler(event: dict[str, Any], context: Any, deps: Built | None = None) -> dict[str, Any]:
    global _ready
    # No secrets here (the pages are public): Settings straight from the environment.
    docs, assets, compose, shadow = deps or _ready or (_ready := freeze_gc(_build()))
    answer = serve(str(event.get("rawPath") or "/hud/"), docs, assets, compose, shadow)
    return {
        "statusCode": answer.status,
        "headers": answer.headers,
        "body": base64.b64encode(answer.body).decode(),
        "isBase64Encoded": True,
    }


def _build() -> Built:
    docs, compose, shadow = build_pages(Settings.from_env())
    return docs, _assets(), compose, shadow


def _assets() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in STATIC.iterdir() if path.is_file()}
