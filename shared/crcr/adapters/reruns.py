"""Automatic re-runs in the state table: one marker per dispatch and run, ever, and the short claim that decides it."""

from __future__ import annotations

from typing import Any

from crcr.adapters.table import DAY, LEDGER_TTL_S, applied, num, rerun_pk
from crcr.app.ports.reruns import RERUN_STATUSES, RerunClaim


class DynamoReruns:
    """The RerunMarks and RerunMarker ports."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def rerun_state(self, dispatch_id: str, run_id: str) -> str | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key={"pk": rerun_pk(dispatch_id), "sk": {"S": f"RUN#{run_id}"}},
            ConsistentRead=True,
        ).get("Item")
        return item.get("status", {}).get("S") if item else None

    def claim_rerun(self, dispatch_id: str, run_id: str, owner: str, now: float, lease_s: float) -> RerunClaim:
        claim = {"pk": rerun_pk(dispatch_id), "sk": {"S": f"CLAIM#{run_id}"}}
        taken = applied(
            self._ddb.put_item,
            TableName=self._table,
            Item=claim
            | {
                "owner": {"S": owner},
                "lease_until": {"N": str(num(now + lease_s))},
                "expires_at": {"N": str(int(now) + DAY)},
            },
            ConditionExpression="attribute_not_exists(pk) OR lease_until < :now",
            ExpressionAttributeValues={":now": {"N": str(num(now))}},
        )
        if not taken:
            return RerunClaim.BUSY
        # Read the marker only once the claim is held: a holder marks before it releases, so a decision
        # made just before this claim is always seen.
        marker = self._ddb.get_item(
            TableName=self._table,
            Key={"pk": rerun_pk(dispatch_id), "sk": {"S": f"RUN#{run_id}"}},
            ConsistentRead=True,
        ).get("Item")
        if marker is not None:
            self.release_rerun(dispatch_id, run_id, owner)
            return RerunClaim.DONE
        return RerunClaim.CLAIMED

    def release_rerun(self, dispatch_id: str, run_id: str, owner: str) -> None:
        applied(  # a lapsed claim another message took is theirs now: leave it
            self._ddb.delete_item,
            TableName=self._table,
            Key={"pk": rerun_pk(dispatch_id), "sk": {"S": f"CLAIM#{run_id}"}},
            ConditionExpression="#o = :o",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":o": {"S": owner}},
        )

    def mark_rerun(self, dispatch_id: str, run_id: str, status: str, now: float) -> bool:
        if status not in RERUN_STATUSES:
            raise ValueError(f"unknown re-run status {status!r}")
        return applied(
            self._ddb.put_item,
            TableName=self._table,
            Item={
                "pk": rerun_pk(dispatch_id),
                "sk": {"S": f"RUN#{run_id}"},
                "status": {"S": status},
                "marked_at": {"N": str(num(now))},
                "expires_at": {"N": str(int(now) + LEDGER_TTL_S)},
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
