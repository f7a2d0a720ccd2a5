"""The allowlist edit a demotion PR proposes: one L3 entry moved to the end of L2, every other line as it was.

Hand-written because no YAML library round-trips comments and layout: the text is edited by lines (the entry,
the comment lines directly above it, and its device group when nothing else is left in it), and the caller
parses the result back and refuses it unless it is exactly the intended change.
"""

from __future__ import annotations

import json
import re

from crcr.domain.allowlist import Entry
from crcr.domain.errors import AllowlistError


class EditError(AllowlistError):
    """The file is written in a way the edit cannot change safely (flow style, a missing line)."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _block_end(lines: list[str], start: int) -> int:
    """End (exclusive) of the block opened at lines[start]: the lines after it indented deeper, without trailing
    blank or comment lines."""
    last = start
    for i in range(start + 1, len(lines)):
        if not _content(lines[i]):
            continue
        if _indent(lines[i]) <= _indent(lines[start]):
            break
        last = i
    return last + 1


def _comments_above(lines: list[str], index: int) -> int:
    start = index
    while start > 0 and lines[start - 1].strip().startswith("#") and _indent(lines[start - 1]) == _indent(lines[index]):
        start -= 1
    return start


def _header(lines: list[str], name: str) -> int | None:
    found = [i for i, line in enumerate(lines) if re.match(rf"{name}\s*:", line)]
    if len(found) > 1:
        raise EditError(f"more than one top-level {name} key")
    return found[0] if found else None


def _item(entry: Entry, indent: int) -> list[str]:
    pad = " " * indent
    repo = entry.repo
    if entry.events_given:
        inner = " " * (indent + 4)
        lines = [f"{pad}- {repo}:\n"]
        if entry.oncalls:
            lines.append(f"{inner}oncalls: {json.dumps(list(entry.oncalls))}\n")
        lines.append(f"{inner}events: {json.dumps(sorted(entry.settings.events))}\n")
        return lines
    if entry.oncalls:
        return [f"{pad}- {repo}: {json.dumps(list(entry.oncalls))}\n"]
    return [f"{pad}- {repo}\n"]


def demote_to_l2(text: str, entry: Entry) -> str:
    """`entry` (an L3 entry parsed from `text`, with its line) moved to the end of L2."""
    if entry.line is None or entry.device is None:
        raise EditError(f"{entry.repo}: its line in the allowlist is not known")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    at = entry.line - 1
    l3 = _header(lines, "L3")
    if l3 is None or not re.match(r"L3\s*:\s*(#.*)?$", lines[l3].rstrip("\n")) or at <= l3:
        raise EditError("L3 must be a block mapping for the demotion to be proposed")
    if not re.match(rf"\s+([\"']?){re.escape(entry.repo)}\1\s*:(\s|$)", lines[at]):
        raise EditError(f"{entry.repo}: line {entry.line} does not open its entry (flow style?)")
    group = next(
        (i for i in range(at - 1, l3, -1) if _content(lines[i]) and _indent(lines[i]) < _indent(lines[at])), None
    )
    if group is None or _indent(lines[group]) == 0:
        raise EditError(f"{entry.repo}: its device group was not found")
    start, end = _comments_above(lines, at), _block_end(lines, at)
    group_end = _block_end(lines, group)
    others = any(_content(lines[i]) for i in range(group + 1, group_end) if not start <= i < end)
    if others:
        del lines[start:end]
    else:
        del lines[_comments_above(lines, group) : group_end]

    l2 = _header(lines, "L2")
    if l2 is None:
        where = _header(lines, "L3")
        insert = where if where is not None else len(lines)
        lines[insert:insert] = ["L2:\n", *_item(entry, 2)]
        return "".join(lines)
    if not re.match(r"L2\s*:\s*(#.*)?$", lines[l2].rstrip("\n")):
        raise EditError("L2 must be in block style for the demotion to be proposed")
    l2_end = _block_end(lines, l2)
    items = [i for i in range(l2 + 1, l2_end) if _content(lines[i]) and re.match(r"\s*-(\s|$)", lines[i])]
    indent = min((_indent(lines[i]) for i in items), default=2)
    insert = l2_end if items else l2 + 1
    lines[insert:insert] = _item(entry, indent)
    return "".join(lines)
