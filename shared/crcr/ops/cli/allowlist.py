"""`crcr allowlist check`: an allowlist file validated, and its level table printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add(sub: Any) -> None:
    allow = sub.add_parser("allowlist", help="allowlist tools")
    allow_sub = allow.add_subparsers(dest="allowlist_command", required=True)
    check = allow_sub.add_parser("check", help="validate an allowlist file and print its level table")
    check.add_argument("file")
    check.add_argument(
        "--allow-empty", action="store_true", help="pass an allowlist that lists no repository (it dispatches nothing)"
    )
    check.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from crcr.adapters.allowlist_source import parse_allowlist  # noqa: PLC0415
    from crcr.domain.errors import AllowlistError  # noqa: PLC0415

    path, allow_empty = args.file, args.allow_empty

    try:
        allowlist = parse_allowlist(Path(path).read_bytes())
    except OSError as exc:
        print(f"{path}: {exc.strerror}", file=sys.stderr)
        return 2
    except AllowlistError as exc:
        print(f"{path}: {exc.message}", file=sys.stderr)
        return 1
    if not len(allowlist) and not allow_empty:
        print(
            f"{path}: lists no repository: published, it would stop every dispatch (--allow-empty if that is meant)",
            file=sys.stderr,
        )
        return 1
    rows = [("repository", "level", "device", "oncalls"), *allowlist.table()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print(f"{len(allowlist)} repositories")
    return 0
