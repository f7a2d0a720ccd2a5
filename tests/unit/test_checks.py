"""Which jobs get an upstream check run, and which writes move one forward."""

from __future__ import annotations

import pytest

from crcr.domain.checks import Known, check_run_name, should_write, wants_check_run


@pytest.mark.parametrize(
    ("level", "device", "labels", "expected"),
    [
        (4, None, (), True),
        (3, "rocm", ("ciflow/crcr/rocm",), True),
        (3, "rocm", ("CIFLOW/CRCR/ROCM",), True),
        (3, "rocm", ("ciflow/crcr/mps", "ciflow/trunk"), False),
        (3, "rocm", (), False),
        (2, None, ("ciflow/crcr/rocm",), False),
        (1, None, (), False),
    ],
)
def test_who_gets_a_check_run(level: int, device: str | None, labels: tuple[str, ...], expected: bool) -> None:
    assert wants_check_run(level, device, labels) is expected


def test_the_name_follows_the_contract() -> None:
    assert check_run_name("Org/Repo", "CI", "build") == "crcr/Org/Repo/CI/build"


@pytest.mark.parametrize(
    ("known", "status", "conclusion", "expected"),
    [
        (None, "in_progress", None, True),
        (Known(1, "queued", None), "in_progress", None, True),
        (Known(1, "in_progress", None), "completed", "success", True),
        (Known(1, "in_progress", None), "in_progress", None, False),
        (Known(1, "completed", "success"), "in_progress", None, False),  # never regresses
        (Known(1, "completed", "success"), "completed", "success", False),
        (Known(1, "completed", "timed_out"), "completed", "success", True),  # a genuine result replaces it
    ],
)
def test_only_forward_writes(known: Known | None, status: str, conclusion: str | None, expected: bool) -> None:
    assert should_write(known, status, conclusion) is expected
