"""Retry arithmetic: exponential backoff with full jitter, and GitHub's and Buildkite's rate-limit signals."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    base_s: float = 2.0
    cap_s: float = 900.0
    max_attempts: int = 8  # transient failures (5xx, timeouts) before dead-lettering

    def backoff(self, attempt: int, rand: Callable[[], float]) -> float:
        """Full jitter (AWS architecture blog): uniform in [1, min(cap, base * 2**attempt)]."""
        ceiling = min(self.cap_s, self.base_s * 2.0 ** max(attempt, 0))
        return max(1.0, float(rand()) * ceiling)


SECONDARY_LIMIT_WAIT_S = 60.0  # GitHub: with no header to go by, wait at least one minute


def rate_limit_wait(status: int, headers: Mapping[str, str], message: str, now: float) -> float | None:
    """Seconds GitHub asks us to wait, or None when the response is not a rate limit.

    GitHub documents: honour retry-after; else when x-ratelimit-remaining is 0 wait until
    x-ratelimit-reset; else (secondary limit) wait at least a minute.
    """
    if status not in (403, 429):
        return None
    retry_after = headers.get("retry-after")
    if retry_after is not None:
        try:
            return max(1.0, float(retry_after))
        except ValueError:
            return SECONDARY_LIMIT_WAIT_S
    if headers.get("x-ratelimit-remaining") == "0" and headers.get("x-ratelimit-reset"):
        try:
            return max(1.0, float(headers["x-ratelimit-reset"]) - now + 1.0)
        except ValueError:
            return SECONDARY_LIMIT_WAIT_S
    if status == 429 or "rate limit" in message.lower():
        return SECONDARY_LIMIT_WAIT_S
    return None


BUILDKITE_DEFAULT_WAIT_S = 60.0  # a 429 without a reset to go by: Buildkite's windows are one minute long


def _seconds(raw: object) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def buildkite_rate_limit_wait(headers: Mapping[str, str], body_reset: object = None) -> float:
    """Seconds to wait after Buildkite's 429: until the later of the windows it names has reset.

    Buildkite documents `RateLimit-Reset` (organization) and `RateLimit-User-Reset` (token user), both
    seconds until that window resets, and says to make no request until the relevant one has passed: the
    larger of those present. The 429 body's `reset` (the exceeded window's) serves only when neither is.
    One second more covers a reset Buildkite rounded down.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    resets = [
        s
        for s in (_seconds(lowered.get("ratelimit-reset")), _seconds(lowered.get("ratelimit-user-reset")))
        if s is not None
    ]
    if not resets and (from_body := _seconds(body_reset)) is not None:
        resets.append(from_body)
    return max(resets) + 1.0 if resets else BUILDKITE_DEFAULT_WAIT_S
