"""`crcr local`: the relay on this machine against an embedded AWS, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from typing import Any


def add(sub: Any) -> None:
    local = sub.add_parser("local", help="run the relay on this machine against an embedded AWS")
    local.add_argument("--port", type=int, default=8787, help="port to serve on (0 picks a free one)")
    local.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback unless told)")
    local.add_argument(
        "--follow",
        action="store_true",
        help="after the ready line, print each step of each delivery as a line (crcr follow's view of the logs)",
    )
    local.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from crcr.local.stack import LocalStack  # noqa: PLC0415
    from crcr.settings import ConfigError  # noqa: PLC0415

    port, host, follow = args.port, args.host, args.follow

    try:
        stack = LocalStack(port=port, host=host).start()
    except ConfigError as exc:  # every problem at once, one line each, before anything runs
        for problem in exc.problems:
            print(f"crcr local: {problem}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. a --host that does not resolve or is not this machine's
        print(f"crcr local: --host {host}: cannot listen there: {exc.strerror or exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    ready: dict[str, object] = {"event": "ready", "url": stack.url, "hud": f"{stack.url}/hud/"}
    if stack.env.get("CRCR_GITHUB_APP_ID"):
        ready["app_id"] = stack.env["CRCR_GITHUB_APP_ID"]
    if stack.sandbox is not None:
        ready["sandbox_github"] = stack.env["CRCR_GITHUB_API_URL"]
        if not os.environ.get("CRCR_WEBHOOK_SECRET"):  # generated for this run: the caller needs it to sign
            ready["webhook_secret"] = stack.secrets["webhook_secret"]
    ready["env"] = stack.operator_env()
    print(json.dumps(ready), flush=True)
    if follow:  # each step of each delivery as a human line (crcr follow's view) instead of silence or raw JSON
        from crcr.adapters.observability import logger  # noqa: PLC0415
        from crcr.ops.follow import HumanStream  # noqa: PLC0415

        logger.setLevel(stack.env.get("POWERTOOLS_LOG_LEVEL") or "INFO")  # the functions' own env says WARNING
        handler = logger.registered_handler
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(HumanStream(sys.stdout))
    # Woken twice a second: Python runs a signal's handler in the main thread only, and a SIGTERM the kernel hands
    # to one of the stack's threads would never wake a wait without a timeout (crcr local then never stopped).
    while not done.wait(0.5):
        pass
    stack.stop()
    return 0
