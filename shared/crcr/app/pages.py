"""HUD pages: which file or document answers a GET under /hud/ (HudFunction; `crcr local` serves the same)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class PageDocReader(Protocol):
    def read(self, key: str) -> bytes | None:
        """A document's bytes as stored, or None when there is none."""
        ...


# Pages are one HTML shell; its script reads the path and fetches the documents it needs. A commit is named by
# its full or short SHA in any case (the script finds the full one); any other path under /hud/ gets the shell
# with a 404, and the script says there is no such page, in words, with the way back.
PAGE = re.compile(
    r"^/hud/(trunk|nightly|shadow|commit/[0-9a-fA-F]{7,40}|pr/[1-9][0-9]{0,9}"
    r"|repo/[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100})?$"
)
DOC = re.compile(
    r"^/hud/data/(index|nightly|commit/[0-9a-f]{40}|pr/[1-9][0-9]{0,9}"
    r"|repo/[a-z0-9_.-]{1,100}/[a-z0-9_.-]{1,100})\.json$"
)
LEVEL_STATUS = "/hud/api/crcr/level-status"  # PyTorch's GET /api/crcr/level-status, as LevelFunction last wrote it
REGRESSIONS = "/hud/api/crcr/regressions"  # open and recently closed regressions, as the reporter last wrote them
NO_REGRESSIONS = b'{"schema":1,"regressions":[]}'
SHADOW = "/hud/api/crcr/shadow"  # what a shadow relay decided, newest first (crcr.app.shadow)
SHADOW_COMPARE = "/hud/api/crcr/shadow/compare"  # the last `crcr shadow compare --publish` report
NO_SHADOW = b'{"schema":1,"decisions":[]}'
ASSET = re.compile(r"^/hud/static/([a-z0-9-]+\.(?:css|js|svg))$")
TYPES = {"html": "text/html; charset=utf-8", "css": "text/css; charset=utf-8", "js": "text/javascript; charset=utf-8"}
TYPES |= {"json": "application/json", "svg": "image/svg+xml"}
# Everything the pages show from downstreams is untrusted text: no inline script, no third-party origin.
SECURITY = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _answer(status: int, body: bytes, kind: str, cache: str) -> Answer:
    return Answer(status, body, {"content-type": TYPES[kind], "cache-control": cache} | SECURITY)


# The PR and repository pages' documents are composed when read (crcr.app.summaries.pr_page, repo_page).
Compose = Callable[[str], dict[str, Any] | None]
Shadow = Callable[[], dict[str, Any]]  # a shadow relay's newest decisions (crcr.app.shadow)
COMPOSED = ("pr/", "repo/")


def serve(
    path: str,
    docs: PageDocReader | None,
    assets: dict[str, bytes],
    compose: Compose | None = None,
    shadow: Shadow | None = None,
) -> Answer:
    if path == "/hud":
        return Answer(308, b"", {"location": "/hud/"} | SECURITY)
    if path == LEVEL_STATUS:
        body = docs.read("level-status.json") if docs is not None else None
        if body is not None:
            return _answer(200, body, "json", "no-cache")
        return _answer(503, b'{"error":"not_computed","message":"the level check has not run yet"}', "json", "no-cache")
    if path == REGRESSIONS:
        body = docs.read("regressions.json") if docs is not None else None
        return _answer(200, body if body is not None else NO_REGRESSIONS, "json", "no-cache")
    if path == SHADOW_COMPARE:
        body = docs.read("shadow-compare.json") if docs is not None else None
        if body is not None:
            return _answer(200, body, "json", "no-cache")
        message = b'{"error":"not_computed","message":"no comparison published yet: crcr shadow compare --publish"}'
        return _answer(503, message, "json", "no-cache")
    if path == SHADOW:
        return _answer(200, json.dumps(shadow()).encode() if shadow is not None else NO_SHADOW, "json", "no-cache")
    if PAGE.fullmatch(path):
        return _answer(200, assets["index.html"], "html", "no-cache")
    if match := ASSET.fullmatch(path):
        name = match.group(1)
        if name in assets:
            return _answer(200, assets[name], name.rsplit(".", 1)[1], "public, max-age=300")
    elif match := DOC.fullmatch(path):
        key = f"{match.group(1)}.json"
        if compose is not None and key.startswith(COMPOSED):
            page = compose(key)
            body = json.dumps(page).encode() if page is not None else None
        else:
            body = docs.read(key) if docs is not None else None
        if body is not None:
            return _answer(200, body, "json", "no-cache")
        return _answer(404, b'{"error":"not_found","message":"nothing recorded here yet"}', "json", "no-cache")
    elif not path.startswith(("/hud/data/", "/hud/static/", "/hud/api/")) and "index.html" in assets:
        return _answer(404, assets["index.html"], "html", "no-cache")  # a page people follow a link to: in words
    return _answer(404, b'{"error":"not_found","message":"no such HUD page"}', "json", "no-cache")
