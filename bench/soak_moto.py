"""moto's server for the bench's and the soak's stacks, as `crcr local` runs it, counting every call by caller."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import EnvironBuilder, run_wsgi_app

from crcr.local.aws import atomic_dynamodb, patch_moto
from crcr.local.front import FrontEnd, Limits, Route

SOAK_AGENT = "crcr-soak"
COUNTS_PATH = "/_soak/aws-calls"


class Counting:
    """`GET /_soak/aws-calls`: `{"relay": {"DynamoDB.PutItem": n, ...}, "soak": {...}}` (a `crcr-soak` User-Agent)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.counts: dict[str, Counter[str]] = {"relay": Counter(), "soak": Counter()}
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == COUNTS_PATH:
            with self.lock:
                body = json.dumps({who: dict(c) for who, c in self.counts.items()}).encode()
            start_response("200 OK", [("content-type", "application/json"), ("content-length", str(len(body)))])
            return [body]
        who = "soak" if SOAK_AGENT in environ.get("HTTP_USER_AGENT", "") else "relay"
        with self.lock:
            self.counts[who][operation(environ)] += 1
        return self.app(environ, start_response)


def operation(environ: dict[str, Any]) -> str:
    """`Service.Operation` of a JSON-protocol call (DynamoDB, Streams, SQS, Secrets Manager), else S3's method."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        service, _, op = target.partition(".")  # DynamoDB_20120810, DynamoDBStreams_20120810, AmazonSQS, secretsmanager
        return f"{service.removeprefix('Amazon').split('_', 1)[0]}.{op}"
    if environ.get("PATH_INFO", "").startswith("/moto-api"):
        return "moto-api"
    return f"S3.{environ.get('REQUEST_METHOD', '?')}"


class Dispatcher(DomainDispatcherApplication):
    """moto's dispatcher with its host -> backend lookup remembered: moto lists its package directory and tries
    every backend's URL patterns on each request (about a sixth of its CPU under the soak's load)."""

    def __init__(self, create_app: Callable[..., Any]) -> None:
        super().__init__(create_app)
        self.backends: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:
        if host not in self.backends:
            self.backends[host] = super().get_backend_for_host(host)
        return self.backends[host]


def fast_clock() -> None:
    """moto's `unix_time()` for "now" builds two datetimes, for every queued message on every SQS call (5 ms of CPU per
    send with a few hundred messages queued): the same number, from `time.time()`."""
    import moto.core.utils as core_utils  # noqa: PLC0415
    import moto.dynamodb.models  # noqa: PLC0415 - loaded now so their imported names are patched too
    import moto.s3.models  # noqa: PLC0415
    import moto.sqs.models  # noqa: F401, PLC0415

    slow_s, slow_ms = core_utils.unix_time, core_utils.unix_time_millis

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else slow_s(dt)

    def unix_time_millis(dt: Any = None) -> float:
        return time.time() * 1000.0 if dt is None else slow_ms(dt)

    for module in [m for name, m in sys.modules.items() if name.startswith("moto") and m is not None]:
        for name, slow, fast in (("unix_time", slow_s, unix_time), ("unix_time_millis", slow_ms, unix_time_millis)):
            if getattr(module, name, None) is slow:
                setattr(module, name, fast)


def wsgi_route(app: Callable[..., Iterable[bytes]], port: int) -> Route:
    """A WSGI application (moto's) behind crcr local's HTTP/1.1 front end, which keeps connections open as AWS does:
    moto's own server closes each after one answer, which put a connect and a close in every call's CPU."""

    base = f"http://127.0.0.1:{port}"

    def route(method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, Any]:
        environ = EnvironBuilder(path, base, query, method, headers=headers, data=body, multithread=True).get_environ()
        chunks, status, answer = run_wsgi_app(app, environ, buffered=True)
        kept = {k: v for k, v in answer.items() if k.lower() not in {"content-length", "connection"}}
        return int(status.split(" ", 1)[0]), b"".join(chunks), kept

    return route


def main() -> None:
    port = int(sys.argv[1])
    fast_clock()
    patch_moto()  # as `crcr local` runs moto (crcr.local.aws): its Query, item maps, transactions and stream iterators
    # Each DynamoDB request whole before the next, as DynamoDB makes a conditional write one step.
    app = Counting(atomic_dynamodb(Dispatcher(create_backend_app)))
    # S3 holds webhook bodies up to API Gateway's 10 MB, plus the request's own framing.
    limits = Limits(max_body=64 * 1024 * 1024, body_budget=512 * 1024 * 1024, request_s=120.0, write_s=120.0)
    server = FrontEnd(("127.0.0.1", port), wsgi_route(app, port), limits)
    server.serve_forever()


if __name__ == "__main__":
    main()
