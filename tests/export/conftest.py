"""`crcr hud export` fixtures: a moto server holding the results table (declared as template.yaml declares
it) with the recorded jobs, and the readers every export must satisfy: ClickHouse (chdb) and DuckDB."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from chdb import session
from moto.server import ThreadedMotoServer

from crcr.adapters.results import DynamoResults
from crcr.app.ports.jobs import JobRecord
from crcr.app.torchci import COLUMNS
from crcr.local.stack import free_port
from crcr.local.template import load_template
from crcr.ops.torchci_rows import FORMATS
from tests.conftest import ROOT, http
from tests.export.jobs import recorded_jobs

REGION = "us-east-1"
RESULTS_TABLE = "crcr-test-ResultsTable"
BUCKET = "crcr-exports"

# pytorch/test-infra clickhouse_db_schema/default.crcr_workflow_job/schema.sql (newest), verbatim but for the
# engine: MergeTree instead of SharedReplacingMergeTree(...), which exists only in ClickHouse Cloud.
DDL = (
    "CREATE TABLE default.crcr_workflow_job ( `dynamoKey` String, `status` String, `downstream_repo` String, "
    "`upstream_repo` String, `pr_number` UInt64, `pytorch_head_sha` String, `delivery_id` String, "
    "`workflow_run_url` String, `workflow_name` String, `job_name` String DEFAULT '', "
    "`check_run_id` String DEFAULT '', `run_id` String DEFAULT '', `run_attempt` UInt32 DEFAULT 1, "
    "`conclusion` String, `queue_time` Nullable(Float64), `execution_time` Nullable(Float64), "
    "`started_at` DateTime64(9), `completed_at` DateTime64(9), `total_tests` UInt64 DEFAULT 0, "
    "`passed_tests` UInt64 DEFAULT 0, `failed_tests` UInt64 DEFAULT 0, `skipped_tests` UInt64 DEFAULT 0, "
    "`failed_tests_json` String DEFAULT '', `artifact_url` String DEFAULT '', `environment` String DEFAULT '', "
    "`downstream_repo_level` String DEFAULT '', `event_type` String DEFAULT 'pull_request', "
    "`_inserted_at` DateTime MATERIALIZED now(), `repository_full_name` String ALIAS downstream_repo, "
    "`duration_seconds` Float64 ALIAS if(completed_at = toDateTime64(0, 9), 0, "
    "dateDiff(second, started_at, completed_at)) ) "
    "ENGINE = MergeTree ORDER BY (downstream_repo, delivery_id, dynamoKey)"
)
# The statement docs/contracts.md gives (with FORMAT per format): times in the files are UTC without a zone.
LOAD = "INSERT INTO default.crcr_workflow_job FROM INFILE '{path}' SETTINGS session_timezone='UTC' FORMAT {format}"
DUCKDB_TYPES = {
    "String": "VARCHAR",
    "UInt64": "UBIGINT",
    "UInt32": "UINTEGER",
    "Nullable(Float64)": "DOUBLE",
    "DateTime64(9)": "TIMESTAMP_NS",
}
TIMES = [name for name, kind in COLUMNS if kind == "DateTime64(9)"]


@dataclass
class Aws:
    url: str
    dynamodb: Any
    s3: Any

    def env(self, **extra: str) -> dict[str, str]:
        """What `crcr local`'s ready line hands an operator command (LocalStack.operator_env())."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "CRCR_RESULTS_TABLE": RESULTS_TABLE,
            "PATH": "/usr/bin:/bin",
        } | extra


def create_results_table(ddb: Any, name: str) -> None:
    """As template.yaml declares ResultsTable (moto's CloudFormation skips TTL and PITR: set here)."""
    props = load_template(ROOT / "template.yaml")["Resources"]["ResultsTable"]["Properties"]
    ddb.create_table(
        TableName=name,
        KeySchema=props["KeySchema"],
        AttributeDefinitions=props["AttributeDefinitions"],
        GlobalSecondaryIndexes=props["GlobalSecondaryIndexes"],
        BillingMode=props["BillingMode"],
    )
    pitr = props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"]
    ddb.update_continuous_backups(TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": pitr})


@pytest.fixture(scope="module")  # moto's backends are per process: each module resets and seeds its own
def aws() -> Iterator[Aws]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    http("POST", f"{url}/moto-api/reset")
    kwargs = {"endpoint_url": url, "region_name": REGION, "aws_access_key_id": "t", "aws_secret_access_key": "t"}
    aws = Aws(url, boto3.client("dynamodb", **kwargs), boto3.client("s3", **kwargs))
    create_results_table(aws.dynamodb, RESULTS_TABLE)
    aws.s3.create_bucket(Bucket=BUCKET)
    results = DynamoResults(aws.dynamodb, RESULTS_TABLE)
    for job in recorded_jobs():
        assert results.put_job(job, None)
    yield aws
    server.stop()


@pytest.fixture(scope="module")
def jobs(aws: Aws) -> list[JobRecord]:
    return recorded_jobs()


class ClickHouse:
    """An embedded ClickHouse (chdb) whose session time zone is not UTC, as a server's may not be."""

    def __init__(self) -> None:
        self.session = session.Session()
        self.session.query("SET session_timezone = 'America/New_York'")

    def query(self, sql: str, fmt: str = "CSV") -> str:
        return str(self.session.query(sql, fmt))

    def fresh_table(self) -> None:
        self.query("DROP TABLE IF EXISTS default.crcr_workflow_job")
        self.query(DDL)

    def describe(self, what: str) -> list[tuple[str, str, str]]:
        """(name, type, default kind) of a table or of `file(…)`."""
        docs = map(json.loads, self.query(f"DESCRIBE {what}", "JSONEachRow").splitlines())
        return [(d["name"], d["type"], d["default_type"]) for d in docs]

    def load(self, path: Path, fmt: str) -> None:
        self.fresh_table()
        self.query(LOAD.format(path=path, format=FORMATS[fmt]))

    def rows(self, where: str = "1") -> list[dict[str, Any]]:
        """Every column as stored; times as nanoseconds since the epoch (UTC whatever the session's zone)."""
        select = ", ".join(f"toUnixTimestamp64Nano({n}) AS {n}" if n in TIMES else n for n, _ in COLUMNS)
        text = self.query(
            f"SELECT {select} FROM default.crcr_workflow_job WHERE {where} ORDER BY dynamoKey "
            "SETTINGS output_format_json_quote_64bit_integers = 0",
            "JSONEachRow",
        )
        return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def clickhouse() -> ClickHouse:
    return ClickHouse()
