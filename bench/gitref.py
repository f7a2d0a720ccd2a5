"""The code at a git ref, exported to a temporary directory: what a `--baseline` run measures beside this checkout."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def exported(ref: str, prefix: str) -> Iterator[tuple[str, Path] | None]:
    """(the commit, a directory holding its tree), or None when `ref` names no commit here."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    if not commit:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield commit, Path(tmp)
