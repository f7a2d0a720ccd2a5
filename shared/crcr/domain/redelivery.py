"""Which of GitHub's webhook deliveries the relay missed (no attempt answered 2xx, and the relay acts on it) and should
ask GitHub to make again, with the same guid."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

# A redelivery carries the same body, so an answer about the body itself comes back the same: not worth a slot.
REFUSED_FOR_ITS_BODY = frozenset({400, 413})
# Each event is asked for at most this many times: a redelivery that lands in an outage that is still going on
# fails too and is asked for again, but a delivery the relay keeps refusing is given up (and alarmed), not looped.
MAX_ASKS_PER_EVENT = 3
# The newest delivery failed this recently: the edge may still be failing, and a redelivery now would fail too.
EDGE_SETTLE_S = 60.0
# Look back this far before the last run: GitHub may list a delivery a little after it was made.
OVERLAP_S = 300.0


@dataclass(frozen=True)
class Attempt:
    """One of GitHub's deliveries of an event to the App's webhook (one item of `GET /app/hook/deliveries`)."""

    id: int  # the delivery's id: what `POST /app/hook/deliveries/{id}/attempts` redelivers
    guid: str  # the event's X-GitHub-Delivery, the same in every attempt
    delivered_at: float
    status_code: int  # 0: no HTTP answer (a timeout, no connection)
    event: str
    action: str | None = None
    redelivery: bool = False
    repository_id: int | None = None

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status_code < 300


ActsOn = Callable[[str, str | None], bool]


def missed(attempts: Iterable[Attempt], acts_on: ActsOn, upstream_id: int | None = None) -> list[Attempt]:
    """The events no attempt of which was answered 2xx, that the relay acts on, each as its newest failed
    attempt (the one to redeliver), oldest first. An event answered 400 or 413 is left alone (its body was
    refused), and so is another repository's event when the upstream's id is known."""
    by_guid: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        by_guid.setdefault(attempt.guid, []).append(attempt)
    out = []
    for tries in by_guid.values():
        if any(t.succeeded for t in tries):
            continue
        newest = max(tries, key=lambda t: (t.delivered_at, t.id))
        if any(t.status_code in REFUSED_FOR_ITS_BODY for t in tries):
            continue
        if upstream_id is not None and newest.repository_id not in (None, upstream_id):
            continue
        if acts_on(newest.event, newest.action):
            out.append(newest)
    return sorted(out, key=lambda t: (t.delivered_at, t.id))


def edge_failing(attempts: Iterable[Attempt], now: float, settle_s: float = EDGE_SETTLE_S) -> bool:
    """The newest delivery GitHub made failed less than `settle_s` ago: the relay's edge may still be down."""
    newest = max(attempts, key=lambda t: (t.delivered_at, t.id), default=None)
    return newest is not None and not newest.succeeded and now - newest.delivered_at < settle_s


def window_start(now: float, cursor: float | None, lookback_s: float, overlap_s: float = OVERLAP_S) -> float:
    """Where a run starts looking: a little before the last run's end, and never further back than the lookback
    (the first run, or one after a long gap, looks back the lookback)."""
    earliest = now - lookback_s
    return earliest if cursor is None else max(earliest, min(cursor, now) - overlap_s)
