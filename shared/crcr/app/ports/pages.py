"""The HUD pages' JSON documents (crcr's own pages, served under /hud/)."""

from __future__ import annotations

from typing import Any, Protocol


class PageDocs(Protocol):
    """JSON documents the HUD pages read, written with optimistic concurrency."""

    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """The document and its version tag; (None, None) when there is none."""
        ...

    def put(self, key: str, doc: dict[str, Any], tag: str | None) -> bool:
        """Write if the document is still at `tag` (None: only if it does not exist); False otherwise."""
        ...
