"""`crcr hud export`: PyTorch's HUD (torchci) rows of every job attempt, in a file its ClickHouse loads."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any


def add(sub: Any) -> None:
    hud = sub.add_parser("hud", help="PyTorch's HUD data (uses AWS credentials / AWS_ENDPOINT_URL)")
    hud_sub = hud.add_subparsers(dest="hud_command", required=True)
    export = hud_sub.add_parser(
        "export", help="one crcr_workflow_job row per job attempt, as PyTorch's ClickHouse table loads it"
    )
    export.add_argument("--since", help="only jobs changed at or after this ISO 8601 time (incremental loads)")
    export.add_argument("--format", choices=["jsonl", "csv", "parquet"], default="jsonl")
    export.add_argument("--out", help="file to write (default crcr_workflow_job.<format>; - for standard output)")
    export.add_argument(
        "--from-export", metavar="S3_URL", help="read a DynamoDB table export (s3://bucket/prefix) instead of the table"
    )
    export.add_argument("--json", action="store_true", help="print the summary as JSON")
    export.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from crcr.ops.torchci_rows import ExportError, export_from_env  # noqa: PLC0415

    try:
        done = export_from_env(args.format, args.out, args.since, args.from_export)
    except ExportError as exc:
        print(f"crcr hud export: {exc}", file=sys.stderr)
        return exc.code
    summary = json.dumps(dataclasses.asdict(done)) if args.json else done.line()
    print(summary, file=sys.stderr if done.out == "-" else sys.stdout)  # standard output may carry the rows
    return 0
