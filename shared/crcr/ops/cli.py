"""The `crcr` command: local stack, allowlist check, dead letters, repository health, HUD export, onboarding,
the App manifest, ticket key rotation, demo."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any


def _allowlist_check(path: str, allow_empty: bool = False) -> int:
    from crcr.adapters.allowlist_source import parse_allowlist  # noqa: PLC0415
    from crcr.domain.errors import AllowlistError  # noqa: PLC0415

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


def _dlq(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.composition import aws_client  # noqa: PLC0415
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
        print(f"crcr dlq: {_problem(exc)}", file=sys.stderr)
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


def _health(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.app.health import health_report  # noqa: PLC0415
    from crcr.app.ports.github import GitHubError  # noqa: PLC0415
    from crcr.composition import build_health_deps, load_settings  # noqa: PLC0415
    from crcr.domain.errors import CrcrError  # noqa: PLC0415
    from crcr.settings import ConfigError  # noqa: PLC0415

    try:
        rows = health_report(build_health_deps(load_settings()), args.window_days, args.min_jobs)
    except (ConfigError, CrcrError, OSError, BotoCoreError, ClientError, GitHubError) as exc:
        # What an operator can fix (configuration, allowlist, AWS): one line naming it, no traceback.
        print(f"crcr health: {_problem(exc)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([row.as_json() for row in rows], indent=2))
        return 0
    table = [("repository", "level", "jobs", "pass", "timeout", "flaky", "avg queue", "p50 e2e", "max exec", "verdict")]
    for row in rows:
        table.append(
            (
                row.repo,
                row.level,
                str(row.jobs),
                _pct(row.pass_rate),
                _pct(row.timeout_rate),
                str(row.flaky),
                _secs(row.avg_queue_s),
                _secs(row.p50_end_to_end_s),
                _secs(row.max_execution_s),
                row.verdict.value,
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    for row in rows:
        if row.unmet:
            print(f"{row.repo}: {'; '.join(row.unmet)}")
        if row.not_started:
            many = "a dispatch" if row.not_started == 1 else f"{row.not_started} dispatches"
            print(f"{row.repo}: GitHub started no run for {many}; {row.not_started_reason}")
    return 0


def _regressions(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.composition import build_regression_store, load_settings  # noqa: PLC0415
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
        print(f"crcr regressions: {_problem(exc)}", file=sys.stderr)
        return 2
    print(render(select(found, args.repo, args.open), args.json))
    return 0


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _secs(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _shadow(args: argparse.Namespace) -> int:
    import time  # noqa: PLC0415

    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.composition import build_shadow_reader, load_settings  # noqa: PLC0415
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
        print(f"crcr shadow compare: {_problem(exc)}", file=sys.stderr)
        return 2
    print(render(report, args.json))
    return 0


def _replay(args: argparse.Namespace) -> int:
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


def _problem(exc: Exception) -> str:
    """One line naming what is missing or wrong."""
    from botocore.exceptions import (  # noqa: PLC0415
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
    )

    from crcr.domain.errors import AllowlistError  # noqa: PLC0415

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        table = os.environ.get("CRCR_RESULTS_TABLE", "")
        message = f"AWS {exc.operation_name}: {error.get('Code', '')}: {error.get('Message', '')}"
        if exc.operation_name == "Query":
            message = f"results table {table}: {error.get('Code', '')}: {error.get('Message', '')}"
        if "NonExistentQueue" in str(error.get("Code", "")):
            message = f"no such queue: {error.get('Message', '')}"
        return " ".join(message.split())
    if isinstance(exc, NoRegionError):
        return "no AWS region: set AWS_REGION or AWS_DEFAULT_REGION"
    if isinstance(exc, NoCredentialsError):
        return "no AWS credentials (the functions' variables, or crcr local's ready line env)"
    if isinstance(exc, EndpointConnectionError):
        return f"AWS unreachable: {exc}"
    if isinstance(exc, AllowlistError):
        return f"allowlist {os.environ.get('CRCR_ALLOWLIST', '')}: {exc.message}"
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split()) or type(exc).__name__


def _hud_export(args: argparse.Namespace) -> int:
    from crcr.ops.torchci_rows import ExportError, export_from_env  # noqa: PLC0415

    try:
        done = export_from_env(args.format, args.out, args.since, args.from_export)
    except ExportError as exc:
        print(f"crcr hud export: {exc}", file=sys.stderr)
        return exc.code
    summary = json.dumps(dataclasses.asdict(done)) if args.json else done.line()
    print(summary, file=sys.stderr if done.out == "-" else sys.stdout)  # standard output may carry the rows
    return 0


def _onboard(args: argparse.Namespace) -> int:
    from crcr.ops.onboard import OnboardFailed, as_json, onboard_from_env  # noqa: PLC0415

    try:
        done = onboard_from_env(
            args.repo, args.level, args.device, args.buildkite, args.out, args.action_ref, args.force, args.no_report
        )
    except OnboardFailed as exc:
        print(f"crcr onboard: {exc}", file=sys.stderr)
        return exc.code
    print(as_json(done) if args.json else done.text)
    return 0


def _app_manifest(args: argparse.Namespace) -> int:
    import secrets  # noqa: PLC0415

    from crcr.ops.onboard import OnboardFailed, app_manifest, manifest_form  # noqa: PLC0415

    try:
        manifest = app_manifest(args.webhook_url, args.name, shadow=args.shadow)
        if args.form:
            state = secrets.token_urlsafe(16)
            Path(args.form).write_text(manifest_form(manifest, state, args.org, args.github_url), encoding="utf-8")
            print(f"wrote {args.form}; check that GitHub's redirect carries state={state}", file=sys.stderr)
    except OnboardFailed as exc:
        print(f"crcr app-manifest: {exc}", file=sys.stderr)
        return exc.code
    except OSError as exc:
        print(f"crcr app-manifest: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    print(json.dumps(manifest, indent=2))
    return 0


def _keys_rotate(args: argparse.Namespace) -> int:
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
            from crcr.composition import aws_client  # noqa: PLC0415

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


def _add_keys(sub: Any) -> None:
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


def _send(args: argparse.Namespace) -> int:
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


def _follow(args: argparse.Namespace) -> int:
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


def _local(port: int, host: str, follow: bool = False) -> int:
    from crcr.local.stack import LocalStack  # noqa: PLC0415
    from crcr.settings import ConfigError  # noqa: PLC0415

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


def _sha(text: str) -> str:
    """A commit as GitHub names it: 40 hexadecimal digits."""
    if not re.fullmatch(r"[0-9a-fA-F]{40}", text):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a commit SHA (40 hexadecimal digits)")
    return text.lower()


def _event_name(text: str) -> str:
    """An X-GitHub-Event value: GitHub's event names are lower-case words joined by underscores."""
    if not re.fullmatch(r"[a-z][a-z_]{0,49}", text):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a GitHub event name (e.g. pull_request)")
    return text


def _delivery(text: str) -> str:
    """An X-GitHub-Delivery value: visible characters only (a header cannot carry a line end)."""
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", text):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a delivery id (letters, digits, . _ : -)")
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def _add_onboarding(sub: Any) -> None:
    onboard = sub.add_parser(
        "onboard",
        help="check a new downstream with the App, print its allowlist entry and write its CI files",
        description="Checks that the App is installed on the repository and reads its numeric id (GitHub Actions "
        "downstreams; uses CRCR_GITHUB_API_URL, CRCR_GITHUB_APP_ID, CRCR_GITHUB_APP_PRIVATE_KEY), prints the "
        "allowlist change (a diff of CRCR_ALLOWLIST when set: the repository added, or moved from its level; else "
        "the entry) and for Buildkite the relay's ci_providers.yml entry, and writes the downstream's workflow or "
        "pipeline under --out (refusing to overwrite a file that differs without --force).",
    )
    onboard.add_argument("repo", help="the downstream repository, owner/repo")
    onboard.add_argument("--level", required=True, help="L1, L2, L3 or L4")
    onboard.add_argument("--device", help="L3 only: the device of its ciflow/crcr/<device> label")
    onboard.add_argument(
        "--buildkite", metavar="ORG/PIPELINE", help="the downstream builds on this Buildkite pipeline (slugs)"
    )
    onboard.add_argument("--out", help="where to write the files (default crcr-onboard/<owner>-<repo>/)")
    onboard.add_argument(
        "--action-ref", metavar="OWNER/REPO/action@SHA", help="crcr's report action at a full commit, for the workflow"
    )
    onboard.add_argument("--force", action="store_true", help="overwrite files under --out that differ")
    onboard.add_argument(
        "--no-report",
        action="store_true",
        help="write the workflow without a report step (L2): the relay records its jobs from GitHub's own record",
    )
    onboard.add_argument("--json", action="store_true", help="print the result as JSON")
    manifest = sub.add_parser(
        "app-manifest", help="print infra/github-app-manifest.json filled in, and a form that registers the App"
    )
    manifest.add_argument("--webhook-url", required=True, help="the relay's webhook URL (stack output WebhookUrl)")
    manifest.add_argument("--name", help="the App's name (GitHub asks for one when not given)")
    manifest.add_argument("--org", help="register the App for this organization instead of your account")
    manifest.add_argument("--form", metavar="PATH", help="also write an HTML page whose form registers the App")
    manifest.add_argument("--github-url", default="https://github.com", help="GitHub's web URL (GHES: your host)")
    manifest.add_argument(
        "--shadow", action="store_true", help="a shadow relay's App: read-only on the upstream, sends nothing"
    )


def _add_dlq(sub: Any) -> None:
    dlq = sub.add_parser("dlq", help="list or redrive dead letters (uses AWS credentials / AWS_ENDPOINT_URL)")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True)
    dlq_list = dlq_sub.add_parser(
        "list",
        help="show dead letters with their failure reasons",
        description="Receives each message once and makes it visible again at once (SQS has no peek): each listing "
        "raises a message's ApproximateReceiveCount by one; `received` shows it as it was before the listing.",
    )
    dlq_list.add_argument("queue", help="dead-letter queue URL (stack output DispatchDLQUrl or EventsDLQUrl)")
    dlq_list.add_argument("--max", type=_positive, default=100)
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
    dlq_redrive.add_argument("--max", type=_positive, default=1000)
    dlq_redrive.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_send_follow(sub: Any) -> None:
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
    send.add_argument("--sha", type=_sha, help="the commit: PR head, push after (default: a new random one)")
    send.add_argument("--pr", type=_positive, help="the PR number (default: the example's, 170001)")
    send.add_argument("--label", help="pull_request.labeled: the label, e.g. ciflow/crcr/xpu")
    send.add_argument("--ciflow", default="trunk", help="ciflow: the tag's name, refs/tags/ciflow/<name>/<PR>")
    send.add_argument("--external-id", help="check_run.rerequested: the check run's <repo>:<run_id>:<pr>")
    send.add_argument("--file", help="send this JSON body as it is instead (with --event)")
    send.add_argument("--event", type=_event_name, help="with --file: the X-GitHub-Event header")
    send.add_argument(
        "--delivery", type=_delivery, help="the X-GitHub-Delivery id (default: a new one; repeat one to redeliver)"
    )
    send.add_argument("--secret-file", metavar="PATH", help="a file holding the webhook secret (CRCR_WEBHOOK_SECRET)")
    send.add_argument("--json", action="store_true", help="print the result as JSON")
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


def _add_shadow(sub: Any) -> None:
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


def _add_replay(sub: Any) -> None:
    replay = sub.add_parser("replay", help="send recorded webhook deliveries through a relay again, in order")
    replay.add_argument("file", help="GitHub's delivery log entries, or {headers, body} per delivery (JSON, or gzip)")
    replay.add_argument("--url", required=True, help="the relay (crcr local's url, or the stack's base URL)")
    replay.add_argument(
        "--secret-file", metavar="PATH", help="a file holding its webhook secret (default: CRCR_WEBHOOK_SECRET)"
    )
    replay.add_argument("--secret", help=argparse.SUPPRESS)  # refused, saying why: a command line is public
    replay.add_argument("--rate", type=float, default=0.0, help="deliveries a second at most (default: one by one)")
    replay.add_argument("--json", action="store_true", help="print the summary as JSON")


def _add_regressions(sub: Any) -> None:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crcr", description="Cross-Repository CI Relay")
    sub = parser.add_subparsers(dest="command", required=True)
    local = sub.add_parser("local", help="run the relay on this machine against an embedded AWS")
    local.add_argument("--port", type=int, default=8787, help="port to serve on (0 picks a free one)")
    local.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback unless told)")
    local.add_argument(
        "--follow",
        action="store_true",
        help="after the ready line, print each step of each delivery as a line (crcr follow's view of the logs)",
    )
    _add_send_follow(sub)
    allow = sub.add_parser("allowlist", help="allowlist tools")
    allow_sub = allow.add_subparsers(dest="allowlist_command", required=True)
    check = allow_sub.add_parser("check", help="validate an allowlist file and print its level table")
    check.add_argument("file")
    check.add_argument(
        "--allow-empty", action="store_true", help="pass an allowlist that lists no repository (it dispatches nothing)"
    )
    _add_dlq(sub)
    health = sub.add_parser(
        "health", help="per-repository pass rate, timeouts and times with a level verdict (uses AWS like dlq)"
    )
    health.add_argument("--json", action="store_true", help="print a JSON list instead of the table")
    health.add_argument("--window-days", type=_positive, default=None, help="days of dispatches to judge (default 14)")
    health.add_argument("--min-jobs", type=_positive, default=None, help="fewest finished jobs to judge (default 10)")
    _add_shadow(sub)
    _add_replay(sub)
    _add_regressions(sub)
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
    _add_onboarding(sub)
    _add_keys(sub)
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
    args = parser.parse_args(argv)

    if args.command == "local":
        return _local(args.port, args.host, args.follow)
    if args.command == "allowlist":
        return _allowlist_check(args.file, args.allow_empty)
    commands = {"send": _send, "follow": _follow, "dlq": _dlq, "health": _health, "hud": _hud_export,
                "regressions": _regressions, "shadow": _shadow, "replay": _replay, "onboard": _onboard,
                "app-manifest": _app_manifest, "keys": _keys_rotate}  # fmt: skip
    if args.command in commands:
        return commands[args.command](args)
    from crcr.ops.demo import run_demo  # noqa: PLC0415

    return run_demo(None if args.keep < 0 else args.keep)


if __name__ == "__main__":
    sys.exit(main())
