"""Typed identifiers and repository-name rules shared by every layer."""

from __future__ import annotations

import re

# GitHub: owner 1-39 of [A-Za-z0-9-]; repository name 1-100 of [A-Za-z0-9._-], never "." or "..".
# Matched with fullmatch: `$` alone would also match before a trailing newline ("org/repo\n").
_REPO_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_DELIVERY_RE = re.compile(r"[A-Za-z0-9._-]{1,100}")
# Only ASCII letters fold. str.lower() folds far more: Kelvin sign K (U+212A) becomes "k", and so would
# make a look-alike of an allowlisted name compare equal to it.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# A git commit SHA as GitHub sends it (SHA-1, lower-case hex).
SHA_PATTERN = r"^[0-9a-f]{40}$"
# A ref as GitHub keeps it: at most 255 bytes with its refs/heads/ prefix (a branch of 244 bytes), and none of
# the characters git's check-ref-format refuses (controls, space, ~ ^ : ? * [ \, "..", "@{").
MAX_REF_BYTES = 255
BRANCH_PREFIX = "refs/heads/"
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{")


def ascii_lower(value: str) -> str:
    """Lower-case ASCII letters only; any other character stays as it is (so it never matches an ASCII one)."""
    return value.translate(_ASCII_LOWER)


def is_repo_name(value: str) -> bool:
    """`owner/name` as GitHub spells names: ASCII only, so a Unicode look-alike is never a name."""
    if not _REPO_RE.fullmatch(value):
        return False
    return value.split("/", 1)[1] not in {".", ".."}


def repo_key(value: str) -> str:
    """GitHub compares repository names case-insensitively; so do we, folding ASCII letters only: a name with
    a non-ASCII look-alike (Cyrillic o U+043E, Kelvin sign U+212A, long s U+017F) keeps that character and so
    matches no real name."""
    return ascii_lower(value)


def is_delivery_id(value: str) -> bool:
    return bool(_DELIVERY_RE.fullmatch(value))


def is_ref(value: str, *, branch: bool = False) -> bool:
    """A git ref (`refs/heads/main`, `refs/tags/v1`) or, with `branch`, a branch name (`main`), within GitHub's
    length and git's characters."""
    full = BRANCH_PREFIX + value if branch else value
    if not value or len(full.encode("utf-8", "surrogatepass")) > MAX_REF_BYTES:
        return False
    if not branch and not value.startswith("refs/"):
        return False
    return _REF_FORBIDDEN.search(value) is None


# A downstream run: GitHub Actions' run id (digits) or a Buildkite build's UUID. "0": none (the sweeper's
# record of a dispatch no job started on).
RUN_ID_PATTERN = r"^(?:[1-9][0-9]{0,19}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
NO_RUN = "0"


def is_github_run(run_id: str) -> bool:
    """A GitHub Actions run the Actions API knows (re-runs, status); not a Buildkite build, not NO_RUN."""
    return run_id.isdigit() and run_id != NO_RUN


def run_order(run_id: str) -> tuple[int, int, str]:
    """Sort key: GitHub runs by number (a later run has a larger id), builds by id, NO_RUN first."""
    return (0, int(run_id), "") if run_id.isdigit() else (1, 0, run_id)
