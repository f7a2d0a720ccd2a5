"""Typed domain errors; one place (crcr.api) maps them to HTTP status codes."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError


class CrcrError(Exception):
    """Base of every error the relay raises on purpose."""

    reason: str = "error"

    def __init__(self, message: str, *, field: str | None = None, limit: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.limit = limit  # the documented limit a request went past (docs/contracts.md), named in the answer


class BadSignature(CrcrError):
    reason = "bad_signature"


class BadRequest(CrcrError):
    reason = "bad_request"


class PayloadTooLarge(CrcrError):
    reason = "too_large"


class AllowlistError(CrcrError):
    """A problem in an allowlist document; `line` is 1-based when known."""

    reason = "bad_allowlist"

    def __init__(self, message: str, *, line: int | None = None) -> None:
        where = f"line {line}: " if line else ""
        super().__init__(f"{where}{message}")
        self.line = line


class Unauthorized(CrcrError):
    """The token or ticket does not prove who is calling."""

    reason = "unauthorized"


class Forbidden(CrcrError):
    """The caller is known but may not report this."""

    reason = "forbidden"


class OverLimit(Forbidden):
    """Past a documented per-dispatch or per-job limit: the same request is refused however often it is sent."""

    reason = "over_limit"


class Conflict(CrcrError):
    reason = "conflict"


class RetryLater(CrcrError):
    """Answered with Retry-After: the same request may succeed later."""

    def __init__(self, message: str, *, retry_after_s: int, field: str | None = None, limit: str | None = None) -> None:
        super().__init__(message, field=field, limit=limit)
        self.retry_after_s = retry_after_s


class TooManyRequests(RetryLater):
    reason = "rate_limited"


class Unavailable(RetryLater):
    """A dependency (the OIDC issuer, GitHub, the allowlist) cannot answer now."""

    reason = "unavailable"


MAX_FIELD_CHARS = 200  # a field named in an answer: its keys may come from the caller


def field_path(parts: Sequence[str | int]) -> str:
    """A dotted path (`pull_request.head.sha`, `labels.3.name`), as a 400 answer names a field; keys a caller
    chose are cut to MAX_FIELD_CHARS and a lone surrogate in one (no answer could encode it) is escaped."""
    text = ".".join(str(part).encode("utf-8", "backslashreplace").decode() for part in parts) or "body"
    return text if len(text) <= MAX_FIELD_CHARS else text[: MAX_FIELD_CHARS - 1] + "…"


def invalid_field(exc: ValidationError) -> str:
    """The dotted path of the first invalid field, for the `field` of a 400 answer."""
    errors = exc.errors()
    return field_path(errors[0]["loc"]) if errors else "body"
