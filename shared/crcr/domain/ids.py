"""Typed identifiers and repository-name rules shared by every layer."""

from __future__ import annotations

import re

# GitHub: owner 1-39 of [A-Za-z0-9-]; repository name 1-100 of [A-Za-z0-9._-], never "." or "..".
_REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_DELIVERY_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


def is_repo_name(value: str) -> bool:
    if not _REPO_RE.match(value):
        return False
    return value.split("/", 1)[1] not in {".", ".."}


def repo_key(value: str) -> str:
    """GitHub compares repository names case-insensitively; so do we."""
    return value.lower()


def is_delivery_id(value: str) -> bool:
    return bool(_DELIVERY_RE.match(value))


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
