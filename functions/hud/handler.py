"""HudFunction: GET /hud/... -> the HUD pages (static files shipped here) and the documents the reporter keeps."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from crcr.app.pages import serve
from crcr.composition import build_hud_reader, kept
from crcr.settings import Settings

STATIC = Path(__file__).resolve().parent / "static"
_ready: tuple[Any, dict[str, bytes]] | None = None


def lambda_handler(
    event: dict[str, Any], context: Any, deps: tuple[Any, dict[str, bytes]] | None = None
) -> dict[str, Any]:
    global _ready
    # No secrets here (the pages are public): Settings straight from the environment.
    docs, assets = deps or _ready or (_ready := kept((build_hud_reader(Settings.from_env()), _assets())))
    answer = serve(str(event.get("rawPath") or "/hud/"), docs, assets)
    return {
        "statusCode": answer.status,
        "headers": answer.headers,
        "body": base64.b64encode(answer.body).decode(),
        "isBase64Encoded": True,
    }


def _assets() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in STATIC.iterdir() if path.is_file()}
