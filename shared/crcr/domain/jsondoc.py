"""What JSON the relay accepts at its edges (webhook and callback bodies), and how it writes JSON.

Python's `json` takes documents the relay cannot carry on: nesting up to the recursion limit (then a
RecursionError), integers of up to 4,300 digits (then a ValueError), `NaN`/`Infinity` (not JSON: a
JavaScript reader such as PyTorch's HUD refuses them), literals that overflow to infinity (`1e400`), and
lone surrogates (`"\\ud800"`, which cannot be encoded as UTF-8 again). A body is refused at the door with
the path of the first such value instead of failing later in a queue, a model, a table or a reader.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from crcr.domain.errors import BadRequest, field_path

# GitHub's own webhook payloads nest at most 7 levels (the 329 examples in tests/events/octokit); pydantic
# stops serialising at a few hundred and Python's json at about a thousand.
MAX_DEPTH = 64
# DynamoDB numbers hold 38 digits; GitHub's ids and counts have at most 19.
MAX_INT_DIGITS = 38
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LEXEME = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]')


class _Refused:
    """Stands in for a value the parser refused, so the walk that follows can say where it was."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _int(text: str) -> Any:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _Refused(f"a number out of range ({text[:20]})")


def _constant(text: str) -> Any:
    return _Refused(f"{text} (not JSON)")


def loads(data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse a JSON document the relay can carry; raise BadRequest naming the first value it cannot."""
    text = ""
    try:
        text = data if isinstance(data, str) else data.decode("utf-8")
        doc = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError as exc:
        where = _deep_path(text, max_depth)
        raise BadRequest(f"JSON nested deeper than {max_depth} levels at {where}", field=where) from exc
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BadRequest(f"body is not UTF-8 JSON: {str(exc)[:200]}", field="body") from exc
    problem = _first_problem(doc, max_depth, check_strings=_SURROGATE_ESCAPE.search(text) is not None)
    if problem is not None:
        path, why = problem
        where = field_path(path)
        raise BadRequest(f"{why} at {where}", field=where)
    return doc


def _first_problem(doc: Any, max_depth: int, *, check_strings: bool) -> tuple[list[str | int], str] | None:
    """The path of the first value nested too deep, refused by the parser, or (when the text has surrogate
    escapes) a string that is not Unicode text. Cheap when there is none: only containers are visited."""
    if isinstance(doc, _Refused):
        return [], doc.why
    if not _suspect(doc, max_depth, check_strings):
        return None
    stack: list[tuple[Any, list[str | int]]] = [(doc, [])]
    while stack:
        node, path = stack.pop()
        if len(path) >= max_depth:
            return path, f"JSON nested deeper than {max_depth} levels"
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in reversed(list(items)):
            where = [*path, key]
            if check_strings and isinstance(key, str) and not _is_text(key):
                return where, "a lone surrogate (\\ud800-\\udfff) in a key"
            if isinstance(value, _Refused):
                return where, value.why
            if check_strings and isinstance(value, str) and not _is_text(value):
                return where, "a lone surrogate (\\ud800-\\udfff), not Unicode text"
            if isinstance(value, dict | list):
                stack.append((value, where))
    return None


def _suspect(doc: Any, max_depth: int, check_strings: bool) -> bool:
    """Whether anything needs a closer look (the common answer, no, costs one pass over the containers)."""
    if check_strings:
        return True
    stack: list[tuple[Any, int]] = [(doc, 1)] if isinstance(doc, dict | list) else []
    while stack:
        node, depth = stack.pop()
        for value in node.values() if type(node) is dict else node:
            kind = type(value)
            if kind is dict or kind is list:
                if depth >= max_depth:
                    return True
                stack.append((value, depth + 1))
            elif kind is _Refused:
                return True
    return False


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _deep_path(text: str, max_depth: int) -> str:
    """Where a document too deep for the parser first goes deeper than `max_depth` (its brackets read
    lexeme by lexeme; only on that error path)."""
    path: list[str | int] = []
    kinds: list[str] = []
    key: str | int = ""
    want_key = False
    for match in _LEXEME.finditer(text):
        lexeme = match.group()
        if lexeme in ("{", "["):
            if kinds:
                path.append(key)
            if len(kinds) >= max_depth:
                return field_path(path)
            kinds.append(lexeme)
            key, want_key = (0, False) if lexeme == "[" else ("", True)
        elif lexeme in ("}", "]"):
            if kinds:
                kinds.pop()
            key = path.pop() if path else ""
            want_key = False
        elif lexeme == ",":
            if kinds and kinds[-1] == "[" and isinstance(key, int):
                key += 1
            else:
                want_key = True
        elif lexeme == ":":
            want_key = False
        elif want_key:
            try:
                key = str(json.loads(lexeme))
            except ValueError:
                key = lexeme[1:-1]
    return "body"


def dumps(value: Any) -> str:
    """JSON as the relay writes it: compact, UTF-8 text, and never NaN or Infinity (not JSON: raises)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
