"""`crcr dlq list` and `crcr dlq redrive`: dead letters shown with their reasons, or sent back to their queue."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from crcr.ops.cli.common import positive, problem


def add(sub: Any) -> None:
    dlq = sub.add_parser("dlq", help="list or redrive dead letters (uses AWS credentials / AWS_ENDPOINT_URL)")
    dlq.set_defaults(run=run)
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True)
    dlq_list = dlq_sub.add_parser(
        "list",
        help="show dead letters with their failure reasons",
        description="Receives each message once and makes it visible again at once (SQS has no peek): each listing "
        "raises a message's ApproximateReceiveCount by one; `received` shows it as it was before the listing.",
    )
    dlq_list.add_argument("queue", help="dead-letter queue URL (stack output DispatchDLQUrl or EventsDLQUrl)")
    dlq_list.add_argument("--max", type=positive, default=100)
    dlq_list.add_argument("--json", action="store_true", help="one JSON object a line instead of the table")
    dlq_redrive = dlq_sub.add_parser(
        "redrive",
        help="move dead letters back to the queue they came from",
        description="Sends each dead letter back to the queue whose redrive policy names the DLQ (as template.yaml "
        "pairs them), after checking it against that queue's message contract: invalid ones stay in the DLQ and are "
        "listed (exit 1). Dispatches start again with a fresh attempt count.",
    )
    dlq_redrive.add_argument("queue", metavar="DLQ", help="dead-letter queue URL")
    dlq_redrive.add_argument("--to", help="queue URL to move them to (default: the one the DLQ is paired with)")
    dlq_redrive.add_argument(
        "--any-queue", action="store_true", help="let --to name a queue the DLQ is not paired with"
    )
    dlq_redrive.add_argument("--dry-run", action="store_true", help="check and count, move nothing")
    dlq_redrive.add_argument("--max", type=positive, default=1000)
    dlq_redrive.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.composition.base import aws_client  # noqa: PLC0415
    from crcr.ops.dlq import DlqFailed, list_dead_letters, queue_url, redrive, target_for  # noqa: PLC0415

    try:
        dlq = queue_url(args.queue, "QUEUE" if args.dlq_command == "list" else "DLQ")
        sqs = aws_client("sqs")
        if args.dlq_command == "list":
            rows = list_dead_letters(sqs, dlq, args.max)
            _print_dead_letters(rows, args.json)
            return 0
        to = target_for(sqs, dlq, queue_url(args.to, "--to") if args.to else None, args.any_queue)
        done = redrive(sqs, dlq, to, args.max, dry_run=args.dry_run, any_queue=args.any_queue)
    except DlqFailed as exc:
        print(f"crcr dlq: {exc}", file=sys.stderr)
        return exc.code
    except (BotoCoreError, ClientError) as exc:
        print(f"crcr dlq: {problem(exc)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(dataclasses.asdict(done)))
    else:
        print(done.line())
        for row in done.left:
            print(f"  left  {row['message_id']}  {row['reason']}")
    return 1 if done.left else 0


def _print_dead_letters(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    table = [("message", "delivery", "repository", "received", "reason")]
    table += [
        (r["message_id"], r["delivery_id"] or "-", r["target_repo"] or "-", str(r["receive_count"]), r["reason"])
        for r in rows
    ]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    for line in table:
        print("  ".join([*(c.ljust(w) for c, w in zip(line[:4], widths, strict=True)), line[4]]).rstrip())
    print(f"{len(rows)} dead letters", file=sys.stderr)
