"""Upstream check runs (DESIGN §4.5): who gets one, its name, and which writes move it forward."""

from __future__ import annotations

from dataclasses import dataclass

from crcr.domain.levels import Level

STATUS_RANK = {"queued": 0, "in_progress": 1, "completed": 2}
CIFLOW_DEVICE_PREFIX = "ciflow/crcr/"


def wants_check_run(level: int, device: str | None, labels: tuple[str, ...]) -> bool:
    """L4 always; L3 only while the PR carries ciflow/crcr/<device>; L1/L2 never."""
    if level >= Level.L4:
        return True
    if level == Level.L3 and device:
        return f"{CIFLOW_DEVICE_PREFIX}{device}".lower() in {label.lower() for label in labels}
    return False


def parse_external_id(external_id: str | None) -> tuple[str, int] | None:
    """`<downstream repo>:<run_id>:<pr>` (DESIGN §4.5) -> (repo, run_id)."""
    parts = (external_id or "").rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def check_run_name(repo: str, workflow_name: str, job_name: str) -> str:
    """Per job; a dispatch no job started on is the repository's own check run, crcr/<owner>/<repo>."""
    return f"crcr/{repo}/{workflow_name}/{job_name}" if job_name else f"crcr/{repo}"


@dataclass(frozen=True)
class Known:
    """What the relay last wrote to a check run."""

    check_run_id: int
    status: str
    conclusion: str | None
    run_attempt: int = 0


def should_write(known: Known | None, status: str, conclusion: str | None, run_attempt: int = 0) -> bool:
    """Create when unknown; then only forward: never back to an earlier status, and a completed run is
    rewritten only when its conclusion changes (a sweeper's timed_out replaced by a genuine result).
    A newer run attempt (a re-run from the Checks tab) starts the same check run over."""
    if known is None:
        return True
    if run_attempt != known.run_attempt:
        return run_attempt > known.run_attempt
    if STATUS_RANK[status] != STATUS_RANK[known.status]:
        return STATUS_RANK[status] > STATUS_RANK[known.status]
    return status == "completed" and conclusion != known.conclusion
