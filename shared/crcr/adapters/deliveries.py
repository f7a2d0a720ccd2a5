"""Webhook deliveries in the state table: the delivery id and the body's digest claimed together, then marked queued."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import DELIVERY_TTL_S, body_key, conditional_failed, delivery_key
from crcr.app.ports.deliveries import Claim


class DynamoDeliveries:
    """The DeliveryStore port (the webhook's claims)."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def claim_delivery(self, delivery_id: str, event: str, now: float, body_sha256: str) -> Claim:
        """The delivery id and the body's digest, claimed together in one transaction: GitHub signs the body, not
        X-GitHub-Delivery, so a captured body sent again under a fresh id is a replay; and an id seen before with
        another body takes nothing, so it can neither hide that body when it comes under its own id nor stand in
        for it. The same id with the same body passes (GitHub's redelivery, or a retry after a failure here)."""
        expires = int(now) + DELIVERY_TTL_S
        body = body_key(body_sha256)
        delivery = delivery_key(delivery_id)
        try:
            self._ddb.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": body | to_dynamo({"delivery_id": delivery_id, "expires_at": expires}),
                            "ConditionExpression": "attribute_not_exists(pk) OR delivery_id = :d",
                            "ExpressionAttributeValues": to_dynamo({":d": delivery_id}),
                        }
                    },
                    {
                        "Put": {
                            "TableName": self._table,
                            "Item": delivery
                            | to_dynamo(
                                {
                                    "event": event,
                                    "state": "received",
                                    "received_at": now,
                                    "body_sha256": body_sha256,
                                    "expires_at": expires,
                                }
                            ),
                            "ConditionExpression": "attribute_not_exists(pk)",
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        }
                    },
                ]
            )
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            reasons = exc.response.get("CancellationReasons") or []
            failed = [r.get("Code") == "ConditionalCheckFailed" for r in reasons] + [False, False]
            if failed[1]:
                old = from_dynamo(reasons[1].get("Item") or self._delivery_item(delivery))
                if old.get("body_sha256", body_sha256) != body_sha256:
                    return Claim.REUSED
                return Claim.QUEUED if old.get("state") == "queued" else Claim.PENDING
            if failed[0]:
                return Claim.REPLAYED
            raise
        return Claim.NEW

    def _delivery_item(self, key: dict[str, Any]) -> dict[str, Any]:
        """The delivery as stored, for a cancellation that did not bring it along."""
        item = self._ddb.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        return dict(item or {})

    def mark_queued(self, delivery_id: str, now: float) -> None:
        self._ddb.update_item(
            TableName=self._table,
            Key=delivery_key(delivery_id),
            UpdateExpression="SET #s = :q, queued_at = :t",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues=to_dynamo({":q": "queued", ":t": now}),
        )
