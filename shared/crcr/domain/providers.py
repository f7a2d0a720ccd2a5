"""PyTorch's `ci_providers.yml` (docs/contracts.md): which Buildkite pipeline may report as which repository.

Buildkite's OIDC tokens carry no repository: every organization shares one issuer, so identity is the
token's `organization_id`/`pipeline_id` (immutable UUIDs; slugs can be renamed and a released slug
claimed by someone else), mapped to a repository here. The file loads unchanged:

    providers:
      buildkite:
        repo_map:
          <organization_id>/<pipeline_id>: owner/repo            # or
          <organization_id>/<pipeline_id>: {repo: owner/repo, required_claims: {build_branch: [main]}}
    buildkite:                                                   # legacy flat section, read only when
      <organization_id>/<pipeline_id>: ...                       # providers.buildkite.repo_map is empty

Issuers and key URLs in the file (`issuer`, `jwks_uri`) are ignored: trust anchors are fixed in code.
A `required_claims` entry holds when the claim's text equals one of its values (a missing claim is "").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crcr.domain.errors import AllowlistError
from crcr.domain.ids import ascii_lower, is_repo_name

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_KEY_RE = re.compile(rf"^({_UUID})/({_UUID})$")
_CLAIM_RE = re.compile(r"^[a-z][a-z0-9_:.-]{0,63}$")
_TOP_KEYS = frozenset({"providers", "buildkite"})
_ENTRY_KEYS = frozenset({"repo", "required_claims"})


class ProvidersError(AllowlistError):
    """A problem in the providers document; `line` is 1-based when known."""

    reason = "bad_ci_providers"


@dataclass(frozen=True)
class PipelineRule:
    repo: str
    required_claims: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def unmet(self, claims: Mapping[str, Any]) -> tuple[str, str, tuple[str, ...]] | None:
        """The first required claim the token does not satisfy: (name, its value, what is allowed)."""
        for name, allowed in self.required_claims:
            actual = claims.get(name)
            if isinstance(actual, dict | list):  # never one of the values (and its text could be any size)
                return name, f"a {type(actual).__name__}", allowed
            text = "" if actual is None else str(actual)[:1000]
            if text not in allowed:
                return name, text, allowed
        return None


@dataclass(frozen=True)
class Providers:
    buildkite: Mapping[tuple[str, str], PipelineRule] = field(default_factory=dict)

    def pipeline(self, organization_id: str, pipeline_id: str) -> PipelineRule | None:
        return self.buildkite.get((ascii_lower(organization_id), ascii_lower(pipeline_id)))

    def __len__(self) -> int:
        return len(self.buildkite)


def _line(value: object) -> int | None:
    line = getattr(value, "line", None)
    return line if isinstance(line, int) else None


def _rule(key: object, value: object, where: str) -> tuple[tuple[str, str], PipelineRule]:
    match = _KEY_RE.fullmatch(ascii_lower(str(key).strip()))
    if not match:
        raise ProvidersError(
            f"{where}: key {key!r} must be <organization_id>/<pipeline_id> (Buildkite UUIDs; slugs can be "
            "renamed and reclaimed)",
            line=_line(key),
        )
    required: Any = {}
    if isinstance(value, str):
        repo = value.strip()
    elif isinstance(value, Mapping):
        unknown = set(map(str, value)) - _ENTRY_KEYS
        if unknown:
            raise ProvidersError(f"{where}.{key}: unknown key {sorted(unknown)[0]!r} (known: repo, required_claims)")
        repo = str(value.get("repo") or "").strip()
        required = value.get("required_claims") or {}
        if not isinstance(required, Mapping):
            raise ProvidersError(f"{where}.{key}.required_claims must be a mapping of claim: [values]", line=_line(key))
    else:
        raise ProvidersError(f"{where}.{key} must be owner/repo or {{repo, required_claims}}", line=_line(key))
    if not is_repo_name(repo):
        raise ProvidersError(f"{where}.{key}: {repo!r} is not an owner/repo name", line=_line(key))
    claims: list[tuple[str, tuple[str, ...]]] = []
    for name, allowed in required.items():
        if not isinstance(name, str) or not _CLAIM_RE.fullmatch(name):
            raise ProvidersError(f"{where}.{key}.required_claims: {name!r} is not a claim name", line=_line(name))
        values = allowed if isinstance(allowed, list) else [allowed]
        if not values or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in values):
            raise ProvidersError(
                f"{where}.{key}.required_claims.{name} must be a value or a non-empty list of values", line=_line(name)
            )
        claims.append((name, tuple(str(v) for v in values)))
    return (match.group(1), match.group(2)), PipelineRule(repo, tuple(claims))


def _rules(section: object, where: str) -> dict[tuple[str, str], PipelineRule]:
    if section is None:
        return {}  # every entry commented out
    if not isinstance(section, Mapping):
        raise ProvidersError(f"{where} must be a mapping", line=_line(section))
    rules: dict[tuple[str, str], PipelineRule] = {}
    for key, value in section.items():
        pair, rule = _rule(key, value, where)
        if pair in rules:
            raise ProvidersError(f"{where}: {key} is listed twice", line=_line(key))
        rules[pair] = rule
    return rules


def build_providers(doc: object) -> Providers:
    """Validate a parsed providers document; raise ProvidersError naming the line of the first problem."""
    if doc is None:
        return Providers()
    if not isinstance(doc, Mapping):
        raise ProvidersError("the document must be a mapping (providers:, and the legacy buildkite:)")
    for key in doc:
        if key not in _TOP_KEYS:
            raise ProvidersError(f"unknown top-level key {key!r} (expected providers, buildkite)", line=_line(key))
    providers = doc.get("providers") or {}
    if not isinstance(providers, Mapping):
        raise ProvidersError("providers must be a mapping of provider names", line=_line(providers))
    buildkite = providers.get("buildkite") or {}
    if not isinstance(buildkite, Mapping):
        raise ProvidersError("providers.buildkite must be a mapping", line=_line(buildkite))
    rules = _rules(buildkite.get("repo_map"), "providers.buildkite.repo_map")
    # PyTorch keeps the legacy flat section as a copy for older readers; it counts only when repo_map is empty.
    legacy = _rules(doc.get("buildkite"), "buildkite")
    return Providers(rules or legacy)
