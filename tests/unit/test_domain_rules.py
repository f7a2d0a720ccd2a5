"""Signature, retry, pacing and payload fitting: the arithmetic the relay's promises rest on."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from crcr.domain.errors import BadSignature
from crcr.domain.pacing import CONTENT_RATES, Rate, pace, parse_rates
from crcr.domain.payload import encoded_size, fit_payload
from crcr.domain.retry import RetryPolicy, rate_limit_wait
from crcr.domain.signature import sign, verify_signature

EVENTS = Path(__file__).resolve().parents[2] / "examples" / "events"


def test_signature_accepts_the_body_as_signed() -> None:
    body = b'{"zen": "Design for failure."}'
    verify_signature((b"s3cret",), body, sign(b"s3cret", body))


@pytest.mark.parametrize("header", [None, "", "sha1=abc", "sha256=" + "0" * 64, sign(b"other", b"{}"), "sha256=\u00e9"])
def test_signature_refuses_anything_else(header: str | None) -> None:
    with pytest.raises(BadSignature):
        verify_signature((b"s3cret",), b"{}", header)


def test_signature_accepts_a_rotating_out_secret() -> None:
    verify_signature((b"new", b"old"), b"{}", sign(b"old", b"{}"))


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(base_s=2, cap_s=60)
    assert policy.backoff(1, lambda: 1.0) == 4
    assert policy.backoff(3, lambda: 1.0) == 16
    assert policy.backoff(20, lambda: 1.0) == 60
    assert policy.backoff(3, lambda: 0.0) == 1.0  # never zero: SQS would hand it straight back


@pytest.mark.parametrize(
    ("status", "headers", "message", "expected"),
    [
        (429, {"retry-after": "7"}, "", 7.0),
        (403, {"retry-after": "30"}, "You have exceeded a secondary rate limit", 30.0),
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1000120"}, "API rate limit exceeded", 121.0),
        (403, {}, "You have exceeded a secondary rate limit. Please wait a few minutes", 60.0),
        (429, {}, "", 60.0),
        (403, {"x-ratelimit-remaining": "4999"}, "Resource not accessible by integration", None),
        (404, {"retry-after": "5"}, "Not Found", None),
        (502, {}, "", None),
    ],
)
def test_rate_limit_signals(status: int, headers: dict[str, str], message: str, expected: float | None) -> None:
    assert rate_limit_wait(status, headers, message, now=1_000_000.0) == expected


def _saturate(rates: tuple[Rate, ...], horizon_s: float) -> list[float]:
    """Send as fast as pacing allows for `horizon_s` seconds; return the send times."""
    state, now, times = None, 0.0, []
    while now < horizon_s:
        new, wait = pace(state, now, rates)
        if wait > 0:
            now += wait
            continue
        state = new
        times.append(now)
    return times


def _max_in_window(times: list[float], window: float) -> int:
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def test_pacing_allows_a_burst_then_spaces_calls() -> None:
    times = _saturate(CONTENT_RATES, 60)
    assert times[:16] == [0.0] * 16  # a burst goes out at once
    assert _max_in_window(times, 60) <= 75  # GitHub: about 80 content writes a minute


def test_pacing_holds_the_hourly_budget_under_saturation() -> None:
    times = _saturate(CONTENT_RATES, 3 * 3600)
    assert _max_in_window(times, 60) <= 75
    assert 440 <= _max_in_window(times, 3600) <= 491  # GitHub: about 500 an hour


def test_pacing_state_is_unchanged_when_refused() -> None:
    rates = (Rate(1, 10.0),)
    state, wait = pace(None, 0.0, rates)
    assert wait == 0
    again, wait = pace(state, 1.0, rates)
    assert again == state and wait == 9.0


def test_a_reserved_slot_is_booked_so_waiting_callers_queue_instead_of_colliding() -> None:
    rates = (Rate(1, 10.0),)
    state, _ = pace(None, 0.0, rates)
    waits = []
    for _ in range(3):  # three callers refused at the same moment
        state, wait = pace(state, 1.0, rates, reserve=True)
        waits.append(wait)
    assert waits == [9.0, 19.0, 29.0]  # each gets its own later slot, none the same
    booked_calls = [1.0 + w for w in waits]
    assert all(b - a >= 10.0 for a, b in zip([0.0, *booked_calls], booked_calls, strict=False))


def test_small_payloads_travel_untouched() -> None:
    payload = json.loads((EVENTS / "pull_request.opened.json").read_text())
    assert fit_payload(payload, 60_000) == (payload, False)


def test_large_payloads_are_trimmed_keeping_documented_paths() -> None:
    payload = json.loads((EVENTS / "pull_request.opened.json").read_text())
    payload["pull_request"]["body"] = "x" * 200_000
    payload["pull_request"]["labels"] = [{"name": f"label-{i}", "color": "ededed", "id": i} for i in range(300)]
    original = copy.deepcopy(payload)
    fitted, trimmed = fit_payload(payload, 20_000)
    assert trimmed and encoded_size(fitted) <= 20_000
    pr = fitted["pull_request"]
    assert pr["number"] == 170001 and pr["draft"] is False
    assert pr["head"]["sha"] == original["pull_request"]["head"]["sha"]
    assert pr["base"]["ref"] == "main" and pr["user"]["login"] == "octodev"
    assert len(pr["labels"]) == 300 and fitted["repository"]["full_name"] == "pytorch/pytorch"
    assert payload == original  # the caller's copy is not modified


def test_pull_request_fields_beyond_the_skeleton_come_back_while_they_fit() -> None:
    """A body over the budget once dropped every pull_request field outside the skeleton, merge_commit_sha too."""
    payload = json.loads((EVENTS / "pull_request.opened.json").read_text())
    payload["pull_request"] |= {"body": "x" * 200_000, "merge_commit_sha": "e" * 40, "mergeable": True}
    fitted, trimmed = fit_payload(payload, 60_000)
    assert trimmed and encoded_size(fitted) <= 60_000
    pr = fitted["pull_request"]
    assert (pr["merge_commit_sha"], pr["mergeable"], pr["commits"]) == (
        "e" * 40,
        True,
        payload["pull_request"]["commits"],
    )
    assert pr["body"] == "x" * 1024 + "…"  # slimmed like any added-back text
    assert "url" not in pr  # API links stay out


def test_push_paths_survive_trimming() -> None:
    payload = json.loads((EVENTS / "push.main.json").read_text())
    payload["commits"] = payload["commits"] * 2000
    fitted, trimmed = fit_payload(payload, 10_000)
    assert trimmed and encoded_size(fitted) <= 10_000
    assert (fitted["after"], fitted["ref"]) == (payload["after"], "refs/heads/main")


@pytest.mark.parametrize(
    "hostile",
    [
        {"pull_request.title": "t" * 300_000},
        {"pull_request.head.label": "l" * 100_000, "pull_request.base.label": "l" * 100_000},
        {"pull_request.user.login": "u" * 100_000},
        {"pull_request.merged": list(range(50_000))},  # an array where GitHub sends a boolean
        {"pull_request.html_url": {"nested": ["x" * 1000] * 200}},
        {"ref": "r" * 300_000, "forced": "f" * 300_000},  # push-only keys in a pull_request event
        {"pull_request.labels": [{"name": "\u0001" * 100} for _ in range(500)]},  # escapes grow 6x
        {"repository.owner": {"login": "o" * 100_000}, "repository.name": "n" * 100_000},
    ],
)
def test_whatever_the_skeleton_holds_the_payload_fits_and_the_documented_paths_survive(
    hostile: dict[str, object],
) -> None:
    payload = json.loads((EVENTS / "pull_request.opened.json").read_text())
    for path, value in hostile.items():
        node = payload
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    for budget in (60_000, 10_000):
        fitted, trimmed = fit_payload(payload, budget)
        assert trimmed and encoded_size(fitted) <= budget
        pr = fitted["pull_request"]
        assert pr["number"] == 170001 and pr["head"]["sha"] == payload["pull_request"]["head"]["sha"]
        assert pr["head"]["ref"] == payload["pull_request"]["head"]["ref"]
        assert fitted["repository"]["full_name"] == "pytorch/pytorch"


def test_write_rates_parse_as_count_period_burst_windows() -> None:
    assert parse_rates("60/60+15,440/3600+50") == CONTENT_RATES
    assert parse_rates("6000/60") == (Rate(6000, 60.0, 0),)
    for bad in ("lots", "60/0+1", "0/60", "60/60+-1", "60/60,"):
        with pytest.raises(ValueError):
            parse_rates(bad)


def test_a_bad_write_rate_setting_fails_the_cold_start_naming_it() -> None:
    from crcr.settings import ConfigError, Settings  # noqa: PLC0415

    with pytest.raises(ConfigError, match=r"^CRCR_GITHUB_WRITE_RATES: "):
        Settings.from_env({"CRCR_GITHUB_WRITE_RATES": "60 a minute"})


def test_the_oidc_audience_is_one_or_several_separated_by_commas_and_never_blank() -> None:
    from crcr.settings import ConfigError, Settings  # noqa: PLC0415

    assert Settings.from_env({}).oidc_audiences == ("crcr",)
    two = Settings.from_env({"CRCR_OIDC_AUDIENCE": " crcr , pytorch-cross-repo-ci-relay"})
    assert two.oidc_audiences == ("crcr", "pytorch-cross-repo-ci-relay")
    for bad in ("crcr,", ",crcr", "crcr,,other", " "):
        with pytest.raises(ConfigError, match=r"^CRCR_OIDC_AUDIENCE: "):
            Settings.from_env({"CRCR_OIDC_AUDIENCE": bad})


def test_workflow_inputs_carry_the_client_payload_as_strings_within_githubs_limits() -> None:
    import json  # noqa: PLC0415

    from crcr.domain.payload import MAX_INPUTS_CHARS, as_inputs  # noqa: PLC0415

    small = {"event_type": "pull_request", "delivery_id": "d", "payload": {"number": 5}, "dispatch_id": "a" * 32}
    assert as_inputs(small) == {**small, "payload": '{"number":5}'}
    # A body of quotes escapes twice (JSON in a JSON string): trimmed as a dispatch's body is, until it fits.
    big = small | {"payload": {"number": 5, "pull_request": {"number": 5, "body": '"' * 60_000, "title": "t"}}}
    fitted = as_inputs(big)
    assert len(json.dumps(fitted, separators=(",", ":"))) <= MAX_INPUTS_CHARS
    assert json.loads(fitted["payload"])["pull_request"]["number"] == 5
    assert len(fitted) <= 25  # GitHub's most inputs a workflow_dispatch takes
