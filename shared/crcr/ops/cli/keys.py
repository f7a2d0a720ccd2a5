"""`crcr keys rotate`: a new ticket signing key, the current one kept to verify what it signed until that expires."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add(sub: Any) -> None:
    keys = sub.add_parser("keys", help="ticket signing keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    rotate = keys_sub.add_parser(
        "rotate",
        help="a new ticket signing key; the current one verifies the tickets it signed until they expire",
        description="Generates an Ed25519 key for ticket_signing_key and keeps the current key's public half as "
        "ticket_previous_key in the relay's Secrets Manager JSON document: with --secret-arn the secret is updated "
        "in place (PutSecretValue; AWS variables as the other commands, or crcr local's ready line env), with "
        "--from the document is read from a file (- for standard input) and written to --out or standard output.",
    )
    rotate.add_argument("--secret-arn", help="the secret to update in place (CRCR_SECRETS_ARN)")
    rotate.add_argument("--from", dest="source", metavar="FILE", help="the secret's current JSON (- for stdin)")
    rotate.add_argument("--out", help="with --from: write the new JSON here (mode 0600) instead of standard output")
    rotate.add_argument(
        "--revoke-current",
        action="store_true",
        help="the current key is compromised: drop it (its tickets get 401) instead of keeping it as the previous key",
    )
    rotate.add_argument(
        "--force", action="store_true", help="rotate even though the previous key still verifies unexpired tickets"
    )
    rotate.add_argument("--json", action="store_true", help="print the summary as JSON (never the keys)")
    rotate.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import time  # noqa: PLC0415

    from crcr.ops.keys import USAGE, RotateFailed, describe, rotate_file, rotate_secret  # noqa: PLC0415
    from crcr.settings import ConfigError, Settings  # noqa: PLC0415

    try:
        max_age_s = float(Settings.from_env().secrets_max_age_s)
    except ConfigError as exc:
        print(f"crcr keys rotate: {exc}", file=sys.stderr)
        return USAGE
    options = {"max_age_s": max_age_s, "revoke_current": args.revoke_current, "force": args.force}
    document = None
    try:
        if args.secret_arn and (args.source or args.out):
            raise RotateFailed(
                USAGE,
                f"give --secret-arn or --from, not both: {'--from' if args.source else '--out'} does nothing "
                "with --secret-arn (the secret is read and updated in place)",
            )
        if args.out and not args.source:
            raise RotateFailed(USAGE, "--out writes the document read with --from: give --from FILE")
        if args.secret_arn:
            from crcr.composition.base import aws_client  # noqa: PLC0415

            rotated = rotate_secret(aws_client("secretsmanager"), args.secret_arn, time.time(), **options)
            where = args.secret_arn
        elif args.source:
            rotated, document = rotate_file(args.source, args.out, time.time(), **options)
            where = args.out or "standard output"
        else:
            raise RotateFailed(USAGE, "give --secret-arn ARN (update the secret) or --from FILE (the secret's JSON)")
    except RotateFailed as exc:
        print(f"crcr keys rotate: {exc}", file=sys.stderr)
        return exc.code
    # Standard output carries the new secret document when it was not written anywhere else.
    to_stdout = document is not None and args.out is None
    if to_stdout:
        print(document)
    summary = json.dumps(rotated.summary() | {"secret": where}) if args.json else describe(rotated, where, max_age_s)
    print(summary, file=sys.stderr if to_stdout else sys.stdout)
    return 0
