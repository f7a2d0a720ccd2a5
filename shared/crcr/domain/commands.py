"""PR comment commands: `@<app-slug> rerun <owner/repo|all> [failed]`, who may give them, and what they ask for.

A command is one line of the comment (not a quote, not inside a code block). Whether its author may give it is
asked of GitHub (write or triage access to the upstream), never read from the comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# GitHub's role names (`role_name` of a collaborator's permission) that may re-run CI: those who can push or triage.
ALLOWED_ROLES = frozenset({"admin", "maintain", "write", "triage"})
MAX_LINES = 200


@dataclass(frozen=True)
class RerunCommand:
    repos: tuple[str, ...] | None  # None: all
    failed_only: bool  # `failed`: only failed jobs re-run, never a new dispatch


def looks_like_command(body: str) -> bool:
    """A cheap look before the event is queued: most comments are not commands."""
    return "rerun" in body.lower() and "@" in body


def parse_command(body: str, slug: str) -> RerunCommand | None:
    """The first command line addressed to the App, or None."""
    pattern = re.compile(
        rf"@{re.escape(slug)}\s+rerun\s+(all|[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(\s+failed)?\s*", re.IGNORECASE
    )
    fenced = False
    for line in body.splitlines()[:MAX_LINES]:
        text = line.strip()
        if text.startswith("```") or text.startswith("~~~"):
            fenced = not fenced
            continue
        if fenced or text.startswith(">"):
            continue
        match = pattern.fullmatch(text)
        if match:
            target = match.group(1)
            return RerunCommand(None if target.lower() == "all" else (target,), bool(match.group(2)))
    return None


def may_rerun(role: str | None) -> bool:
    return (role or "").lower() in ALLOWED_ROLES
