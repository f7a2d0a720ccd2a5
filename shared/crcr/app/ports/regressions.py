"""The regressions of downstream jobs on the upstream's default branch: kept by the reporter, read by verdicts, the
HUD's document and `crcr regressions`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from crcr.domain.regressions import Tracked


class RegressionStore(Protocol):
    def job_regressions(self, upstream: str, repo: str, workflow_name: str, job_name: str) -> tuple[list[Tracked], int]:
        """One job's regressions as kept, with the version to write them back at (0: none kept)."""
        ...

    def save_job_regressions(
        self, upstream: str, repo: str, workflow_name: str, job_name: str, kept: list[Tracked], version: int
    ) -> bool:
        """Replace one job's regressions if they are still at `version`; False when another writer got there first."""
        ...

    def regressions_of(self, upstream: str) -> list[Tracked]:
        """Every regression kept for the upstream, open and recently closed."""
        ...


CHANGE_TRIES = 8


def change_regressions(
    store: RegressionStore, upstream: str, job: tuple[str, str, str], change: Callable[[Tracked], Tracked]
) -> int:
    """Apply `change` to each of one job's (repository, workflow, job) regressions, written back at the version read
    (read again when another writer got there first); how many it changed."""
    for _ in range(CHANGE_TRIES):
        kept, version = store.job_regressions(upstream, *job)
        changed = [change(t) for t in kept]
        moved = sum(1 for a, b in zip(kept, changed, strict=True) if a != b)
        if not moved or store.save_job_regressions(upstream, *job, changed, version):
            return moved
    return 0
