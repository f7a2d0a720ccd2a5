"""SQS partial batch responses, with records processed in parallel so one slow target delays no other."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_pools = threading.local()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The calling thread's pool of `workers` threads, made once and kept across invocations: starting ten threads
    for every batch cost a warm dispatch about a twentieth of its CPU. One per calling thread, so that `crcr
    local`'s pollers, which invoke a handler side by side, never share workers (in Lambda one thread invokes)."""
    pools: dict[int, ThreadPoolExecutor] = _pools.__dict__.setdefault("by_size", {})
    if workers not in pools:
        pools[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="batch")
    return pools[workers]


def process_batch(
    event: dict[str, Any],
    handle: Callable[[dict[str, Any]], None],
    on_error: Callable[[dict[str, Any], BaseException], None],
    parallel: int = 1,
) -> dict[str, Any]:
    """Run `handle` on each record; failed records are reported back to SQS and only they are retried. A
    DynamoDB stream's records are named by sequence number: the stream retries from the first one named."""
    records = event.get("Records") or []

    def run(record: dict[str, Any]) -> str | None:
        try:
            handle(record)
        except Exception as exc:  # a failed record must not fail its neighbours
            on_error(record, exc)
            return str(record["messageId"] if "messageId" in record else record["dynamodb"]["SequenceNumber"])
        return None

    side_by_side = parallel > 1 and len(records) > 1
    failed = list(_pool(parallel).map(run, records)) if side_by_side else [run(r) for r in records]
    return {"batchItemFailures": [{"itemIdentifier": mid} for mid in failed if mid]}
