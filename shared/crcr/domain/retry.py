"""Retry arithmetic: exponential backoff with full jitter, and GitHub's rate-limit signals."""

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
