"""The keys of PyTorch's HUD (torchci) rows a dispatch's jobs hold, and the count of its jobs, in the state table."""

from __future__ import annotations

import hashlib
from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import RESULTS_TTL_S, conditional_failed, key
from crcr.app.ports.jobs import JobLimitReached


class DynamoTorchciKeys:
    """The TorchciKeys port: one state-table item per (dispatch, torchci row key), holding the job that took it, and
    one count of the keys a dispatch holds, written together in one transaction per new job that names a check-run id,
    whatever the dispatch's size. A job that names none holds no key and only counts."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def claim(self, dispatch_id: str, hud_key: str | None, owner: str, now: float, max_jobs: int) -> str | None:
        expires = int(now) + RESULTS_TTL_S  # as long as the job rows they guard
        count = {
            "TableName": self._table,
            "Key": key(f"HUD#{dispatch_id}", "#JOBS"),
            "UpdateExpression": "ADD jobs :one SET expires_at = :exp",
            "ConditionExpression": "attribute_not_exists(jobs) OR jobs < :cap",
            "ExpressionAttributeValues": to_dynamo({":one": 1, ":cap": max_jobs, ":exp": expires}),
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
                            "Item": to_dynamo(
                                {"pk": f"HUD#{dispatch_id}", "sk": digest, "owner": owner, "expires_at": expires}
                            ),
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
                holder = from_dynamo(reasons[0].get("Item") or {}).get("owner")
                if holder is None:  # a cancellation that did not bring the item: read it
                    held = key(f"HUD#{dispatch_id}", digest)
                    item = self._ddb.get_item(TableName=self._table, Key=held, ConsistentRead=True).get("Item") or {}
                    holder = from_dynamo(item).get("owner", "another job")
                return None if holder == owner else str(holder)  # the same job again: counted once already
            if reasons[1].get("Code") == "ConditionalCheckFailed":
                raise JobLimitReached(f"dispatch {dispatch_id} holds {max_jobs} jobs") from exc
            raise
        return None
