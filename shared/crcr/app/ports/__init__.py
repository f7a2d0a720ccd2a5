"""Ports every use case shares: the clock, metrics and the allowlist. A port one use case needs lives beside it; one
that several use cases share lives in this package's module of its aggregate."""

from __future__ import annotations

from typing import Protocol

from crcr.domain.allowlist import Allowlist


class Clock(Protocol):
    def now(self) -> float: ...


class Metrics(Protocol):
    def count(self, name: str, value: int = 1, **dimensions: str) -> None: ...


class AllowlistProvider(Protocol):
    def current(self) -> Allowlist: ...
