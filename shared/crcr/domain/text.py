"""Text downstreams send: names hold no control characters; free text is shown without them."""

from __future__ import annotations

import re

# C0 and C1 controls (DEL included), line and paragraph separators, and the bidirectional marks, embeddings,
# overrides and isolates that make text read other than it is ("Trojan Source"). A name is one line of text a
# maintainer reads in a check run, the HUD or the PR comment: none of these belong in it.
NAME_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
# Free text (a summary in Markdown) keeps its line breaks and tabs; everything else above is removed.
_TEXT_STRIPPED = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def control_in(value: str) -> str | None:
    """The first character a name may not hold, as U+XXXX; None when there is none."""
    found = NAME_FORBIDDEN.search(value)
    return f"U+{ord(found.group()):04X}" if found else None


def shown(value: str) -> str:
    """Free text as the relay shows it: control and bidirectional characters removed, CRLF as LF."""
    return _TEXT_STRIPPED.sub("", value.replace("\r\n", "\n").replace("\r", "\n"))
