"""A downstream's triage verdict (PyTorch's proposed object): advice about why its job failed, never a gate.

The wire shape follows PyTorch's relay (`workflow.triage_verdict`, schema_version 1): `category` (upstream,
backend, infra, flake, unknown), `confidence` (high, medium, low), `summary`, and optionally
`suspected_upstream` {pr, commit, reason} (only with category upstream), `evidence` [{job, test, excerpt,
log_url}], `reproduced_on_retry`, `analyzer` {name, version, model, prompt_version}, `analyzed_at`.
It is authored by whatever tool the downstream runs, so: a structural problem (a wrong type, an unknown
value or version) drops the whole verdict and the result still records; text that is merely long is cut;
unknown keys are ignored, so an additive field of a newer analyzer still validates.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

SCHEMA_VERSION = 1
CATEGORIES = frozenset({"upstream", "backend", "infra", "flake", "unknown"})
CONFIDENCES = frozenset({"high", "medium", "low"})
MAX_BYTES = 16 * 1024
MAX_SUMMARY = 1000
MAX_REASON = 300
MAX_EVIDENCE = 10
MAX_EXCERPT = 1000
MAX_SHORT = 200
MAX_URL = 500
_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Dropped(ValueError):
    """Why a verdict was dropped whole."""


def _text(value: object, name: str, limit: int) -> str:
    if not isinstance(value, str):
        raise Dropped(f"{name} must be a string")
    text = _CONTROL.sub("", value).strip()
    if not text:
        raise Dropped(f"{name} must not be empty")
    return text[:limit]


def _optional(value: object, name: str, limit: int) -> str | None:
    return None if value is None else _text(value, name, limit)


def _suspected(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Dropped("suspected_upstream must be an object")
    found: dict[str, Any] = {}
    pr = value.get("pr")
    if pr is not None:
        if not isinstance(pr, int) or isinstance(pr, bool) or pr <= 0:
            raise Dropped("suspected_upstream.pr must be a positive integer")
        found["pr"] = pr
    commit = _optional(value.get("commit"), "suspected_upstream.commit", 40)
    if commit is not None:
        if not _SHA.fullmatch(commit):
            raise Dropped("suspected_upstream.commit must be a hex commit SHA")
        found["commit"] = commit.lower()
    reason = _optional(value.get("reason"), "suspected_upstream.reason", MAX_REASON)
    if reason is not None:
        found["reason"] = reason
    if "pr" not in found and "commit" not in found:
        raise Dropped("suspected_upstream must name a pr or a commit")
    return found


def _link(value: object, name: str) -> str | None:
    url = _optional(value, name, MAX_URL)
    if url is None:
        return None
    parts = urlsplit(url)
    # Rendered as a link in a PR comment: plain http(s) only, no userinfo (https://github.com@evil), no spaces.
    if (
        parts.scheme not in ("http", "https")
        or not parts.netloc
        or "@" in parts.netloc
        or any(c.isspace() for c in url)
    ):
        raise Dropped(f"{name} must be a plain http(s) URL")
    return url


def _evidence(value: object) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise Dropped("evidence must be an array")
    entries = []
    for index, item in enumerate(value[:MAX_EVIDENCE]):
        if not isinstance(item, dict):
            raise Dropped(f"evidence[{index}] must be an object")
        entry = {
            key: text
            for key, limit in (("job", MAX_SHORT), ("test", MAX_SHORT), ("excerpt", MAX_EXCERPT))
            if (text := _optional(item.get(key), f"evidence[{index}].{key}", limit)) is not None
        }
        if (url := _link(item.get("log_url"), f"evidence[{index}].log_url")) is not None:
            entry["log_url"] = url
        if entry:
            entries.append(entry)
    return entries


def validate(raw: object) -> dict[str, Any] | None:
    """The verdict, normalised and capped; None when absent. Raises Dropped naming a structural problem."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise Dropped("triage_verdict must be an object")
    size = len(json.dumps(raw, default=str).encode())
    if size > MAX_BYTES:
        raise Dropped(f"triage_verdict is {size} bytes; at most {MAX_BYTES}")
    version = raw.get("schema_version")
    if isinstance(version, str) and version.strip().isdigit():
        version = int(version.strip())
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise Dropped(f"triage_verdict schema_version {raw.get('schema_version')!r} is not {SCHEMA_VERSION}")
    category = _text(raw.get("category"), "category", MAX_SHORT)
    if category not in CATEGORIES:
        raise Dropped(f"unknown category {category!r}")
    confidence = _text(raw.get("confidence"), "confidence", MAX_SHORT)
    if confidence not in CONFIDENCES:
        raise Dropped(f"unknown confidence {confidence!r}")
    verdict: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "category": category,
        "confidence": confidence,
        "summary": _text(raw.get("summary"), "summary", MAX_SUMMARY),
    }
    if raw.get("suspected_upstream") is not None:
        if category != "upstream":
            raise Dropped("suspected_upstream is only valid with category upstream")
        verdict["suspected_upstream"] = _suspected(raw["suspected_upstream"])
    if raw.get("evidence") is not None and (evidence := _evidence(raw["evidence"])):
        verdict["evidence"] = evidence
    retried = raw.get("reproduced_on_retry")
    if retried is not None:
        if not isinstance(retried, bool):
            raise Dropped("reproduced_on_retry must be true or false")
        verdict["reproduced_on_retry"] = retried
    analyzer = raw.get("analyzer")
    if analyzer is not None:
        if not isinstance(analyzer, dict):
            raise Dropped("analyzer must be an object")
        named = {
            key: text
            for key in ("name", "version", "model", "prompt_version")
            if (text := _optional(analyzer.get(key), f"analyzer.{key}", MAX_SHORT)) is not None
        }
        if named:
            verdict["analyzer"] = named
    if raw.get("analyzed_at") is not None:
        at = _text(raw["analyzed_at"], "analyzed_at", MAX_SHORT)
        try:
            datetime.fromisoformat(at)
        except ValueError as exc:
            raise Dropped("analyzed_at must be an ISO 8601 time") from exc
        verdict["analyzed_at"] = at
    return verdict
