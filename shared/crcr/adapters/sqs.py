"""SQS adapters: the events queue, and the dispatch queue with delayed re-sends and reasoned dead letters."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from crcr.contracts.check_messages import CheckSync
from crcr.contracts.messages import DispatchMessage, EventMessage, RunMessage

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


def _send_batches(sqs: Any, url: str, bodies: list[dict[str, Any]], what: str) -> None:
    """send_message_batch in tens, re-sending only the entries SQS reports as failed."""
    for start in range(0, len(bodies), _BATCH):
        entries = {str(i): {"Id": str(i)} | body for i, body in enumerate(bodies[start : start + _BATCH])}
        for _ in range(3):
            result = sqs.send_message_batch(QueueUrl=url, Entries=list(entries.values()))
            entries = {f["Id"]: entries[f["Id"]] for f in result.get("Failed", [])}
            if not entries:
                break
        if entries:
            raise QueueSendError(f"{len(entries)} {what} messages were not accepted by SQS")


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
        # On failure the planner's message is retried whole; the dispatcher's ledger absorbs the repeats.
        _send_batches(
            self._sqs,
            self._url,
            [{"MessageBody": m.model_dump_json(), "MessageAttributes": _attributes(m)} for m in messages],
            "dispatch",
        )

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


class SqsChecksQueue:
    """Check-run sync requests: sent in batches, delayed when paced or settling, dead-lettered with a reason."""

    def __init__(self, client: Any, url: str, dlq_url: str) -> None:
        self._sqs = client
        self._url = url
        self._dlq = dlq_url

    def send_checks(self, messages: Sequence[CheckSync], delay_s: float = 0.0) -> None:
        delay = max(0, min(SQS_MAX_DELAY_S, math.ceil(delay_s)))
        _send_batches(
            self._sqs,
            self._url,
            [{"MessageBody": m.model_dump_json(), "DelaySeconds": delay} for m in messages],
            "check-run",
        )

    def dead_letter(self, message: CheckSync, reason: str) -> None:
        self._sqs.send_message(
            QueueUrl=self._dlq,
            MessageBody=message.model_dump_json(),
            MessageAttributes={"failure_reason": {"DataType": "String", "StringValue": reason[:1000] or "unknown"}},
        )


class SqsRunQueue:
    """Downstream run events (`workflow_run`) for the runs worker, apart from the upstream's events: a busy
    downstream never queues in front of the upstream. A completion waits the settle time for late reports."""

    def __init__(self, client: Any, url: str) -> None:
        self._sqs = client
        self._url = url

    def send_run(self, message: RunMessage, delay_s: float = 0.0) -> None:
        self._sqs.send_message(
            QueueUrl=self._url,
            MessageBody=message.model_dump_json(),
            DelaySeconds=max(0, min(SQS_MAX_DELAY_S, math.ceil(delay_s))),
            MessageAttributes={"delivery_id": {"DataType": "String", "StringValue": message.delivery_id}},
        )
