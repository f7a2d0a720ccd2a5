"""Lambda's event sources on `crcr local`: SQS pollers, DynamoDB stream readers (in order per shard, or in parallel
per partition key) and EventBridge schedules, each invoking its function on the stack as Lambda would."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from crcr.local.aws import ACCOUNT, REGION
from crcr.local.filters import passes
from crcr.local.template import FunctionDecl, StreamSource
from crcr.settings import Settings


class Host(Protocol):
    """What the event sources need of the stack: its resources, its settings, the function runtime and its stop."""

    settings: Settings
    queue_urls: dict[str, str]
    stream_arns: dict[str, str]
    stopping: threading.Event

    def client(self, service: str) -> Any: ...

    def invoke(self, logical_id: str, event: dict[str, Any]) -> Any: ...


# Each scheduled function's local period, from Settings; any other scheduled function runs at the sweeper's.
SCHEDULE_INTERVALS: dict[str, Callable[[Settings], float]] = {
    "ReconcilerFunction": lambda settings: settings.reconcile_interval_s,
    "LevelFunction": lambda settings: settings.level_interval_s,
    "ExportFunction": lambda settings: settings.export_interval_s,
}


def _sweep_interval(settings: Settings) -> float:
    return settings.sweep_interval_s


# Scheduled functions `crcr local` runs at start too, not only after their first interval: the level status, and
# the results table's export (its first run is a full export, each later one incremental).
RUN_AT_START = frozenset({"LevelFunction", "ExportFunction"})


def poll_queue(host: Host, fn: FunctionDecl, queue_logical: str, batch_size: int, report_failures: bool) -> None:
    """Lambda's SQS event source: batches to the function, the ones it reports failed left for SQS to return."""
    sqs = host.client("sqs")
    url = host.queue_urls[queue_logical]
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{url.rsplit('/', 1)[-1]}"  # a queue URL ends with its name
    while not host.stopping.is_set():
        try:
            got = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(batch_size, 10),
                WaitTimeSeconds=1,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
        except Exception:  # moto restarting or gone while stopping
            if host.stopping.wait(0.5):
                return
            continue
        messages = got.get("Messages") or []
        if not messages:
            continue
        records = [sqs_record(m, arn) for m in messages]
        try:
            result = host.invoke(fn.logical_id, {"Records": records})
        except Exception as exc:  # the whole batch returns after the visibility timeout, as in Lambda
            print(json.dumps({"event": "invoke_failed", "function": fn.logical_id, "error": repr(exc)}), flush=True)
            continue
        failed: set[str] = set()
        if report_failures and isinstance(result, dict):
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures") or []}
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            try:
                sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
                )
            except Exception:  # AWS gone (stopping): the messages come back, as in Lambda
                if host.stopping.is_set():
                    return


def poll_stream(host: Host, fn: FunctionDecl, source: StreamSource) -> None:
    """Lambda's stream event source: in order per shard, retry from the failed record, then on-failure."""
    if source.parallelization > 1:
        ParallelStream(host, fn, source).run()
        return
    reader = StreamReader(host.client("dynamodbstreams"), host.stream_arns[source.table])
    pending: dict[str, list[dict[str, Any]]] = {}
    retries: dict[str, int] = {}
    while not host.stopping.is_set():
        busy = False
        try:
            for sid in reader.shards():
                if not pending.get(sid):
                    # Lambda filters before it batches: a filtered stream is read further ahead.
                    read = reader.read(sid, source.batch_size if not source.filters else 1000)
                    pending[sid] = [r for r in read if passes(source.filters, r)]
                    busy = busy or bool(read)
                if pending[sid]:
                    _deliver_stream_batch(host, fn, source, sid, pending, retries)
                    busy = True
        except Exception:  # moto going away while stopping
            if host.stopping.wait(0.5):
                return
        if not busy:  # Lambda polls an idle shard 4 times a second, and one with records waiting at once
            host.stopping.wait(0.2)


def stream_failed(
    host: Host, fn: FunctionDecl, source: StreamSource, shard: str, dropped: list[dict[str, Any]]
) -> None:
    """Records given up on after the source's retries: their batch's description to the on-failure queue."""
    if not source.on_failure_queue:
        return
    host.client("sqs").send_message(
        QueueUrl=host.queue_urls[source.on_failure_queue],
        MessageBody=json.dumps(
            {
                "requestContext": {"condition": "RetryAttemptsExhausted", "functionArn": fn.logical_id},
                "DDBStreamBatchInfo": {
                    "shardId": shard,
                    "streamArn": host.stream_arns[source.table],
                    "startSequenceNumber": dropped[0]["dynamodb"]["SequenceNumber"],
                    "endSequenceNumber": dropped[-1]["dynamodb"]["SequenceNumber"],
                    "batchSize": len(dropped),
                },
            }
        ),
    )


def _deliver_stream_batch(
    host: Host,
    fn: FunctionDecl,
    source: StreamSource,
    shard: str,
    pending: dict[str, list[dict[str, Any]]],
    retries: dict[str, int],
) -> None:
    batch = pending[shard][: source.batch_size]
    try:
        result = host.invoke(fn.logical_id, {"Records": batch})
        failed = [f["itemIdentifier"] for f in (result or {}).get("batchItemFailures") or []]
    except Exception:
        failed = [batch[0]["dynamodb"]["SequenceNumber"]]
    if not failed:
        pending[shard] = pending[shard][len(batch) :]
        retries[shard] = 0
        return
    first = next(i for i, r in enumerate(batch) if r["dynamodb"]["SequenceNumber"] in failed)
    pending[shard] = pending[shard][first:]
    retries[shard] = retries.get(shard, 0) + 1
    if source.max_retries >= 0 and retries[shard] > source.max_retries:
        dropped = pending[shard][: len(batch) - first]
        pending[shard] = pending[shard][len(dropped) :]
        retries[shard] = 0
        stream_failed(host, fn, source, shard, dropped)
        return
    host.stopping.wait(min(2.0 ** retries[shard] * 0.1, 5.0))  # Lambda backs off between stream retries


def run_schedule(host: Host, fn: FunctionDecl) -> None:
    """EventBridge's schedule, at the function's local period (SCHEDULE_INTERVALS; docs/configuration.md)."""
    interval = SCHEDULE_INTERVALS.get(fn.logical_id, _sweep_interval)(host.settings)
    wait = 0.0 if fn.logical_id in RUN_AT_START else interval  # the level status: computed now, then each interval
    while not host.stopping.wait(wait):
        wait = interval
        event = {"source": "aws.events", "detail-type": "Scheduled Event", "time": time.time(), "detail": {}}
        try:
            host.invoke(fn.logical_id, event)
        except Exception as exc:  # as in Lambda: the next tick tries again
            print(json.dumps({"event": "invoke_failed", "function": fn.logical_id, "error": repr(exc)}), flush=True)


def start_pollers(host: Host, functions: list[FunctionDecl], pollers_per_queue: int) -> list[threading.Thread]:
    """Every function's event sources, each in threads of its own: `pollers_per_queue` per queue, one per stream
    and one per schedule."""
    threads = []
    for fn in functions:
        for source in fn.sqs_sources:
            args = (host, fn, source.queue, source.batch_size, source.report_failures)
            for i in range(pollers_per_queue):
                threads.append(threading.Thread(target=poll_queue, args=args, name=f"poll-{fn.logical_id}-{i}"))
        if fn.schedules:
            threads.append(threading.Thread(target=run_schedule, args=(host, fn), name=f"timer-{fn.logical_id}"))
        for stream in fn.stream_sources:
            threads.append(
                threading.Thread(target=poll_stream, args=(host, fn, stream), name=f"stream-{fn.logical_id}")
            )
    for thread in threads:
        thread.daemon = True
        thread.start()
    return threads


class StreamReader:
    """A table's DynamoDB stream as Lambda's event source reads it: each shard from its start (TRIM_HORIZON),
    in order, each record as the event carries it (with its eventSourceARN).

    DynamoDB writes no stream record for a PutItem or UpdateItem that changes nothing in the item; moto does
    (with equal old and new images). Those are left out here, so the function sees what it would in AWS."""

    def __init__(self, streams: Any, arn: str) -> None:
        self._streams = streams
        self.arn = arn
        self._iterators: dict[str, str] = {}

    def shards(self) -> list[str]:
        for shard in self._streams.describe_stream(StreamArn=self.arn)["StreamDescription"].get("Shards", []):
            sid = shard["ShardId"]
            if sid not in self._iterators:
                self._iterators[sid] = self._streams.get_shard_iterator(
                    StreamArn=self.arn, ShardId=sid, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
        return list(self._iterators)

    def read(self, shard: str, limit: int) -> list[dict[str, Any]]:
        """The shard's next records (at most `limit` of them, fewer once unchanged writes are left out)."""
        return [r | {"eventSourceARN": self.arn} for r in self._next(shard, limit) if not _unchanged(r)]

    def _next(self, shard: str, limit: int) -> list[dict[str, Any]]:
        got = self._streams.get_records(ShardIterator=self._iterators[shard], Limit=limit)
        self._iterators[shard] = got.get("NextShardIterator") or self._iterators[shard]
        return list(got.get("Records", []))


class ParallelStream:
    """Lambda's stream event source with a ParallelizationFactor: up to that many batches of a shard at once, each
    partition key's records in order (a key waits while a batch holding it is out, or being retried). One table
    partition, say one dispatch with hundreds of jobs, then holds one batch at a time, never the others' turn."""

    LOOKAHEAD = 1000  # records read ahead of the batches

    def __init__(self, host: Host, fn: FunctionDecl, source: StreamSource) -> None:
        self.host, self.fn, self.source = host, fn, source
        self.reader = StreamReader(host.client("dynamodbstreams"), host.stream_arns[source.table])
        self.pending: list[tuple[int, str, dict[str, Any]]] = []  # (sequence number, shard, record), in order
        self.out: set[str] = set()  # partition keys of the batches out
        self.running = 0
        self.cond = threading.Condition()

    @staticmethod
    def key(record: dict[str, Any]) -> str:
        keys = (record.get("dynamodb") or {}).get("Keys") or {}
        return json.dumps(keys.get("pk", keys), sort_keys=True)

    def run(self) -> None:
        try:
            self._run()
        finally:  # the batches out finish before the stack stops moto under them
            with self.cond:
                self.cond.wait_for(lambda: self.running == 0, timeout=10)

    def _run(self) -> None:
        stop = self.host.stopping
        while not stop.is_set():
            try:
                read = self._read()
            except Exception:  # moto going away while stopping
                if stop.wait(0.5):
                    return
                continue
            with self.cond:
                batch = self._take()
                if batch:
                    self.running += 1
            if batch:
                threading.Thread(target=self._deliver, args=(batch,), daemon=True, name="stream-batch").start()
            else:
                with self.cond:
                    # An idle shard is polled 4 times a second; records whose keys are all out wait for a batch to
                    # come back (which wakes this at once).
                    self.cond.wait(0.05 if read else 0.2)

    def _read(self) -> bool:
        with self.cond:
            if len(self.pending) >= self.LOOKAHEAD:
                return False
        got: list[tuple[int, str, dict[str, Any]]] = []
        for sid in self.reader.shards():
            got += [(int(r["dynamodb"]["SequenceNumber"]), sid, r) for r in self.reader.read(sid, 1000)]
        kept = [g for g in got if passes(self.source.filters, g[2])]
        with self.cond:
            self.pending += kept
        return bool(got)

    def _take(self) -> list[tuple[int, str, dict[str, Any]]]:
        """The next batch: the oldest records whose keys no batch out holds, up to the batch size."""
        if self.running >= self.source.parallelization:
            return []
        batch: list[tuple[int, str, dict[str, Any]]] = []
        shard: str | None = None
        for item in self.pending:
            if len(batch) >= self.source.batch_size:
                break
            if self.key(item[2]) in self.out or (shard is not None and item[1] != shard):
                continue
            shard = item[1]
            batch.append(item)
        for item in batch:
            self.pending.remove(item)
            self.out.add(self.key(item[2]))
        return batch

    def _deliver(self, batch: list[tuple[int, str, dict[str, Any]]]) -> None:
        attempt, held = 0, {self.key(r) for _, _, r in batch}
        try:
            while batch and not self.host.stopping.is_set():
                records = [r for _, _, r in batch]
                try:
                    result = self.host.invoke(self.fn.logical_id, {"Records": records})
                    failed = [f["itemIdentifier"] for f in (result or {}).get("batchItemFailures") or []]
                except Exception:
                    failed = [records[0]["dynamodb"]["SequenceNumber"]]
                if not failed:
                    return
                first = next(i for i, r in enumerate(records) if r["dynamodb"]["SequenceNumber"] in failed)
                batch, attempt = batch[first:], attempt + 1
                if self.source.max_retries >= 0 and attempt > self.source.max_retries:
                    stream_failed(self.host, self.fn, self.source, batch[0][1], [r for _, _, r in batch])
                    return
                self.host.stopping.wait(min(2.0**attempt * 0.1, 5.0))  # its keys stay held while it backs off
        finally:
            with self.cond:
                self.running -= 1
                self.out -= held
                self.cond.notify_all()


def _unchanged(record: dict[str, Any]) -> bool:
    data = record.get("dynamodb") or {}
    return record.get("eventName") == "MODIFY" and "OldImage" in data and data.get("OldImage") == data.get("NewImage")


def sqs_record(message: dict[str, Any], arn: str) -> dict[str, Any]:
    """A Lambda SQS event record, as the event source mapping builds it."""
    attributes = {
        name: {
            "stringValue": value.get("StringValue"),
            "dataType": value.get("DataType"),
            "stringListValues": [],
            "binaryListValues": [],
        }
        for name, value in (message.get("MessageAttributes") or {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes") or {},
        "messageAttributes": attributes,
        "md5OfBody": message.get("MD5OfBody"),
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "awsRegion": REGION,
    }
