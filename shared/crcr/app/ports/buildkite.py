"""Buildkite builds as a dispatch asks for them, and the errors of its REST API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from crcr.domain.identity import Channel, Evidence, id_text

# Buildkite meta_data keys of a relay-created build; the dispatch id finds the build again
# (GET .../builds?meta_data[crcr_dispatch_id]=<id>).
DISPATCH_META_KEY = "crcr_dispatch_id"


DELIVERY_META_KEY = "crcr_delivery_id"


@dataclass(frozen=True)
class NewBuild:
    """What a Buildkite dispatch asks for: the downstream's branch at HEAD, with the relay's word in env."""

    branch: str
    message: str
    env: dict[str, str]  # CRCR_TICKET, CRCR_CALLBACK_URL, ... (the build's only input from the relay)
    meta_data: dict[str, str]  # crcr_dispatch_id, crcr_delivery_id: what finds the build again
    commit: str = "HEAD"


class BuildkiteError(Exception):
    """Base of errors the Buildkite adapter raises; each tells the use case how to react."""


class BuildkiteUnavailable(BuildkiteError):
    """5xx, timeout or connection failure: retry with backoff. `maybe_sent`: the request may have reached
    Buildkite (so a build may exist); False only when it certainly never left (no connection)."""

    def __init__(self, message: str, maybe_sent: bool = True) -> None:
        super().__init__(message)
        self.maybe_sent = maybe_sent


class BuildkiteRateLimited(BuildkiteError):
    """429: nothing was done; wait `wait_s` (Buildkite's reset) and spend no attempt."""

    def __init__(self, wait_s: float, message: str) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class BuildkiteRejected(BuildkiteError):
    """401/403/404/422 and other 4xx: Buildkite refused, with its `message`; retrying will not fix it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


@dataclass(frozen=True)
class BuildkiteJob:
    """One command job of a build as Buildkite describes it (`GET .../builds/{number}`, its `jobs`)."""

    id: str  # the job's UUID: the callback's check_run_id for it
    name: str
    state: str  # scheduled, running, passed, failed, canceled, timed_out, expired, ...
    conclusion: str | None  # crcr.domain.runs.buildkite_conclusion: None while it has not finished
    started_at: float | None
    finished_at: float | None
    url: str


@dataclass(frozen=True)
class BuildkiteBuild:
    state: str
    finished: bool  # the build is over: each job's conclusion is final
    jobs: tuple[BuildkiteJob, ...]  # its command jobs, the latest retry of each
    id: str = ""  # which build Buildkite's answer is of (for the inbound door): its UUID and number
    number: int | None = None

    def evidence(self) -> Evidence:
        return Evidence(Channel.BUILD_READ, build_number=id_text(self.number), build_id=self.id or None)


class BuildReader(Protocol):
    def build(self, organization: str, pipeline: str, number: int) -> BuildkiteBuild | None:
        """None: Buildkite has no such build (404). Raises BuildkiteError otherwise."""
        ...
