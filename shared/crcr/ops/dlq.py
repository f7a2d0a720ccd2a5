"""Operator tools behind `crcr dlq`: list dead letters with their reasons, and redrive them."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from crcr.contracts.messages import DispatchMessage


def list_dead_letters(sqs: Any, dlq_url: str, limit: int = 100) -> list[dict[str, Any]]:
    """Peek without hiding: each message stays visible (VisibilityTimeout=0)."""
    seen: dict[str, dict[str, Any]] = {}
    while len(seen) < limit:
        got = sqs.receive_message(
            QueueUrl=dlq_url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=0,
            AttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        fresh = [m for m in got if m["MessageId"] not in seen]
        if not fresh:
            break
        for message in fresh:
            attributes = message.get("MessageAttributes") or {}
            seen[message["MessageId"]] = {
                "message_id": message["MessageId"],
                "delivery_id": attributes.get("delivery_id", {}).get("StringValue"),
                "target_repo": attributes.get("target_repo", {}).get("StringValue"),
                # Messages SQS moved after maxReceiveCount carry no reason: the function crashed on them.
                "reason": attributes.get("failure_reason", {}).get("StringValue") or "receive count exceeded",
                "receive_count": int(message.get("Attributes", {}).get("ApproximateReceiveCount", "0")),
            }
    return list(seen.values())[:limit]


def stream_batch(body: str) -> bool:
    """Lambda's on-failure record of a stream batch (it names a shard and sequence numbers, not messages)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and "DDBStreamBatchInfo" in doc


def redrive(sqs: Any, dlq_url: str, to_url: str, limit: int = 1000, kept: list[str] | None = None) -> int:
    """Move dead letters back to their queue; dispatches start again with a fresh attempt count. A stream batch's
    record is no message of that queue: it stays in the DLQ (its id is added to `kept`)."""
    moved = 0
    while moved < limit:
        got = sqs.receive_message(
            QueueUrl=dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=60, MessageAttributeNames=["All"]
        ).get("Messages", [])
        if not got:
            return moved
        for message in got:
            body = message["Body"]
            if stream_batch(body):
                if kept is not None and message["MessageId"] not in kept:
                    kept.append(message["MessageId"])
                continue
            try:
                dispatch = DispatchMessage.model_validate_json(body)
                body = dispatch.model_copy(update={"attempt": 0, "not_before": None}).model_dump_json()
            except ValidationError:
                pass  # an event message: it goes back as it was
            attributes = {
                k: {"DataType": v["DataType"], "StringValue": v["StringValue"]}
                for k, v in (message.get("MessageAttributes") or {}).items()
                if k != "failure_reason" and "StringValue" in v
            }
            sqs.send_message(QueueUrl=to_url, MessageBody=body, MessageAttributes=attributes)
            sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=message["ReceiptHandle"])
            moved += 1
    return moved
