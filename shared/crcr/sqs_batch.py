"""SQS partial batch responses, with records processed in parallel so one slow target delays no other."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def process_batch(
    event: dict[str, Any],
    handle: Callable[[dict[str, Any]], None],
    on_error: Callable[[dict[str, Any], BaseException], None],
    parallel: int = 1,
) -> dict[str, Any]:
    """Run `handle` on each record; failed records are reported back to SQS and only they are retried."""
    records = event.get("Records") or []

    def run(record: dict[str, Any]) -> str | None:
        try:
            handle(record)
        except Exception as exc:  # a failed record must not fail its neighbours
            on_error(record, exc)
            return str(record["messageId"])
        return None

    if parallel > 1 and len(records) > 1:
        with ThreadPoolExecutor(max_workers=min(parallel, len(records))) as pool:
            failed = list(pool.map(run, records))
    else:
        failed = [run(r) for r in records]
    return {"batchItemFailures": [{"itemIdentifier": mid} for mid in failed if mid]}
