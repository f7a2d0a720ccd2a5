"""`crcr hud export`: PyTorch's HUD (torchci) rows, one `crcr_workflow_job` row per job attempt, written to a file
that PyTorch's ClickHouse loads as it is (and DuckDB or Athena read)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from crcr.app.ports.jobs import JobRecord
from crcr.app.torchci import COLUMNS, EPOCH, row

TABLE = "crcr_workflow_job"
# Our format name → ClickHouse's name for it (`FORMAT …` in the INSERT that loads the file).
FORMATS = {"jsonl": "JSONEachRow", "csv": "CSVWithNames", "parquet": "Parquet"}
INSTALL_PARQUET = "pip install 'crcr[export]'"


class ExportError(Exception):
    """What stopped an export, in one line; `code` 2 for the operator's input, 1 for the source or output."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


@dataclass(frozen=True)
class Exported:
    rows: int
    statuses: dict[str, int]
    out: str
    format: str
    source: str
    since: str | None

    def line(self) -> str:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(self.statuses.items()))
        since = f" changed since {self.since}" if self.since else ""
        detail = f" ({counts})" if counts else ""
        return f"{self.rows} rows{detail}{since} from {self.source} → {self.out} ({FORMATS[self.format]})"


def parse_since(text: str) -> datetime:
    """ISO 8601; a time without a zone is UTC, a date alone is its midnight UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ExportError(f"bad --since {text!r}: expected ISO 8601, e.g. 2026-11-30T00:00:00Z", code=2) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def last_change(job: JobRecord) -> float:
    return max(t for t in (job.completed_at, job.started_at, job.dispatched_at) if t is not None)


def select_rows(jobs: Iterable[JobRecord], since: datetime | None = None) -> list[dict[str, Any]]:
    """One row per job attempt — its latest version when it appears more than once (several exports under
    one prefix) — that changed at or after `since`, in the table's ORDER BY."""
    latest: dict[tuple[str, str, int, str], tuple[int, float, dict[str, Any]]] = {}
    for job in jobs:
        key = (job.dispatch_id, job.run_id, job.run_attempt, job.job_name)
        if key not in latest or job.version > latest[key][0]:
            latest[key] = (job.version, last_change(job), row(job))
    cutoff = since.timestamp() if since else None
    rows = [r for _, changed, r in latest.values() if cutoff is None or changed >= cutoff]
    rows.sort(key=lambda r: (r["downstream_repo"], r["delivery_id"], r["dynamoKey"]))
    return rows


def datetime64(moment: datetime) -> str:
    """DateTime64(9) as ClickHouse writes it: UTC, no zone, nine digits (load with session_timezone UTC)."""
    utc = moment.astimezone(UTC)
    return f"{utc:%Y-%m-%d %H:%M:%S}.{utc.microsecond:06d}000"


def nanoseconds(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1) * 1000


def _json_value(kind: str, value: Any) -> Any:
    return datetime64(value) if kind == "DateTime64(9)" else value


def _csv_field(kind: str, value: Any) -> str:
    if value is None:
        return ""  # unquoted empty: NULL for ClickHouse's Nullable and for DuckDB
    if kind == "String":
        # Always quoted: ClickHouse fills the column DEFAULT for an unquoted empty field ('pull_request'
        # for event_type), while a quoted "" stays ''.
        return '"' + str(value).replace('"', '""') + '"'
    if kind == "DateTime64(9)":
        return datetime64(value)
    if kind == "Nullable(Float64)":
        return repr(float(value))
    return str(int(value))


def write_jsonl(rows: list[dict[str, Any]], out: IO[bytes]) -> None:
    for r in rows:
        doc = {name: _json_value(kind, r[name]) for name, kind in COLUMNS}
        out.write(json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode() + b"\n")


def write_csv(rows: list[dict[str, Any]], out: IO[bytes]) -> None:
    out.write((",".join(name for name, _ in COLUMNS) + "\n").encode())
    for r in rows:
        out.write((",".join(_csv_field(kind, r[name]) for name, kind in COLUMNS) + "\n").encode())


def require_pyarrow() -> Any:
    try:
        import pyarrow  # noqa: PLC0415 - an optional extra, only for parquet
        import pyarrow.parquet  # noqa: PLC0415
    except ImportError:
        raise ExportError(f"--format parquet needs pyarrow: {INSTALL_PARQUET}", code=2) from None
    return pyarrow


def write_parquet(rows: list[dict[str, Any]], out: IO[bytes]) -> None:
    pa = require_pyarrow()
    types = {
        "String": pa.string(),
        "UInt64": pa.uint64(),
        "UInt32": pa.uint32(),
        "Nullable(Float64)": pa.float64(),
        "DateTime64(9)": pa.timestamp("ns", tz="UTC"),
    }
    schema = pa.schema([pa.field(name, types[kind], nullable=kind.startswith("Nullable(")) for name, kind in COLUMNS])
    columns = [[nanoseconds(r[name]) if kind == "DateTime64(9)" else r[name] for r in rows] for name, kind in COLUMNS]
    table = pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )
    pa.parquet.write_table(table, out)


WRITERS: dict[str, Callable[[list[dict[str, Any]], IO[bytes]], None]] = {
    "jsonl": write_jsonl,
    "csv": write_csv,
    "parquet": write_parquet,
}


def write(rows: list[dict[str, Any]], fmt: str, out: str) -> None:
    """To `out` whole or not at all (a temporary file renamed into place); `-` is standard output."""
    try:
        if out == "-":
            WRITERS[fmt](rows, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            return
        target = Path(out)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False) as tmp:
            try:
                WRITERS[fmt](rows, tmp)
            except BaseException:
                os.unlink(tmp.name)
                raise
        os.replace(tmp.name, target)
    except OSError as exc:
        raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from exc


def export_from_env(fmt: str, out: str | None, since: str | None, from_export: str | None) -> Exported:
    """`crcr hud export`: the results table named by CRCR_RESULTS_TABLE, or a table export in S3, reached
    with the functions' own variables (AWS_ENDPOINT_URL for `crcr local`)."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.composition.base import aws_client  # noqa: PLC0415
    from crcr.settings import ConfigError, Settings  # noqa: PLC0415

    moment = parse_since(since) if since else None
    if fmt == "parquet":
        require_pyarrow()  # before reading anything
    if from_export:
        from crcr.ops.export_files import ExportUnreadable, export_jobs, parse_s3_url  # noqa: PLC0415

        source = f"export {from_export}"
        try:
            parse_s3_url(from_export)
        except ExportUnreadable as exc:
            raise ExportError(f"bad --from-export {from_export!r}: {exc}", code=2) from exc
        try:
            rows = select_rows(export_jobs(aws_client("s3"), from_export), moment)
        except ExportUnreadable as exc:
            raise ExportError(f"cannot read {source}: {exc}") from exc
        except (BotoCoreError, ClientError) as exc:
            raise ExportError(f"cannot read {source}: {exc}") from exc
    else:
        from crcr.adapters.results import DynamoResults  # noqa: PLC0415

        try:
            settings = Settings.from_env()
            settings.require("results_table")
        except ConfigError as exc:
            raise ExportError(f"{exc} (or give --from-export s3://bucket/prefix)", code=2) from exc
        source = f"table {settings.results_table}"
        try:
            rows = select_rows(DynamoResults(aws_client("dynamodb"), str(settings.results_table)).all_jobs(), moment)
        except (BotoCoreError, ClientError) as exc:
            raise ExportError(f"cannot read {source}: {exc}") from exc
    target = out or f"{TABLE}.{fmt}"
    write(rows, fmt, target)
    return Exported(
        rows=len(rows),
        statuses=dict(Counter(r["status"] for r in rows)),
        out=target,
        format=fmt,
        source=source,
        since=moment.isoformat() if moment else None,
    )
