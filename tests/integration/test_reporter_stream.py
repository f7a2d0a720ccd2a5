"""The results table's stream as `crcr local` (and the reporter bench) read it: crcr.local.pollers.StreamReader over
moto server, with the table made from template.yaml's ResultsTable."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest

from crcr.adapters.job_items import from_item, to_item
from crcr.adapters.results import DynamoResults
from crcr.adapters.stream import images
from crcr.adapters.table import job_key
from crcr.app.ports.jobs import JobRecord
from crcr.local.pollers import StreamReader
from tests.integration.aws import create_tables, moto_server, read_all

TABLE = "results"


@pytest.fixture
def aws() -> Iterator[dict[str, Any]]:
    with moto_server() as reach:
        ddb = boto3.client("dynamodb", **reach)
        create_tables(ddb, ResultsTable=TABLE)
        arn = ddb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        yield {"dynamodb": ddb, "reader": StreamReader(boto3.client("dynamodbstreams", **reach), arn), "arn": arn}


def failed_job(version: int = 2) -> JobRecord:
    return JobRecord(
        dispatch_id="d-1", run_id="901", run_attempt=1, job_name="test", workflow_name="CI", state="completed",
        conclusion="failure", fingerprint="f", url="https://github.com/o/r/actions/runs/901", repo="o/r",
        repo_id=7, level=4, delivery_id="g-1", upstream="pytorch/pytorch", head_sha="a" * 40, pr=12,
        device=None, dispatched_at=1_000.0, started_at=1_010.0, completed_at=1_300.0, callback_payload="{}",
        version=version, event_type="pull_request",
    )  # fmt: skip


def test_the_reporters_verdict_write_back_comes_back_as_the_next_image_and_a_rewrite_does_not(
    aws: dict[str, Any],
) -> None:
    ddb, reader, results = aws["dynamodb"], aws["reader"], DynamoResults(aws["dynamodb"], TABLE)
    job = failed_job()
    ddb.put_item(TableName=TABLE, Item=to_item(job))  # the callback function records the failure
    [recorded] = read_all(reader)
    assert recorded["eventName"] == "INSERT" and recorded["eventSourceARN"] == aws["arn"]
    assert images(recorded) == (None, job)

    assert results.set_verdict(job, "no baseline")  # the reporter's write-back
    # The stream retries the first record: the row carries the verdict already, so nothing is written (or counted).
    assert not results.set_verdict(job, "no baseline")
    # A write that changes nothing (moto records one, DynamoDB does not): the reader leaves it out.
    ddb.update_item(
        TableName=TABLE,
        Key=job_key(job.dispatch_id, job.run_id, job.run_attempt, job.job_name),
        UpdateExpression="SET verdict = :v",
        ExpressionAttributeValues={":v": {"S": "no baseline"}},
    )
    [judged] = read_all(reader)  # one record, as DynamoDB writes none for a write that changes nothing
    old, new = images(judged)
    assert judged["eventName"] == "MODIFY" and old == job
    assert new is not None and new.verdict == "no baseline" and new.version == job.version

    assert results.set_verdict(job, "flaky")  # a passing re-run turns it flaky: a change again
    [flaky] = read_all(reader)
    assert [image.verdict if image else None for image in images(flaky)] == ["no baseline", "flaky"]
    assert not results.set_verdict(failed_job(version=1), "infra")  # never on an older state
    assert read_all(reader) == []
    [item] = ddb.scan(TableName=TABLE)["Items"]
    assert from_item(item).verdict == "flaky"

    # A verdict that compared a baseline names its commit, which comes with the image; one that compared none drops it.
    assert results.set_verdict(job, "new", "b" * 40)
    [compared] = read_all(reader)
    assert [(i.verdict, i.verdict_baseline) if i else None for i in images(compared)] == [
        ("flaky", None),
        ("new", "b" * 40),
    ]
    assert results.set_verdict(job, "flaky")
    [item] = ddb.scan(TableName=TABLE)["Items"]
    assert (from_item(item).verdict, from_item(item).verdict_baseline) == ("flaky", None)


def test_the_local_stacks_reader_hands_out_at_most_a_batch_and_resumes_where_it_stopped(aws: dict[str, Any]) -> None:
    ddb, reader = aws["dynamodb"], aws["reader"]
    for attempt in range(1, 4):
        ddb.put_item(TableName=TABLE, Item=to_item(failed_job() if attempt == 1 else _attempt(attempt)))
    [shard] = reader.shards()
    first, rest = reader.read(shard, 2), reader.read(shard, 2)
    assert [images(r)[1].run_attempt for r in first + rest if images(r)[1]] == [1, 2, 3]
    assert reader.read(shard, 2) == []


def _attempt(n: int) -> JobRecord:
    return replace(failed_job(), run_attempt=n)
