"""The export's rows are those PyTorch's own pipeline holds: our push → its HUD endpoint (the torchci port)
→ its DynamoDB item → clickhouse-replicator-dynamo's JSONEachRow insert → `default.crcr_workflow_job`."""

from __future__ import annotations

import json
from pathlib import Path

from crcr.app.ports.jobs import JobRecord
from crcr.app.torchci import envelope
from crcr.local.torchci import TorchciHud
from crcr.ops.torchci_rows import select_rows, write
from tests.export.conftest import ClickHouse
from tests.export.test_formats import as_stored, by_key


def test_exported_rows_are_the_rows_pytorchs_pipeline_builds(
    jobs: list[JobRecord], clickhouse: ClickHouse, tmp_path: Path
) -> None:
    hud = TorchciHud("token")
    for job in jobs:  # each job's latest push; the HUD's item keeps what it set
        status, reply = hud.handle("POST", {"x-hud-internal-bot": "token"}, json.dumps(envelope(job)).encode())
        assert status == 200, reply
    clickhouse.fresh_table()
    # As the replicator inserts (ClickHouse Cloud parses times best-effort; PyTorch's servers run in UTC).
    body = "\n".join(json.dumps(item) for item in hud.table.values())
    clickhouse.query(
        "INSERT INTO default.crcr_workflow_job SETTINGS date_time_input_format = 'best_effort', "
        f"session_timezone = 'UTC' FORMAT JSONEachRow {body}"
    )
    theirs = by_key(clickhouse.rows())

    path = tmp_path / "ours.jsonl"
    write(select_rows(jobs), "jsonl", str(path))
    clickhouse.load(path, "jsonl")
    ours = by_key(clickhouse.rows())

    assert set(ours) == set(theirs) == {as_stored(job)["dynamoKey"] for job in jobs}
    for key, row in theirs.items():
        # A downstream's nanoseconds survive in their row; Python's datetime (row()) keeps microseconds.
        row["completed_at"] -= row["completed_at"] % 1000
        assert ours[key] == row, key
