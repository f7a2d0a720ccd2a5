"""Allowlist rules: PyTorch's level document plus optional per-repository settings, validated with line numbers.

The document arrives as plain Python values (dict, list, str, bool, int). Strings and keys may carry a
``line`` attribute (the YAML adapter attaches one); the rules here only read it to name the line in errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crcr.domain.errors import AllowlistError
from crcr.domain.ids import is_repo_name, repo_key
from crcr.domain.levels import Level

KNOWN_EVENTS = frozenset({"pull_request", "push"})
DEFAULT_EVENTS = frozenset({"pull_request", "push"})
_DEVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,49}$")
_SETTING_KEYS = frozenset(
    {"events", "branches", "skip_drafts", "repository_id", "workflows", "trusted_authors_only", "oncalls", "check_runs"}
    | {"buildkite"}
)
_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")  # Buildkite organization and pipeline slugs, as in its URLs
_BRANCH_RE = re.compile(r"^[A-Za-z0-9._/-]{1,255}$")
CHECK_RUN_MODES = ("auto", "per_job", "per_repo")


@dataclass(frozen=True)
class BuildkitePipeline:
    """`repos.<repo>.buildkite`: dispatches to this repository create a build of this pipeline."""

    organization: str  # slug, as in https://buildkite.com/<organization>/<pipeline>
    pipeline: str
    branch: str = "main"  # the downstream branch the build checks out (its HEAD); the upstream commit is in env


@dataclass(frozen=True)
class RepoSettings:
    events: frozenset[str] = DEFAULT_EVENTS
    branches: tuple[str, ...] | None = None  # None: the upstream's default branch only
    skip_drafts: bool = False
    repository_id: int | None = None
    workflows: tuple[str, ...] = ()
    trusted_authors_only: bool = False
    # per_job: one check run per downstream job plus the repository's; per_repo: the repository's alone,
    # its summary listing the jobs (fewer writes against the upstream installation's budget); auto: per_job
    # while the installation's hourly write budget has room, per_repo's writes once it has not (crcr.app.checks).
    check_runs: str = "auto"
    buildkite: BuildkitePipeline | None = None  # None: GitHub Actions, through repository_dispatch


@dataclass(frozen=True)
class Entry:
    repo: str  # as written in the allowlist
    level: Level
    oncalls: tuple[str, ...] = ()
    device: str | None = None  # L3 only: the label is ciflow/crcr/<device>
    settings: RepoSettings = field(default_factory=RepoSettings)
    line: int | None = None

    @property
    def key(self) -> str:
        return repo_key(self.repo)


@dataclass(frozen=True)
class Allowlist:
    entries: tuple[Entry, ...] = ()

    def get(self, repo: str) -> Entry | None:
        wanted = repo_key(repo)
        for entry in self.entries:
            if entry.key == wanted:
                return entry
        return None

    def __len__(self) -> int:
        return len(self.entries)

    def table(self) -> list[tuple[str, str, str, str]]:
        """Rows (repo, level, device, oncalls) sorted by level then name, for humans."""
        rows = sorted(self.entries, key=lambda e: (e.level, e.key))
        return [(e.repo, e.level.name, e.device or "", ", ".join(e.oncalls)) for e in rows]


def _line(value: object) -> int | None:
    line = getattr(value, "line", None)
    return line if isinstance(line, int) else None


def _oncalls(value: object, where: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(v.strip() for v in value if v.strip())
    raise AllowlistError("oncalls must be a comma-separated string or a list of names", line=_line(where))


def _repo_items(level: str, items: object, where: object) -> Iterable[tuple[str, object]]:
    """Yield (repo, oncalls) from a list of `repo` / `{repo: oncalls}` items or a `{repo: oncalls}` mapping."""
    if items is None:
        return
    if isinstance(items, Mapping):
        yield from items.items()
        return
    if not isinstance(items, list):
        raise AllowlistError(f"{level} must be a list of repositories", line=_line(where))
    for item in items:
        if isinstance(item, str):
            yield item, None
        elif isinstance(item, Mapping) and len(item) == 1:
            yield next(iter(item.items()))
        else:
            raise AllowlistError(f"{level}: each item is 'owner/repo' or 'owner/repo: oncalls'", line=_line(where))


def _settings(repo: object, raw: object) -> tuple[RepoSettings, tuple[str, ...] | None]:
    if not isinstance(raw, Mapping):
        raise AllowlistError(f"repos.{repo}: settings must be a mapping", line=_line(repo))
    for key in raw:
        if key not in _SETTING_KEYS:
            raise AllowlistError(
                f"repos.{repo}: unknown key {key!r} (known: {', '.join(sorted(_SETTING_KEYS))})",
                line=_line(key),
            )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"repos.{repo}.{key}"
        if key in {"skip_drafts", "trusted_authors_only"}:
            if not isinstance(value, bool):
                raise AllowlistError(f"{where} must be true or false", line=_line(key))
            values[key] = value
        elif key == "repository_id":
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise AllowlistError(f"{where} must be a positive integer", line=_line(key))
            values[key] = value
        elif key == "buildkite":
            values[key] = _buildkite(where, value, key)
        elif key == "check_runs":
            if value not in CHECK_RUN_MODES:
                raise AllowlistError(f"{where} must be one of {', '.join(CHECK_RUN_MODES)}", line=_line(key))
            values[key] = value
        elif key in {"events", "branches", "workflows"}:
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise AllowlistError(f"{where} must be a list of strings", line=_line(key))
            if key == "events":
                unknown = set(value) - KNOWN_EVENTS
                if unknown:
                    raise AllowlistError(
                        f"{where}: unknown event {sorted(unknown)[0]!r} (known: pull_request, push)",
                        line=_line(key),
                    )
                values[key] = frozenset(value)
            else:
                values[key] = tuple(value)
    oncalls = _oncalls(raw["oncalls"], raw["oncalls"]) if "oncalls" in raw else None
    return RepoSettings(**values), oncalls


def _buildkite(where: str, value: object, at: object) -> BuildkitePipeline:
    if not isinstance(value, Mapping) or not {"organization", "pipeline"} <= set(value):
        raise AllowlistError(f"{where} must be a mapping with organization and pipeline (slugs)", line=_line(at))
    unknown = set(value) - {"organization", "pipeline", "branch"}
    if unknown:
        raise AllowlistError(
            f"{where}: unknown key {sorted(map(str, unknown))[0]!r} (known: branch, organization, pipeline)",
            line=_line(at),
        )
    organization, pipeline = value["organization"], value["pipeline"]
    for name, slug in (("organization", organization), ("pipeline", pipeline)):
        if not isinstance(slug, str) or not _SLUG_RE.fullmatch(slug):
            raise AllowlistError(f"{where}.{name} must be a Buildkite slug (lower-case, digits, -)", line=_line(at))
    branch = value.get("branch", "main")
    if not isinstance(branch, str) or not _BRANCH_RE.fullmatch(branch):
        raise AllowlistError(f"{where}.branch must be a branch name", line=_line(at))
    return BuildkitePipeline(organization, pipeline, branch)


def build_allowlist(doc: object) -> Allowlist:
    """Validate a parsed allowlist document; raise AllowlistError naming the line of the first problem."""
    if doc is None:
        return Allowlist()
    if not isinstance(doc, Mapping):
        raise AllowlistError("the allowlist must be a mapping of L1..L4 (and optional repos)", line=_line(doc))
    for key in doc:
        if key not in {"L1", "L2", "L3", "L4", "repos"}:
            raise AllowlistError(f"unknown top-level key {key!r} (expected L1, L2, L3, L4, repos)", line=_line(key))

    seen: dict[str, Entry] = {}

    def add(repo: object, oncalls: object, level: Level, device: str | None) -> None:
        if not isinstance(repo, str) or not is_repo_name(repo):
            raise AllowlistError(f"{level.name}: {repo!r} is not an owner/repo name", line=_line(repo))
        previous = seen.get(repo_key(repo))
        if previous is not None:
            at = f" (first at line {previous.line})" if previous.line else ""
            raise AllowlistError(f"{repo} is listed twice{at}", line=_line(repo))
        seen[repo_key(repo)] = Entry(
            repo=str(repo), level=level, oncalls=_oncalls(oncalls, repo), device=device, line=_line(repo)
        )

    for name in ("L1", "L2", "L4"):
        if name in doc:
            key = next(k for k in doc if k == name)
            for repo, oncalls in _repo_items(name, doc[name], key):
                add(repo, oncalls, Level.parse(name), None)
    if "L3" in doc and doc["L3"] is not None:
        l3 = doc["L3"]
        if not isinstance(l3, Mapping):
            raise AllowlistError("L3 must map a device name to its repositories", line=_line(l3))
        for device, repos in l3.items():
            if not isinstance(device, str) or not _DEVICE_RE.fullmatch(device):
                raise AllowlistError(f"L3: {device!r} is not a device name", line=_line(device))
            for repo, oncalls in _repo_items(f"L3.{device}", repos, device):
                add(repo, oncalls, Level.L3, device)

    raw_settings = doc.get("repos") or {}
    if not isinstance(raw_settings, Mapping):
        raise AllowlistError("repos must map owner/repo to settings", line=None)
    for repo, raw in raw_settings.items():
        entry = seen.get(repo_key(str(repo)))
        if entry is None:
            raise AllowlistError(f"repos.{repo}: not listed under any level", line=_line(repo))
        settings, oncalls = _settings(repo, raw)
        seen[entry.key] = Entry(
            repo=entry.repo,
            level=entry.level,
            oncalls=oncalls if oncalls is not None else entry.oncalls,
            device=entry.device,
            settings=settings,
            line=entry.line,
        )
    return Allowlist(entries=tuple(seen.values()))
