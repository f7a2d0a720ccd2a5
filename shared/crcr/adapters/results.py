"""Job records in the results table (streamed to the reporter): conditional writes by version, and the reads by
dispatch, by commit, by repository, by baseline and by run deadline."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crcr.adapters.item_codec import to_dynamo
from crcr.adapters.job_items import (
    BY_BASELINE_INDEX,
    BY_REPO_INDEX,
    JUDGED_ATTRIBUTES,
    baseline_key,
    from_item,
    is_job_item,
    to_item,
)
from crcr.adapters.table import applied, job_key, job_pk, query_all
from crcr.app.ports.jobs import JobRecord
from crcr.domain.ids import repo_key
from crcr.domain.limits import MAX_RUN_ATTEMPT


class DynamoResults:
    def __init__(self, client: Any, table: str, run_timeout_s: float | None = None) -> None:
        self._ddb = client
        self._table = table
        self._run_timeout_s = run_timeout_s

    def set_verdict(
        self, record: JobRecord, verdict: str, baseline_sha: str | None = None, known_issues: str = ""
    ) -> bool:
        """The VerdictStore port: a verdict on the row as recorded (the same version), never on a newer state; False
        when the row already carries it (a redelivered stream record), so a verdict is counted once. The baseline's
        commit and a `known` verdict's issues go with it, or are removed."""
        values: dict[str, Any] = {":v": verdict, ":ver": record.version}
        sets, removes = ["verdict = :v"], []
        kept = (("verdict_baseline", baseline_sha, ":b"), ("known_issues", known_issues, ":k"))
        for name, value, placeholder in kept:
            if value:
                sets.append(f"{name} = {placeholder}")
                values[placeholder] = value
            else:
                removes.append(name)
        update = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=job_key(record.dispatch_id, record.run_id, record.run_attempt, record.job_name),
            UpdateExpression=update,
            ConditionExpression="version = :ver AND (attribute_not_exists(verdict) OR verdict <> :v)",
            ExpressionAttributeValues=to_dynamo(values),
        )

    def jobs_for_head(self, upstream: str, head_sha: str) -> list[JobRecord]:
        """Every job reported on one upstream commit (index by_head)."""
        items = query_all(
            self._ddb,
            TableName=self._table,
            IndexName="by_head",
            KeyConditionExpression="head_key = :h",
            ExpressionAttributeValues=to_dynamo({":h": f"{repo_key(upstream)}#{head_sha}"}),
        )
        return [from_item(item) for item in items]

    def jobs_of_repo(self, repo: str, since: float) -> list[JobRecord]:
        """Every job row of one downstream repository dispatched at or after `since` (index by_repo, which
        projects everything but `callback_payload` and `fingerprint`), oldest dispatch first."""
        items = query_all(
            self._ddb,
            TableName=self._table,
            IndexName=BY_REPO_INDEX,
            KeyConditionExpression="repo_key = :r AND dispatched_at >= :since",
            ExpressionAttributeValues=to_dynamo({":r": repo_key(repo), ":since": since}),
        )
        return [from_item(item) for item in items]

    def baseline_jobs(self, repo: str, workflow_name: str, job_name: str, since: float) -> list[JobRecord]:
        """The BaselineJobs port: one job's branch results dispatched at or after `since` (index by_baseline)."""
        items = query_all(
            self._ddb,
            TableName=self._table,
            IndexName=BY_BASELINE_INDEX,
            KeyConditionExpression="baseline_key = :b AND dispatched_at >= :since",
            ExpressionAttributeValues=to_dynamo({":b": baseline_key(repo, workflow_name, job_name), ":since": since}),
        )
        return [from_item(item) for item in items]

    def branch_results(self, repo: str, workflow_name: str, job_name: str, limit: int) -> list[JobRecord]:
        """The BranchResults port: one job's `limit` newest branch results by dispatch time (index by_baseline, one
        Query), newest first."""
        items = self._ddb.query(
            TableName=self._table,
            IndexName=BY_BASELINE_INDEX,
            KeyConditionExpression="baseline_key = :b",
            ExpressionAttributeValues=to_dynamo({":b": baseline_key(repo, workflow_name, job_name)}),
            ScanIndexForward=False,
            Limit=limit,
        ).get("Items", [])
        return [from_item(item) for item in items]

    def newest_of_repo(self, repo: str, limit: int) -> list[JobRecord]:
        """The NewestJobs port: the repository's `limit` newest job rows by dispatch time, whole (one Query of the
        by_repo index for their keys, one BatchGetItem per hundred rows), newest first."""
        keys = [
            {"pk": item["pk"], "sk": item["sk"]}
            for item in self._ddb.query(
                TableName=self._table,
                IndexName=BY_REPO_INDEX,
                KeyConditionExpression="repo_key = :r",
                ExpressionAttributeValues=to_dynamo({":r": repo_key(repo)}),
                ProjectionExpression="pk, sk",
                ScanIndexForward=False,
                Limit=limit,
            ).get("Items", [])
        ]
        found = [
            job
            for start in range(0, len(keys), 100)
            for job in self._read_jobs(keys[start : start + 100], (*JUDGED_ATTRIBUTES, "callback_payload"))
        ]
        return sorted(found, key=lambda j: (j.dispatched_at, j.run_attempt), reverse=True)

    def first_l2_job(self, repo: str) -> float | None:
        """When the repository's earliest job still kept was dispatched, if it was at L2 or above then."""
        items = self._ddb.query(
            TableName=self._table,
            IndexName=BY_REPO_INDEX,
            KeyConditionExpression="repo_key = :r",
            ExpressionAttributeValues=to_dynamo({":r": repo_key(repo)}),
            ScanIndexForward=True,
            Limit=1,
        ).get("Items", [])
        first = from_item(items[0]) if items else None
        return first.dispatched_at if first is not None and first.level >= 2 else None

    def jobs_of_dispatch(self, dispatch_id: str) -> list[JobRecord]:
        """Every job (every run and attempt) reported for one dispatch."""
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues=to_dynamo({":p": job_pk(dispatch_id)}),
            ConsistentRead=True,
        )
        return [from_item(item) for item in items]

    def has_jobs(self, dispatch_id: str) -> bool:
        """Whether any job (or the sweeper's record of the dispatch) is stored for this dispatch: one key read."""
        return bool(
            self._ddb.query(
                TableName=self._table,
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues=to_dynamo({":p": job_pk(dispatch_id)}),
                ProjectionExpression="pk",
                Limit=1,
                ConsistentRead=True,
            ).get("Items")
        )

    def attempts_of_job(self, dispatch_id: str, run_id: str, job_name: str) -> list[JobRecord]:
        """The JobAttempts port: every attempt of one job, by key (one BatchGetItem of MAX_RUN_ATTEMPT keys: attempts
        are numbered 1 to 51), projected without `callback_payload` and `fingerprint`."""
        keys = [job_key(dispatch_id, run_id, attempt, job_name) for attempt in range(1, MAX_RUN_ATTEMPT + 1)]
        return sorted(self._read_jobs(keys, JUDGED_ATTRIBUTES, consistent=True), key=lambda j: j.run_attempt)

    def _read_jobs(
        self, keys: list[dict[str, Any]], attributes: tuple[str, ...], *, consistent: bool = False
    ) -> list[JobRecord]:
        """Up to 100 rows by key with the attributes named (one BatchGetItem, its unprocessed keys asked again)."""
        names = {f"#a{i}": name for i, name in enumerate(attributes)}
        request = {"ProjectionExpression": ", ".join(names), "ExpressionAttributeNames": names}
        pending: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": consistent} | request}
        found: list[JobRecord] = []
        for _ in range(5):
            got = self._ddb.batch_get_item(RequestItems=pending)
            found += [from_item(item) for item in got.get("Responses", {}).get(self._table, [])]
            pending = got.get("UnprocessedKeys") or {}
            if not pending:
                break
        return found

    def all_jobs(self) -> Iterator[JobRecord]:
        """Every job in the table, page by page (a Scan: for operator exports, never on a function's path)."""
        request: dict[str, Any] = {"TableName": self._table, "ConsistentRead": True}
        while True:
            page = self._ddb.scan(**request)
            yield from (from_item(item) for item in page.get("Items", []) if is_job_item(item))
            if "LastEvaluatedKey" not in page:
                return
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def due_runs(self, now: float, limit: int = 100) -> list[JobRecord]:
        """Jobs still in progress at their run deadline."""
        items = self._ddb.query(
            TableName=self._table,
            IndexName="sweep",
            KeyConditionExpression="sweep_pk = :w AND sweep_at <= :now",
            ExpressionAttributeValues=to_dynamo({":w": "RUN", ":now": now}),
            Limit=limit,
        ).get("Items", [])
        return [from_item(item) for item in items]

    def get_job(self, dispatch_id: str, run_id: str, run_attempt: int, job_name: str) -> JobRecord | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=job_key(dispatch_id, run_id, run_attempt, job_name), ConsistentRead=True
        ).get("Item")
        return from_item(item) if item else None

    def put_job(self, record: JobRecord, expected_version: int | None) -> bool:
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(pk)"}
            if expected_version is None
            else {
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": to_dynamo({":v": expected_version}),
            }
        )
        item = to_item(record)
        if record.state == "in_progress" and self._run_timeout_s is not None and record.started_at is not None:
            # Watched by the sweeper until it completes (put_item replaces the item, dropping these).
            due = record.recheck_at or record.started_at + self._run_timeout_s
            item |= to_dynamo({"sweep_pk": "RUN", "sweep_at": due})
        return applied(self._ddb.put_item, TableName=self._table, Item=item, **condition)
