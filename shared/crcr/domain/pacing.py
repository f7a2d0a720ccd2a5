"""Pacing of the relay's API calls (GCRA over several windows): GitHub writes per installation, Buildkite calls
per organization."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    """`count` calls per `period_s` sustained, plus at most `burst` more at once.

    In any window of `period_s` seconds no more than count + burst calls pass.
    """

    count: int
    period_s: float
    burst: int = 0

    @property
    def interval(self) -> float:
        return self.period_s / self.count


# GitHub's secondary limits: about 80 content-creating requests a minute and 500 an hour.
# Windows hold at most 75 and 491, leaving room for other writers of the same installation.
CONTENT_RATES: tuple[Rate, ...] = (Rate(60, 60.0, burst=15), Rate(440, 3600.0, burst=50))

# Buildkite's REST API: 200 requests a minute per organization and, in its newer documentation, 50 a minute
# per token user (a quota set per organization, under Settings > Quotas). At most 45 in any minute leaves
# room for the token's other users; every call counts (a build lookup as much as a create).
BUILDKITE_RATES: tuple[Rate, ...] = (Rate(40, 60.0, burst=5),)


def pace(
    tats: tuple[float, ...] | None, now: float, rates: tuple[Rate, ...], reserve: bool = False
) -> tuple[tuple[float, ...], float]:
    """Generic cell rate algorithm: return (new theoretical arrival times, wait).

    wait == 0 means the call may go now and the returned state must be stored. wait > 0 means the call
    must wait that many seconds: with `reserve` the returned state books that later slot (store it, and
    make the call then without asking again); without, the state is returned unchanged (ask again then).
    Booking keeps waiting callers from all coming back for the same freed slot.
    """
    current = tats if tats is not None and len(tats) == len(rates) else tuple(now for _ in rates)
    wait = max(0.0, *(tat - rate.burst * rate.interval - now for tat, rate in zip(current, rates, strict=True)))
    if wait > 0 and not reserve:
        return current, wait
    at = now + wait
    return tuple(max(tat, at) + rate.interval for tat, rate in zip(current, rates, strict=True)), wait
