"""Pacing of content-creating GitHub calls per installation (GCRA over several windows)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    count: int
    period_s: float

    @property
    def interval(self) -> float:
        return self.period_s / self.count


# GitHub's secondary limits are about 80 content-creating requests a minute and 500 an hour;
# stay a little under both so retries and other writers of the same installation have room.
CONTENT_RATES: tuple[Rate, ...] = (Rate(70, 60.0), Rate(450, 3600.0))


def pace(tats: tuple[float, ...] | None, now: float, rates: tuple[Rate, ...]) -> tuple[tuple[float, ...], float]:
    """Generic cell rate algorithm: return (new theoretical arrival times, wait).

    wait == 0 means the call may go now and the returned state must be stored; wait > 0 means
    try again after that many seconds, and the state is returned unchanged.
    """
    current = tats if tats is not None and len(tats) == len(rates) else tuple(now for _ in rates)
    new: list[float] = []
    wait = 0.0
    for tat, rate in zip(current, rates, strict=True):
        start = max(tat, now)
        allow_at = start + rate.interval - rate.period_s
        wait = max(wait, allow_at - now)
        new.append(start + rate.interval)
    if wait > 0:
        return current, wait
    return tuple(new), 0.0
