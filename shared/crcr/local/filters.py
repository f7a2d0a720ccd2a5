"""Lambda's event filtering (an event source mapping's FilterCriteria) for the local stack's pollers: the operators
template.yaml uses, plus `exists`; any other is refused when the template is read."""

from __future__ import annotations

import json
from typing import Any

OPERATORS = frozenset({"prefix", "anything-but", "exists"})
STREAM_KEYS = frozenset({"dynamodb"})  # "DynamoDB event source mappings only support filtering on the dynamodb key"


class Filter:
    def __init__(self, pattern: str, keys: frozenset[str] | None = None) -> None:
        """`keys`: the top-level keys the source lets a pattern name (a DynamoDB stream's: only `dynamodb`)."""
        try:
            self.pattern = json.loads(pattern)
        except json.JSONDecodeError as exc:
            raise ValueError(f"FilterCriteria pattern is not JSON: {exc}") from None
        if not isinstance(self.pattern, dict):
            raise ValueError("FilterCriteria pattern must be a JSON object")
        if keys is not None and (extra := set(self.pattern) - keys):
            raise ValueError(f"FilterCriteria: this source filters only on {sorted(keys)}, not {sorted(extra)}")
        _check(self.pattern)

    def matches(self, record: dict[str, Any]) -> bool:
        """Each key of the pattern present in the record: a nested object matches a nested object, a list a value
        equal to one of its entries or passing one of its operators."""
        return _object(self.pattern, record)


def passes(filters: list[Filter], record: dict[str, Any]) -> bool:
    """No filters: every record goes to the function; otherwise any one matching lets it through."""
    return not filters or any(f.matches(record) for f in filters)


def _check(pattern: dict[str, Any]) -> None:
    for key, rule in pattern.items():
        if isinstance(rule, dict):
            _check(rule)
        elif not isinstance(rule, list):
            raise ValueError(f"FilterCriteria: {key!r} must be an object or a list")
        else:
            for entry in rule:
                if isinstance(entry, dict) and (len(entry) != 1 or next(iter(entry)) not in OPERATORS):
                    raise ValueError(f"FilterCriteria: {key!r}: operator {entry!r} is not supported locally")


def _object(pattern: dict[str, Any], value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    for key, rule in pattern.items():
        if isinstance(rule, dict):
            if not _object(rule, value.get(key)):
                return False
        elif not _any(rule, key in value, value.get(key)):
            return False
    return True


def _any(rule: list[Any], present: bool, value: Any) -> bool:
    return any(_entry(entry, present, value) for entry in rule)


def _entry(entry: Any, present: bool, value: Any) -> bool:
    if not isinstance(entry, dict):
        return present and value == entry
    ((op, arg),) = entry.items()
    if op == "exists":
        return present is bool(arg)
    if not present or isinstance(value, (dict, list)):
        return False
    if op == "prefix":
        return isinstance(value, str) and value.startswith(arg)
    excluded = arg if isinstance(arg, list) else [arg]  # anything-but
    return value not in excluded
