"""Which jobs get an upstream check run, and which writes move one forward."""

from __future__ import annotations

from typing import Any

import pytest

from crcr.app.checks import CheckDeps, sync_check_run
from crcr.app.ports import JobRecord
from crcr.domain.checks import Known, check_run_name, should_write, wants_check_run
from tests.unit.fakes import RecordingMetrics


@pytest.mark.parametrize(
    ("level", "device", "labels", "expected"),
    [
        (4, None, (), True),
        (3, "rocm", ("ciflow/crcr/rocm",), True),
        (3, "rocm", ("CIFLOW/CRCR/ROCM",), True),
        (3, "rocm", ("ciflow/crcr/mps", "ciflow/trunk"), False),
        (3, "rocm", (), False),
        (2, None, ("ciflow/crcr/rocm",), False),
        (1, None, (), False),
    ],
)
def test_who_gets_a_check_run(level: int, device: str | None, labels: tuple[str, ...], expected: bool) -> None:
    assert wants_check_run(level, device, labels) is expected


def test_the_name_follows_the_contract() -> None:
    assert check_run_name("Org/Repo", "CI", "build") == "crcr/Org/Repo/CI/build"


@pytest.mark.parametrize(
    ("known", "status", "conclusion", "expected"),
    [
        (None, "in_progress", None, True),
        (Known(1, "queued", None), "in_progress", None, True),
        (Known(1, "in_progress", None), "completed", "success", True),
        (Known(1, "in_progress", None), "in_progress", None, False),
        (Known(1, "completed", "success"), "in_progress", None, False),  # never regresses
        (Known(1, "completed", "success"), "completed", "success", False),
        (Known(1, "completed", "timed_out"), "completed", "success", True),  # a genuine result replaces it
    ],
)
def test_only_forward_writes(known: Known | None, status: str, conclusion: str | None, expected: bool) -> None:
    assert should_write(known, status, conclusion) is expected


def _job(state: str, conclusion: str | None) -> JobRecord:
    return JobRecord(
        dispatch_id="d", run_id=7, run_attempt=1, job_name="build", workflow_name="CI", state=state,
        conclusion=conclusion, fingerprint=state, url="https://github.com/o/r/actions/runs/7", repo="o/r",
        repo_id=1, level=4, delivery_id="x", upstream="pytorch/pytorch", head_sha="a" * 40, pr=5, device=None,
        dispatched_at=100.0, started_at=110.0, completed_at=150.0 if state == "completed" else None,
        callback_payload="{}", version=1 if state == "in_progress" else 2,
    )  # fmt: skip


class _Api:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def create_check_run(self, upstream: str, fields: dict[str, Any]) -> int:
        self.calls.append(("create", fields))
        return 99

    def update_check_run(self, upstream: str, check_run_id: int, fields: dict[str, Any]) -> None:
        self.calls.append(("update", fields))


class _Store:
    def __init__(self) -> None:
        self.rows: dict[str, tuple[Known, int]] = {}

    def get_check(self, upstream: str, head_sha: str, name: str) -> tuple[Known | None, int]:
        known, version = self.rows.get(name, (None, 0))
        return known, version

    def save_check(self, upstream: str, head_sha: str, name: str, known: Known, version: int) -> bool:
        self.rows[name] = (known, version + 1)
        return True

    def pr_labels(self, upstream: str, pr: int) -> tuple[str, ...]:
        return ()


class _Results:
    def __init__(self, latest: JobRecord) -> None:
        self.latest = latest

    def get_job(self, dispatch_id: str, run_id: int, run_attempt: int, job_name: str) -> JobRecord | None:
        return self.latest

    def put_job(self, record: JobRecord, expected_version: int | None) -> bool:
        raise AssertionError("check runs never write results")


def test_a_job_completed_before_its_in_progress_record_is_handled_is_written_once() -> None:
    api, store = _Api(), _Store()
    deps = CheckDeps(api=api, store=store, metrics=RecordingMetrics(), results=_Results(_job("completed", "success")))
    sync_check_run(_job("in_progress", None), deps)  # the older stream record, handled late
    sync_check_run(_job("completed", "success"), deps)
    assert [(kind, f["status"], f.get("conclusion")) for kind, f in api.calls] == [("create", "completed", "success")]
