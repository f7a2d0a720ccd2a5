"""Allowlist loading: YAML with line numbers, from a path, s3:// or github:owner/repo/path@ref; a source is polled at
most every `refresh_s`, and a document that fails to fetch or validate is logged, counted and ignored, so a bad edit
never replaces the last good allowlist."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import yaml
from botocore.exceptions import ClientError

from crcr.adapters.github import GitHubApp
from crcr.app.ports import Metrics
from crcr.domain.allowlist import Allowlist, build_allowlist
from crcr.domain.errors import AllowlistError
from crcr.domain.known import KnownFailures, KnownFailuresError, parse_condensed, parse_known_issues
from crcr.domain.providers import Providers, ProvidersError, build_providers

T = TypeVar("T")


class _LStr(str):
    """A YAML string that remembers its line, so allowlist errors can name it."""

    line: int


class _Loader(yaml.SafeLoader):
    pass


def _construct_str(loader: _Loader, node: yaml.ScalarNode) -> _LStr:
    value = _LStr(loader.construct_scalar(node))
    value.line = node.start_mark.line + 1
    return value


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            raise AllowlistError(f"duplicate key {key!r}", line=key_node.start_mark.line + 1)
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_Loader.add_constructor("tag:yaml.org,2002:str", _construct_str)
_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)


NESTED_TOO_DEEP = "not valid YAML: nested too deep to read"


def parse_allowlist(text: str | bytes) -> Allowlist:
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise AllowlistError(f"not valid YAML: {exc.problem}", line=line) from exc
    except yaml.YAMLError as exc:
        raise AllowlistError(f"not valid YAML: {exc}") from exc
    except RecursionError as exc:  # PyYAML recurses per level: `[[[…]]]` a thousand deep (was a traceback)
        raise AllowlistError(NESTED_TOO_DEEP) from exc
    return build_allowlist(doc)


class Fetcher(Protocol):
    def __call__(self) -> bytes | None:
        """The document, or None when it has not changed since the last fetch."""
        ...


@dataclass
class PathFetcher:
    path: Path
    _mtime: float | None = None

    def __call__(self) -> bytes | None:
        mtime = self.path.stat().st_mtime
        if mtime == self._mtime:
            return None
        data = self.path.read_bytes()
        self._mtime = mtime
        return data


@dataclass
class S3Fetcher:
    client: Any
    bucket: str
    key: str
    _etag: str | None = None

    def __call__(self) -> bytes | None:
        kwargs = {"IfNoneMatch": self._etag} if self._etag else {}
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.key, **kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"304", "NotModified"}:
                return None
            raise
        data: bytes = obj["Body"].read()
        self._etag = obj.get("ETag")
        return data


@dataclass
class GitHubFetcher:
    github: GitHubApp
    repo: str
    path: str
    ref: str
    _etag: str | None = None

    def __call__(self) -> bytes | None:
        installation = self.github.installation_for(self.repo)
        token = self.github.repo_token(installation, self.repo, {"contents": "read"})
        resp = self.github.get_contents(self.repo, self.path, self.ref, token, self._etag)
        if resp.status == 304:
            return None
        self._etag = resp.headers.get("etag")
        return base64.b64decode(resp.body["content"])


def fetcher_for(source: str, s3_client: Callable[[], Any], github: Callable[[], GitHubApp]) -> Fetcher:
    """`source` is a path, `s3://bucket/key` or `github:owner/repo/path@ref`."""
    if source.startswith("s3://"):
        bucket, _, key = source.removeprefix("s3://").partition("/")
        if not bucket or not key:
            raise AllowlistError(f"allowlist source {source!r}: expected s3://bucket/key")
        return S3Fetcher(s3_client(), bucket, key)
    if source.startswith("github:"):
        spec, _, ref = source.removeprefix("github:").rpartition("@")
        parts = spec.split("/", 2)
        if not ref or len(parts) != 3 or not all(parts):
            raise AllowlistError(f"allowlist source {source!r}: expected github:owner/repo/path@ref")
        return GitHubFetcher(github(), f"{parts[0]}/{parts[1]}", parts[2], ref)
    return PathFetcher(Path(source))


class CachedDocument(Generic[T]):
    """A configuration document (the allowlist, the CI providers): the last good version, refreshed at most
    every `refresh_s`; one that fails to fetch or validate is counted, logged and ignored."""

    kind = "document"
    metric = "Document"

    def __init__(
        self,
        fetch: Fetcher,
        metrics: Metrics,
        clock: Callable[[], float],
        refresh_s: float = 60.0,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._fetch = fetch
        self._metrics = metrics
        self._clock = clock
        self._refresh_s = refresh_s
        self._on_error = on_error or (lambda _msg: None)
        self._good: T | None = None
        self._checked = float("-inf")
        self._lock = threading.Lock()

    def parse(self, data: bytes) -> T:
        raise NotImplementedError

    def current(self) -> T:
        with self._lock:
            now = self._clock()
            if self._good is None or now - self._checked >= self._refresh_s:
                self._checked = now
                self._refresh()
            if self._good is None:
                raise AllowlistError(f"no valid {self.kind} has been loaded yet")
            return self._good

    def _refresh(self) -> None:
        try:
            data = self._fetch()
            if data is None:
                return
            self._good = self.parse(data)
            self._metrics.count(f"{self.metric}Loaded")
        except Exception as exc:  # any failure keeps the last good document
            self._metrics.count(f"{self.metric}Rejected")
            self._on_error(f"{self.kind} not loaded, keeping the last good one: {exc}")


class CachedAllowlist(CachedDocument[Allowlist]):
    """The AllowlistProvider port."""

    kind = "allowlist"
    metric = "Allowlist"

    def parse(self, data: bytes) -> Allowlist:
        return parse_allowlist(data)


class CachedKnownFailures(CachedDocument[KnownFailures]):
    """The tests upstream disables (crcr.domain.known), reloaded like the allowlist; `current` raises until one
    loads."""

    kind = "disabled tests list"
    metric = "DisabledTests"

    def parse(self, data: bytes) -> KnownFailures:
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise KnownFailuresError(f"not JSON: {exc}") from exc
        return parse_condensed(doc)


class CachedKnownIssues(CachedDocument[KnownFailures]):
    """The known-issues file kept beside the allowlist (crcr.domain.known), reloaded like it."""

    kind = "known-issues file"
    metric = "KnownIssues"

    def parse(self, data: bytes) -> KnownFailures:
        try:
            doc = yaml.load(data, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader subclass
        except yaml.YAMLError as exc:
            raise KnownFailuresError(f"not valid YAML: {exc}") from exc
        return KnownFailures({}, parse_known_issues(doc or []))


def parse_providers(text: str | bytes) -> Providers:
    """PyTorch's ci_providers.yml, with the allowlist's YAML rules (line numbers, no duplicate keys)."""
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise ProvidersError(f"not valid YAML: {exc.problem}", line=line) from exc
    except yaml.YAMLError as exc:
        raise ProvidersError(f"not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise ProvidersError(NESTED_TOO_DEEP) from exc
    except AllowlistError as exc:  # a duplicate key, found while loading
        raise ProvidersError(exc.message) from exc
    return build_providers(doc)


class CachedProviders(CachedDocument[Providers]):
    """The ProvidersSource port: the pipeline -> repository map, same reload rules as the allowlist."""

    kind = "ci_providers"
    metric = "Providers"

    def parse(self, data: bytes) -> Providers:
        return parse_providers(data)


class OneShotAllowlist:
    """The AllowlistProvider port for one-shot operator commands: read once, and a source that cannot be
    read or a document that does not validate raises (there is no last good document to fall back on)."""

    def __init__(self, fetch: Fetcher) -> None:
        self._fetch = fetch
        self._allowlist: Allowlist | None = None

    def current(self) -> Allowlist:
        if self._allowlist is None:
            data = self._fetch()
            if data is None:
                raise AllowlistError("the allowlist source returned no document")
            self._allowlist = parse_allowlist(data)
        return self._allowlist
