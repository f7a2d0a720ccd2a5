"""The allowlist edit a demotion PR proposes: one L3 entry moved to the end of L2, every other line as it was
(hand-written: no YAML library round-trips comments and layout; the caller parses the result back and checks it)."""

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


def _section(lines: list[str], name: str) -> tuple[int, int] | None:
    """The block of a top-level key in block style: (header, end), or None when the file has no such key."""
    at = _header(lines, name)
    if at is None:
        return None
    if not re.match(rf"{name}\s*:\s*(#.*)?$", lines[at].rstrip("\n")):
        raise EditError(f"{name} must be in block style for crcr onboard to edit it")
    return at, _block_end(lines, at)


def _remove(lines: list[str], entry: Entry) -> None:
    """The entry's item (with the comment lines directly above it); an L3 device group left empty goes too."""
    if entry.line is None:
        raise EditError(f"{entry.repo}: its line in the allowlist is not known")
    at = entry.line - 1
    start, end = _comments_above(lines, at), _block_end(lines, at)
    if entry.device is not None:
        group = next(i for i in range(at - 1, -1, -1) if _content(lines[i]) and _indent(lines[i]) < _indent(lines[at]))
        group_end = _block_end(lines, group)
        if _indent(lines[group]) > 0 and not any(
            _content(lines[i]) for i in range(group + 1, group_end) if not start <= i < end
        ):
            del lines[_comments_above(lines, group) : group_end]
            _drop_if_empty(lines, "L3")
            return
    del lines[start:end]
    _drop_if_empty(lines, entry.level.name)


def _drop_if_empty(lines: list[str], level: str) -> None:
    """A level's header left with nothing under it goes too (with the comment lines directly above it)."""
    at = _header(lines, level)
    if (
        at is not None
        and not any(_content(lines[i]) for i in range(at + 1, _block_end(lines, at)))
        and re.match(rf"{level}\s*:\s*(#.*)?$", lines[at].rstrip("\n"))
    ):
        del lines[_comments_above(lines, at) : _block_end(lines, at)]


def _insert(lines: list[str], level: str, device: str | None, item: str) -> None:
    """`- <item>` at the end of the level's list (or of its device's group), in the layout around it."""
    found = _section(lines, level)
    if found is None:
        # In the levels' order: before the next level the file has, else before repos:, else at the end.
        later = [_header(lines, name) for name in (*(f"L{n}" for n in range(int(level[1]) + 1, 5)), "repos")]
        at = min((i for i in later if i is not None), default=len(lines))
        block = [f"{level}:\n"] + ([f"  {device}:\n", f"    - {item}\n"] if device else [f"  - {item}\n"])
        lines[at:at] = block
        return
    start, end = found
    if device is None:
        items = [i for i in range(start + 1, end) if _content(lines[i])]
        indent = min((_indent(lines[i]) for i in items), default=2)
        lines[end:end] = [f"{' ' * indent}- {item}\n"]
        return
    key = re.compile(rf"\s+([\"']?){re.escape(device)}\1\s*:\s*(#.*)?$")
    group = next((i for i in range(start + 1, end) if key.match(lines[i].rstrip("\n"))), None)
    if group is None:
        lines[end:end] = [f"  {device}:\n", f"    - {item}\n"]
        return
    group_end = _block_end(lines, group)
    members = [i for i in range(group + 1, group_end) if _content(lines[i])]
    indent = min((_indent(lines[i]) for i in members), default=_indent(lines[group]) + 2)
    listed = not members or lines[members[0]].lstrip().startswith("-")
    text = f"- {item}" if listed else (item if ": " in item else f"{item}:")
    lines[group_end:group_end] = [f"{' ' * indent}{text}\n"]


def _set_settings(lines: list[str], repo: str, settings: dict[str, str]) -> None:
    """`repos.<repo>.<key>: <value>` for each of `settings`, replacing a value the file has."""
    if not settings:
        return
    found = _section(lines, "repos")
    if found is None:
        lines.append("repos:\n")
        lines += [f"  {repo}:\n", *(f"    {k}: {v}\n" for k, v in settings.items())]
        return
    start, end = found
    key = re.compile(rf"\s+([\"']?){re.escape(repo)}\1\s*:\s*(#.*)?$", re.IGNORECASE)
    at = next((i for i in range(start + 1, end) if key.match(lines[i].rstrip("\n"))), None)
    if at is None:
        lines[end:end] = [f"  {repo}:\n", *(f"    {k}: {v}\n" for k, v in settings.items())]
        return
    block_end = _block_end(lines, at)
    indent = _indent(lines[at]) + 2
    for name, value in settings.items():
        line = re.compile(rf"\s+{name}\s*:")
        have = next((i for i in range(at + 1, block_end) if line.match(lines[i]) and _indent(lines[i]) == indent), None)
        if have is not None:
            lines[have] = f"{' ' * indent}{name}: {value}\n"
        else:
            lines.insert(at + 1, f"{' ' * indent}{name}: {value}\n")
            block_end += 1


def place(text: str, current: Entry | None, entry: Entry, settings: dict[str, str]) -> str:
    """The allowlist with `entry` at its level (moved from where `current`, its entry parsed from `text`, was) and
    `settings` under `repos:`; every other line as it was. The caller parses the result back and refuses it unless
    it is exactly that change."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if current is not None:
        _remove(lines, current)
    oncalls = f": {json.dumps(list(entry.oncalls))}" if entry.oncalls else ""
    _insert(lines, entry.level.name, entry.device, f"{entry.repo}{oncalls}")
    _set_settings(lines, entry.repo, settings)
    return "".join(lines)
