"""Change hints in the dispatch payload: what a change touches, capped, built only from files already known."""

from __future__ import annotations

import json

from crcr.domain.change_hints import MAX_HINT_BYTES, MAX_LISTED, change_hints, is_test_file


def test_a_small_change_is_listed_whole_with_its_directories_and_test_files() -> None:
    files = ["torch/nn/functional.py", "test/test_nn.py", "README.md", "aten/src/ATen/native/Conv_test.cpp"]
    assert change_hints(files, 4) == {
        "files": 4,
        "complete": True,
        "dirs": ["", "aten", "test", "torch"],
        "paths": sorted(files),
        "tests": ["aten/src/ATen/native/Conv_test.cpp", "test/test_nn.py"],
    }


def test_unknown_files_say_only_githubs_count_and_nothing_at_all_says_nothing() -> None:
    assert change_hints(None, 3200) == {"files": 3200, "complete": False, "dirs": [], "paths": [], "tests": []}
    assert change_hints(None) is None


def test_a_large_change_is_capped_in_paths_and_in_bytes() -> None:
    files = [f"torch/{'deep/' * 30}module_{i}.py" for i in range(500)] + [f"test/test_{i}.py" for i in range(80)]
    hints = change_hints(files)
    assert hints is not None
    assert hints["files"] == 580 and hints["complete"] is False
    assert len(hints["paths"]) <= MAX_LISTED and len(hints["tests"]) <= MAX_LISTED
    assert len(json.dumps(hints, separators=(",", ":")).encode()) <= MAX_HINT_BYTES
    assert hints["dirs"] == ["test", "torch"]
    one_huge = change_hints(["x" * 5000])
    assert one_huge is not None and one_huge["paths"] == [] and one_huge["files"] == 1
    assert len(json.dumps(one_huge).encode()) <= MAX_HINT_BYTES


def test_test_files_as_pytorch_and_its_downstreams_name_them() -> None:
    tests = ["test/test_ops.py", "third_party/x/tests/a.cc", "torch/testing/_internal/common.py", "c10/foo_test.cc"]
    others = ["torch/nn/modules/conv.py", "tools/testing_notes.md", "docs/contest.md"]
    assert [p for p in tests + others if is_test_file(p)] == tests
