"""Upstream pull requests as the relay knows them from their newest webhook."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PrInfo:
    """What the relay knows of an upstream PR from its newest webhook."""

    head_sha: str
    base_sha: str = ""  # the commit it is based on: its jobs' baselines are at or before it
    labels: tuple[str, ...] = ()
    closed: bool = False


@dataclass(frozen=True)
class HeadRecord:
    """What storing a PR event's head did."""

    newest: bool  # the event was the newest the relay knows of the PR: its head is the PR's head now
    replaced: str | None = None  # the head it replaced, when that changed


class PrInfos(Protocol):
    def pr_info(self, upstream: str, pr: int) -> PrInfo | None:
        """The PR's head, base and labels from its newest webhook (None: the relay never saw it)."""
        ...
