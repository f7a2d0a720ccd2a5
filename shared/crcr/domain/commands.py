"""PR comment commands: `@<app-slug> rerun <owner/repo|all> [failed]`, who may give them, and what they ask for.

A command is one visible line of the comment as GitHub shows it: not a quote, not inside a fenced or indented code
block, not inside an HTML comment (which GitHub does not show), and split only at real line ends (U+2028 or U+0085
inside a line are not one). Whether its author may give it is asked of GitHub (write or triage access to the
upstream), never read from the comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# GitHub's role names (`role_name` of a collaborator's permission) that may re-run CI: those who can push or triage.
ALLOWED_ROLES = frozenset({"admin", "maintain", "write", "triage"})
# A comment's `author_association` when GitHub knows no tie between its author and the upstream (never a commit, no
# membership or collaborator grant it shows): refused before their role is asked, so a crowd of strangers costs nothing.
STRANGERS = frozenset({"NONE", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR"})
MAX_LINES = 200
_LINE_END = re.compile(r"\r\n|\n|\r")  # what ends a line in GitHub's Markdown (not U+2028, U+0085, \v or \f)
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|$)", re.DOTALL)


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
        rf"@{re.escape(slug)}[ \t]+rerun[ \t]+(all|[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)([ \t]+failed)?[ \t]*", re.IGNORECASE
    )
    shown = _HTML_COMMENT.sub("", body)  # an unclosed one hides the rest, as GitHub shows it
    fenced = False
    for line in _LINE_END.split(shown)[:MAX_LINES]:
        text = line.strip(" \t")
        if text.startswith("```") or text.startswith("~~~"):
            fenced = not fenced
            continue
        if fenced or text.startswith(">") or line.startswith(("    ", "\t")):  # a quote, or (indented) code
            continue
        match = pattern.fullmatch(text)
        if match:
            target = match.group(1)
            return RerunCommand(None if target.lower() == "all" else (target,), bool(match.group(2)))
    return None


def may_rerun(role: str | None) -> bool:
    return (role or "").lower() in ALLOWED_ROLES


def stranger(author_association: str | None) -> bool:
    """A comment's author GitHub shows no tie to the upstream for; an absent association is asked about as before."""
    return (author_association or "").upper() in STRANGERS
