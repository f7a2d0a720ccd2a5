"""The JSON the relay takes at its edges: depth, numbers, NaN and surrogates refused with the path named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crcr.domain.errors import BadRequest
from crcr.domain.jsondoc import MAX_DEPTH, MAX_INT_DIGITS, dumps, loads
from tests.strategies import nested_text

OCTOKIT = Path(__file__).resolve().parents[1] / "events" / "octokit"


def refused(text: str | bytes, **kwargs: int) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        loads(text, **kwargs)
    return caught.value


def depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def test_every_github_example_payload_is_far_inside_the_depth_cap() -> None:
    """The cap was chosen against GitHub's own payloads: the deepest of the 329 examples has 7 levels."""
    deepest = 0
    for path in OCTOKIT.glob("*.json"):
        for example in json.loads(path.read_text()):
            text = json.dumps(example["payload"])
            assert loads(text) == example["payload"]
            deepest = max(deepest, depth(example["payload"]))
    assert deepest == 7
    assert 8 * deepest < MAX_DEPTH


def test_nesting_up_to_the_cap_passes_and_one_more_level_is_named() -> None:
    assert loads(nested_text(MAX_DEPTH)) is not None
    error = refused('{"a": {"b": [0, ' + nested_text(MAX_DEPTH - 2) + "]}}")
    assert error.field == "a.b.1." + ".".join(["0"] * (MAX_DEPTH - 3))
    assert "nested deeper than 64 levels" in error.message


@pytest.mark.parametrize("levels", [100, 990, 5_000, 100_000])
def test_nesting_past_the_parsers_recursion_limit_is_a_400_naming_where(levels: int) -> None:
    """json.loads raises RecursionError near 1,000 levels; the answer still names the path, not a 500."""
    error = refused('{"pull_request": {"head": ' + nested_text(levels) + "}}")
    assert error.field is not None and error.field.startswith("pull_request.head.0.0.")
    assert len(error.field) <= 200


def test_integers_past_38_digits_are_refused_naming_the_field() -> None:
    assert loads('{"n": ' + "9" * MAX_INT_DIGITS + "}") == {"n": int("9" * MAX_INT_DIGITS)}
    assert loads('{"n": -' + "9" * MAX_INT_DIGITS + "}")["n"] < 0
    error = refused('{"pull_request": {"number": ' + "9" * (MAX_INT_DIGITS + 1) + "}}")
    assert error.field == "pull_request.number" and "39 digits" in error.message
    # Past Python's 4,300-digit limit json.loads itself raises ValueError: still the field, not a 500.
    assert refused('{"x": [1, ' + "9" * 5_000 + "]}").field == "x.1"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "1" + "0" * 400 + ".0"])
def test_nan_infinity_and_overflowing_numbers_are_refused(literal: str) -> None:
    error = refused('{"test_results": {"passed": ' + literal + "}}")
    assert error.field == "test_results.passed"
    assert loads('{"x": 1.5e300, "y": -2.5e-300}') == {"x": 1.5e300, "y": -2.5e-300}


def test_lone_surrogates_are_refused_and_pairs_pass() -> None:
    assert loads('{"s": "\\ud83d\\ude80"}') == {"s": "\U0001f680"}
    assert refused('{"a": [{"s": "x\\ud800y"}]}').field == "a.0.s"
    assert refused('{"\\udc00": 1}').field == "\\udc00"  # escaped: the answer could not carry it otherwise
    assert loads('{"s": "\\\\ud800"}') == {"s": "\\ud800"}  # an escaped backslash, then text: fine


def test_bodies_not_utf8_json_name_the_body() -> None:
    for body in (b"\xff\xfe{}", b"{", "{".encode("utf-16"), b""):
        assert refused(body).field == "body"


def test_a_top_level_nan_is_named_body() -> None:
    assert refused("NaN").field == "body"


def test_dumps_never_writes_nan() -> None:
    assert dumps({"a": "é", "b": [1.5]}) == '{"a":"é","b":[1.5]}'
    with pytest.raises(ValueError):
        dumps({"a": float("nan")})


def test_the_named_field_is_bounded() -> None:
    key = "k" * 10_000
    error = refused(json.dumps({key: float("inf")}, allow_nan=True))
    assert error.field is not None and len(error.field) == 200 and error.field.endswith("…")
