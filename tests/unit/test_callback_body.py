"""The callback body at the door (`parse_report`): what cannot be stored or shown is a 400 naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crcr.app.callback_body import CALLBACK_MAX_DEPTH, fingerprint_of, parse_report, stored_payload
from crcr.domain.errors import BadRequest
from crcr.domain.jsondoc import MAX_DEPTH
from tests.strategies import nested_text

OURS: dict[str, Any] = {
    "schema_version": 1,
    "ticket": "t" * 40,
    "status": "completed",
    "conclusion": "success",
    "workflow_name": "CI",
    "job_name": "build (ubuntu, 3.11)",
    "run_id": 777,
    "run_attempt": 1,
    "url": "https://github.com/org/repo/actions/runs/777",
    "test_results": {"passed": 5, "failed": 0, "skipped": 1, "total": 6},
}
THEIRS: dict[str, Any] = {
    "delivery_id": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    "payload": {"pull_request": {"number": 1}},
    "workflow": {
        "status": "in_progress",
        "name": "CI",
        "job_name": "xpu",
        "run_id": "777",
        "url": "https://github.com/org/repo/actions/runs/777",
    },
}


def refused(body: dict[str, Any] | bytes) -> BadRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(BadRequest) as caught:
        parse_report(raw)
    return caught.value


def with_raw(body: dict[str, Any], key: str, literal: str) -> bytes:
    """`body` with the raw JSON text `literal` at top-level `key` (NaN, huge numbers: json.dumps won't)."""
    return json.dumps(body | {key: "\u0000HOLE"}).replace('"\\u0000HOLE"', literal).encode()


def test_bodies_as_downstreams_send_them_pass() -> None:
    for body in (OURS, THEIRS, OURS | {"summary": "line\n\ttab \U0001f680", "artifact_url": "http://a.example/x"}):
        _parsed, report = parse_report(json.dumps(body).encode())
        assert stored_payload(report.raw) and fingerprint_of(report.raw)


def test_a_null_check_run_id_is_no_check_run_id() -> None:
    """Found by the callback property: `"check_run_id": null` was a TypeError inside pydantic (a 500)."""
    for body in (OURS | {"check_run_id": None}, THEIRS | {"workflow": THEIRS["workflow"] | {"check_run_id": None}}):
        _parsed, report = parse_report(json.dumps(body).encode())
        assert stored_payload(report.raw)
    assert refused(OURS | {"check_run_id": "a/b"}).field == "check_run_id"


def test_a_check_run_id_in_the_relays_own_namespace_is_refused() -> None:
    """The relay derives `crcr-<run>-<attempt>` for a job that sends none and writes no HUD key for it: a caller
    sending such an id could otherwise take another job's HUD row."""
    for body in (
        OURS | {"check_run_id": "crcr-900-1"},
        THEIRS | {"workflow": THEIRS["workflow"] | {"check_run_id": "crcr-900-1"}},
    ):
        assert "check_run_id" in (refused(body).field or "")
    _parsed, report = parse_report(json.dumps(OURS | {"check_run_id": "900-crcr-1"}).encode())
    assert report.check_run_id == "900-crcr-1"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"run_attempt": 10**40}, "run_attempt"),  # DynamoDB keeps 38 digits: was a 500 at the write
        ({"run_attempt": 2**31}, "run_attempt"),  # PyTorch's HUD keeps a UInt32
        ({"test_results": {"passed": 10**30, "failed": 0, "skipped": 0, "total": 10**30}}, "test_results.passed"),
        ({"test_results": {"passed": 2**53, "failed": 0, "skipped": 0, "total": 1}}, "test_results.passed"),
        ({"job_name": "build\x1b[31mred"}, "job_name"),
        ({"job_name": "two\nlines"}, "job_name"),
        ({"job_name": "tset\u202ebuild"}, "job_name"),  # a right-to-left override: reads "build" + "test" reversed
        ({"workflow_name": "CI\x00"}, "workflow_name"),
        ({"workflow_name": "CI\u2028"}, "workflow_name"),
        ({"url": "javascript:alert(1)"}, "url"),
        ({"url": "https://github.com/a b"}, "url"),
        ({"url": "https://github.com/\x07"}, "url"),
        ({"url": "https://[::1"}, "url"),
        ({"url": "https://github.com:99999/o/r/actions/runs/1"}, "url"),  # became the check run's details_url
        ({"url": "https://github.com:abc/o/r"}, "url"),
        ({"artifact_url": "http://example.com:-1/a"}, "artifact_url"),
        ({"artifact_url": "file:///etc/passwd"}, "artifact_url"),
        ({"started_at": "0001-01-01T00:00:00+01:00"}, "started_at"),  # OverflowError in UTC: was a 500
        ({"completed_at": "9999-12-31T23:59:59-01:00"}, "completed_at"),
    ],
)
def test_ours_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    assert refused(OURS | changes).field == field


@pytest.mark.parametrize(
    ("key", "literal", "field"),
    [
        ("summary", "NaN", "summary"),
        ("run_attempt", "Infinity", "run_attempt"),
        ("run_attempt", "9" * 5_000, "run_attempt"),  # past Python's 4,300 digits: a ValueError
        ("check_run_id", "1e400", "check_run_id"),
        ("summary", '"\\ud800"', "summary"),
        ("triage_verdict", '{"confidence": NaN}', "triage_verdict.confidence"),
    ],
)
def test_what_json_cannot_carry_is_refused_naming_the_field(key: str, literal: str, field: str) -> None:
    assert refused(with_raw(OURS, key, literal)).field == field


def test_nesting_near_pythons_recursion_limit_is_refused_naming_the_field() -> None:
    for levels in (CALLBACK_MAX_DEPTH, 900, 990, 100_000):
        error = refused(with_raw(OURS, "triage_verdict", nested_text(levels)))
        assert error.field is not None and error.field.startswith("triage_verdict.0.0")


def test_pytorchs_body_may_echo_a_payload_as_deep_as_ingest_took_one() -> None:
    payload: Any = 1
    for _ in range(MAX_DEPTH):
        payload = {"a": payload}
    parse_report(json.dumps(THEIRS | {"payload": payload}).encode())
    assert refused(THEIRS | {"payload": {"a": payload}}).field == "payload." + ".".join(["a"] * MAX_DEPTH)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"delivery_id": "d-1\n"}, "delivery_id"),
        ({"delivery_id": "../../x"}, "delivery_id"),
        ({"workflow": THEIRS["workflow"] | {"name": "CI\r"}}, "workflow.name"),
        ({"workflow": THEIRS["workflow"] | {"job_name": "\u200fxpu"}}, "workflow.job_name"),
        ({"workflow": THEIRS["workflow"] | {"run_attempt": 10**20}}, "workflow.run_attempt"),
        ({"workflow": THEIRS["workflow"] | {"url": "data:text/html,x"}}, "workflow.url"),
    ],
)
def test_pytorchs_body_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    assert refused(THEIRS | changes).field == field


def test_a_field_named_by_a_caller_is_bounded() -> None:
    error = refused(OURS | {"k" * 100_000: 1})  # extra="forbid" names the unknown key
    assert error.field is not None and len(error.field) <= 200
