"""A push to PyTorch's HUD (torchci) that failed: worth retrying, or refused for good."""

from __future__ import annotations


class TorchciUnavailable(Exception):
    """5xx, 429, timeout: worth retrying."""


class TorchciRejected(Exception):
    """A 4xx: the HUD will not take this push however often it is sent."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
