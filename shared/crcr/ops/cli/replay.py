"""`crcr replay`: recorded webhook deliveries sent through a relay again, in the order GitHub made them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add(sub: Any) -> None:
    replay = sub.add_parser("replay", help="send recorded webhook deliveries through a relay again, in order")
    replay.add_argument("file", help="GitHub's delivery log entries, or {headers, body} per delivery (JSON, or gzip)")
    replay.add_argument("--url", required=True, help="the relay (crcr local's url, or the stack's base URL)")
    replay.add_argument(
        "--secret-file", metavar="PATH", help="a file holding its webhook secret (default: CRCR_WEBHOOK_SECRET)"
    )
    replay.add_argument("--secret", help=argparse.SUPPRESS)  # refused, saying why: a command line is public
    replay.add_argument("--rate", type=float, default=0.0, help="deliveries a second at most (default: one by one)")
    replay.add_argument("--json", action="store_true", help="print the summary as JSON")
    replay.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from crcr.ops.input_file import FileRefused, one_line, read_secret  # noqa: PLC0415
    from crcr.ops.replay import ReplayError, read, replay  # noqa: PLC0415

    try:
        if args.secret is not None:  # every local user can read a command line (/proc/<pid>/cmdline)
            raise ReplayError("--secret is refused: a command line is readable by every local user "
                              "(/proc/<pid>/cmdline); set CRCR_WEBHOOK_SECRET or give --secret-file PATH")  # fmt: skip
        secret = read_secret(args.secret_file)
        deliveries, skipped = read(Path(args.file))
    except (ReplayError, FileRefused) as exc:
        print(f"crcr replay: {one_line(exc)}", file=sys.stderr)  # nothing of the file's reaches a terminal raw
        return 2
    done = replay(deliveries, args.url, secret, args.rate)
    done.skipped = skipped
    print(json.dumps(done.to_json()) if args.json else done.line())
    for line in done.refused:
        print(f"refused: {one_line(line)}", file=sys.stderr)
    return 1 if done.refused else 0
