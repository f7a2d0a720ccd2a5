"""`crcr send` (an upstream event posted to a relay, its answer in words) and `crcr follow` (a delivery's steps)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from crcr.ops.cli.common import positive


def add(sub: Any) -> None:
    from crcr.ops.send import KINDS  # noqa: PLC0415

    send = sub.add_parser(
        "send",
        help="build, sign and post an upstream event to a relay, and say what it answered",
        description="Builds a realistic upstream webhook from examples/events/ (or takes --file), signs it with "
        "CRCR_WEBHOOK_SECRET as GitHub does, posts it to the relay's /webhook and says what the answer means. "
        "Watch what follows with `crcr local --follow`, or `crcr follow DELIVERY` over the functions' logs.",
    )
    send.add_argument("kind", nargs="?", choices=KINDS, metavar="EVENT", help=f"one of: {', '.join(KINDS)}")
    send.add_argument("--url", default="http://127.0.0.1:8787", help="the relay's URL or WebhookUrl")
    send.add_argument("--sha", type=sha, help="the commit: PR head, push after (default: a new random one)")
    send.add_argument("--pr", type=positive, help="the PR number (default: the example's, 170001)")
    send.add_argument("--label", help="pull_request.labeled: the label, e.g. ciflow/crcr/xpu")
    send.add_argument("--ciflow", default="trunk", help="ciflow: the tag's name, refs/tags/ciflow/<name>/<PR>")
    send.add_argument("--external-id", help="check_run.rerequested: the check run's <repo>:<run_id>:<pr>")
    send.add_argument("--file", help="send this JSON body as it is instead (with --event)")
    send.add_argument("--event", type=event_name, help="with --file: the X-GitHub-Event header")
    send.add_argument(
        "--delivery", type=delivery, help="the X-GitHub-Delivery id (default: a new one; repeat one to redeliver)"
    )
    send.add_argument("--secret-file", metavar="PATH", help="a file holding the webhook secret (CRCR_WEBHOOK_SECRET)")
    send.add_argument("--json", action="store_true", help="print the result as JSON")
    send.set_defaults(run=run_send)
    follow = sub.add_parser(
        "follow",
        help="read the functions' JSON log lines and print each step a delivery takes",
        description="Reads the relay's structured log lines from standard input (or --file): crcr local's output "
        "with POWERTOOLS_LOG_LEVEL=INFO, or `aws logs tail` of the functions' log groups; prints one line per step "
        "(webhook, planned, each dispatch, each report and its HUD push, check runs, the PR comment, dead letters, "
        "warnings and errors).",
    )
    follow.add_argument("delivery", nargs="*", help="only these X-GitHub-Delivery ids (default: all)")
    follow.add_argument("--file", help="read this file instead of standard input")
    follow.add_argument("--json", action="store_true", help="the raw JSON lines of those steps instead")
    follow.set_defaults(run=run_follow)


def run_send(args: argparse.Namespace) -> int:
    from crcr.ops.input_file import FileRefused, one_line, read_secret  # noqa: PLC0415
    from crcr.ops.send import SendFailed, Sent, build, from_file, post, webhook_url  # noqa: PLC0415

    try:
        url = webhook_url(args.url)
        if not args.secret_file and not os.environ.get("CRCR_WEBHOOK_SECRET"):
            raise SendFailed(
                2, "CRCR_WEBHOOK_SECRET is not set: the relay's webhook secret signs the event (or --secret-file PATH)"
            )
        secret = read_secret(args.secret_file)
        if args.file:
            if not args.event:
                raise SendFailed(2, "--file needs --event (the X-GitHub-Event header, e.g. pull_request)")
            body = from_file(args.file)
            event, action, sha, pr = args.event, json.loads(body).get("action"), None, None
        else:
            if args.kind is None:
                raise SendFailed(2, "name an event (pull_request.opened, push, ciflow, ...) or give --file")
            upstream = os.environ.get("CRCR_UPSTREAM_REPO") or "pytorch/pytorch"
            event, action, doc = build(
                args.kind,
                upstream,
                sha=args.sha,
                pr=args.pr,
                label=args.label,
                ciflow=args.ciflow,
                external_id=args.external_id,
            )
            body = json.dumps(doc).encode()
            sha = doc.get("after") or (doc.get("pull_request") or doc.get("check_run") or {}).get("head", {}).get("sha")
            sha = sha or (doc.get("check_run") or {}).get("head_sha")
            pr = doc.get("number") or args.pr
        delivery, status, reply = post(url, secret, event, body, args.delivery)
    except SendFailed as exc:
        print(f"crcr send: {one_line(exc)}", file=sys.stderr)
        return exc.code
    except FileRefused as exc:
        print(f"crcr send: {one_line(exc)}", file=sys.stderr)
        return 2
    sent = Sent(event, action, delivery, url, status, reply, sha, pr)
    print(json.dumps(sent.as_json()) if args.json else sent.line())
    return 0 if 200 <= status < 300 else 1


def run_follow(args: argparse.Namespace) -> int:
    from crcr.ops.follow import follow  # noqa: PLC0415

    try:
        # A line that is not UTF-8 is read with replacement characters, never a traceback.
        source = open(args.file, encoding="utf-8", errors="replace") if args.file else sys.stdin  # noqa: SIM115
        if source is sys.stdin:
            sys.stdin.reconfigure(errors="replace")  # type: ignore[union-attr]
    except OSError as exc:
        print(f"crcr follow: {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        follow(source, lambda line: print(line, flush=True), set(args.delivery), args.json)
    except (KeyboardInterrupt, BrokenPipeError):
        pass
    finally:
        if source is not sys.stdin:
            source.close()
    return 0


def sha(text: str) -> str:
    """A commit as GitHub names it: 40 hexadecimal digits."""
    if not re.fullmatch(r"[0-9a-fA-F]{40}", text):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a commit SHA (40 hexadecimal digits)")
    return text.lower()


def event_name(text: str) -> str:
    """An X-GitHub-Event value: GitHub's event names are lower-case words joined by underscores."""
    if not re.fullmatch(r"[a-z][a-z_]{0,49}", text):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a GitHub event name (e.g. pull_request)")
    return text


def delivery(text: str) -> str:
    """An X-GitHub-Delivery value: visible characters only (a header cannot carry a line end)."""
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", text):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a delivery id (letters, digits, . _ : -)")
    return text
