"""A downstream's triage verdict: validated, capped, dropped whole when malformed; advice only."""

from __future__ import annotations

from typing import Any

import pytest

from crcr.domain.triage import MAX_EVIDENCE, MAX_SUMMARY, Dropped, validate


def verdict(**changes: Any) -> dict[str, Any]:
    base = {"schema_version": 1, "category": "backend", "confidence": "high", "summary": "OOM on the runner"}
    return {k: v for k, v in (base | changes).items() if v is not None}


def test_a_well_formed_verdict_is_kept_and_capped() -> None:
    got = validate(
        verdict(
            category="upstream",
            summary="x" * 5000,
            suspected_upstream={"pr": 170001, "commit": "ABCDEF1", "reason": "changed the allocator"},
            evidence=[{"test": "test_ops", "log_url": "https://ci.example/log/1", "excerpt": "boom"}] * 20,
            analyzer={"name": "triager", "version": "2"},
            future_field="ignored",
        )
    )
    assert got is not None
    assert len(got["summary"]) == MAX_SUMMARY and len(got["evidence"]) == MAX_EVIDENCE
    assert got["suspected_upstream"] == {"pr": 170001, "commit": "abcdef1", "reason": "changed the allocator"}
    assert "future_field" not in got and validate(None) is None


@pytest.mark.parametrize(
    "bad",
    [
        verdict(category="blame-pytorch"),
        verdict(confidence="certain"),
        verdict(schema_version=2),
        verdict(summary=True),
        verdict(suspected_upstream={"pr": 1}),  # only with category upstream
        verdict(category="upstream", suspected_upstream={"reason": "names neither a pr nor a commit"}),
        verdict(evidence=[{"log_url": "javascript:alert(1)"}]),
        verdict(evidence=[{"log_url": "https://github.com@evil.example/x"}]),
        verdict(reproduced_on_retry="yes"),
        verdict(summary="y" * 20_000),  # over the 16 KiB cap
        "not an object",
    ],
)
def test_a_malformed_verdict_is_dropped_whole(bad: Any) -> None:
    with pytest.raises(Dropped):
        validate(bad)
