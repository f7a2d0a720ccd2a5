"""Every export format loads unchanged into PyTorch's `default.crcr_workflow_job` (ClickHouse, through chdb)
and reads in DuckDB, each value as `row()` says: NULLs, DateTime64(9) and the "never" epoch included."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crcr.adapters.results import DynamoResults
from crcr.app.ports.jobs import JobRecord
from crcr.app.torchci import COLUMNS, EPOCH, row
from crcr.ops.torchci_rows import FORMATS, last_change, nanoseconds, select_rows, write
from tests.conftest import ROOT
from tests.export.conftest import DUCKDB_TYPES, LOAD, RESULTS_TABLE, TIMES, Aws, ClickHouse


def as_stored(job: JobRecord) -> dict[str, Any]:
    """`row()` with times as nanoseconds since the epoch, the form both readers give back exactly."""
    return {k: nanoseconds(v) if k in TIMES else v for k, v in row(job).items()}


def by_key(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["dynamoKey"]: r for r in rows}


@pytest.fixture(scope="module", params=list(FORMATS))
def exported(request: pytest.FixtureRequest, aws: Aws, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    fmt = str(request.param)
    path = tmp_path_factory.mktemp("export") / f"crcr_workflow_job.{fmt}"
    write(select_rows(DynamoResults(aws.dynamodb, RESULTS_TABLE).all_jobs()), fmt, str(path))
    return fmt, path


def test_the_table_holds_the_columns_of_the_contract_in_order(clickhouse: ClickHouse) -> None:
    clickhouse.fresh_table()
    described = clickhouse.describe("TABLE default.crcr_workflow_job")
    stored = [(name, kind) for name, kind, default in described if default not in ("MATERIALIZED", "ALIAS")]
    assert stored == list(COLUMNS)


def test_clickhouse_loads_each_format_as_it_is(
    exported: tuple[str, Path], clickhouse: ClickHouse, jobs: list[JobRecord]
) -> None:
    fmt, path = exported
    clickhouse.load(path, fmt)
    loaded = clickhouse.rows()
    assert len(loaded) == len(jobs)
    assert by_key(loaded) == by_key([as_stored(job) for job in jobs])
    never = [r for r in loaded if r["job_name"] == "(no job started)"]
    assert never and never[0]["started_at"] == 0 and never[0]["queue_time"] is None  # "none" stays none
    assert all(r["completed_at"] == 0 for r in loaded if r["status"] == "in_progress")


def test_duration_seconds_reads_the_loaded_times(
    exported: tuple[str, Path], clickhouse: ClickHouse, jobs: list[JobRecord]
) -> None:
    fmt, path = exported
    clickhouse.load(path, fmt)
    text = clickhouse.query("SELECT dynamoKey, duration_seconds FROM default.crcr_workflow_job", "JSONEachRow")
    got = {doc["dynamoKey"]: doc["duration_seconds"] for doc in map(json.loads, text.splitlines())}

    def expected(r: dict[str, Any]) -> float:
        if r["completed_at"] == EPOCH:
            return 0.0
        return float(math.floor(r["completed_at"].timestamp()) - math.floor(r["started_at"].timestamp()))

    rows = by_key([row(job) for job in jobs])
    assert got == {k: expected(r) for k, r in rows.items()}
    passed = rows[next(k for k in got if k.startswith("org-four/L4-Repo/72d3"))]
    assert expected(passed) == 30 * 60 + 1  # 09:01:34.123 → 09:31:35.123, downstream clock


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_text_times_are_utc_so_the_load_says_so(fmt: str, aws: Aws, clickhouse: ClickHouse, tmp_path: Path) -> None:
    """ClickHouse reads a time without a zone in the session's zone; the load docs/contracts.md gives sets UTC."""
    path = tmp_path / f"x.{fmt}"
    write(select_rows(DynamoResults(aws.dynamodb, RESULTS_TABLE).all_jobs()), fmt, str(path))
    clickhouse.fresh_table()
    clickhouse.query(LOAD.format(path=path, format=FORMATS[fmt]).replace("SETTINGS session_timezone='UTC' ", ""))
    shifted = clickhouse.rows("job_name = 'gpu-tests'")[0]["started_at"]
    assert shifted - nanoseconds(datetime(2026, 11, 30, 9, 0, 45, tzinfo=UTC)) == 5 * 3600 * 10**9  # New York


def test_parquet_physical_types_match_the_columns(aws: Aws, clickhouse: ClickHouse, tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    write(select_rows(DynamoResults(aws.dynamodb, RESULTS_TABLE).all_jobs()), "parquet", str(path))
    arrow = {
        "String": pa.string(),
        "UInt64": pa.uint64(),
        "UInt32": pa.uint32(),
        "Nullable(Float64)": pa.float64(),
        "DateTime64(9)": pa.timestamp("ns", tz="UTC"),
    }
    schema = pq.read_schema(path)
    assert [(f.name, f.type, f.nullable) for f in schema] == [
        (name, arrow[kind], kind.startswith("Nullable(")) for name, kind in COLUMNS
    ]
    assert [(name, kind) for name, kind, _ in clickhouse.describe(f"file('{path}', Parquet)")] == [
        (name, "DateTime64(9, 'UTC')" if kind == "DateTime64(9)" else kind) for name, kind in COLUMNS
    ]


def duckdb_rows(path: Path, fmt: str) -> list[dict[str, Any]]:
    """What DuckDB reads: text formats need the column types (its sniffer would take run_id "222" for a
    number, keep microseconds and read CSV's quoted "" as NULL); parquet carries its own."""
    columns = "{" + ", ".join(f"'{name}': '{DUCKDB_TYPES[kind]}'" for name, kind in COLUMNS) + "}"
    source = {
        "jsonl": f"read_json('{path}', format='newline_delimited', columns={columns})",
        "csv": f"read_csv('{path}', header=true, columns={columns}, allow_quoted_nulls=false)",
        "parquet": f"read_parquet('{path}')",
    }[fmt]
    select = ", ".join(f"epoch_ns({name}) AS {name}" if name in TIMES else name for name, _ in COLUMNS)
    cursor = duckdb.connect().execute(f"SELECT {select} FROM {source}")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]


def test_duckdb_reads_each_format(exported: tuple[str, Path], jobs: list[JobRecord]) -> None:
    fmt, path = exported
    assert by_key(duckdb_rows(path, fmt)) == by_key([as_stored(job) for job in jobs])
    if fmt == "parquet":
        types = duckdb.connect().execute(f"SELECT column_name, column_type FROM (DESCRIBE '{path}')").fetchall()
        assert [t for _, t in types] == [
            {"DateTime64(9)": "TIMESTAMPTZ_NS"}.get(kind, DUCKDB_TYPES[kind]) for _, kind in COLUMNS
        ]


def test_rows_come_in_the_tables_order(aws: Aws) -> None:
    rows = select_rows(DynamoResults(aws.dynamodb, RESULTS_TABLE).all_jobs())
    keys = [(r["downstream_repo"], r["delivery_id"], r["dynamoKey"]) for r in rows]
    assert keys == sorted(keys)


def test_since_keeps_jobs_whose_last_change_is_at_or_after_it(jobs: list[JobRecord]) -> None:
    cutoff = sorted(last_change(job) for job in jobs)[3]
    kept = select_rows(jobs, datetime.fromtimestamp(cutoff, UTC))
    assert {r["dynamoKey"] for r in kept} == {row(j)["dynamoKey"] for j in jobs if last_change(j) >= cutoff}
    assert 0 < len(kept) < len(jobs)
    # a job still running counts from its start; one never started from its dispatch
    running = next(j for j in jobs if j.state == "in_progress")
    assert last_change(running) == running.started_at


def test_an_empty_selection_still_loads(clickhouse: ClickHouse, tmp_path: Path) -> None:
    for fmt in FORMATS:
        path = tmp_path / f"empty.{fmt}"
        write([], fmt, str(path))
        clickhouse.load(path, fmt)
        assert clickhouse.rows() == []
        assert duckdb_rows(path, fmt) == []


def documented_command(program: str) -> str:
    """The SQL of the one-line `program …"SQL"` command that docs/contracts.md (`crcr hud export`) gives."""
    line = next(x for x in (ROOT / "docs" / "contracts.md").read_text().splitlines() if x.startswith(f"{program} "))
    return line.split('"', 1)[1].rsplit('"', 1)[0]


def test_the_documented_clickhouse_command_is_the_load_tested_here() -> None:
    assert documented_command("clickhouse-client") == LOAD.format(path="crcr_workflow_job.jsonl", format="JSONEachRow")


def test_the_documented_duckdb_command(aws: Aws, jobs: list[JobRecord], tmp_path: Path) -> None:
    path = tmp_path / "crcr_workflow_job.parquet"
    write(select_rows(DynamoResults(aws.dynamodb, RESULTS_TABLE).all_jobs()), "parquet", str(path))
    database = duckdb.connect(str(tmp_path / "crcr.duckdb"))
    database.execute(documented_command("duckdb -c").replace("'crcr_workflow_job.parquet'", f"'{path}'"))
    select = ", ".join(f"epoch_ns({name}) AS {name}" if name in TIMES else name for name, _ in COLUMNS)
    cursor = database.execute(f"SELECT {select} FROM crcr_workflow_job")
    names = [d[0] for d in cursor.description]
    loaded = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    assert by_key(loaded) == by_key([as_stored(job) for job in jobs])
