"""Untrusted text set in GitHub Markdown (the PR comment, check runs, notices): plain text with Markdown and HTML
escaped, and mentions, issue references and autolinks broken by an invisible space, so it can neither ping anyone,
link anywhere unchecked nor break a table."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from crcr.domain.known import parse_known_refs
from crcr.domain.text import NAME_FORBIDDEN

ZWSP = "\u200b"  # zero-width space: breaks a mention or a reference without changing what a reader sees

_MARKDOWN = re.compile(r"([\\`*_\[\]()!|~])")
_REFERENCE = re.compile(r"#(?=[0-9A-Za-z])")  # #123, org/repo#123
_GH_REFERENCE = re.compile(r"(?i)\b(gh)-(?=[0-9])")  # GH-123 links an issue too
_SCHEME = re.compile(r"://")  # http://, https://, ftp://: GFM's extended autolinks
_WWW = re.compile(r"(?i)\b(www)\.")
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")
_TEAM = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_URL_UNSAFE = set("<>\"'`\\{}^")
_URL_ENCODE = {"(": "%28", ")": "%29", "[": "%5B", "]": "%5D", "|": "%7C"}


def text(value: object, limit: int = 200) -> str:
    """Untrusted text as inert Markdown for one line (a table cell): no markup, HTML, mention, reference or
    autolink survives, and a pipe cannot end the cell."""
    s = value if isinstance(value, str) else str(value)
    s = " ".join(NAME_FORBIDDEN.sub(" ", s).split())
    if len(s) > limit:
        s = s[: limit - 1].rstrip() + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MARKDOWN.sub(r"\\\1", s)
    s = s.replace("@", "@" + ZWSP)
    s = _REFERENCE.sub("#" + ZWSP, s)
    s = _GH_REFERENCE.sub(r"\1" + ZWSP + "-", s)
    s = _SCHEME.sub(":" + ZWSP + "//", s)
    return _WWW.sub(r"\1" + ZWSP + ".", s)


def safe_url(value: object) -> str | None:
    """A downstream's link as a Markdown link target: plain http(s), no userinfo (https://github.com@evil),
    printable ASCII without quotes or brackets that could end the link; None otherwise."""
    if not isinstance(value, str) or not value or len(value) > 500:
        return None
    if any(not 33 <= ord(c) <= 126 or c in _URL_UNSAFE for c in value):
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    return "".join(_URL_ENCODE.get(c, c) for c in value)


def link(value: object) -> str:
    """The downstream run as a link whose text is its host, so a reader sees where it goes."""
    url = safe_url(value)
    if url is None:
        return "—"
    return f"[{text(urlsplit(url).hostname or 'run', 100)}]({url})"


def handle(oncall: str) -> str | None:
    """An allowlist oncall as a GitHub login or `org/team` (without the @), or None when it is neither."""
    name = oncall.strip().removeprefix("@")
    return name if _LOGIN.fullmatch(name) or _TEAM.fullmatch(name) else None


def known_links(refs: str) -> str:
    """A `known` verdict's issues as links `[#123](…/issues/123)` (URLs from the configured disabled-tests list,
    checked like every link), each `by @login` when the issue search named its author (a mention that pings no one)."""
    links = []
    for url, author in parse_known_refs(refs):
        safe = safe_url(url)
        number = url.rstrip("/").rsplit("/", 1)[-1]
        if safe and number.isdigit():
            links.append(f"[#{ZWSP}{number}]({safe})" + (f" by {text('@' + author, 60)}" if author else ""))
    return "(" + ", ".join(links) + ")" if links else ""


def triage_cell(raw: str) -> str:
    """The downstream's triage verdict (validated at the callback, still untrusted): category, confidence,
    summary and the upstream change it suspects, as text; never a link or a reference."""
    try:
        verdict = json.loads(raw) if raw else None
    except ValueError:
        return "—"
    if not isinstance(verdict, dict) or not verdict.get("category"):
        return "—"
    parts = [f"_{text(verdict.get('category'), 20)}_, {text(verdict.get('confidence'), 20)} confidence"]
    if verdict.get("summary"):
        parts.append(f"“{text(verdict['summary'], 300)}”")
    suspected: Any = verdict.get("suspected_upstream")
    if isinstance(suspected, dict):
        named = []
        if isinstance(suspected.get("pr"), int):
            named.append(f"PR {suspected['pr']}")  # as text: a #reference would add to that PR's timeline
        if suspected.get("commit"):
            named.append(f"commit {text(str(suspected['commit'])[:12], 12)}")
        if named:
            suspect = "suspects upstream " + " / ".join(named)
            if suspected.get("reason"):
                suspect += f": {text(suspected['reason'], 150)}"
            parts.append(suspect)
    return " · ".join(parts)
