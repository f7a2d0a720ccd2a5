"""Change hints: what a change touches, summarised for downstreams that select their own tests (advice, never a
filter; the relay's own decision is the path filter). Built only from files the relay already knows: a push's from
its payload, a PR's from the listing its path filters read. Capped so the dispatch stays within GitHub's limits."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from crcr.domain.payload import encoded_size

MAX_HINT_BYTES = 2_000  # of client_payload's 64 KB: the upstream body keeps its 60,000 and the ticket its ~2 KB
MAX_LISTED = 50  # paths, and test files, listed at most (before the byte cap)
MAX_DIRS = 30
_TEST_FILE = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*$|_test\.[^/]+$|(^|/)[^/]*_tests?\.[^/]+$")


def is_test_file(path: str) -> bool:
    return bool(_TEST_FILE.search(path))


def change_hints(files: Sequence[str] | None, count: int | None = None) -> dict[str, Any] | None:
    """`{"files", "complete", "dirs", "paths", "tests"}` of a change whose files are `files` (None: not listed),
    of which GitHub counts `count` (a PR's `changed_files`); None when nothing is known. `files` is GitHub's count,
    else the number listed; `complete` says `paths` lists every file known; `dirs` (top-level directories, "" for
    files at the root) and `tests` (test files touched) are of the listed files."""
    if files is None:
        return None if count is None else {"files": count, "complete": False, "dirs": [], "paths": [], "tests": []}
    listed = sorted(set(files))  # a renamed file is listed under both its names
    hints: dict[str, Any] = {
        "files": count if count is not None else len(listed),
        "complete": len(listed) <= MAX_LISTED,
        "dirs": sorted({path.split("/", 1)[0] if "/" in path else "" for path in listed})[:MAX_DIRS],
        "paths": listed[:MAX_LISTED],
        "tests": [path for path in listed if is_test_file(path)][:MAX_LISTED],
    }
    # Over the byte cap (long paths): fewer paths, then fewer test files, then fewer directories.
    for key in ("paths", "tests", "dirs"):
        while hints[key] and encoded_size(hints) > MAX_HINT_BYTES:
            hints[key] = hints[key][: len(hints[key]) // 2]
            hints["complete"] = False
    return hints
