"""crcr local runs every function in one process, several at once: each thread keeps its own Powertools log keys."""

from __future__ import annotations

import threading
from typing import Any

from aws_lambda_powertools import Logger


def per_thread_log_keys(logger: Logger) -> None:
    """Lambda runs one invocation per process, so Powertools keeps a handler's keys (the Lambda context's
    `function_name` and request id, `correlation_id`) in the formatter, shared by the process. `crcr local` runs
    the functions in threads of one process: there, a line logged by one function named another's. The keys
    become the calling thread's own, each thread starting from the keys the logger had here; the formatter is
    Powertools' own, only where it keeps them changes. Idempotent."""
    formatter = logger.registered_formatter
    base = type(formatter)
    if getattr(base, "_crcr_per_thread", False):
        return
    initial = dict(formatter.__dict__.pop("log_format"))
    local = threading.local()

    def get(self: Any) -> dict[str, Any]:
        keys = getattr(local, "keys", None)
        if keys is None:
            keys = local.keys = dict(initial)
        return keys

    def set_(self: Any, value: dict[str, Any]) -> None:
        local.keys = value

    formatter.__class__ = type(base.__name__, (base,), {"log_format": property(get, set_), "_crcr_per_thread": True})
