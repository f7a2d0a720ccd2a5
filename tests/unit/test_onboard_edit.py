"""The allowlist change `crcr onboard` proposes: the repository added at its level, or moved from the level it is
at with its oncalls, its `repos:` settings set, every other line as it was."""

from __future__ import annotations

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.domain.allowlist import Entry
from crcr.domain.allowlist_edit import EditError, place
from crcr.domain.levels import Level

BEFORE = """\
# The relay's allowlist.
L1:
  - intel/torch-xpu-ops: [alice]
  - pytorch-fdn/oota-stub
L3:
  npu:
    ascend/pytorch: bob
L4:
  - riscv/pytorch-riscv-ci: riscv-oncall
repos:
  ascend/pytorch:
    repository_id: 11
"""


def test_a_repository_at_l1_moves_to_l3_keeping_its_oncalls_and_nothing_else_changes() -> None:
    before = parse_allowlist(BEFORE)
    current = before.get("intel/torch-xpu-ops")

    after_text = place(
        BEFORE, current, Entry("intel/torch-xpu-ops", Level.L3, ("alice",), "xpu"), {"repository_id": "7"}
    )

    assert after_text == BEFORE.replace("  - intel/torch-xpu-ops: [alice]\n", "").replace(
        "    ascend/pytorch: bob\n", '    ascend/pytorch: bob\n  xpu:\n    - intel/torch-xpu-ops: ["alice"]\n'
    ).replace("    repository_id: 11\n", "    repository_id: 11\n  intel/torch-xpu-ops:\n    repository_id: 7\n")
    after = parse_allowlist(after_text)
    moved = after.get("intel/torch-xpu-ops")
    assert moved is not None and (moved.level, moved.device, moved.oncalls) == (Level.L3, "xpu", ("alice",))
    assert moved.settings.repository_id == 7 and len(after) == len(before) == 4


def test_a_repository_moved_out_of_its_l3_group_takes_the_empty_group_and_level_with_it() -> None:
    current = parse_allowlist(BEFORE).get("ascend/pytorch")

    after_text = place(BEFORE, current, Entry("ascend/pytorch", Level.L4, ("bob",)), {"repository_id": "12"})

    assert "L3:" not in after_text and "npu:" not in after_text
    assert '  - ascend/pytorch: ["bob"]\n' in after_text and "    repository_id: 12\n" in after_text
    assert "repository_id: 11" not in after_text
    assert parse_allowlist(after_text).get("ascend/pytorch").level is Level.L4  # type: ignore[union-attr]


def test_a_new_repository_joins_the_mapping_style_of_its_device_group_and_a_new_level_goes_in_order() -> None:
    added = place(BEFORE, None, Entry("huawei/npu-extra", Level.L3, (), "npu"), {})
    assert "    ascend/pytorch: bob\n    huawei/npu-extra:\n" in added

    l2 = place(BEFORE, None, Entry("acme/new", Level.L2), {"repository_id": "5"})
    assert l2.index("L2:\n  - acme/new\n") < l2.index("L3:")
    assert parse_allowlist(l2).get("acme/new") is not None


def test_a_flow_style_level_is_not_edited() -> None:
    with pytest.raises(EditError, match="L2 must be in block style"):
        place("L2: [a/b]\n", None, Entry("c/d", Level.L2), {})
