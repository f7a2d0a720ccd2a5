"""The relay's record of each upstream check run it writes (one writer at a time, by version)."""

from __future__ import annotations

from typing import Protocol

from crcr.domain.checks import Known


class CheckRunStore(Protocol):
    def get_check(self, upstream: str, head_sha: str, name: str) -> tuple[Known | None, int]:
        """What was last written to this check run, and the row's version (0: no row)."""
        ...

    def lock_check(
        self, upstream: str, head_sha: str, name: str, version: int, now: float, lease_s: float
    ) -> int | None:
        """Take the check run for one write, if it is still at `version` and no live lock holds it;
        returns the locked version, or None."""
        ...

    def unlock_check(self, upstream: str, head_sha: str, name: str, locked: int) -> None: ...

    def save_check(self, upstream: str, head_sha: str, name: str, known: Known, locked: int) -> bool:
        """Record what was written and release the lock (False: the lock lapsed and another writer took it)."""
        ...

    def checks_of_head(self, upstream: str, head_sha: str) -> list[tuple[str, Known, int]]:
        """(name, what was written, version) of every check run the relay wrote on one commit."""
        ...
