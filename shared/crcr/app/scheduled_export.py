"""The scheduled export starter (ExportFunction): DynamoDB exports of the results table, full daily, incremental from
where the last one ended; `crcr hud export --from-export` reads them back (crcr.ops.export_files)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from crcr.app.ports import Clock, Metrics

FULL, INCREMENTAL = "full", "incremental"
MIN_WINDOW_S = 15 * 60  # DynamoDB's shortest incremental export
MAX_WINDOW_S = 24 * 3600  # and its longest: a longer gap is exported a day at a time, one day per run


class TableExports(Protocol):
    def start_full(self, prefix: str, at: float) -> str:
        """Start a full export of the table as it was at `at` under `prefix`; its ARN."""
        ...

    def start_incremental(self, prefix: str, start: float, end: float) -> str:
        """Start an export of what changed from `start` to `end` (new and old images) under `prefix`; its ARN."""
        ...


class ExportMarks(Protocol):
    def last(self) -> float | None:
        """Where the last export ended (None: never exported)."""
        ...

    def advance(self, to: float) -> bool:
        """Record that exports cover the table up to `to`; False when another run already got further."""
        ...


@dataclass(frozen=True)
class ExportDeps:
    exports: TableExports
    marks: ExportMarks
    metrics: Metrics
    clock: Clock


@dataclass(frozen=True)
class Started:
    kind: str  # full, incremental, or "none" (nothing new to export yet)
    prefix: str = ""
    start: float | None = None
    end: float | None = None
    arn: str = ""


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H%MZ")


def run_export(kind: str, deps: ExportDeps) -> Started:
    """Start the export the schedule asks for; an incremental one with no export before it is a full one (there is
    nothing to be incremental to), and one whose window is shorter than DynamoDB allows waits for the next run."""
    now = deps.clock.now()
    last = deps.marks.last()
    if kind == FULL or last is None:
        prefix = f"full/{_stamp(now)}"
        arn = deps.exports.start_full(prefix, now)
        deps.marks.advance(now)
        deps.metrics.count("ExportStarted", kind=FULL)
        return Started(FULL, prefix, None, now, arn)
    end = min(now, last + MAX_WINDOW_S)
    if end - last < MIN_WINDOW_S:
        deps.metrics.count("ExportSkipped", reason="too_soon")
        return Started("none", start=last, end=now)
    prefix = f"incremental/{_stamp(last)}-{_stamp(end)}"
    arn = deps.exports.start_incremental(prefix, last, end)
    if not deps.marks.advance(end):
        deps.metrics.count("ExportRaced")
    deps.metrics.count("ExportStarted", kind=INCREMENTAL)
    return Started(INCREMENTAL, prefix, last, end, arn)
