"""Hypothesis strategies for hostile input at the relay's edges (webhook and callback bodies, token claims).

Reused by the property tests here and by the fuzzing. Values Python's `json.dumps` cannot write (NaN as a
bare literal, integers past 4,300 digits, lone surrogate escapes) are drawn as *raw JSON text* and spliced
into an otherwise ordinary document with `splice`.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

# -- nesting ---------------------------------------------------------------------------------------------------


def nested_json(depth: int, leaf: Any = 1) -> st.SearchStrategy[Any]:
    """A JSON value exactly `depth` containers deep (objects and arrays mixed; the leaf counts for nothing)."""

    def build(kinds: list[bool], keys: list[str]) -> Any:
        value = leaf
        for is_object, key in zip(kinds, keys, strict=True):
            value = {key: value} if is_object else [value]
        return value

    return st.builds(
        build,
        st.lists(st.booleans(), min_size=depth, max_size=depth),
        st.lists(st.text("abcxyz_", min_size=1, max_size=6), min_size=depth, max_size=depth),
    )


def nested_text(depth: int) -> str:
    """Brackets only, `depth` deep: what `json.loads` gives up on with a RecursionError past about 1,000."""
    return "[" * depth + "]" * depth


# -- numbers ---------------------------------------------------------------------------------------------------


def many_digit_ints(min_digits: int = 39, max_digits: int = 4300) -> st.SearchStrategy[int]:
    """Integers Python can still write (at most 4,300 digits) but no table or JavaScript reader keeps exactly."""
    return st.integers(min_digits, max_digits).flatmap(
        lambda n: st.sampled_from([10 ** (n - 1), 10**n - 1, -(10 ** (n - 1))])
    )


def huge_int_literals() -> st.SearchStrategy[str]:
    """Integer literals past Python's 4,300-digit limit: `int()` (and so `json.loads`) raises ValueError."""
    return st.integers(4301, 20_000).map(lambda n: "9" * n)


def non_finite_literals() -> st.SearchStrategy[str]:
    """Python's json extensions (not JSON), and literals that overflow a double to infinity."""
    return st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "1" + "0" * 400 + ".5"])


def out_of_range_numbers() -> st.SearchStrategy[Any]:
    """Numbers a DynamoDB attribute (38 digits), a UInt32/UInt64 column or a JS number cannot hold."""
    return st.one_of(
        many_digit_ints(),
        st.sampled_from([2**31, 2**32, 2**53 + 1, 2**63, 2**64, 10**38, 10**40, -1, -(2**63) - 1]),
        st.floats(allow_nan=False, allow_infinity=False, min_value=1e300),
    )


# -- names -----------------------------------------------------------------------------------------------------

# Characters that look like (or case-fold to) an ASCII letter of a repository name.
LOOKALIKES: dict[str, tuple[str, ...]] = {
    "a": ("\u0430", "\u0251", "\uff41"),  # Cyrillic a, Latin alpha, fullwidth a
    "c": ("\u0441", "\u217d"),  # Cyrillic es, small roman numeral one hundred
    "e": ("\u0435", "\u212e"),
    "i": ("\u0456", "\u0131", "\u0130"),  # Ukrainian i, dotless i, capital I with dot (lower: "i̇")
    "k": ("\u212a", "\u03ba"),  # Kelvin sign (lower() gives ASCII "k"), Greek kappa
    "o": ("\u043e", "\u03bf", "\u0585", "\uff4f"),
    "p": ("\u0440", "\u03c1"),
    "r": ("\u0433",),
    "s": ("\u017f", "\u0455"),  # long s (upper() gives "S"), Cyrillic dze
    "t": ("\u0442",),
    "y": ("\u0443",),
    "-": ("\u2010", "\u2011", "\u2212"),
}


def lookalike_names(name: str) -> st.SearchStrategy[str]:
    """`name` with one or more characters swapped for a Unicode look-alike (or "ß" for "ss")."""
    spots = [i for i, c in enumerate(name.lower()) if c in LOOKALIKES]
    if not spots:
        raise ValueError(f"{name!r} has no letter with a look-alike")

    @st.composite
    def swap(draw: st.DrawFn) -> str:
        chosen = draw(st.lists(st.sampled_from(spots), min_size=1, max_size=3, unique=True))
        chars = list(name)
        for i in chosen:
            chars[i] = draw(st.sampled_from(LOOKALIKES[name[i].lower()]))
        return "".join(chars)

    extra = [st.just(name.replace("ss", "\u00df"))] if "ss" in name else []
    return st.one_of(swap(), *extra)


def repo_names() -> st.SearchStrategy[str]:
    """Valid GitHub `owner/name`s (ASCII)."""
    owner = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9-]{0,38}\Z")
    repo = st.from_regex(r"\A[A-Za-z0-9._-]{1,100}\Z").filter(lambda s: s not in {".", ".."})
    return st.builds(lambda o, r: f"{o}/{r}", owner, repo)


# -- text ------------------------------------------------------------------------------------------------------

C0 = [chr(c) for c in range(0x20)]
C1 = [chr(c) for c in range(0x7F, 0xA0)]
BIDI = ["\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068"]


def control_chars() -> st.SearchStrategy[str]:
    """One C0/C1 control character (DEL included), or a bidirectional control."""
    return st.sampled_from(C0 + C1 + BIDI)


def with_controls(base: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[str]:
    """Text with at least one control character somewhere in it."""
    around = base if base is not None else st.text(max_size=20)
    return st.builds(lambda a, c, b: a + c + b, around, control_chars(), around)


def long_strings(min_size: int = 1_000, max_size: int = 400_000) -> st.SearchStrategy[str]:
    """Long texts without drawing each character: a repeated unit, optionally non-ASCII."""
    unit = st.sampled_from(["x", "ab", "\u00e9", "\U0001f680", "a\u0301", '\\"'])
    return st.builds(
        lambda u, n: (u * n)[:n] if len(u) == 1 else u * (n // len(u)), unit, st.integers(min_size, max_size)
    )


def lone_surrogate_escapes() -> st.SearchStrategy[str]:
    """A JSON string literal holding a lone surrogate: valid JSON, but no UTF-8 text."""
    return st.integers(0xD800, 0xDFFF).map(lambda c: f'"\\u{c:04x}"')


# -- whole values ----------------------------------------------------------------------------------------------

HOLE = "\u0000crcr-hole\u0000"


def raw_literals() -> st.SearchStrategy[str]:
    """JSON text that json.dumps would never write, to `splice` into a document."""
    return st.one_of(
        huge_int_literals(),
        non_finite_literals(),
        lone_surrogate_escapes(),
        st.integers(65, 3_000).map(nested_text),
    )


def hostile_values() -> st.SearchStrategy[Any]:
    """Python values json.dumps can write, each wrong for some field: types, sizes, depth, names, controls."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        out_of_range_numbers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=50),
        with_controls(),
        long_strings(),
        st.sampled_from(
            ["pytorch/pytorch", "PyTorch/PyTorch", "pytorch/pytorch\n", "a" * 40, "0" * 40, "refs/heads/main"]
        ),
        lookalike_names("pytorch/pytorch"),
    )
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=3),
        st.dictionaries(st.text(max_size=8), scalars, max_size=3),
        st.integers(2, 200).flatmap(nested_json),
    )


def splice(doc: Any, path: list[str | int], value: Any = None, raw: str | None = None) -> bytes:
    """`doc` as JSON bytes with `value` (or the raw JSON text `raw`) at `path`, creating objects on the way."""
    doc = json.loads(json.dumps(doc))
    if path:
        parent = doc
        for part in path[:-1]:
            if isinstance(parent, list) and isinstance(part, int) and -len(parent) <= part < len(parent):
                parent = parent[part]
            elif isinstance(parent, dict):
                nxt = parent.get(part)
                parent[part] = nxt if isinstance(nxt, dict | list) else {}
                parent = parent[part]
            else:
                break
        last = path[-1]
        target = HOLE if raw is not None else value
        in_list = isinstance(parent, list) and isinstance(last, int) and -len(parent) <= last < len(parent)
        if isinstance(parent, dict) or in_list:
            parent[last] = target  # type: ignore[index]
    else:
        doc = HOLE if raw is not None else value
    text = json.dumps(doc, ensure_ascii=False)
    if raw is not None:
        text = text.replace(json.dumps(HOLE, ensure_ascii=False), raw, 1)
    return text.encode("utf-8", "surrogatepass")
