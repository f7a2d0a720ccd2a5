"""`row()` is the `crcr_workflow_job` row PyTorch's HUD builds from our pushes, ClickHouse defaults included."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from crcr.app.ports.jobs import JobRecord
from crcr.app.torchci import EPOCH, envelope, row
from crcr.local.torchci import extract_dynamo_record

NEVER_STARTED = JobRecord(  # what the sweeper records for a dispatch no job reported on
    dispatch_id="d1", run_id="0", run_attempt=0, job_name="", workflow_name="", state="timed_out",
    conclusion="timed_out", fingerprint="swept", url="", repo="org/repo", repo_id=1, level=2,
    delivery_id="dlv-1", upstream="pytorch/pytorch", head_sha="a" * 40, pr=5, device=None,
    dispatched_at=1_764_583_200.0, started_at=None, completed_at=1_764_586_800.0, callback_payload="{}",
    version=1, event_type="pull_request",
)  # fmt: skip


def test_a_dispatch_no_job_started_on_is_attempt_1_as_the_hud_reads_it() -> None:
    theirs = extract_dynamo_record(envelope(NEVER_STARTED))
    ours = row(NEVER_STARTED)
    assert ours["dynamoKey"] == theirs["dynamoKey"]
    assert ours["run_attempt"] == theirs["run_attempt"] == 1


def test_a_job_without_an_event_type_gets_the_column_default() -> None:
    job = replace(NEVER_STARTED, event_type="")  # ledger rows written before the event type was kept
    assert "event_type" not in extract_dynamo_record(envelope(job))  # so ClickHouse fills its DEFAULT
    assert row(job)["event_type"] == "pull_request"


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ("2026-12-01T12:00:00.250+02:00", datetime(2026, 12, 1, 10, 0, 0, 250_000, tzinfo=UTC)),
        ("2026-12-01T10:00:00", datetime(2026, 12, 1, 10, 0, tzinfo=UTC)),  # no zone: UTC
        ("9999-12-31T00:00:00Z", EPOCH),  # past what DateTime64(9) holds: ClickHouse would refuse the insert
        ("0001-01-01T00:00:00Z", EPOCH),
    ],
)
def test_times_are_those_datetime64_9_can_hold(reported: str, expected: datetime) -> None:
    body = {"workflow": {"status": "completed", "conclusion": "success", "completed_at": reported}}
    job = replace(
        NEVER_STARTED, run_id="9", run_attempt=1, job_name="build", workflow_name="CI", state="completed",
        conclusion="success", callback_payload=json.dumps(body),
    )  # fmt: skip
    assert row(job)["completed_at"] == expected


def test_rows_written_before_run_ids_became_text_still_read() -> None:
    from crcr.adapters.job_items import from_item, to_item  # noqa: PLC0415

    item = to_item(NEVER_STARTED) | {"run_id": {"N": "0"}}
    assert from_item(item).run_id == "0"
    assert to_item(NEVER_STARTED)["run_id"] == {"S": "0"}
