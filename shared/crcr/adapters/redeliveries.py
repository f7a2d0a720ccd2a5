"""DynamoDB rows of the webhook reconciler: the webhook's record of an event, each event's redelivery asks
(`DLV#<guid>`/`REDELIVERY`, conditional writes) and the reconciler's cursor, in the state table."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.item_codec import from_dynamo, num, to_dynamo
from crcr.adapters.table import DELIVERY_TTL_S, applied, conditional_failed, delivery_key, key
from crcr.app.ports.deliveries import RedeliveryClaim

CURSOR = ("RECONCILE#app-hook", "CURSOR")  # the reconciler's cursor: (pk, sk)
FINAL = ("requested", "refused")


class DynamoRedeliveries:
    """The RedeliveryStore port. The row of an event holds the last attempt asked for (`last_id`), how many of its
    attempts were asked for (`asks`), and `state`: `asking` (a run holds it until `lease_until`), `requested`,
    `refused` or `abandoned`."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    @staticmethod
    def _key(guid: str) -> dict[str, dict[str, Any]]:
        return key(f"DLV#{guid}", "REDELIVERY")

    def delivery_state(self, guid: str) -> str | None:
        item = self._ddb.get_item(
            TableName=self._table,
            Key=delivery_key(guid),
            ConsistentRead=True,
            ProjectionExpression="#s",
            ExpressionAttributeNames={"#s": "state"},
        ).get("Item")
        return from_dynamo(item).get("state") if item else None

    def claim_redelivery(
        self, guid: str, attempt_id: int, owner: str, now: float, lease_s: float, max_asks: int
    ) -> RedeliveryClaim:
        values = to_dynamo(
            {
                ":id": attempt_id,
                ":o": owner,
                ":lease": now + lease_s,
                ":now": now,
                ":asking": "asking",
                ":abandoned": "abandoned",
                ":max": max_asks,
                ":one": 1,
                ":zero": 0,
                ":exp": int(now) + DELIVERY_TTL_S,
            }
        )
        try:
            # A new attempt of the event (its first failure, or a redelivery that failed too): one more ask.
            self._ddb.update_item(
                TableName=self._table,
                Key=self._key(guid),
                UpdateExpression=(
                    "SET last_id = :id, asks = if_not_exists(asks, :zero) + :one, #s = :asking, #o = :o, "
                    "lease_until = :lease, updated_at = :now, expires_at = :exp"
                ),
                ConditionExpression=(
                    "attribute_not_exists(pk) OR (last_id <> :id AND asks < :max AND #s <> :abandoned "
                    "AND (#s <> :asking OR lease_until < :now))"
                ),
                ExpressionAttributeNames={"#s": "state", "#o": "owner"},
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            return self._claim_taken(guid, attempt_id, from_dynamo(exc.response.get("Item") or {}), now, values)
        return RedeliveryClaim.CLAIMED

    def _claim_taken(
        self, guid: str, attempt_id: int, old: dict[str, Any], now: float, values: dict[str, dict[str, Any]]
    ) -> RedeliveryClaim:
        state = old.get("state")
        if state == "abandoned":
            return RedeliveryClaim.ABANDONED
        lapsed = float(old.get("lease_until", 0)) < float(num(now))
        if int(old.get("last_id", 0)) == attempt_id:
            if state != "asking" or not lapsed:
                return RedeliveryClaim.ASKED if state in FINAL else RedeliveryClaim.BUSY
            # A run that asked for this very attempt died or could not reach GitHub: ask again (no new ask).
            taken = applied(
                self._ddb.update_item,
                TableName=self._table,
                Key=self._key(guid),
                UpdateExpression="SET #o = :o, lease_until = :lease, updated_at = :now",
                ConditionExpression="last_id = :id AND #s = :asking AND lease_until < :now",
                ExpressionAttributeNames={"#s": "state", "#o": "owner"},
                ExpressionAttributeValues={k: values[k] for k in (":id", ":o", ":lease", ":now", ":asking")},
            )
            return RedeliveryClaim.CLAIMED if taken else RedeliveryClaim.BUSY
        if state == "asking" and not lapsed:
            return RedeliveryClaim.BUSY
        # Every ask spent: give the event up, once (the caller counts and alarms it).
        given_up = applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(guid),
            UpdateExpression="SET #s = :abandoned, updated_at = :now",
            ConditionExpression="#s <> :abandoned",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={k: values[k] for k in (":abandoned", ":now")},
        )
        return RedeliveryClaim.EXHAUSTED if given_up else RedeliveryClaim.ABANDONED

    def finish_redelivery(self, guid: str, attempt_id: int, owner: str, status: str, now: float) -> None:
        if status not in FINAL:
            raise ValueError(f"unknown redelivery status {status!r}")
        applied(  # a claim that lapsed and was taken by another run is theirs to finish
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(guid),
            UpdateExpression="SET #s = :s, lease_until = :zero, updated_at = :now",
            ConditionExpression="last_id = :id AND #o = :o",
            ExpressionAttributeNames={"#s": "state", "#o": "owner"},
            ExpressionAttributeValues=to_dynamo(
                {":s": status, ":zero": 0, ":now": now, ":id": attempt_id, ":o": owner}
            ),
        )

    def release_redelivery(self, guid: str, attempt_id: int, owner: str) -> None:
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key(guid),
            UpdateExpression="SET lease_until = :zero",
            ConditionExpression="last_id = :id AND #o = :o",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues=to_dynamo({":zero": 0, ":id": attempt_id, ":o": owner}),
        )

    def reconcile_cursor(self) -> float | None:
        item = self._ddb.get_item(TableName=self._table, Key=key(*CURSOR), ConsistentRead=True).get("Item")
        return float(from_dynamo(item)["at"]) if item else None

    def save_reconcile_cursor(self, at: float) -> None:
        self._ddb.put_item(TableName=self._table, Item=key(*CURSOR) | to_dynamo({"at": at}))
