"""The RunStore port in the state table: one item per downstream run bound to a dispatch (`RUN#<repo>#<run id>`/
`RUN`), moved forward by GitHub's run events only, with the claim that reads each completed attempt's jobs once and
the sweeper's watch on a run whose `completed` event has not come."""

from __future__ import annotations

from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import LEDGER_TTL_S, SWEEP_INDEX, applied, key
from crcr.app.ports.runs import BoundRun
from crcr.domain.ids import repo_key

WATCH = "BOUNDRUN"  # sweep_pk of a bound run not known to be completed


def run_key(repo: str, run_id: str) -> dict[str, dict[str, Any]]:
    return key(f"RUN#{repo_key(repo)}#{run_id}", "RUN")


def _run(stored: dict[str, Any]) -> BoundRun:
    item = from_dynamo(stored)

    def text(name: str) -> str:
        return str(item.get(name) or "")  # absent, or NULL (no conclusion yet)

    return BoundRun(
        repo=text("repo"),
        run_id=text("run_id"),
        delivery_id=text("delivery_id"),
        dispatch_id=text("run_dispatch"),  # never `dispatch_id`: that attribute keys the ledger's by_dispatch index
        attempt=int(item.get("attempt", 1)),
        status=text("run_status"),
        conclusion=text("conclusion") or None,
        workflow_name=text("workflow_name"),
        url=text("url"),
        progress=int(item.get("progress", 0)),
        reconciled=frozenset(int(a) for a in item.get("reconciled", ())),
    )


class DynamoRuns:
    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def bound(self, repo: str, run_id: str) -> BoundRun | None:
        item = self._ddb.get_item(TableName=self._table, Key=run_key(repo, run_id), ConsistentRead=True).get("Item")
        return _run(item) if item else None

    def record(self, run: BoundRun, now: float, watch_until: float | None) -> bool:
        values: dict[str, Any] = {
            ":repo": run.repo,
            ":run": run.run_id,
            ":dlv": run.delivery_id,
            ":did": run.dispatch_id,
            ":attempt": run.attempt,
            ":status": run.status,
            ":conclusion": run.conclusion or None,
            ":wf": run.workflow_name,
            ":url": run.url,
            ":p": run.progress,
            ":now": now,
            ":exp": int(now) + LEDGER_TTL_S,
        }
        update = (
            "SET repo = :repo, run_id = :run, delivery_id = :dlv, run_dispatch = :did, attempt = :attempt, "
            "run_status = :status, conclusion = :conclusion, workflow_name = :wf, #url = :url, progress = :p, "
            "updated_at = :now, expires_at = :exp"
        )
        if watch_until is None:
            update += " REMOVE sweep_pk, sweep_at"
        else:
            update += ", sweep_pk = :watch, sweep_at = :due"
            values |= {":watch": WATCH, ":due": watch_until}
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=run_key(run.repo, run.run_id),
            UpdateExpression=update,
            ConditionExpression="attribute_not_exists(pk) OR progress < :p",
            ExpressionAttributeNames={"#url": "url"},
            ExpressionAttributeValues=to_dynamo(values),
        )

    def claim_reconcile(self, repo: str, run_id: str, attempt: int, owner: str, now: float, lease_s: float) -> bool:
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=run_key(repo, run_id),
            UpdateExpression="SET lease_owner = :o, lease_until = :l",
            ConditionExpression=(
                "attribute_exists(pk) AND (attribute_not_exists(reconciled) OR NOT contains(reconciled, :a)) "
                "AND (attribute_not_exists(lease_until) OR lease_until < :now)"
            ),
            ExpressionAttributeValues=to_dynamo({":o": owner, ":l": now + lease_s, ":a": attempt, ":now": now}),
        )

    def reconciled(self, repo: str, run_id: str, attempt: int, owner: str) -> None:
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=run_key(repo, run_id),
            UpdateExpression="ADD reconciled :a REMOVE lease_owner, lease_until",
            ConditionExpression="lease_owner = :o",
            ExpressionAttributeValues=to_dynamo({":a": {attempt}, ":o": owner}),
        )

    def release(self, repo: str, run_id: str, owner: str) -> None:
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=run_key(repo, run_id),
            UpdateExpression="REMOVE lease_owner, lease_until",
            ConditionExpression="lease_owner = :o",
            ExpressionAttributeValues=to_dynamo({":o": owner}),
        )

    def due_runs(self, now: float, limit: int = 100) -> list[BoundRun]:
        items = self._ddb.query(
            TableName=self._table,
            IndexName=SWEEP_INDEX,
            KeyConditionExpression="sweep_pk = :w AND sweep_at <= :now",
            ExpressionAttributeValues=to_dynamo({":w": WATCH, ":now": now}),
            Limit=limit,
        ).get("Items", [])
        return [_run(item) for item in items]

    def watch(self, repo: str, run_id: str, until: float) -> None:
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=run_key(repo, run_id),
            UpdateExpression="SET sweep_pk = :w, sweep_at = :due",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues=to_dynamo({":w": WATCH, ":due": until}),
        )
