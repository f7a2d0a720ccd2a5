"""Path filters (`paths` / `paths_ignore` of an allowlist entry), with GitHub Actions' filter-pattern syntax.

Hand-written because no library matches GitHub's syntax: `*` is any run of characters but `/`, `**` any run at all,
`**/` any directories or none, `?` makes the character before it optional and `+` repeats it, `[...]` is a class,
`\\` escapes, and a leading `!` negates; patterns apply in order, a later one overriding an earlier one for a file
it matches. As in a workflow's `on.<event>.paths`: a change concerns a downstream when at least one changed file is
matched by `paths`, or when not every changed file is matched by `paths_ignore`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache


class PatternError(ValueError):
    """A pattern GitHub would refuse (an unterminated class, a dangling escape or quantifier)."""


@cache
def _compile(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")  # any directories, none included: **/README.md matches README.md
                i += 3
                continue
            if pattern.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
        elif c in "?+":
            if not out or out[-1] in ("?", "+"):
                raise PatternError(f"{pattern!r}: {c!r} needs a character before it")
            out.append(c)
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                raise PatternError(f"{pattern!r}: '[' is not closed")
            body = pattern[i + 1 : end]
            if not body:
                raise PatternError(f"{pattern!r}: an empty class")
            out.append("[" + "".join("\\" + ch if ch in "\\^[" else ch for ch in body) + "]")
            i = end
        elif c == "\\":
            if i + 1 == n:
                raise PatternError(f"{pattern!r}: a dangling escape")
            out.append(re.escape(pattern[i + 1]))
            i += 1
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


def check(patterns: Iterable[str]) -> None:
    """Raise PatternError for the first pattern GitHub would refuse."""
    for pattern in patterns:
        body = pattern[1:] if pattern.startswith("!") else pattern
        if not body:
            raise PatternError(f"{pattern!r}: an empty pattern")
        _compile(body)


def _matched(path: str, patterns: Sequence[str]) -> bool:
    """Whether the last pattern that matches `path` is a positive one."""
    result = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if _compile(pattern[1:] if negated else pattern).fullmatch(path):
            result = not negated
    return result


@dataclass(frozen=True)
class PathFilter:
    paths: tuple[str, ...] = ()
    paths_ignore: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.paths or self.paths_ignore)

    def concerns(self, files: Iterable[str]) -> bool:
        """Whether a change of these files concerns the downstream (no filter: always; no file: never)."""
        changed = list(files)
        if self.paths:
            return any(_matched(f, self.paths) for f in changed)
        if self.paths_ignore:
            return any(not _matched(f, self.paths_ignore) for f in changed)
        return True
