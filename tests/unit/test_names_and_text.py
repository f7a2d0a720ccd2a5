"""Names compare in ASCII only; refs keep to GitHub's length and git's characters; text shows no controls."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.domain.errors import AllowlistError
from crcr.domain.ids import is_delivery_id, is_ref, is_repo_name, repo_key
from crcr.domain.text import control_in, shown
from tests.strategies import BIDI, C0, C1, control_chars, lookalike_names, repo_names

ALLOWLIST = parse_allowlist("L4:\n  - pytorch/kineto\n  - org/class-dass\nL2:\n  - Org/Backend\n")


def test_repo_key_folds_ascii_letters_only() -> None:
    assert repo_key("PyTorch/Kineto") == "pytorch/kineto"
    assert "\u212a".lower() == "k"  # what str.lower() did: the Kelvin sign became the letter
    assert repo_key("pytorch/\u212aineto") != repo_key("pytorch/kineto")
    assert repo_key("org/class-da\u00df") == "org/class-da\u00df"  # no "ss" folding either


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(["pytorch/kineto", "org/class-dass", "Org/Backend"]).flatmap(lookalike_names))
def test_no_look_alike_of_an_allowlisted_name_is_a_name_or_matches_one(name: str) -> None:
    assert not is_repo_name(name)
    assert ALLOWLIST.get(name) is None


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(repo_names())
def test_every_ascii_name_is_one_and_matches_itself_in_any_case(name: str) -> None:
    assert is_repo_name(name) and repo_key(name.upper()) == repo_key(name.lower())


@pytest.mark.parametrize("name", ["pytorch/pyt\u043erch", "pytorch/kineto\n", "p\u0443torch/kineto", "a/b\u200b"])
def test_the_allowlist_refuses_a_name_that_is_not_ascii(name: str) -> None:
    with pytest.raises(AllowlistError, match="not an owner/repo name"):
        parse_allowlist(f"L2:\n  - {json.dumps(name)}\n")  # a YAML double-quoted string takes JSON's escapes


def test_a_repos_section_key_with_a_look_alike_matches_no_entry() -> None:
    with pytest.raises(AllowlistError, match="not listed"):
        parse_allowlist("L4:\n  - pytorch/kineto\nrepos:\n  pytorch/\u212aineto:\n    skip_drafts: true\n")


def test_ids_anchor_at_the_very_end() -> None:
    """Python's `$` also matches before a final newline: names and delivery ids use fullmatch."""
    assert is_repo_name("org/repo") and not is_repo_name("org/repo\n")
    assert is_delivery_id("72d3162e-cc78-11e3-81ab-4c9367dc0958") and not is_delivery_id("d-1\n")


@pytest.mark.parametrize(
    ("ref", "branch", "ok"),
    [
        ("refs/heads/main", False, True),
        ("refs/tags/v2.5.0", False, True),
        ("refs/heads/" + "b" * 244, False, True),  # 255 bytes
        ("refs/heads/" + "b" * 245, False, False),
        ("main", False, False),  # a push's ref is a full ref
        ("b" * 244, True, True),  # as refs/heads/<branch>: 255 bytes
        ("b" * 245, True, False),
        ("\u00e9" * 122, True, True),  # 244 bytes of UTF-8
        ("\u00e9" * 123, True, False),
        ("gh/user/1/head", True, True),
        ("a b", True, False),
        ("a..b", True, False),
        ("a~1", True, False),
        ("x@{1}", True, False),
        ("tab\there", True, False),
        ("del\x7f", True, False),
        ("", True, False),
    ],
)
def test_refs(ref: str, branch: bool, ok: bool) -> None:
    assert is_ref(ref, branch=branch) is ok


@given(control_chars())
def test_every_control_and_bidi_character_is_found_in_a_name(char: str) -> None:
    assert control_in(f"build{char}test") == f"U+{ord(char):04X}"


def test_shown_text_keeps_line_breaks_and_tabs_and_drops_the_rest() -> None:
    text = "ok\r\n\tline\u202eevil\x1b[31mred\x00" + "".join(C1) + "".join(BIDI)
    assert shown(text) == "ok\n\tlineevil[31mred"
    assert all(c not in shown("".join(C0)) for c in C0 if c not in "\n\t")
    assert control_in("build (ubuntu, 3.11) \u2013 \U0001f680") is None
