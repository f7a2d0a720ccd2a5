"""Typed domain errors; one place (crcr.api) maps them to HTTP status codes."""

from __future__ import annotations

from pydantic import ValidationError


class CrcrError(Exception):
    """Base of every error the relay raises on purpose."""

    reason: str = "error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


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


class Conflict(CrcrError):
    reason = "conflict"


class RetryLater(CrcrError):
    """Answered with Retry-After: the same request may succeed later."""

    def __init__(self, message: str, *, retry_after_s: int, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = retry_after_s


class TooManyRequests(RetryLater):
    reason = "rate_limited"


class Unavailable(RetryLater):
    """A dependency (the OIDC issuer, GitHub, the allowlist) cannot answer now."""

    reason = "unavailable"


def invalid_field(exc: ValidationError) -> str:
    """The dotted path of the first invalid field, for the `field` of a 400 answer."""
    errors = exc.errors()
    return ".".join(str(part) for part in errors[0]["loc"]) if errors and errors[0]["loc"] else "body"
