"""Fitting the upstream webhook body into a repository_dispatch client_payload (GitHub caps its size)."""

from __future__ import annotations

import json
from typing import Any

# Paths downstream workflows read (PyTorch's relay documents them); always kept when trimming.
_KEEP_PR = ("number", "head", "base", "labels", "draft", "user", "state", "title", "html_url", "merged")
_KEEP_TOP = ("action", "number", "deleted", "forced")
_VALIDATED_TOP = ("after", "before", "ref")  # validated at ingest for a push (SHAs, a ref)
_MAX_TEXT = 1024
# Values ingest validates (SHAs, refs of at most 255 bytes, owner/name, label names) are never longer than this;
# cut at it anyway where the same key arrives in an event that does not validate it.
_EXACT = 255


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


def _cap(value: Any, limit: int) -> Any:
    """A kept value as GitHub sends it, a short scalar; a longer text is cut and an object or array where GitHub
    sends a scalar is dropped, so that the skeleton fits whatever the rest of the body holds."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    return value if value is None or isinstance(value, bool | int | float) else None


def _repo_ref(repo: Any, limit: int) -> Any:
    if not isinstance(repo, dict):
        return _cap(repo, limit)
    owner = repo.get("owner")
    if not isinstance(owner, dict):
        owner = {}
    return {
        "id": _cap(repo.get("id"), limit),
        "name": _cap(repo.get("name"), limit),
        "full_name": _cap(repo.get("full_name"), _EXACT),  # validated at ingest (an ASCII owner/name)
        "owner": {"login": _cap(owner.get("login"), limit)},
    }


def _git_ref(value: dict[str, Any], limit: int) -> dict[str, Any]:
    # ref and sha are validated at ingest (a branch name, 40 hex); label ("owner:branch") is not
    kept = {k: _cap(v, _EXACT) for k, v in value.items() if k in {"ref", "sha"}}
    if "label" in value:
        kept["label"] = _cap(value["label"], limit)
    return kept | {"repo": _repo_ref(value.get("repo"), limit)}


def _skeleton(payload: dict[str, Any], limit: int) -> dict[str, Any]:
    """The documented paths. Those ingest validates (SHAs, refs, names, numbers, labels) are kept as they are;
    any other text is cut at `limit` characters."""
    out: dict[str, Any] = {k: _cap(payload[k], limit) for k in _KEEP_TOP if k in payload}
    out.update({k: _cap(payload[k], _EXACT) for k in _VALIDATED_TOP if k in payload})
    pr = payload.get("pull_request")
    if isinstance(pr, dict):
        kept: dict[str, Any] = {}
        for key in _KEEP_PR:
            if key not in pr:
                continue
            value = pr[key]
            if key in {"head", "base"} and isinstance(value, dict):
                value = _git_ref(value, limit)
            elif key == "labels" and isinstance(value, list):
                value = [{"name": _cap(lb.get("name"), _EXACT)} for lb in value if isinstance(lb, dict)]
            elif key == "user" and isinstance(value, dict):
                value = {k: _cap(value.get(k), limit) for k in ("login", "id", "type")}
            else:
                value = _cap(value, _EXACT if key == "number" else limit)
            kept[key] = value
        out["pull_request"] = kept
    repo = payload.get("repository")
    if isinstance(repo, dict):
        out["repository"] = _repo_ref(repo, limit) | {"default_branch": _cap(repo.get("default_branch"), _EXACT)}
    return out


def fit_payload(payload: dict[str, Any], budget: int) -> tuple[dict[str, Any], bool]:
    """Return (payload that encodes to at most `budget` bytes, whether anything was dropped)."""
    if encoded_size(payload) <= budget:
        return payload, False
    # A genuine skeleton fits with texts of 1 KB; a hostile one (texts or objects where GitHub sends short
    # values) is cut harder until it fits: what was accepted is always sent.
    for limit in (_MAX_TEXT, 100, 0):
        out = _skeleton(payload, limit)
        # Pathological skeletons (thousands of labels): shorten the label list until it fits.
        labels = out.get("pull_request", {}).get("labels")
        while isinstance(labels, list) and labels and encoded_size(out) > budget:
            del labels[len(labels) // 2 :]
        if encoded_size(out) <= budget:
            break
    # Add back the rest, slimmed, field by field, while it fits: first what the pull request carries beyond the
    # skeleton (merge_commit_sha, mergeable, …), then the other top-level keys.
    pr, kept_pr = payload.get("pull_request"), out.get("pull_request")
    if isinstance(pr, dict) and isinstance(kept_pr, dict):
        for key, value in _slim(pr).items():
            if key in kept_pr:
                continue
            kept_pr[key] = value
            if encoded_size(out) > budget:
                del kept_pr[key]
    for key, value in payload.items():
        if key in out:
            continue
        candidate = out | {key: _slim(value)}
        if encoded_size(candidate) <= budget:
            out = candidate
    return out, True


# GitHub's limits on a workflow_dispatch's inputs: 25 of them (a client_payload has at most 10 keys), 65,535 characters
# in all (as their JSON).
MAX_INPUTS_CHARS = 65_535


def as_inputs(client_payload: dict[str, Any], limit: int = MAX_INPUTS_CHARS) -> dict[str, str]:
    """The client_payload a repository_dispatch would carry, as workflow_dispatch inputs (strings: an object is its
    JSON), within GitHub's limits: the upstream event's body (`payload`) is trimmed as for a dispatch until the
    inputs fit."""
    inputs = {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":")) for k, v in client_payload.items()}
    body = client_payload.get("payload")
    budget = encoded_size(body) if isinstance(body, dict) else 0
    while len(json.dumps(inputs, separators=(",", ":"))) > limit and isinstance(body, dict) and budget > 0:
        budget = budget * 3 // 4
        fitted, _ = fit_payload(body, budget)
        inputs["payload"] = json.dumps(fitted, separators=(",", ":"))
    return inputs
