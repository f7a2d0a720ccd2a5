"""`--from-export`: a DynamoDB table export in S3 gives the rows the live table gives — moto's export (one
gzip, no manifest) and one laid out as AWS documents it (manifests naming each data file)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from crcr.adapters.results import DynamoResults
from crcr.adapters.scheduled_export import DynamoExportMarks, DynamoTableExports
from crcr.app.scheduled_export import ExportDeps
from crcr.local.stack import Context
from crcr.local.template import load_template
from crcr.ops.export_files import ExportUnreadable, export_jobs
from crcr.ops.torchci_rows import select_rows, write
from tests.conftest import ROOT
from tests.export.conftest import BUCKET, RESULTS_TABLE, Aws, ClickHouse, create_results_table
from tests.export.jobs import recorded_jobs
from tests.unit.fakes import FakeClock, RecordingMetrics

_spec = importlib.util.spec_from_file_location("export_handler", ROOT / "functions" / "export" / "handler.py")
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
lambda_handler = _module.lambda_handler
CONTEXT = Context("crcr-test-ExportFunction", 30)


def table_rows(aws: Aws, table: str = RESULTS_TABLE) -> list[dict[str, Any]]:
    return select_rows(DynamoResults(aws.dynamodb, table).all_jobs())


def moto_export(aws: Aws, table: str, prefix: str) -> None:
    arn = aws.dynamodb.describe_table(TableName=table)["Table"]["TableArn"]
    export = aws.dynamodb.export_table_to_point_in_time(
        TableArn=arn, S3Bucket=BUCKET, S3Prefix=prefix, ExportFormat="DYNAMODB_JSON"
    )["ExportDescription"]
    deadline = time.time() + 10
    while export["ExportStatus"] == "IN_PROGRESS" and time.time() < deadline:
        time.sleep(0.05)
        export = aws.dynamodb.describe_export(ExportArn=export["ExportArn"])["ExportDescription"]
    assert export["ExportStatus"] == "COMPLETED", export


def put(aws: Aws, key: str, data: bytes) -> None:
    aws.s3.put_object(Bucket=BUCKET, Key=key, Body=data)


def test_the_results_table_keeps_point_in_time_recovery(aws: Aws) -> None:
    """An export to S3 needs it: template.yaml declares it (moto's CloudFormation would ignore it)."""
    props = load_template(ROOT / "template.yaml")["Resources"]["ResultsTable"]["Properties"]
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    backups = aws.dynamodb.describe_continuous_backups(TableName=RESULTS_TABLE)["ContinuousBackupsDescription"]
    assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"


def test_a_moto_export_gives_the_tables_rows(aws: Aws) -> None:
    moto_export(aws, RESULTS_TABLE, "exports/moto")
    keys = [o["Key"] for o in aws.s3.list_objects_v2(Bucket=BUCKET, Prefix="exports/moto/")["Contents"]]
    assert len(keys) == 1 and "/AWSDynamoDB/" in keys[0] and keys[0].endswith(".gz")  # no manifest at all
    assert select_rows(export_jobs(aws.s3, f"s3://{BUCKET}/exports/moto")) == table_rows(aws)


def test_several_exports_under_one_prefix_give_each_job_attempt_once_at_its_latest(aws: Aws) -> None:
    table = "crcr-test-Results-changing"
    create_results_table(aws.dynamodb, table)
    results = DynamoResults(aws.dynamodb, table)
    running = next(job for job in recorded_jobs() if job.state == "in_progress")
    assert results.put_job(running, None)
    moto_export(aws, table, "exports/daily")
    done = replace(running, state="completed", conclusion="success", completed_at=running.started_at + 60, version=2)
    assert results.put_job(done, running.version)
    moto_export(aws, table, "exports/daily")

    rows = select_rows(export_jobs(aws.s3, f"s3://{BUCKET}/exports/daily"))
    assert [(r["status"], r["conclusion"]) for r in rows] == [("completed", "success")]
    assert rows == table_rows(aws, table)


def test_an_export_laid_out_as_aws_documents_it(aws: Aws) -> None:
    items = aws.dynamodb.scan(TableName=RESULTS_TABLE, ConsistentRead=True)["Items"]
    lines = [json.dumps({"Item": item}) + "\n" for item in items]
    root = "exports/aws/AWSDynamoDB/01764547200000-a1b2c3d4"
    files = {  # dataFileS3Key counts from the bucket's root in one line, from the export prefix in another
        f"{root}/data/3ssfmvxqbu2dlbsj7w6bqrtwpy.json.gz": lines[:3],
        f"{root}/data/vhfbkbrtrq7wnpljq2m5cgqvwa.json.gz": lines[3:],
        f"{root}/data/yk3jqrsiqq4afhn2kiyyklkfaq.json.gz": [],  # an empty partition
    }
    for key, content in files.items():
        put(aws, key, gzip.compress("".join(content).encode()))
    first, second, empty = files
    manifest = [
        {"itemCount": 3, "md5Checksum": "x", "etag": "y", "dataFileS3Key": first},
        {
            "itemCount": len(items) - 3,
            "md5Checksum": "x",
            "etag": "y",
            "dataFileS3Key": second.removeprefix("exports/aws/"),
        },
        {"itemCount": 0, "md5Checksum": "x", "etag": "y", "dataFileS3Key": empty},
    ]
    put(aws, f"{root}/manifest-files.json", "".join(json.dumps(m) + "\n" for m in manifest).encode())
    summary = {
        "version": "2020-06-30", "exportArn": "arn:aws:dynamodb:us-east-1:123456789012:table/t/export/x",
        "startTime": "2026-12-01T00:00:00.000Z", "endTime": "2026-12-01T00:05:00.000Z",
        "exportTime": "2026-12-01T00:00:00.000Z", "s3Bucket": BUCKET, "s3Prefix": "exports/aws",
        "manifestFilesS3Key": f"{root}/manifest-files.json", "itemCount": len(items),
        "outputFormat": "DYNAMODB_JSON", "exportType": "FULL_EXPORT",
    }  # fmt: skip
    put(aws, f"{root}/manifest-summary.json", json.dumps(summary).encode())
    for name in ("_started", "manifest-files.checksum", "manifest-summary.checksum"):
        put(aws, f"{root}/{name}", b"")
    # A data file no manifest names (an export that failed half-way) is not read.
    put(aws, f"{root}/data/unlisted.json.gz", b"not even gzip")

    assert select_rows(export_jobs(aws.s3, f"s3://{BUCKET}/exports/aws")) == table_rows(aws)


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({}, "no DynamoDB export under it"),
        ({"AWSDynamoDB/e/data/a.json.gz": b"plain text"}, "not a gzip of UTF-8 lines"),
        ({"AWSDynamoDB/e/data/a.json.gz": gzip.compress(b'{"Item": {"pk": ')}, "line 1: not JSON"),
        ({"AWSDynamoDB/e/data/a.json.gz": gzip.compress(b'{"Image": {}}\n')}, 'not an export line ({"Item"'),
        (
            {"AWSDynamoDB/e/data/a.json.gz": gzip.compress(b'{"Item": {"pk": {"S": "DSP#x"}, "sk": {"S": "JOB#1"}}}')},
            "line 1: not a job record (KeyError: 'dispatch_id')",
        ),
        ({"AWSDynamoDB/e/manifest-files.json": b'{"dataFileS3Key": "AWSDynamoDB/e/data/gone.json.gz"}\n'}, "NoSuchKey"),
        (
            {
                "AWSDynamoDB/e/manifest-summary.json": b'{"outputFormat": "ION", "exportType": "FULL_EXPORT"}',
                "AWSDynamoDB/e/manifest-files.json": b"",
            },
            "a ION FULL_EXPORT; export the table as DYNAMODB_JSON",
        ),
    ],
)
def test_an_unreadable_export_says_where_and_why(aws: Aws, files: dict[str, bytes], says: str) -> None:
    prefix = f"broken/{uuid.uuid4().hex}"
    for key, data in files.items():
        put(aws, f"{prefix}/{key}", data)
    with pytest.raises(ExportUnreadable) as caught:
        list(export_jobs(aws.s3, f"s3://{BUCKET}/{prefix}"))
    assert says in str(caught.value)


def test_a_missing_bucket_is_unreadable(aws: Aws) -> None:
    with pytest.raises(ExportUnreadable, match="NoSuchBucket"):
        list(export_jobs(aws.s3, "s3://no-such-bucket/exports"))


def of(item: dict[str, Any], job: Any) -> bool:
    return bool(item.get("run_id", {}).get("S") == job.run_id and item.get("job_name", {}).get("S") == job.job_name)


def test_a_full_export_and_the_incremental_ones_after_it_give_the_tables_rows_in_clickhouse(
    aws: Aws, clickhouse: ClickHouse, tmp_path: Path
) -> None:
    """The schedule's exports under one prefix (a full one as moto writes it, then an incremental one laid out as
    AWS documents it, with a job finished and another deleted since): the newest image of each job wins, the deletion
    holds, and ClickHouse loads the rows `crcr hud export` makes of them as it loads the table's own."""
    table = "crcr-test-Results-incremental"
    create_results_table(aws.dynamodb, table)
    results = DynamoResults(aws.dynamodb, table)
    jobs = recorded_jobs()
    for job in jobs:
        assert results.put_job(job, None)
    moto_export(aws, table, "exports/scheduled/full")
    running = next(job for job in jobs if job.state == "in_progress")
    done = replace(running, state="completed", conclusion="success", completed_at=running.started_at + 60, version=2)
    assert results.put_job(done, running.version)
    gone = next(job for job in jobs if job.state == "completed")
    items = {(i["pk"]["S"], i["sk"]["S"]): i for i in aws.dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]}
    gone_key = next(k for k, i in items.items() if of(i, gone))
    aws.dynamodb.delete_item(TableName=table, Key={"pk": {"S": gone_key[0]}, "sk": {"S": gone_key[1]}})
    finished = next(i for i in items.values() if of(i, running) and i["state"]["S"] == "completed")
    now_us = int((time.time() + 5) * 1e6)
    lines = [
        {"Metadata": {"WriteTimestampMicros": {"N": str(now_us)}}, "Keys": {"pk": finished["pk"], "sk": finished["sk"]},
         "NewImage": finished},
        {"Metadata": {"WriteTimestampMicros": {"N": str(now_us)}},
         "Keys": {"pk": {"S": gone_key[0]}, "sk": {"S": gone_key[1]}}},
    ]  # fmt: skip
    root = "exports/scheduled/incremental/AWSDynamoDB/01764550800000-e5f6a7b8"
    put(aws, f"{root}/data/abc.json.gz", gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode()))
    put(aws, f"{root}/manifest-files.json", json.dumps({"dataFileS3Key": f"{root}/data/abc.json.gz"}).encode())
    to_time = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now_us / 1e6))
    summary = {"outputFormat": "DYNAMODB_JSON", "exportType": "INCREMENTAL_EXPORT", "exportToTime": to_time,
               "exportFromTime": "2026-12-01T00:00:00.000Z", "outputView": "NEW_AND_OLD_IMAGES"}  # fmt: skip
    put(aws, f"{root}/manifest-summary.json", json.dumps(summary).encode())

    rows = select_rows(export_jobs(aws.s3, f"s3://{BUCKET}/exports/scheduled"))
    assert rows == table_rows(aws, table)
    assert not [r for r in rows if r["run_id"] == int(gone.run_id) and r["job_name"] == gone.job_name]
    for name, source in (("exported", rows), ("table", table_rows(aws, table))):
        write(source, "jsonl", str(tmp_path / f"{name}.jsonl"))
    clickhouse.load(tmp_path / "exported.jsonl", "jsonl")
    loaded = clickhouse.rows()
    clickhouse.load(tmp_path / "table.jsonl", "jsonl")
    assert loaded == clickhouse.rows() and len(loaded) == len(rows)


def test_the_schedules_exports_read_back_as_the_tables_rows(aws: Aws) -> None:
    """ExportFunction's adapters against moto: its first run exports the table in full, the next what changed since
    (moto writes the whole table for it, as of then); `crcr hud export --from-export` of the exports' root gives the
    table's rows, and the mark of the last export only moves forward."""
    state = "crcr-test-State-exports"
    aws.dynamodb.create_table(
        TableName=state, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in ("pk", "sk")],
    )  # fmt: skip
    clock = FakeClock()
    clock.t = time.time()
    deps = ExportDeps(
        DynamoTableExports(aws.dynamodb, RESULTS_TABLE, BUCKET, root="scheduled"),
        DynamoExportMarks(aws.dynamodb, state, RESULTS_TABLE), RecordingMetrics(), clock,
    )  # fmt: skip
    assert lambda_handler({"kind": "incremental"}, CONTEXT, deps)["kind"] == "full"
    clock.t += 20 * 60
    second = lambda_handler({"kind": "incremental"}, CONTEXT, deps)
    assert second["kind"] == "incremental" and second["end"] == clock.t
    assert not deps.marks.advance(clock.t - 60)  # a slower run never moves it back
    prefixes = {
        o["Key"].split("/AWSDynamoDB/")[0]
        for o in aws.s3.list_objects_v2(Bucket=BUCKET, Prefix="scheduled/")["Contents"]
    }
    assert {p.split("/")[1] for p in prefixes} == {"full", "incremental"}
    assert select_rows(export_jobs(aws.s3, f"s3://{BUCKET}/scheduled")) == table_rows(aws)
