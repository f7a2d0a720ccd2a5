"""Claims of the relay-signed dispatch ticket (docs/contracts.md): binds one dispatch to its downstream."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

CI = Literal["github", "buildkite"]


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
    # Where the dispatch runs: a ticket for a Buildkite build is refused from a GitHub Actions run and the
    # reverse. Absent in tickets signed before Buildkite: those were all GitHub dispatches.
    ci: CI = "github"
