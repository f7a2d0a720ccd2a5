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
