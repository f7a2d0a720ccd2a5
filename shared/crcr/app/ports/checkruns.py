"""The relay's record of the upstream check runs it writes on each commit (head), and the head's pass: one writer at a
time brings every check run of the head up to date from the recorded state, booked by whoever saw a change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from crcr.domain.checks import Known


@dataclass(frozen=True)
class HeadSync:
    """A head's pass row: the pass booked (its ticket), when it is due, the lock of the pass running, and the
    dispatches booked for it whose ledger rows it must read (`rows`: "<delivery id> <repository>")."""

    pending: str | None = None
    pending_since: float | None = None
    due_at: float | None = None
    lock_until: float = 0.0
    version: int = 0
    rows: frozenset[str] = frozenset()
    timer_at: float | None = None  # the booked pass waits for a timer of its own (a repository settling) until then


class CheckRunStore(Protocol):
    def get_check(self, upstream: str, head_sha: str, name: str) -> tuple[Known | None, int]:
        """What was last written to this check run, and the row's version (0: no row)."""
        ...

    def checks_of_head(self, upstream: str, head_sha: str) -> dict[str, tuple[Known | None, int]]:
        """name -> (what was last written, the row's version) of every check run the relay wrote on one commit."""
        ...

    def record_check(self, upstream: str, head_sha: str, name: str, known: Known, version: int, now: float) -> bool:
        """Record what was written, if the row is still at `version` (0: no row yet). False: another writer moved it."""
        ...

    def book_head(
        self, upstream: str, head_sha: str, ticket: str, now: float, due_at: float, stale_before: float, rows: set[str]
    ) -> str:
        """Ask for a pass over the head no earlier than `due_at`, adding `rows`. The ticket of the pass that will do
        it: `ticket` when none was pending, or the pending one was booked before `stale_before` (lost) or waits for a
        timer of its own later than `due_at` (its message then finds itself superseded), else the pending pass's,
        whose due time moves to `due_at`."""
        ...

    def lock_head(
        self,
        upstream: str,
        head_sha: str,
        ticket: str | None,
        now: float,
        lease_s: float,
        due_by: float,
        booked_before: float,
    ) -> tuple[int | None, HeadSync]:
        """Take the head for one pass: the pass booked (`ticket`; None: a write of its own, which needs no booking),
        no live lock and, for a booked pass, nothing asked for after `due_by` unless it was booked before
        `booked_before` (a steady stream of changes still gets its pass). The locked version (None: not taken) and
        the row as it stood before."""
        ...

    def finish_head(
        self,
        upstream: str,
        head_sha: str,
        ticket: str | None,
        locked: int,
        now: float,
        done: set[str],
        keep: bool,
        timer_at: float | None = None,
    ) -> float | None:
        """Release the head, forgetting the `done` rows, and end the booking unless `keep` or something was asked for
        during the pass; `timer_at`: the booking kept waits for a timer of its own until then, which a request for
        sooner takes over (book_head). None: over; else when the same pass must run again."""
        ...

    def drop_head(self, upstream: str, head_sha: str, ticket: str) -> None:
        """End the booking `ticket` whatever was asked for meanwhile (its message could not be sent): the next ask
        books a pass of its own. The dispatches booked stay for it."""
        ...
