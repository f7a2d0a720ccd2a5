"""The `crcr` command: its parser assembled from one module per command (or command group), each run by its own."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from crcr.ops.cli import (
    allowlist,
    demo,
    dlq,
    health,
    hud,
    keys,
    local,
    onboard,
    regressions,
    replay,
    send,
    shadow,
)

# In the order `crcr --help` lists them.
COMMANDS = (local, send, allowlist, dlq, health, shadow, replay, regressions, hud, onboard, keys, demo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crcr", description="Cross-Repository CI Relay")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add(sub)
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)
