"""`crcr onboard` (a new downstream checked, its allowlist entry and CI files written) and `crcr app-manifest`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add(sub: Any) -> None:
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
    onboard.set_defaults(run=run_onboard)
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
    manifest.set_defaults(run=run_app_manifest)


def run_onboard(args: argparse.Namespace) -> int:
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


def run_app_manifest(args: argparse.Namespace) -> int:
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
