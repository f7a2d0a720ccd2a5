"""Webhook deliveries: what claiming one found, and GitHub's record of the App's deliveries for the reconciler."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from crcr.domain.redelivery import Attempt


class Claim(Enum):
    NEW = "new"
    QUEUED = "queued"  # seen before and handed to the queue: a redelivery
    PENDING = "pending"  # seen before but never reached the queue: send it again
    REPLAYED = "replayed"  # the same signed body was accepted under another delivery id: a replay
    REUSED = "reused"  # this delivery id was accepted with another body: this body claims nothing under it


@dataclass(frozen=True)
class DeliveryListing:
    """The App's webhook deliveries made since a time, newest first; `truncated`: the page cap was reached
    before that time, so older deliveries were not looked at; `incomplete`: a later page could not be read (GitHub
    unavailable), so the listing stops at the pages read and the same window must be listed again."""

    attempts: list[Attempt]
    truncated: bool = False
    incomplete: bool = False


class RedeliveryClaim(Enum):
    CLAIMED = "claimed"  # this run asks GitHub now
    ASKED = "asked"  # this attempt was asked for already (or refused): GitHub's redelivery is due or done
    BUSY = "busy"  # another run is asking right now
    EXHAUSTED = "exhausted"  # the event was asked for MAX_ASKS_PER_EVENT times: given up, first seen now
    ABANDONED = "abandoned"  # given up before
