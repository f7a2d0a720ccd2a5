"""`crcr shadow compare`: a shadow relay's decisions against the rows PyTorch's HUD keeps for the relay in service."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from crcr.ops.cli.common import problem


def add(sub: Any) -> None:
    shadow = sub.add_parser("shadow", help="a shadow relay's decisions (uses AWS like dlq)")
    shadow_sub = shadow.add_subparsers(dest="shadow_command", required=True)
    against = shadow_sub.add_parser(
        "compare", help="against what the relay in service did: the rows PyTorch's HUD keeps for it (crcr_workflow_job)"
    )
    against.add_argument(
        "--rows", required=True, help="its crcr_workflow_job rows: JSON lines, CSV with names or JSON (or gzip)"
    )
    against.add_argument("--since", help="events received from (ISO 8601; default: every decision kept)")
    against.add_argument("--until", help="events received up to (ISO 8601; default: now)")
    against.add_argument("--json", action="store_true", help="print the report as JSON")
    against.add_argument("--publish", action="store_true", help="also keep it for GET /hud/api/crcr/shadow/compare")
    against.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import time  # noqa: PLC0415

    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.composition.base import load_settings  # noqa: PLC0415
    from crcr.composition.operators import build_shadow_reader  # noqa: PLC0415
    from crcr.domain.shadow import compare  # noqa: PLC0415
    from crcr.ops.input_file import FileRefused, one_line  # noqa: PLC0415
    from crcr.ops.shadow import KEEP, CompareError, read_rows, render  # noqa: PLC0415
    from crcr.ops.torchci_rows import ExportError, parse_since  # noqa: PLC0415
    from crcr.settings import ConfigError  # noqa: PLC0415

    try:
        rows = read_rows(Path(args.rows))
        since = parse_since(args.since).timestamp() if args.since else 0.0
        until = parse_since(args.until).timestamp() if args.until else time.time()
    except (CompareError, FileRefused, ExportError, ValueError) as exc:
        print(f"crcr shadow compare: {one_line(exc)}", file=sys.stderr)  # nothing of the file's reaches a terminal raw
        return 2
    try:
        upstream, log, docs = build_shadow_reader(load_settings())
        report = compare(log.between(upstream, since, until), rows) | {"upstream": upstream, "compared_at": time.time()}
        if args.publish:
            if docs is None:
                raise ConfigError("--publish needs the HUD bucket (CRCR_HUD_BUCKET)")
            _, tag = docs.get(KEEP)
            if not docs.put(KEEP, report, tag):
                raise ConfigError(f"{KEEP} changed while it was written: run again")
    except (ConfigError, OSError, BotoCoreError, ClientError) as exc:
        print(f"crcr shadow compare: {problem(exc)}", file=sys.stderr)
        return 2
    print(render(report, args.json))
    return 0
