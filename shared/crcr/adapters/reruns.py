"""Automatic re-runs in the state table: one marker per dispatch and run, ever, and the short claim that decides it."""

from __future__ import annotations

from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import DAY, LEDGER_TTL_S, applied, key, rerun_pk
from crcr.app.ports.reruns import RERUN_STATUSES, RerunClaim


class DynamoReruns:
    """The RerunMarks and RerunMarker ports."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def rerun_state(self, dispatch_id: str, run_id: str) -> str | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=key(rerun_pk(dispatch_id), f"RUN#{run_id}"), ConsistentRead=True
        ).get("Item")
        return from_dynamo(item).get("status") if item else None

    def claim_rerun(self, dispatch_id: str, run_id: str, owner: str, now: float, lease_s: float) -> RerunClaim:
        claim = key(rerun_pk(dispatch_id), f"CLAIM#{run_id}")
        taken = applied(
            self._ddb.put_item,
            TableName=self._table,
            Item=claim | to_dynamo({"owner": owner, "lease_until": now + lease_s, "expires_at": int(now) + DAY}),
            ConditionExpression="attribute_not_exists(pk) OR lease_until < :now",
            ExpressionAttributeValues=to_dynamo({":now": now}),
        )
        if not taken:
            return RerunClaim.BUSY
        # Read the marker only once the claim is held: a holder marks before it releases, so a decision
        # made just before this claim is always seen.
        marker = self._ddb.get_item(
            TableName=self._table, Key=key(rerun_pk(dispatch_id), f"RUN#{run_id}"), ConsistentRead=True
        ).get("Item")
        if marker is not None:
            self.release_rerun(dispatch_id, run_id, owner)
            return RerunClaim.DONE
        return RerunClaim.CLAIMED

    def release_rerun(self, dispatch_id: str, run_id: str, owner: str) -> None:
        applied(  # a lapsed claim another message took is theirs now: leave it
            self._ddb.delete_item,
            TableName=self._table,
            Key=key(rerun_pk(dispatch_id), f"CLAIM#{run_id}"),
            ConditionExpression="#o = :o",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues=to_dynamo({":o": owner}),
        )

    def mark_rerun(self, dispatch_id: str, run_id: str, status: str, now: float) -> bool:
        if status not in RERUN_STATUSES:
            raise ValueError(f"unknown re-run status {status!r}")
        return applied(
            self._ddb.put_item,
            TableName=self._table,
            Item=to_dynamo(
                {
                    "pk": rerun_pk(dispatch_id),
                    "sk": f"RUN#{run_id}",
                    "status": status,
                    "marked_at": now,
                    "expires_at": int(now) + LEDGER_TTL_S,
                }
            ),
            ConditionExpression="attribute_not_exists(pk)",
        )
