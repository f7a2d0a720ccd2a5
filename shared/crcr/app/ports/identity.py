"""Who is calling back: a verified OIDC token and the relay's own signed tickets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from crcr.domain.ticket import TicketClaims


@dataclass(frozen=True)
class VerifiedToken:
    """An OIDC token whose signature, issuer, audience and times were verified."""

    ci: str  # which issuer signed it, which decides the identity rules: "github" or "buildkite"
    claims: dict[str, Any]


class TokenVerifier(Protocol):
    def verify(self, token: str) -> VerifiedToken: ...


class TicketVerifier(Protocol):
    def verify(self, token: str, now: float) -> TicketClaims: ...
