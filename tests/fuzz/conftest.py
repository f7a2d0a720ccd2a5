"""A failing fuzz test of an exploratory run (CRCR_FUZZ_SEED=random) names the seed that replays it."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.fuzz.settings import SEED_VALUE


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if SEED_VALUE is not None and report.failed:
        report.sections.append(("fuzz", f"replay this run with CRCR_FUZZ_SEED={SEED_VALUE}"))
    return report
