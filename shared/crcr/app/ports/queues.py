"""The queues between the functions, and the bucket that carries bodies too big for a message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from crcr.contracts.check_messages import CheckSync
from crcr.contracts.messages import DispatchMessage, RunMessage


class DispatchQueue(Protocol):
    def send_dispatches(self, messages: list[DispatchMessage]) -> None: ...
    def reschedule(self, message: DispatchMessage, delay_s: float) -> None: ...
    def dead_letter(self, message: DispatchMessage, reason: str) -> None: ...


class ChecksQueue(Protocol):
    def send_checks(self, messages: Sequence[CheckSync], delay_s: float = 0.0) -> None: ...
    def dead_letter(self, message: CheckSync, reason: str) -> None: ...


class BlobStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...


class RunQueue(Protocol):
    def send_run(self, message: RunMessage, delay_s: float = 0.0) -> None: ...
