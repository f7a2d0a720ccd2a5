"""Fitting the upstream webhook body into a repository_dispatch client_payload (GitHub caps its size)."""

from __future__ import annotations

import json
from typing import Any

# Paths downstream workflows read (PyTorch's relay documents them); always kept when trimming.
_KEEP_PR = ("number", "head", "base", "labels", "draft", "user", "state", "title", "html_url", "merged")
_KEEP_TOP = ("action", "number", "after", "before", "ref", "deleted", "forced")
_MAX_TEXT = 1024


def encoded_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _slim(value: Any) -> Any:
    """Drop API link fields and long texts: they are most of a payload and no workflow needs them."""
    if isinstance(value, dict):
        return {
            k: _slim(v)
            for k, v in value.items()
            if not (k.endswith("_url") and k != "html_url") and k not in {"_links", "url"}
        }
    if isinstance(value, list):
        return [_slim(v) for v in value]
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        return value[:_MAX_TEXT] + "…"
    return value


def _repo_ref(repo: Any) -> Any:
    if not isinstance(repo, dict):
        return repo
    owner = repo.get("owner")
    if not isinstance(owner, dict):
        owner = {}
    return {
        "id": repo.get("id"),
        "name": repo.get("name"),
        "full_name": repo.get("full_name"),
        "owner": {"login": owner.get("login")},
    }


def _skeleton(payload: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: payload[k] for k in _KEEP_TOP if k in payload}
    pr = payload.get("pull_request")
    if isinstance(pr, dict):
        kept: dict[str, Any] = {}
        for key in _KEEP_PR:
            if key not in pr:
                continue
            value = pr[key]
            if key in {"head", "base"} and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k in {"ref", "sha", "label"}} | {
                    "repo": _repo_ref(value.get("repo"))
                }
            elif key == "labels" and isinstance(value, list):
                value = [{"name": lb.get("name")} for lb in value if isinstance(lb, dict)]
            elif key == "user" and isinstance(value, dict):
                value = {k: value.get(k) for k in ("login", "id", "type")}
            kept[key] = value
        out["pull_request"] = kept
    repo = payload.get("repository")
    if isinstance(repo, dict):
        out["repository"] = _repo_ref(repo) | {"default_branch": repo.get("default_branch")}
    return out


def fit_payload(payload: dict[str, Any], budget: int) -> tuple[dict[str, Any], bool]:
    """Return (payload that encodes to at most `budget` bytes, whether anything was dropped)."""
    if encoded_size(payload) <= budget:
        return payload, False
    out = _skeleton(payload)
    # Add back the rest, slimmed, field by field, while it fits.
    for key, value in payload.items():
        if key in out:
            continue
        candidate = out | {key: _slim(value)}
        if encoded_size(candidate) <= budget:
            out = candidate
    # Pathological skeletons (thousands of labels): shorten the label list until it fits.
    labels = out.get("pull_request", {}).get("labels")
    while isinstance(labels, list) and labels and encoded_size(out) > budget:
        del labels[len(labels) // 2 :]
    return out, True
