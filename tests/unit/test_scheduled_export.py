"""The results table's scheduled export (crcr.app.scheduled_export): the first run exports in full, each later one what
changed since the last ended, never a window DynamoDB refuses, a long gap a day at a time."""

from __future__ import annotations

from crcr.app.scheduled_export import ExportDeps, run_export
from tests.unit.fakes import FakeClock, RecordingMetrics


class Exports:
    def __init__(self) -> None:
        self.started: list[tuple[str, str, float | None, float]] = []

    def start_full(self, prefix: str, at: float) -> str:
        self.started.append(("full", prefix, None, at))
        return f"arn:export/{len(self.started)}"

    def start_incremental(self, prefix: str, start: float, end: float) -> str:
        self.started.append(("incremental", prefix, start, end))
        return f"arn:export/{len(self.started)}"


class Marks:
    def __init__(self) -> None:
        self.to: float | None = None

    def last(self) -> float | None:
        return self.to

    def advance(self, to: float) -> bool:
        if self.to is not None and self.to >= to:
            return False
        self.to = to
        return True


def world() -> tuple[ExportDeps, Exports, FakeClock]:
    clock, exports = FakeClock(), Exports()
    clock.t = 1_796_000_000.0
    return ExportDeps(exports, Marks(), RecordingMetrics(), clock), exports, clock


def test_the_first_run_is_full_then_each_run_exports_from_where_the_last_ended() -> None:
    deps, exports, clock = world()
    first = run_export("incremental", deps)  # nothing to be incremental to yet
    assert (first.kind, first.prefix) == ("full", "full/2026-11-30T0053Z")
    clock.t += 3 * 3600
    second = run_export("incremental", deps)
    assert (second.kind, second.start, second.end) == ("incremental", clock.t - 3 * 3600, clock.t)
    assert second.prefix == "incremental/2026-11-30T0053Z-2026-11-30T0353Z"
    clock.t += 600  # ten minutes: shorter than DynamoDB's shortest window
    assert run_export("incremental", deps).kind == "none" and len(exports.started) == 2
    assert deps.metrics.counts["ExportSkipped"] == 1  # type: ignore[attr-defined]
    clock.t += 3 * 86_400  # a gap of three days: exported a day per run
    gap = run_export("incremental", deps)
    assert gap.end - gap.start == 86_400 and gap.start == second.end  # type: ignore[operator]
    daily = run_export("full", deps)
    assert daily.kind == "full" and exports.started[-1] == ("full", daily.prefix, None, clock.t)
    assert deps.marks.last() == clock.t
