"""Claims of the relay-signed dispatch ticket (DESIGN §4.2): binds one dispatch to its downstream."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TicketClaims(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sub: str  # downstream repository, as GitHub spells it
    repo_id: int
    delivery_id: str
    upstream: str
    pr: int | None
    head_sha: str
    level: int
    iat: int
    exp: int
    jti: str  # dispatch id
