"""DynamoDB results table (job records, streamed to the reporter) and the per-repository callback limiter."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.dynamo import applied, conditional_failed, num, query_all
from crcr.app.ports import JobLimitReached, JobRecord
from crcr.domain.ids import repo_key
from crcr.domain.limits import MAX_RUN_ATTEMPT

RESULTS_TTL_S = 90 * 86_400
BY_REPO_INDEX = "by_repo"  # (repo_key, dispatched_at): every row, for a repository's history and health


def _n(value: float | int) -> dict[str, str]:
    return {"N": str(num(value))}


def _opt_n(value: float | int | None) -> dict[str, Any]:
    return _n(value) if value is not None else {"NULL": True}


def _opt_s(value: str | None) -> dict[str, Any]:
    return {"S": value} if value else {"NULL": True}


def job_key(dispatch_id: str, run_id: str, run_attempt: int, job_name: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": f"DSP#{dispatch_id}"}, "sk": {"S": f"JOB#{run_id}#{run_attempt}#{job_name}"}}


def to_item(record: JobRecord) -> dict[str, Any]:
    return job_key(record.dispatch_id, record.run_id, record.run_attempt, record.job_name) | {
        "dispatch_id": {"S": record.dispatch_id},
        "run_id": {"S": record.run_id},
        "run_attempt": _n(record.run_attempt),
        "job_name": {"S": record.job_name},
        "workflow_name": {"S": record.workflow_name},
        "state": {"S": record.state},
        "conclusion": _opt_s(record.conclusion),
        "fingerprint": {"S": record.fingerprint},
        "url": {"S": record.url},
        "repo": {"S": record.repo},
        "repo_id": _n(record.repo_id),
        "level": _n(record.level),
        "delivery_id": {"S": record.delivery_id},
        "upstream": {"S": record.upstream},
        "head_sha": {"S": record.head_sha},
        "pr": _opt_n(record.pr),
        "device": _opt_s(record.device),
        "dispatched_at": _n(record.dispatched_at),
        "started_at": _opt_n(record.started_at),
        "completed_at": _opt_n(record.completed_at),
        "callback_payload": {"S": record.callback_payload},
        "event_type": _opt_s(record.event_type),
        "check_run_id": _opt_s(record.check_run_id),
        "reported_started_at": _opt_s(record.reported_started_at),
        "failure_kind": _opt_s(record.failure_kind),
        "triage": _opt_s(record.triage),
        "verdict": _opt_s(record.verdict),
        "verdict_baseline": _opt_s(record.verdict_baseline),
        "ciflow": _opt_s(record.ciflow),
        "failed_tests": _opt_s(record.failed_tests),
        "head_key": {"S": f"{repo_key(record.upstream)}#{record.head_sha}"},
        **_baseline_key(record),
        "repo_key": {"S": repo_key(record.repo)},
        "version": _n(record.version),
        "expires_at": _n(int(record.completed_at or record.started_at or record.dispatched_at) + RESULTS_TTL_S),
    }


# What judging a job reads of its attempts: every attribute a JobRecord holds but the body as sent (up to the stored
# cap per job) and its fingerprint.
JUDGED_ATTRIBUTES = (
    "dispatch_id", "run_id", "run_attempt", "job_name", "workflow_name", "state", "conclusion", "url", "repo",
    "repo_id", "level", "delivery_id", "upstream", "head_sha", "pr", "device", "dispatched_at", "started_at",
    "completed_at", "version", "event_type", "check_run_id", "reported_started_at", "failure_kind", "triage",
    "verdict", "verdict_baseline", "ciflow", "failed_tests",
)  # fmt: skip


BY_BASELINE_INDEX = "by_baseline"  # (baseline_key, dispatched_at): a job's results on the branch (sparse)
BASELINE_EVENTS = frozenset({"push", "nightly"})


def baseline_key(repo: str, workflow_name: str, job_name: str) -> str:
    return json.dumps([repo_key(repo), workflow_name, job_name], separators=(",", ":"))


def _baseline_key(record: JobRecord) -> dict[str, Any]:
    """Only a branch result (a push or a scheduled run, no PR) can be a baseline: only those carry the index's key."""
    if record.event_type not in BASELINE_EVENTS or record.pr is not None:
        return {}
    return {"baseline_key": {"S": baseline_key(record.repo, record.workflow_name, record.job_name)}}


def is_job_item(item: dict[str, Any]) -> bool:
    return str(item.get("sk", {}).get("S", "")).startswith("JOB#")


def from_item(item: dict[str, Any]) -> JobRecord:
    def num(name: str) -> float | None:
        return float(item[name]["N"]) if "N" in item.get(name, {}) else None

    def text(name: str) -> str | None:
        return item[name]["S"] if "S" in item.get(name, {}) else None

    pr = num("pr")
    return JobRecord(
        dispatch_id=item["dispatch_id"]["S"],
        run_id=item["run_id"].get("S") or item["run_id"]["N"],  # rows from before Buildkite hold a number
        run_attempt=int(item["run_attempt"]["N"]),
        job_name=item["job_name"]["S"],
        workflow_name=item["workflow_name"]["S"],
        state=item["state"]["S"],
        conclusion=text("conclusion"),
        fingerprint=text("fingerprint") or "",  # not projected into by_repo
        url=item["url"]["S"],
        repo=item["repo"]["S"],
        repo_id=int(item["repo_id"]["N"]),
        level=int(item["level"]["N"]),
        delivery_id=item["delivery_id"]["S"],
        upstream=item["upstream"]["S"],
        head_sha=item["head_sha"]["S"],
        pr=int(pr) if pr is not None else None,
        device=text("device"),
        dispatched_at=float(item["dispatched_at"]["N"]),
        started_at=num("started_at"),
        completed_at=num("completed_at"),
        callback_payload=text("callback_payload") or "",  # not projected into by_repo (up to 256 KiB)
        version=int(item["version"]["N"]),
        event_type=text("event_type") or "",
        check_run_id=text("check_run_id") or "",
        reported_started_at=text("reported_started_at") or "",
        failure_kind=text("failure_kind"),
        triage=text("triage") or "",
        verdict=text("verdict"),
        verdict_baseline=text("verdict_baseline"),
        ciflow=text("ciflow"),
        failed_tests=text("failed_tests") or "",
    )


class DynamoResults:
    def __init__(self, client: Any, table: str, run_timeout_s: float | None = None) -> None:
        self._ddb = client
        self._table = table
        self._run_timeout_s = run_timeout_s

    def set_verdict(self, record: JobRecord, verdict: str, baseline_sha: str | None = None) -> bool:
        """The VerdictStore port: a verdict on the row as recorded (the same version), never on a newer state; False
        when the row already carries it (a redelivered stream record), so a verdict is counted once. The baseline's
        commit goes with it, or is removed (a verdict that compared nothing)."""
        values: dict[str, Any] = {":v": {"S": verdict}, ":ver": _n(record.version)}
        update = "SET verdict = :v REMOVE verdict_baseline"
        if baseline_sha:
            update = "SET verdict = :v, verdict_baseline = :b"
            values[":b"] = {"S": baseline_sha}
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=job_key(record.dispatch_id, record.run_id, record.run_attempt, record.job_name),
            UpdateExpression=update,
            ConditionExpression="version = :ver AND (attribute_not_exists(verdict) OR verdict <> :v)",
            ExpressionAttributeValues=values,
        )

    def jobs_for_head(self, upstream: str, head_sha: str) -> list[JobRecord]:
        """Every job reported on one upstream commit (index by_head)."""
        items = query_all(
            self._ddb,
            TableName=self._table,
            IndexName="by_head",
            KeyConditionExpression="head_key = :h",
            ExpressionAttributeValues={":h": {"S": f"{repo_key(upstream)}#{head_sha}"}},
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
            ExpressionAttributeValues={":r": {"S": repo_key(repo)}, ":since": _n(since)},
        )
        return [from_item(item) for item in items]

    def baseline_jobs(self, repo: str, workflow_name: str, job_name: str, since: float) -> list[JobRecord]:
        """The BaselineJobs port: one job's branch results dispatched at or after `since` (index by_baseline)."""
        items = query_all(
            self._ddb,
            TableName=self._table,
            IndexName=BY_BASELINE_INDEX,
            KeyConditionExpression="baseline_key = :b AND dispatched_at >= :since",
            ExpressionAttributeValues={":b": {"S": baseline_key(repo, workflow_name, job_name)}, ":since": _n(since)},
        )
        return [from_item(item) for item in items]

    def first_l2_job(self, repo: str) -> float | None:
        """When the repository's earliest job still kept was dispatched, if it was at L2 or above then."""
        items = self._ddb.query(
            TableName=self._table,
            IndexName=BY_REPO_INDEX,
            KeyConditionExpression="repo_key = :r",
            ExpressionAttributeValues={":r": {"S": repo_key(repo)}},
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
            ExpressionAttributeValues={":p": {"S": f"DSP#{dispatch_id}"}},
            ConsistentRead=True,
        )
        return [from_item(item) for item in items]

    def attempts_of_job(self, dispatch_id: str, run_id: str, job_name: str) -> list[JobRecord]:
        """The JobAttempts port: every attempt of one job, by key (one BatchGetItem of MAX_RUN_ATTEMPT keys: attempts
        are numbered 1 to 51), projected without `callback_payload` and `fingerprint`."""
        keys = [job_key(dispatch_id, run_id, attempt, job_name) for attempt in range(1, MAX_RUN_ATTEMPT + 1)]
        names = {f"#a{i}": name for i, name in enumerate(JUDGED_ATTRIBUTES)}
        pending: dict[str, Any] = {
            self._table: {
                "Keys": keys,
                "ConsistentRead": True,
                "ProjectionExpression": ", ".join(names),
                "ExpressionAttributeNames": names,
            }
        }
        found: list[JobRecord] = []
        for _ in range(5):
            got = self._ddb.batch_get_item(RequestItems=pending)
            found += [from_item(item) for item in got.get("Responses", {}).get(self._table, [])]
            pending = got.get("UnprocessedKeys") or {}
            if not pending:
                break
        return sorted(found, key=lambda j: j.run_attempt)

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
            ExpressionAttributeValues={":w": {"S": "RUN"}, ":now": _n(now)},
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
            else {"ConditionExpression": "version = :v", "ExpressionAttributeValues": {":v": _n(expected_version)}}
        )
        item = to_item(record)
        if record.state == "in_progress" and self._run_timeout_s is not None and record.started_at is not None:
            # Watched by the sweeper until it completes (put_item replaces the item, dropping these).
            item |= {"sweep_pk": {"S": "RUN"}, "sweep_at": _n(record.started_at + self._run_timeout_s)}
        return applied(self._ddb.put_item, TableName=self._table, Item=item, **condition)


class DynamoHudKeys:
    """The HudKeys port: one state-table item per (dispatch, HUD key), holding the job that took it, and one count of
    the keys a dispatch holds, written together in one transaction per new job that names a check-run id, whatever
    the dispatch's size (before, a new job read every job of its dispatch to look for the key). A job that names none
    holds no key and only counts."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def claim(self, dispatch_id: str, hud_key: str | None, owner: str, now: float, max_jobs: int) -> str | None:
        expires = _n(int(now) + RESULTS_TTL_S)  # as long as the job rows they guard
        count = {
            "TableName": self._table,
            "Key": {"pk": {"S": f"HUD#{dispatch_id}"}, "sk": {"S": "#JOBS"}},
            "UpdateExpression": "ADD jobs :one SET expires_at = :exp",
            "ConditionExpression": "attribute_not_exists(jobs) OR jobs < :cap",
            "ExpressionAttributeValues": {":one": _n(1), ":cap": _n(max_jobs), ":exp": expires},
        }
        if hud_key is None:
            # No key to hold (the job's own run and attempt name its row): the count alone, one write, no transaction.
            try:
                self._ddb.update_item(**count)
            except ClientError as exc:
                if not conditional_failed(exc):
                    raise
                raise JobLimitReached(f"dispatch {dispatch_id} holds {max_jobs} jobs") from exc
            return None
        digest = hashlib.sha256(hud_key.encode("utf-8", "surrogatepass")).hexdigest()  # a key of any length
        try:
            self._ddb.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": {
                                "pk": {"S": f"HUD#{dispatch_id}"},
                                "sk": {"S": digest},
                                "owner": {"S": owner},
                                "expires_at": expires,
                            },
                            "ConditionExpression": "attribute_not_exists(pk)",
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        }
                    },
                    {"Update": count},
                ]
            )
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            reasons = [*(exc.response.get("CancellationReasons") or []), {}, {}]
            if reasons[0].get("Code") == "ConditionalCheckFailed":
                holder = (reasons[0].get("Item") or {}).get("owner", {}).get("S")
                if holder is None:  # a cancellation that did not bring the item: read it
                    key = {"pk": {"S": f"HUD#{dispatch_id}"}, "sk": {"S": digest}}
                    item = self._ddb.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item") or {}
                    holder = item.get("owner", {}).get("S", "another job")
                return None if holder == owner else str(holder)  # the same job again: counted once already
            if reasons[1].get("Code") == "ConditionalCheckFailed":
                raise JobLimitReached(f"dispatch {dispatch_id} holds {max_jobs} jobs") from exc
            raise
        return None


class DynamoRateLimiter:
    """Fixed windows per key (a minute unless told), counted with an atomic ADD in the state table. `budget` names
    the budget (its rows are `RATE#<key>` for the callbacks, `RATE#<budget>#<key>` for any other)."""

    def __init__(self, client: Any, table: str, per_window: int, window_s: int = 60, budget: str = "") -> None:
        self._ddb = client
        self._table = table
        self._limit = per_window
        self._window_s = window_s
        self._prefix = f"RATE#{budget}#" if budget else "RATE#"

    def hit(self, key: str, now: float) -> float:
        window = int(now // self._window_s)
        got = self._ddb.update_item(
            TableName=self._table,
            Key={"pk": {"S": f"{self._prefix}{repo_key(key)}"}, "sk": {"S": str(window)}},
            UpdateExpression="ADD hits :one SET expires_at = :exp",
            ExpressionAttributeValues={":one": {"N": "1"}, ":exp": {"N": str((window + 2) * self._window_s)}},
            ReturnValues="UPDATED_NEW",
        )
        if int(got["Attributes"]["hits"]["N"]) > self._limit:
            return (window + 1) * self._window_s - now
        return 0.0


class DynamoRefusals:
    """The RefusalLog port: refused reports per repository, reason and hour (one atomic ADD each)."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def count(self, repo: str, reason: str, now: float) -> int:
        hour = int(now // 3600)
        got = self._ddb.update_item(
            TableName=self._table,
            Key={"pk": {"S": f"REFUSED#{repo_key(repo)}"}, "sk": {"S": f"{hour}#{reason}"}},
            UpdateExpression="ADD refused :one SET expires_at = :exp",
            ExpressionAttributeValues={":one": {"N": "1"}, ":exp": {"N": str((hour + 2) * 3600)}},
            ReturnValues="UPDATED_NEW",
        )
        return int(got["Attributes"]["refused"]["N"])
