"""`crcr health`: each repository's pass rate, time-outs and times, with a level verdict."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from crcr.ops.cli.common import positive, problem


def add(sub: Any) -> None:
    health = sub.add_parser(
        "health", help="per-repository pass rate, timeouts and times with a level verdict (uses AWS like dlq)"
    )
    health.add_argument("--json", action="store_true", help="print a JSON list instead of the table")
    health.add_argument("--window-days", type=positive, default=None, help="days of dispatches to judge (default 14)")
    health.add_argument("--min-jobs", type=positive, default=None, help="fewest finished jobs to judge (default 10)")
    health.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.app.health import health_report  # noqa: PLC0415
    from crcr.app.ports.github import GitHubError  # noqa: PLC0415
    from crcr.composition.base import load_settings  # noqa: PLC0415
    from crcr.composition.operators import build_health_deps  # noqa: PLC0415
    from crcr.domain.errors import CrcrError  # noqa: PLC0415
    from crcr.settings import ConfigError  # noqa: PLC0415

    try:
        rows = health_report(build_health_deps(load_settings()), args.window_days, args.min_jobs)
    except (ConfigError, CrcrError, OSError, BotoCoreError, ClientError, GitHubError) as exc:
        # What an operator can fix (configuration, allowlist, AWS): one line naming it, no traceback.
        print(f"crcr health: {problem(exc)}", file=sys.stderr)
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


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def _secs(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
