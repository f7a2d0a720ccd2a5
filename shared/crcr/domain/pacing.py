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

# Redeliveries of missed webhooks (`POST /app/hook/deliveries/{id}/attempts`), asked for with the App's JWT: a
# budget apart from the installations' (at most 40 in any minute and 330 in any hour, under GitHub's secondary
# limits of about 80 and 500 for content-creating requests), so a long outage is recovered at a steady pace.
REDELIVERY_RATES: tuple[Rate, ...] = (Rate(30, 60.0, burst=10), Rate(300, 3600.0, burst=30))


# Slots are booked at most this far ahead: one SQS delay (15 minutes) reaches them. A longer wait books nothing.
RESERVE_HORIZON_S = 900.0


def share_of(rates: tuple[Rate, ...], share: float) -> tuple[Rate, ...]:
    """A part of a budget, each window scaled (at least one call a window, so a share never stops a caller)."""
    return tuple(
        Rate(max(1, round(rate.count * share)), rate.period_s, max(0, round(rate.burst * share))) for rate in rates
    )


def parse_rates(text: str) -> tuple[Rate, ...]:
    """`<count>/<period_s>+<burst>` windows separated by commas, e.g. CONTENT_RATES is `60/60+15,440/3600+50`."""
    rates = []
    for part in text.split(","):
        count, _, rest = part.strip().partition("/")
        period, _, burst = rest.partition("+")
        try:
            rate = Rate(int(count), float(period), int(burst or 0))
        except ValueError:
            raise ValueError(f"{part.strip()!r} is not <count>/<period_s>+<burst>") from None
        if rate.count < 1 or rate.period_s <= 0 or rate.burst < 0:
            raise ValueError(f"{part.strip()!r}: count must be at least 1, period positive, burst not negative")
        rates.append(rate)
    return tuple(rates)


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


def grant(
    tats: tuple[float, ...] | None, now: float, rates: tuple[Rate, ...], count: int
) -> tuple[tuple[float, ...], int, float]:
    """Up to `count` calls at once: (new theoretical arrival times, how many may go now, the wait after which the rest
    could go together). Exactly what `count` calls to `pace` one after another at `now` allow before the first that
    must wait: each window lets through its burst plus one, less what it already holds. The rest (at most a burst of
    them; all granted: one more) waits until they fit at once, so a caller with many writes comes back for them
    together instead of once per slot. None may go: the state is returned unchanged (book one with `pace`)."""
    state = tats if tats is not None and len(tats) == len(rates) else tuple(now for _ in rates)
    granted = 0
    while granted < count:
        new, wait = pace(state, now, rates)
        if wait > 0:
            break
        state, granted = new, granted + 1
    rest = max(1, min(count - granted, *(rate.burst + 1 for rate in rates)))
    wait = max(
        0.0, *(tat + (rest - 1 - rate.burst) * rate.interval - now for tat, rate in zip(state, rates, strict=True))
    )
    return state, granted, wait


@dataclass(frozen=True)
class WindowLevel:
    """A budget's longest window (GitHub's hour) as it stands, read without taking a slot: `booked` calls
    beyond its sustained rate (0 when it has been quiet; a call has to wait once `booked` is above `burst`)."""

    booked: float
    burst: int


def window_level(tats: tuple[float, ...] | None, now: float, rates: tuple[Rate, ...]) -> WindowLevel:
    """Read-only: how full the longest window of `rates` is at `now`, from the state `pace` keeps."""
    longest = max(range(len(rates)), key=lambda i: rates[i].period_s)
    rate = rates[longest]
    if tats is None or len(tats) != len(rates):
        return WindowLevel(0.0, rate.burst)
    return WindowLevel(max(0.0, tats[longest] - now) / rate.interval, rate.burst)


def busy_windows(seen: tuple[float, ...] | None, now: float, rates: tuple[Rate, ...]) -> tuple[bool, ...]:
    """For taking a slot now without reading the cell first: which windows to expect busy (a theoretical
    arrival time after `now`, which moves on by one interval) rather than idle (at or before `now`, which
    restarts at now + interval). Guessed from a copy seen earlier: times only grow, so a window seen busy
    is busy still; one seen idle (or never seen) may have been made busy by another caller since, and then
    the conditional write that relies on the guess fails and is made again from what the table holds."""
    if seen is None or len(seen) != len(rates):
        return tuple(False for _ in rates)
    return tuple(tat > now for tat in seen)
