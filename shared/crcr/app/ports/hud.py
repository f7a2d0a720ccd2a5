"""The HUD: the pages' JSON documents, and the errors of a push to PyTorch's HUD."""

from __future__ import annotations

from typing import Any, Protocol


class HudDocs(Protocol):
    """JSON documents the HUD pages read, written with optimistic concurrency."""

    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """The document and its version tag; (None, None) when there is none."""
        ...

    def put(self, key: str, doc: dict[str, Any], tag: str | None) -> bool:
        """Write if the document is still at `tag` (None: only if it does not exist); False otherwise."""
        ...


class HudUnavailable(Exception):
    """5xx, 429, timeout: worth retrying."""


class HudRejected(Exception):
    """A 4xx: the HUD will not take this push however often it is sent."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
