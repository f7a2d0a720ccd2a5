"""DynamoDB stream records (Lambda's event shape): the results table's to JobRecords; and the reporter's dead-letter
queue. (The state table's ledger rows marked sent: crcr.adapters.ledger.dispatched_row.)"""

from __future__ import annotations

import json
from typing import Any

from crcr.adapters.job_items import from_item
from crcr.app.ports.jobs import JobRecord


def images(record: dict[str, Any]) -> tuple[JobRecord | None, JobRecord | None]:
    data = record.get("dynamodb") or {}
    old, new = data.get("OldImage"), data.get("NewImage")
    return (from_item(old) if old else None, from_item(new) if new else None)


class SqsDeadLetters:
    def __init__(self, client: Any, url: str) -> None:
        self._sqs = client
        self._url = url

    def send(self, body: dict[str, Any], reason: str) -> None:
        self._sqs.send_message(
            QueueUrl=self._url,
            MessageBody=json.dumps(body, separators=(",", ":")),
            MessageAttributes={"failure_reason": {"DataType": "String", "StringValue": reason[:1000]}},
        )
