"""The queues between the functions, and the bucket that carries bodies too big for a message."""

from __future__ import annotations

from typing import Protocol

from crcr.contracts.messages import CheckSyncMessage, DispatchMessage, RunMessage


class DispatchQueue(Protocol):
    def send_dispatches(self, messages: list[DispatchMessage]) -> None: ...
    def reschedule(self, message: DispatchMessage, delay_s: float) -> None: ...
    def dead_letter(self, message: DispatchMessage, reason: str) -> None: ...


class ChecksQueue(Protocol):
    def send_checks(self, messages: list[CheckSyncMessage], delay_s: float = 0.0) -> None: ...
    def dead_letter(self, message: CheckSyncMessage, reason: str) -> None: ...


class BlobStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...


class RunQueue(Protocol):
    def send_run(self, message: RunMessage, delay_s: float = 0.0) -> None: ...
