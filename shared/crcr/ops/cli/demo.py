"""`crcr demo`: the relay end to end on the embedded stack, showing what was dispatched and reported."""

from __future__ import annotations

import argparse
from typing import Any


def add(sub: Any) -> None:
    demo = sub.add_parser("demo", help="run the relay end to end on the embedded stack and show what was dispatched")
    demo.add_argument(
        "--keep",
        nargs="?",
        type=float,
        const=-1.0,
        default=0.0,
        metavar="SECONDS",
        help="keep the stack and its HUD pages up afterwards: for SECONDS, or until Ctrl-C without a value",
    )
    demo.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from crcr.ops.demo import run_demo  # noqa: PLC0415

    return run_demo(None if args.keep < 0 else args.keep)
