"""SQS adapters: the events queue, and the dispatch queue with delayed re-sends and reasoned dead letters."""

from __future__ import annotations

import math
from typing import Any

from crcr.contracts.messages import DispatchMessage, EventMessage

SQS_MAX_DELAY_S = 900  # SQS caps DelaySeconds at 15 minutes; longer waits hop (see DispatchMessage.not_before)
_BATCH = 10


class QueueSendError(RuntimeError):
    """Some messages could not be sent even after retrying the failed entries."""


def _attributes(message: DispatchMessage) -> dict[str, Any]:
    """Who a dispatch message is for, readable without parsing the body (crcr dlq list)."""
    return {
        "delivery_id": {"DataType": "String", "StringValue": message.delivery_id},
        "target_repo": {"DataType": "String", "StringValue": message.target_repo},
    }


class SqsEventQueue:
    def __init__(self, client: Any, url: str) -> None:
        self._sqs = client
        self._url = url

    def send_event(self, message: EventMessage) -> None:
        self._sqs.send_message(
            QueueUrl=self._url,
            MessageBody=message.model_dump_json(),
            MessageAttributes={"delivery_id": {"DataType": "String", "StringValue": message.delivery_id}},
        )


class SqsDispatchQueue:
    def __init__(self, client: Any, url: str, dlq_url: str) -> None:
        self._sqs = client
        self._url = url
        self._dlq = dlq_url

    def send_dispatches(self, messages: list[DispatchMessage]) -> None:
        for start in range(0, len(messages), _BATCH):
            entries = {
                str(i): {
                    "Id": str(i),
                    "MessageBody": m.model_dump_json(),
                    "MessageAttributes": _attributes(m),
                }
                for i, m in enumerate(messages[start : start + _BATCH])
            }
            for _ in range(3):
                result = self._sqs.send_message_batch(QueueUrl=self._url, Entries=list(entries.values()))
                entries = {f["Id"]: entries[f["Id"]] for f in result.get("Failed", [])}
                if not entries:
                    break
            if entries:
                # The planner's message is retried whole; the dispatcher's ledger absorbs the repeats.
                raise QueueSendError(f"{len(entries)} dispatch messages were not accepted by SQS")

    def reschedule(self, message: DispatchMessage, delay_s: float) -> None:
        self._sqs.send_message(
            QueueUrl=self._url,
            MessageBody=message.model_dump_json(),
            DelaySeconds=max(0, min(SQS_MAX_DELAY_S, math.ceil(delay_s))),
            MessageAttributes=_attributes(message),
        )

    def dead_letter(self, message: DispatchMessage, reason: str) -> None:
        self._sqs.send_message(
            QueueUrl=self._dlq,
            MessageBody=message.model_dump_json(),
            MessageAttributes=_attributes(message)
            | {"failure_reason": {"DataType": "String", "StringValue": reason[:1000] or "unknown"}},
        )
