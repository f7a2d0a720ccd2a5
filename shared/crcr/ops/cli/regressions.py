"""`crcr regressions`: downstream jobs broken on the default branch, with their ranges; `cancel` stops a bisection."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from crcr.ops.cli.common import problem


def add(sub: Any) -> None:
    regressions = sub.add_parser(
        "regressions", help="downstream jobs broken on the default branch, with their ranges (uses AWS like dlq)"
    )
    regressions.add_argument(
        "action", nargs="?", choices=["list", "cancel"], default="list", help="cancel: stop bisecting (--repo, --job)"
    )
    regressions.add_argument("--job", help="with cancel: one job only")
    regressions.add_argument("--json", action="store_true", help="print the HUD route's entries as JSON")
    regressions.add_argument("--repo", help="one downstream repository only")
    regressions.add_argument("--open", action="store_true", help="open regressions only")
    regressions.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.composition.base import load_settings  # noqa: PLC0415
    from crcr.composition.operators import build_regression_store  # noqa: PLC0415
    from crcr.ops.regressions import cancel, render, select  # noqa: PLC0415
    from crcr.settings import ConfigError  # noqa: PLC0415

    if args.action == "cancel" and not args.repo:
        print("crcr regressions cancel: name the repository (--repo owner/name)", file=sys.stderr)
        return 2
    try:
        upstream, store = build_regression_store(load_settings())
        if args.action == "cancel":
            stopped = cancel(store, upstream, args.repo, args.job)
            print(f"bisection stopped for {stopped} open regression{'s' if stopped != 1 else ''} of {args.repo}")
            return 0
        found = store.regressions_of(upstream)
    except (ConfigError, OSError, BotoCoreError, ClientError) as exc:
        print(f"crcr regressions: {problem(exc)}", file=sys.stderr)
        return 2
    print(render(select(found, args.repo, args.open), args.json))
    return 0
