"""Pacing cells in the state table (GCRA): budgets of content-creating calls, one cell per key."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.item_codec import from_dynamo, num, to_dynamo
from crcr.adapters.table import DAY, conditional_failed, pace_key
from crcr.domain.pacing import (
    CONTENT_RATES,
    RESERVE_HORIZON_S,
    Rate,
    WindowLevel,
    busy_windows,
    grant,
    pace,
    window_level,
)

# How old a cell this pacer saw at its own last booking may be and still answer `level` without a read. The error is
# other writers' bookings since (at the hourly pace, one every 8 s): it can only make `check_runs: auto` admit a
# few detail writes too many, which the pacer then delays; it never lets a write past the budget.
LEVEL_FRESH_S = 30.0


@dataclass(frozen=True)
class _Cell:
    """A pacing cell as last seen by this instance: its version and theoretical arrival times (None: absent)."""

    version: int
    tats: tuple[float, ...] | None


def _cell(stored: dict[str, Any] | None) -> _Cell:
    if not stored or "tats" not in stored:
        return _Cell(0, None)
    item = from_dynamo(stored)
    return _Cell(int(item.get("version", 0)), tuple(float(t) for t in item["tats"]))


class DynamoPacer:
    """Pacing cells (GCRA), one per key: by default GitHub's content-creating calls per installation
    (`PACE#<installation>`/`CONTENT`); another budget (Buildkite's per organization) gets its own cell name
    and rates.

    A slot taken now is one conditional UpdateItem with no read before it: each window's time moves on in
    place, under a condition that says the window allows the call (GCRA evaluated by DynamoDB on what the
    table holds, so concurrent callers never exceed the budget, and callers that find the windows busy do
    not conflict). Which form each window takes (busy or idle) is guessed from the cell as this instance last
    saw it; a wrong guess fails the condition and brings the cell back (ALL_OLD), and the write is made again
    from it. A booking (a wait, reserved) writes the cell whole under its version. Every write adds 1 to the
    version, so a version-conditional write never misses a write made in place.
    """

    def __init__(
        self,
        client: Any,
        table: str,
        attempts: int = 50,  # each a single write, told what it lost to
        *,
        rates: tuple[Rate, ...] = CONTENT_RATES,
        cell: str = "CONTENT",
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._ddb = client
        self._table = table
        self._attempts = attempts
        self._rates = rates
        self._cell = cell
        self._sleep = sleep
        self._rand = rand
        self._seen: dict[int | str, _Cell] = {}
        self._seen_at: dict[int | str, float] = {}  # when each cell above was last seen, for `level`
        self._lock = threading.Lock()
        self._keys: dict[int | str, threading.Lock] = {}

    def acquire(self, key: int | str, now: float, reserve: bool = False) -> float:
        # One caller per cell at a time in this instance (a batch's records for one installation): they would
        # only refuse each other's bookings; in turn, each starts from the cell the one before it wrote.
        with self._lock:
            one = self._keys.setdefault(key, threading.Lock())
        with one:
            wait = self._acquire(key, now, reserve)
            self._seen_at[key] = now
            return wait

    def level(self, key: int | str, now: float) -> WindowLevel:
        """Read-only (the BudgetGauge port): how full `key`'s longest window is. From the cell this pacer saw at
        its own last acquire for `key` when that was at most LEVEL_FRESH_S ago, so a busy writer asks no more
        than it did; otherwise one read of the cell."""
        seen, at = self._seen.get(key), self._seen_at.get(key)
        if seen is None or at is None or not 0 <= now - at <= LEVEL_FRESH_S:
            cell_key = pace_key(key, self._cell)
            seen = _cell(self._ddb.get_item(TableName=self._table, Key=cell_key, ConsistentRead=True).get("Item"))
            self._seen[key], self._seen_at[key] = seen, now
        return window_level(seen.tats, now, self._rates)

    def acquire_many(self, key: int | str, now: float, count: int) -> tuple[int, float]:
        """Up to `count` slots now in one write (the Pacer port): how many, and the wait for the next one. None free:
        (0, wait), nothing booked."""
        with self._lock:
            one = self._keys.setdefault(key, threading.Lock())
        with one:
            granted = self._acquire_many(key, pace_key(key, self._cell), float(num(now)), count)
            self._seen_at[key] = now
            return granted

    def _acquire_many(self, key: int | str, cell_key: dict[str, Any], now: float, count: int) -> tuple[int, float]:
        seen = self._seen.get(key)
        for _ in range(self._attempts):
            tats = seen.tats if seen is not None else None
            _, n, wait = grant(tats, now, self._rates, count)
            if n == 0:
                return 0, wait
            if seen is not None and seen.tats is None:
                new, n, wait = grant(None, now, self._rates, count)
                found = self._write_whole(key, cell_key, new, now, None)
            else:
                found = self._take(key, cell_key, busy_windows(tats, now, self._rates), now, n)
            if found is None:
                return n, wait
            seen = found  # the cell as the table holds it: decide again from that
        return 0, 1.0

    def _acquire(self, key: int | str, now: float, reserve: bool) -> float:
        cell_key = pace_key(key, self._cell)
        now = float(num(now))  # the table's precision, so the conditions and this arithmetic agree
        seen = self._seen.get(key)
        rates = self._rates
        for attempt in range(self._attempts):
            whole = True
            if seen is None:  # never seen here: expect every window idle
                whole, wait = False, 0.0
                found = self._take(key, cell_key, busy_windows(None, now, rates), now)
            elif seen.tats is None:
                new, wait = pace(None, now, rates)
                found = self._write_whole(key, cell_key, new, now, None)
            else:
                new, wait = pace(seen.tats, now, rates, reserve=reserve)
                if wait > 0 and (not reserve or wait > RESERVE_HORIZON_S):
                    # Nothing booked: ask again then. A copy can only be behind the table (times only grow),
                    # so the real wait is at least this long.
                    return wait
                if wait == 0 and len(seen.tats) == len(rates):
                    whole = False
                    found = self._take(key, cell_key, busy_windows(seen.tats, now, rates), now)
                else:
                    found = self._write_whole(key, cell_key, new, now, seen.version)
            if found is None:
                return wait
            if whole:
                # Writers booking on one cell go one at a time (each under the version): a few milliseconds of
                # jitter keeps the losers of a round from meeting again in lockstep.
                self._sleep(self._rand() * 0.002 * min(attempt + 1, 10))
            seen = found  # the cell as the table holds it: decide again from that
        # Every refusal above was another caller's write landing first. Past that many, give up: ask again in a
        # second, or, asked to book, say so with a wait past the horizon (booked nothing), never one that reads
        # as a slot booked.
        return RESERVE_HORIZON_S + 1.0 if reserve else 1.0

    def _values(self, now: float) -> dict[str, Any]:
        return {":one": 1, ":exp": int(now) + 2 * DAY}

    def _take(
        self, key: int | str, cell_key: dict[str, Any], busy: tuple[bool, ...], now: float, cost: int = 1
    ) -> _Cell | None:
        """`cost` slots now, each window moved on in place under the condition that it allows the calls (pace's)."""
        # Exactly one time per window: each compared below, and none after the last (rates unchanged).
        sets, conditions = [], [f"attribute_not_exists(tats[{len(self._rates)}])"]
        values = self._values(now)
        for i, (rate, is_busy) in enumerate(zip(self._rates, busy, strict=True)):
            if is_busy:
                sets.append(f"tats[{i}] = tats[{i}] + :i{i}")
                conditions.append(f"tats[{i}] > :now AND tats[{i}] <= :lim{i}")
                values[":now"] = now
                values[f":i{i}"] = cost * rate.interval
                # A microsecond of slack: the float arithmetic above must never find allowed what DynamoDB's
                # decimals refuse (the same write would be refused again and again).
                values[f":lim{i}"] = now + (rate.burst - cost + 1) * rate.interval + 1e-6
            else:
                # Idle: the window allows `cost` calls at once only if they fit in its burst from its time on.
                sets.append(f"tats[{i}] = :t{i}")
                conditions.append(f"tats[{i}] <= :idle{i}")
                values[f":t{i}"] = now + cost * rate.interval
                values[f":idle{i}"] = now - max(0, cost - 1 - rate.burst) * rate.interval
        return self._update(
            key,
            cell_key,
            UpdateExpression=f"SET {', '.join(sets)}, expires_at = :exp ADD version :one",
            ConditionExpression=" AND ".join(conditions),
            ExpressionAttributeValues=to_dynamo(values),
        )

    def _write_whole(
        self, key: int | str, cell_key: dict[str, Any], tats: tuple[float, ...], now: float, version: int | None
    ) -> _Cell | None:
        """The cell whole (a booking, a new cell, new rates), if it is still the version decided from (None:
        if there is no cell yet)."""
        values = self._values(now) | {":tats": tats}
        if version is None:
            condition = "attribute_not_exists(pk)"
        else:
            condition = "version = :v"
            values[":v"] = version
        return self._update(
            key,
            cell_key,
            UpdateExpression="SET tats = :tats, expires_at = :exp ADD version :one",
            ConditionExpression=condition,
            ExpressionAttributeValues=to_dynamo(values),
        )

    def _update(self, key: int | str, cell_key: dict[str, Any], **request: Any) -> _Cell | None:
        """None when written (the new cell is remembered); otherwise the cell as the table holds it."""
        try:
            written = self._ddb.update_item(
                TableName=self._table,
                Key=cell_key,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **request,
            )
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            seen = _cell(exc.response.get("Item"))
            self._seen[key] = seen
            return seen
        self._seen[key] = _cell(written.get("Attributes"))
        return None
