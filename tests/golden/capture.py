"""What the relay writes while a recorded stream runs: queue sends by botocore hook, GitHub, Buildkite and PyTorch's
HUD writes from their doubles, both tables and the HUD bucket at the end."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import boto3

from crcr.local.stack import LocalStack
from tests.doubles.buildkite_double import BuildkiteDouble
from tests.doubles.github_double import GitHubDouble
from tests.doubles.hud import HudDouble

# Calls the stack's pollers make while nothing happens: they are no sign of work.
IDLE_CALLS = frozenset({"sqs.ReceiveMessage", "sqs.GetQueueAttributes"})
IDLE_SERVICES = frozenset({"dynamodbstreams"})
TABLES = ("StateTable", "ResultsTable")


class AwsWrites:
    """Every SendMessage/SendMessageBatch any client of boto3's default session makes (the relay's clients are all
    made after `install`, so they copy its hooks), and when the last call that was work was made."""

    def __init__(self) -> None:
        self.sends: list[dict[str, Any]] = []
        self.last_work = time.monotonic()
        self._lock = threading.Lock()
        self._removals: list[Callable[[], None]] = []

    def install(self) -> AwsWrites:
        if boto3.DEFAULT_SESSION is None:
            boto3.setup_default_session()
        assert boto3.DEFAULT_SESSION is not None
        events = boto3.DEFAULT_SESSION.events
        events.register("before-call", self._seen, unique_id="crcr-golden")
        self._removals.append(lambda: events.unregister("before-call", unique_id="crcr-golden"))
        return self

    def remove(self) -> None:
        for removal in self._removals:
            removal()

    def _seen(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        service, name = model.service_model.service_name, model.name
        with self._lock:
            if service not in IDLE_SERVICES and f"{service}.{name}" not in IDLE_CALLS:
                self.last_work = time.monotonic()
            if service == "sqs" and name in ("SendMessage", "SendMessageBatch"):
                request = json.loads(params["body"])
                queue = str(request["QueueUrl"]).rsplit("/", 1)[-1].removeprefix("crcr-local-")
                entries = request.get("Entries") or [request]
                self.sends.extend({"queue": queue} | _message(entry) for entry in entries)


def _message(entry: dict[str, Any]) -> dict[str, Any]:
    """A message as it goes on the wire: its body, delay and attributes (the batch entry's own id left out)."""
    out: dict[str, Any] = {"body": entry["MessageBody"]}
    if "DelaySeconds" in entry:
        out["delay_s"] = entry["DelaySeconds"]
    if entry.get("MessageAttributes"):
        out["attributes"] = entry["MessageAttributes"]
    return out


def private_client(stack: LocalStack, service: str) -> Any:
    """A client of a session of its own: the test's reads are neither captured nor taken for the relay's work."""
    return boto3.session.Session().client(service, endpoint_url=stack.env["AWS_ENDPOINT_URL"], region_name="us-east-1")


class Writes:
    """Everything written, cut into steps: each step's share is what arrived between its start and the relay
    settling after it."""

    def __init__(
        self, stack: LocalStack, aws: AwsWrites, github: GitHubDouble, hud: HudDouble, buildkite: BuildkiteDouble
    ) -> None:
        self.stack, self.aws, self.github, self.hud, self.buildkite = stack, aws, github, hud, buildkite
        self.sqs = private_client(stack, "sqs")
        self.steps: list[dict[str, Any]] = []
        self._marks = self._now()

    def _now(self) -> tuple[int, int, int, int]:
        return len(self.aws.sends), len(self.github.requests), len(self.hud.attempts), len(self.buildkite.requests)

    def busy(self) -> str:
        """What is still going on, or "" when nothing is: a message queued, delayed or in flight, a request
        unanswered."""
        for name, url in self.stack.queue_urls.items():
            attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            counts = [
                int(attributes.get(f"ApproximateNumberOf{kind}", 0))
                for kind in ("Messages", "MessagesNotVisible", "MessagesDelayed")
            ]
            if any(counts) and not name.endswith("DLQ"):
                return f"{name} holds {counts}"
        if [r for r in self.github.requests if r.outcome == "pending"]:
            return "a GitHub request unanswered"
        if [r for r in self.buildkite.requests if r.outcome == "pending"]:
            return "a Buildkite request unanswered"
        return ""

    def settle(self, quiet_s: float = 0.6, timeout_s: float = 60.0) -> None:
        """Until no queue holds a message and nothing has been asked of AWS, GitHub, Buildkite or the HUD for
        `quiet_s` (a DynamoDB stream's poller reads within 0.2 s of a write, and its reads are work)."""
        deadline = time.monotonic() + timeout_s
        seen = self._now()
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            doing = self.busy()
            now = self._now()
            if doing or now != seen or self.aws.last_work > quiet_since:
                seen, quiet_since = now, time.monotonic()
                continue
            if time.monotonic() - quiet_since >= quiet_s:
                return
        raise AssertionError(f"the relay did not settle within {timeout_s} s: {self.busy() or 'still writing'}")

    def step(self, name: str, action: Callable[[], Any]) -> None:
        """Run one step of the stream, wait for the relay to settle, and keep what it wrote meanwhile."""
        action()
        self.settle()
        sends, requests, attempts, builds = self._marks
        self._marks = self._now()
        self.steps.append({
            "step": name,
            "github": [github_write(r) for r in self.github.requests[requests:] if is_github_write(r)],
            "buildkite": [buildkite_write(r) for r in self.buildkite.requests[builds:] if r.method != "GET"],
            "torchci": [push for status, push in self.hud.attempts[attempts:] if status < 300],
            "queues": self.aws.sends[sends:],
        })  # fmt: skip

    def at_end(self) -> dict[str, Any]:
        """The steps, then every item of both tables, every document of the HUD bucket and how many messages each
        dead-letter queue holds, as they stand."""
        ddb = private_client(self.stack, "dynamodb")
        tables = {}
        for table in TABLES:
            items: list[dict[str, Any]] = []
            pages = ddb.get_paginator("scan").paginate(TableName=f"crcr-local-{table}", ConsistentRead=True)
            for page in pages:
                items.extend(page["Items"])
            tables[table] = items
        s3 = private_client(self.stack, "s3")
        bucket = self.stack.function_env["CRCR_HUD_BUCKET"]
        documents = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                data = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                documents[obj["Key"]] = json.loads(data)
        dead = {}
        for name, url in self.stack.queue_urls.items():
            if name.endswith("DLQ"):
                attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
                dead[name] = int(attributes["Attributes"]["ApproximateNumberOfMessages"])
        return {"steps": self.steps, "tables": tables, "hud_bucket": documents, "dead_letters": dead}


def is_github_write(request: Any) -> bool:
    """Reads and the relay's token mints tell nothing of what it writes."""
    return request.method != "GET" and not request.path.endswith("/access_tokens")


def github_write(request: Any) -> dict[str, Any]:
    out = {"method": request.method, "path": request.path, "status": request.status, "body": request.json}
    answer = request.response_json
    if request.method == "POST" and isinstance(answer, dict) and "id" in answer:
        out["created_id"] = answer["id"]  # what later PATCHes and stored items name it by
    return out


def buildkite_write(request: Any) -> dict[str, Any]:
    out = {"method": request.method, "path": request.path, "status": request.status, "body": request.json}
    answer = request.response_json
    if isinstance(answer, dict) and "id" in answer:
        out["created_id"] = answer["id"]
    return out
