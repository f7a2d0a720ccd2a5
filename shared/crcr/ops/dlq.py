"""Operator tools behind `crcr dlq`: list dead letters with their reasons, and redrive them to the queue they
came from, each message checked against that queue's contract first."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from crcr.contracts.check_messages import CHECK_SYNC
from crcr.contracts.messages import DispatchMessage, EventMessage

# Which message each of the template's queues carries, by its logical name (in the queue's physical name: SAM's
# `<stack>-DispatchQueue-<suffix>`, crcr local's `crcr-local-DispatchQueue`).
CONTRACTS: dict[str, tuple[str, TypeAdapter[Any]]] = {
    "EventsQueue": ("EventMessage", TypeAdapter(EventMessage)),
    "DispatchQueue": ("DispatchMessage", TypeAdapter(DispatchMessage)),
    "ChecksQueue": ("CheckMessage", CHECK_SYNC),  # one model per kind (crcr.contracts.check_messages)
}
STREAM_BATCH = "a stream batch's on-failure record: it names stream records, not a message, so it cannot be redriven"


class DlqFailed(Exception):
    """One line for the operator, and the exit status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


def queue_url(text: str, flag: str) -> str:
    """An SQS queue URL, or DlqFailed naming what was given instead (a name, an empty string)."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/").count("/") != 1:
        raise DlqFailed(
            2,
            f"{flag} {text!r} is not a queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME: the stack's outputs, "
            "or crcr local's ready line env, e.g. $CRCR_DISPATCH_DLQ_URL)",
        )
    return text


def _name(url: str) -> str:
    """The account and queue name: the same queue whatever host its URL names (moto answers with its own)."""
    return urllib.parse.urlsplit(url).path.strip("/")


def contract_of(url: str) -> tuple[str, tuple[str, TypeAdapter[Any]]] | None:
    name = _name(url).rsplit("/", 1)[-1]
    return next(((logical, contract) for logical, contract in CONTRACTS.items() if logical in name), None)


def list_dead_letters(sqs: Any, dlq_url: str, limit: int = 100) -> list[dict[str, Any]]:
    """Each dead letter once, with its reason. SQS has no peek: a listing receives each message once (hidden for
    the listing, then made visible again at once), so its ApproximateReceiveCount rises by one per listing;
    `receive_count` is shown as it was before this listing."""
    rows: list[dict[str, Any]] = []
    handles: list[str] = []
    try:
        while len(rows) < limit:
            got = sqs.receive_message(
                QueueUrl=dlq_url,
                MaxNumberOfMessages=min(10, limit - len(rows)),
                VisibilityTimeout=60,
                AttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not got:
                break
            for message in got:
                handles.append(message["ReceiptHandle"])
                attributes = message.get("MessageAttributes") or {}
                reason = attributes.get("failure_reason", {}).get("StringValue")
                if stream_batch(message["Body"]):
                    reason = STREAM_BATCH
                rows.append(
                    {
                        "message_id": message["MessageId"],
                        "delivery_id": attributes.get("delivery_id", {}).get("StringValue"),
                        "target_repo": attributes.get("target_repo", {}).get("StringValue"),
                        # Messages SQS moved after maxReceiveCount carry no reason: the function failed on them.
                        "reason": reason or "receive count exceeded",
                        "receive_count": int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1")) - 1,
                    }
                )
    finally:
        _show_again(sqs, dlq_url, handles)
    return rows


def _show_again(sqs: Any, url: str, handles: list[str]) -> None:
    """Messages received but left in the queue are visible again at once, not after the receive's timeout."""
    for start in range(0, len(handles), 10):
        chunk = handles[start : start + 10]
        entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(chunk)]
        sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)


def stream_batch(body: str) -> bool:
    """Lambda's on-failure record of a stream batch (it names a shard and sequence numbers, not messages)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and "DDBStreamBatchInfo" in doc


def paired_queue(sqs: Any, dlq_url: str) -> str | None:
    """The queue whose redrive policy names this DLQ (the template pairs each queue with its own), if one."""
    sources = sqs.list_dead_letter_source_queues(QueueUrl=dlq_url).get("queueUrls", [])
    if len(sources) > 1:
        raise DlqFailed(2, f"{dlq_url} is the dead-letter queue of {len(sources)} queues: name one with --to")
    return sources[0] if sources else None


def target_for(sqs: Any, dlq_url: str, to_url: str | None, any_queue: bool) -> str:
    """Where a redrive may send: the queue the DLQ is paired with, or with `any_queue` the one given."""
    paired = paired_queue(sqs, dlq_url)
    if to_url is None:
        if paired is None:
            raise DlqFailed(
                2,
                f"{dlq_url} is no queue's dead-letter queue (a stream's on-failure queue holds batch records, not "
                "messages): there is nothing to redrive to",
            )
        return paired
    if paired is not None and _name(to_url) == _name(paired):
        return to_url
    if not any_queue:
        paired_text = f"its queue is {paired}" if paired else "it is no queue's dead-letter queue"
        raise DlqFailed(2, f"--to {to_url} is not the queue {dlq_url} takes dead letters from ({paired_text}); "
                        "--any-queue sends there anyway")  # fmt: skip
    return to_url


@dataclass
class Redriven:
    to: str
    moved: int = 0
    dry_run: bool = False
    left: list[dict[str, str]] = field(default_factory=list)  # message_id, reason: invalid ones, still in the DLQ

    def line(self) -> str:
        verb = "would redrive" if self.dry_run else "redrove"
        kept = f"; {len(self.left)} left in the dead-letter queue (below)" if self.left else ""
        return f"{verb} {self.moved} messages to {self.to}{kept}"


def redrive(
    sqs: Any, dlq_url: str, to_url: str, limit: int = 1000, *, dry_run: bool = False, any_queue: bool = False
) -> Redriven:
    """Move dead letters back to `to_url` (dispatches with a fresh attempt count). Each is validated against the
    contract of the queue it goes to first: one that does not hold (a stream batch's record, a malformed body,
    a message of another queue) stays in the DLQ, visible again at once, and is listed. `dry_run` moves nothing."""
    contract = contract_of(to_url)
    if contract is None and not any_queue:
        known = ", ".join(CONTRACTS)
        raise DlqFailed(2, f"--to {to_url}: not one of the relay's queues ({known}), so no contract to check against")
    done = Redriven(to_url, dry_run=dry_run)
    handles: list[str] = []
    try:
        while done.moved + len(done.left) < limit:
            got = sqs.receive_message(
                QueueUrl=dlq_url,
                MaxNumberOfMessages=min(10, limit - done.moved - len(done.left)),
                VisibilityTimeout=60,
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not got:
                break
            for message in got:
                body, problem = _checked(message["Body"], contract[1] if contract else None)
                if problem is not None or dry_run:
                    handles.append(message["ReceiptHandle"])
                    if problem is not None:
                        done.left.append({"message_id": message["MessageId"], "reason": problem})
                    else:
                        done.moved += 1
                    continue
                attributes = {
                    k: {"DataType": v["DataType"], "StringValue": v["StringValue"]}
                    for k, v in (message.get("MessageAttributes") or {}).items()
                    if k != "failure_reason" and "StringValue" in v
                }
                sqs.send_message(QueueUrl=to_url, MessageBody=body, MessageAttributes=attributes)
                sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=message["ReceiptHandle"])
                done.moved += 1
    finally:
        _show_again(sqs, dlq_url, handles)
    return done


def _checked(body: str, contract: tuple[str, TypeAdapter[Any]] | None) -> tuple[str, str | None]:
    """The body to send (a dispatch starts again at attempt 0), or why it does not hold to the contract."""
    if stream_batch(body):
        return body, STREAM_BATCH
    if contract is None:
        return body, None
    name, model = contract
    try:
        parsed = model.validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return body, f"not a {name} ({where}: {first['msg']})"
    if isinstance(parsed, DispatchMessage):
        return parsed.model_copy(update={"attempt": 0, "not_before": None}).model_dump_json(), None
    return body, None
