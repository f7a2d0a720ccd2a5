"""DynamoDB stream records (Lambda's event shape): the results table's to JobRecords, the state table's ledger
rows marked sent to check-run requests; and the reporter's dead-letter queue."""

from __future__ import annotations

import json
from typing import Any

from crcr.adapters.job_items import from_item
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.ledger import LedgerState
from crcr.contracts.messages import CheckSyncMessage


def images(record: dict[str, Any]) -> tuple[JobRecord | None, JobRecord | None]:
    data = record.get("dynamodb") or {}
    old, new = data.get("OldImage"), data.get("NewImage")
    return (from_item(old) if old else None, from_item(new) if new else None)


def dispatched_check(record: dict[str, Any]) -> CheckSyncMessage | None:
    """The check-run request of a ledger row an L3/L4 dispatch just marked sent (the StateTable stream's
    filter passes only those; anything else here is None). The same request the writer takes from ChecksQueue."""
    data = record.get("dynamodb") or {}
    new, old = data.get("NewImage") or {}, data.get("OldImage") or {}
    pk, sk = new.get("pk", {}).get("S", ""), new.get("sk", {}).get("S", "")
    if not (pk.startswith("DLV#") and sk.startswith("DSP#")):
        return None
    sent = LedgerState.DISPATCHED.value
    if new.get("state", {}).get("S") != sent or old.get("state", {}).get("S") == sent:
        return None
    if int(new.get("level", {}).get("N", "0")) < 3:
        return None
    return CheckSyncMessage(
        kind="repo",
        upstream=new["upstream"]["S"],
        head_sha=new["head_sha"]["S"],
        delivery_id=pk.removeprefix("DLV#"),
        repo=new["repo"]["S"],
    )


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
