"""Allowlist rules: PyTorch's level document plus optional per-repository settings, validated with line numbers. It
arrives as plain Python values (dict, list, str, bool, int); strings and keys may carry a ``line`` attribute (the
YAML adapter attaches one), read here only to name the line in errors."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from crcr.domain.errors import AllowlistError
from crcr.domain.ids import is_repo_name, repo_key
from crcr.domain.levels import Level
from crcr.domain.paths import PathFilter, PatternError, check

# `nightly`: the repository's scheduled runs report on upstream commits. An entry whose events name nothing else
# (PyTorch's `- owner/repo: {events: [nightly]}`) takes part only that way: no dispatch for any webhook.
KNOWN_EVENTS = frozenset({"pull_request", "push", "nightly"})
DEFAULT_EVENTS = frozenset({"pull_request", "push"})
DISPATCHED_EVENTS = frozenset({"pull_request", "push"})
# The keys PyTorch's allowlist writes in an entry's own mapping (`- owner/repo: {oncalls: …, events: […]}`).
_ENTRY_KEYS = ("events", "oncalls")
# ciflow/<name>/<PR> tag pushes: ciflow/trunk goes to every repository taking part in pull requests unless its
# `ciflow` setting lists other names; another name only where that setting lists it.
DEFAULT_CIFLOW = ("trunk",)
_CIFLOW_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,49}$")
_DEVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,49}$")
_SETTING_KEYS = frozenset(
    {
        "events",
        "branches",
        "skip_drafts",
        "repository_id",
        "repository_owner_id",
        "workflows",
        "trusted_authors_only",
        "oncalls",
        "check_runs",
    }
    | {"buildkite", "ciflow", "paths", "paths_ignore", "workflow", "bisect", "mode"}
)
# A workflow file as `workflow_dispatch` names it under .github/workflows/ (GitHub's `workflow_id` may be its name).
_WORKFLOW_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.ya?ml$")
_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,99}$")  # Buildkite organization and pipeline slugs, as in its URLs
_BRANCH_RE = re.compile(r"^[A-Za-z0-9._/-]{1,255}$")
CHECK_RUN_MODES = ("auto", "per_job", "per_repo")
MODES = ("live", "shadow")  # `mode`: dispatched for real, or planned and recorded only (crcr.domain.shadow)
MAX_BISECT_RUNS_PER_DAY = 100


@dataclass(frozen=True)
class BuildkitePipeline:
    """`repos.<repo>.buildkite`: dispatches to this repository create a build of this pipeline."""

    organization: str  # slug, as in https://buildkite.com/<organization>/<pipeline>
    pipeline: str
    branch: str = "main"  # the downstream branch the build checks out (its HEAD); the upstream commit is in env


@dataclass(frozen=True)
class WorkflowTarget:
    """`repos.<repo>.workflow`: dispatches to this repository run this workflow through `workflow_dispatch` (the
    relay learns the run's id at once), instead of a `repository_dispatch` any workflow may listen to."""

    file: str  # under .github/workflows/, e.g. ci.yml
    ref: str = "main"  # the downstream branch whose workflow file runs


@dataclass(frozen=True)
class RepoSettings:
    events: frozenset[str] = DEFAULT_EVENTS
    branches: tuple[str, ...] | None = None  # None: the upstream's default branch only
    skip_drafts: bool = False
    repository_id: int | None = None
    # The owner's numeric id (a token's repository_owner_id): a repository moved to another owner, or an owner
    # deleted and its name taken, no longer reports.
    repository_owner_id: int | None = None
    workflows: tuple[str, ...] = ()
    trusted_authors_only: bool = False
    # per_job: one check run per downstream job plus the repository's; per_repo: the repository's alone,
    # its summary listing the jobs (fewer writes against the upstream installation's budget); auto: per_job
    # while the installation's hourly write budget has room, per_repo's writes once it has not (crcr.app.checks).
    check_runs: str = "auto"
    buildkite: BuildkitePipeline | None = None  # None: GitHub Actions, through repository_dispatch
    workflow: WorkflowTarget | None = None  # GitHub Actions through workflow_dispatch of this file (opt-in)
    ciflow: tuple[str, ...] = DEFAULT_CIFLOW  # the ciflow/<name>/<PR> tag pushes it is dispatched for
    # GitHub Actions' path filters: a change none of whose files concern the downstream is not dispatched to it.
    paths: tuple[str, ...] = ()
    paths_ignore: tuple[str, ...] = ()
    # `bisect: {runs_per_day: N}`: a regression of its jobs may be bisected with up to N dispatches a day (0: never).
    bisect_runs_per_day: int = 0
    mode: str | None = None  # live or shadow; None: the deployment's CRCR_MODE

    @property
    def path_filter(self) -> PathFilter:
        return PathFilter(self.paths, self.paths_ignore)

    @property
    def nightly_only(self) -> bool:
        """Takes part only through scheduled reports: no webhook is dispatched to it."""
        return not (self.events & DISPATCHED_EVENTS)


@dataclass(frozen=True)
class Entry:
    repo: str  # as written in the allowlist
    level: Level
    oncalls: tuple[str, ...] = ()
    device: str | None = None  # L3 only: the label is ciflow/crcr/<device>
    settings: RepoSettings = field(default_factory=RepoSettings)
    line: int | None = None
    events_given: bool = False  # the entry's own mapping named its events (PyTorch's form)

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
    """Yield (repo, value) from a list of `repo` / `{repo: value}` items or a `{repo: value}` mapping; the value
    is the entry's oncalls, or its own mapping of `oncalls` and `events`."""
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
            raise AllowlistError(
                f"{level}: each item is 'owner/repo', 'owner/repo: oncalls' or 'owner/repo:' with events/oncalls "
                "under it",
                line=_line(where),
            )


def _events(where: str, value: object, at: object) -> frozenset[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise AllowlistError(f"{where} must be a non-empty list of events", line=_line(at))
    unknown = set(value) - KNOWN_EVENTS
    if unknown:
        raise AllowlistError(
            f"{where}: unknown event {sorted(unknown)[0]!r} (known: {', '.join(sorted(KNOWN_EVENTS))})",
            line=_line(next(v for v in value if v in unknown)) or _line(at),
        )
    return frozenset(value)


def _entry(repo: str, value: object) -> tuple[tuple[str, ...], frozenset[str] | None]:
    """An entry's oncalls and, in PyTorch's mapping form, its events (None: not given)."""
    if not isinstance(value, Mapping):
        return _oncalls(value, repo), None
    for key in value:
        if key not in _ENTRY_KEYS:
            raise AllowlistError(
                f"{repo}: unknown key {key!r} in its entry (known: {', '.join(_ENTRY_KEYS)}; crcr's own settings "
                "go under repos:)",
                line=_line(key) or _line(repo),
            )
    oncall_key = next((k for k in value if k == "oncalls"), repo)
    oncalls = _oncalls(value.get("oncalls"), oncall_key)
    event_key = next((k for k in value if k == "events"), None)
    events = _events(f"{repo}.events", value["events"], event_key) if event_key is not None else None
    return oncalls, events


def _settings(repo: object, raw: object, entry: Entry) -> tuple[RepoSettings, tuple[str, ...] | None]:
    _known_keys(repo, raw)
    assert isinstance(raw, Mapping)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"repos.{repo}.{key}"
        if key in {"skip_drafts", "trusted_authors_only"}:
            if not isinstance(value, bool):
                raise AllowlistError(f"{where} must be true or false", line=_line(key))
            values[key] = value
        elif key in {"repository_id", "repository_owner_id"}:
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise AllowlistError(f"{where} must be a positive integer", line=_line(key))
            values[key] = value
        elif key == "buildkite":
            values[key] = _buildkite(where, value, key)
        elif key == "workflow":
            values[key] = _workflow(where, value, key)
        elif key == "bisect":
            values["bisect_runs_per_day"] = _bisect(where, value, key)
        elif key in ("mode", "check_runs"):
            choices = MODES if key == "mode" else CHECK_RUN_MODES
            if value not in choices:
                raise AllowlistError(f"{where} must be one of {', '.join(choices)}", line=_line(key))
            values[key] = value
        elif key == "events":
            values[key] = _events(where, value, key)
        elif key == "ciflow":
            if not isinstance(value, list) or not all(isinstance(v, str) and _CIFLOW_RE.fullmatch(v) for v in value):
                raise AllowlistError(
                    f"{where} must be a list of ciflow names (as in ciflow/<name>/<PR>)", line=_line(key)
                )
            values[key] = tuple(value)
        elif key in {"paths", "paths_ignore"}:
            if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
                raise AllowlistError(f"{where} must be a non-empty list of path patterns", line=_line(key))
            try:
                check(value)
            except PatternError as exc:
                raise AllowlistError(f"{where}: {exc}", line=_line(key)) from None
            values[key] = tuple(value)
        elif key in {"branches", "workflows"}:
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise AllowlistError(f"{where} must be a list of strings", line=_line(key))
            values[key] = tuple(value)
    _one_of(repo, raw, values)
    if "events" in values:
        if entry.events_given:
            at = f" (line {entry.line})" if entry.line else ""
            raise AllowlistError(
                f"repos.{repo}.events: its {entry.level.name} entry{at} already gives its events",
                line=_line(next(k for k in raw if k == "events")),
            )
    else:
        values["events"] = entry.settings.events
    oncalls = _oncalls(raw["oncalls"], raw["oncalls"]) if "oncalls" in raw else None
    return RepoSettings(**values), oncalls


def _known_keys(repo: object, raw: object) -> None:
    if not isinstance(raw, Mapping):
        raise AllowlistError(f"repos.{repo}: settings must be a mapping", line=_line(repo))
    for key in raw:
        if key not in _SETTING_KEYS:
            raise AllowlistError(
                f"repos.{repo}: unknown key {key!r} (known: {', '.join(sorted(_SETTING_KEYS))})",
                line=_line(key),
            )


def _one_of(repo: object, raw: Mapping[Any, Any], values: dict[str, Any]) -> None:
    """Settings that exclude each other."""
    for first, second, why in (
        ("workflow", "buildkite", "workflow (GitHub Actions) or buildkite, not both"),
        ("paths", "paths_ignore", "paths or paths_ignore, not both (as GitHub Actions requires)"),
    ):
        if first in values and second in values:
            raise AllowlistError(f"repos.{repo}: give {why}", line=_line(next(k for k in raw if k == second)))


def _bisect(where: str, value: object, at: object) -> int:
    """`bisect: {runs_per_day: N}`: the downstream's daily budget of bisection dispatches."""
    runs = value.get("runs_per_day") if isinstance(value, Mapping) and set(value) == {"runs_per_day"} else None
    if not isinstance(runs, int) or isinstance(runs, bool) or not 1 <= runs <= MAX_BISECT_RUNS_PER_DAY:
        problem = f"{where} must be a mapping with runs_per_day (1 to {MAX_BISECT_RUNS_PER_DAY})"
        raise AllowlistError(problem, line=_line(at))
    return runs


def _workflow(where: str, value: object, at: object) -> WorkflowTarget:
    """`workflow: ci.yml`, or `workflow: {file: ci.yml, ref: main}`."""
    raw = {"file": value} if isinstance(value, str) else value
    if not isinstance(raw, Mapping) or "file" not in raw or set(raw) - {"file", "ref"}:
        raise AllowlistError(f"{where} must be a workflow file name, or a mapping with file (and ref)", line=_line(at))
    file, ref = raw["file"], raw.get("ref", "main")
    if not isinstance(file, str) or not _WORKFLOW_FILE_RE.fullmatch(file):
        raise AllowlistError(f"{where}: the file must be a .yml or .yaml name under .github/workflows/", line=_line(at))
    if not isinstance(ref, str) or not _BRANCH_RE.fullmatch(ref) or ".." in ref:
        raise AllowlistError(f"{where}: ref must be a branch name", line=_line(at))
    return WorkflowTarget(file=file, ref=ref)


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

    def add(repo: object, value: object, level: Level, device: str | None) -> None:
        if not isinstance(repo, str) or not is_repo_name(repo):
            raise AllowlistError(f"{level.name}: {repo!r} is not an owner/repo name", line=_line(repo))
        previous = seen.get(repo_key(repo))
        if previous is not None:
            at = f" (first at line {previous.line})" if previous.line else ""
            raise AllowlistError(f"{repo} is listed twice{at}", line=_line(repo))
        oncalls, events = _entry(repo, value)
        settings = RepoSettings(events=events) if events is not None else RepoSettings()
        seen[repo_key(repo)] = Entry(
            repo=str(repo),
            level=level,
            oncalls=oncalls,
            device=device,
            settings=settings,
            line=_line(repo),
            events_given=events is not None,
        )

    for name in ("L1", "L2", "L4"):
        if name in doc:
            key = next(k for k in doc if k == name)
            for repo, value in _repo_items(name, doc[name], key):
                add(repo, value, Level.parse(name), None)
    if "L3" in doc and doc["L3"] is not None:
        l3 = doc["L3"]
        if not isinstance(l3, Mapping):
            raise AllowlistError("L3 must map a device name to its repositories", line=_line(l3))
        for device, repos in l3.items():
            if not isinstance(device, str) or not _DEVICE_RE.fullmatch(device):
                raise AllowlistError(f"L3: {device!r} is not a device name", line=_line(device))
            for repo, value in _repo_items(f"L3.{device}", repos, device):
                add(repo, value, Level.L3, device)

    raw_settings = doc.get("repos") or {}
    if not isinstance(raw_settings, Mapping):
        raise AllowlistError("repos must map owner/repo to settings", line=None)
    for repo, raw in raw_settings.items():
        entry = seen.get(repo_key(str(repo)))
        if entry is None:
            raise AllowlistError(f"repos.{repo}: not listed under any level", line=_line(repo))
        settings, oncalls = _settings(repo, raw, entry)
        seen[entry.key] = replace(entry, oncalls=oncalls if oncalls is not None else entry.oncalls, settings=settings)
    return Allowlist(entries=tuple(seen.values()))
