"""The golden comparison's normal form (tests/golden): what varies between runs reads alike, what the relay decides
still shows, and a difference is printed where it is."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.golden.compare import as_text, normal_form, readable_diff, shared_payloads
from tests.golden.normalise import Numbering, Rules, Window, shape

NOW = 1_796_682_225.0
RULES = Rules(Window(NOW - 3600, NOW + 3 * 366 * 86_400), ids=frozenset({4_000_000_001, 4_000_000_002}))


def form(
    steps: list[dict[str, Any]] | None = None, items: list[dict[str, Any]] | None = None, rules: Rules = RULES
) -> dict[str, Any]:
    captured = {
        "steps": steps or [],
        "tables": {"StateTable": items or []},
        "hud_bucket": {},
        "dead_letters": {"ChecksDLQ": 0},
    }
    return normal_form(captured, rules)


def step(name: str, github: list[dict[str, Any]] | None = None, queues: list[dict[str, Any]] | None = None) -> Any:
    return {"step": name, "github": github or [], "buildkite": [], "torchci": [], "queues": queues or []}


def item(pk: str, sk: str, **attributes: dict[str, str]) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}} | attributes


def test_one_instant_written_to_six_decimals_and_as_python_prints_it_is_one_placeholder() -> None:
    queued = {"queue": "EventsQueue", "body": json.dumps({"received_at": 1796682609.8281016})}
    stored = item("DLV#d", "META", received_at={"N": "1796682609.828102"}, queued_at={"N": "1796682609.840494"})
    out = form([step("s", queues=[queued])], [stored])
    assert out["steps"][0]["queues"][0]["body"]["json"]["received_at"] == "#<t1.dec>"  # a JSON number: #
    [row] = out["tables"]["StateTable"]
    assert (row["received_at"]["N"], row["queued_at"]["N"]) == ("<t1.dec>", "<t2.dec>")


def test_a_change_of_number_format_or_type_shows() -> None:
    def stored(value: dict[str, str]) -> dict[str, Any]:
        return form(items=[item("P", "S", t=value)])["tables"]["StateTable"][0]["t"]

    assert stored({"N": "1796682609.5"}) == {"N": "<t1.dec>"}
    assert stored({"N": "1796682609.0"}) == {"N": "<t.0>"}  # a whole second: too coarse to number
    assert stored({"N": "1796682609"}) == {"N": "<t>"}
    assert stored({"S": "1796682609.5"}) == {"S": "<t1.dec>"}  # the type is kept beside it
    # Decimal(float) instead of the float's own digits: a change of format, and it shows.
    assert stored({"N": "1796682609.828101634979248046875"}) == {"N": "<t1.long>"}


def test_ids_the_double_handed_out_are_numbered_where_they_first_appear_whatever_their_value() -> None:
    def run(first: int, second: int) -> dict[str, Any]:
        writes = [
            {"method": "POST", "path": "/check-runs", "status": 201, "body": {"name": "a"}, "created_id": first},
            {"method": "POST", "path": "/check-runs", "status": 201, "body": {"name": "b"}, "created_id": second},
            {"method": "PATCH", "path": f"/check-runs/{first}", "status": 200, "body": {"status": "completed"}},
        ]
        return form([step("s", github=writes)], [item("CHECK#h", "NAME#a", check_run_id={"N": str(first)})])

    # The double numbered the two check runs in the order their POSTs raced: the normal form is the same.
    assert as_text(run(4_000_000_001, 4_000_000_002)) == as_text(run(4_000_000_002, 4_000_000_001))
    out = run(4_000_000_002, 4_000_000_001)
    assert [w.get("created_id") for w in out["steps"][0]["github"]] == ["#<id1>", "#<id2>", None]
    assert out["steps"][0]["github"][2]["path"] == "/check-runs/<id1>"  # the PATCH names check run "a"
    assert out["tables"]["StateTable"][0]["check_run_id"]["N"] == "<id1>"


def test_a_ticket_keeps_its_claims_but_when_it_was_made() -> None:
    def segment(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

    claims = {"dispatch_id": "d1", "repo": "org/r", "iat": int(NOW), "exp": int(NOW) + 600}
    ticket = f"{segment({'alg': 'EdDSA', 'kid': 'k1'})}.{segment(claims)}.c2lnbmF0dXJl"
    assert shape({"ticket": ticket}, RULES) == {
        "ticket": {"jwt": {"header": {"alg": "EdDSA", "kid": "k1"}, "claims": {"dispatch_id": "d1", "repo": "org/r"}}}
    }


def test_random_ids_ports_and_padded_milliseconds_become_placeholders_and_inputs_stay() -> None:
    doc = {
        "owner": "1d9919417af843b8b7a64a6fe4ce495b",
        "build": "b01c68f1-e295-4e59-8d95-9f9140a0cc19",
        "url": "http://127.0.0.1:54295/callback",
        "sk": f"{int(NOW * 1000):015d}#golden-pr-opened#org/r",
        "commit_time": "2026-11-29T18:02:11Z",  # the stream's own input, days before the run: kept
        "dispatch_id": "b8892713270d263c8455635df32fc028",  # an md5, not a random uuid: kept
    }
    out = Numbering().render(shape(doc, RULES))
    assert out == {
        "owner": "<uuid2>",
        "build": "<uuid1>",  # keys are walked in order
        "url": "http://127.0.0.1:<port1>/callback",
        "sk": "00<ms1>#golden-pr-opened#org/r",
        "commit_time": "2026-11-29T18:02:11Z",
        "dispatch_id": "b8892713270d263c8455635df32fc028",
    }


def test_times_of_pages_durations_and_negative_zero_read_alike() -> None:
    doc = {"at": NOW + 0.25, "since": NOW + 0.5, "queue_s": 2.224, "tenure_days": -0.0, "measured": "-0 days"}
    captured = {"steps": [], "tables": {}, "hud_bucket": {"data/index.json": doc}, "dead_letters": {}}
    [document] = normal_form(captured, RULES)["hud_bucket"]
    # A page rounds times to the millisecond, where two are equal by chance: none is numbered.
    assert document["doc"] == {
        "at": "#<t.dec>",
        "since": "#<t.dec>",
        "queue_s": "#<duration>",
        "tenure_days": 0.0,
        "measured": "0 days",
    }


def test_rate_windows_are_one_counter_and_sets_are_sorted() -> None:
    items = [
        item("RATE#org/r", "29944703", hits={"N": "2"}, expires_at={"N": "1796682300"}),
        item("RATE#org/r", "29944704", hits={"N": "1"}, expires_at={"N": "1796682360"}),
        item("DLV#d", "DSP#r", unsettled={"SS": ["b", "a"]}),
    ]
    rows = form(items=items)["tables"]["StateTable"]
    assert sorted(rows, key=lambda row: row["pk"]["S"]) == [
        {"pk": {"S": "DLV#d"}, "sk": {"S": "DSP#r"}, "unsettled": {"SS": ["a", "b"]}},
        {"pk": {"S": "RATE#org/r"}, "sk": {"S": "<window>"}, "hits": {"N": "3"}, "expires_at": {"N": "<t>"}},
    ]


def test_a_large_object_written_twice_is_kept_once_and_named_by_its_digest() -> None:
    payload = {"pull_request": {"body": "x" * 2000}}
    out = shared_payloads({"steps": [{"a": payload}, {"b": payload}]})
    [(name, kept)] = out["payloads"].items()
    assert kept == payload and name.startswith("sha256:")
    assert out["steps"] == [{"a": {"payload": name}}, {"b": {"payload": name}}]


def test_a_difference_is_printed_with_its_step_and_path() -> None:
    def summary(word: str) -> dict[str, Any]:
        write = {"method": "PATCH", "path": "/check-runs/7", "status": 200, "body": {"output": {"summary": word}}}
        return form([step("L4 fails", github=[write])])

    diff = readable_diff(as_text(summary("failure")), as_text(summary("failed")))
    assert '-steps["L4 fails"].github[0].body.output.summary = "failure"' in diff
    assert '+steps["L4 fails"].github[0].body.output.summary = "failed"' in diff
    assert diff.splitlines()[:2] == ["2 lines differ, at:", "     2  steps[…].github[…].body.output.summary"]


def test_a_day_is_named_by_how_many_days_before_the_run_it_is_whatever_the_run_s_date() -> None:
    """A trend's days, read on two runs a day apart, take the same placeholders: a golden file made yesterday holds."""
    shown = []
    for began in (NOW, NOW + 86_400):
        named = ("2026-12-06", "2026-12-07") if began == NOW else ("2026-12-07", "2026-12-08")
        days = [{"day": d} for d in named]
        rules = Rules(Window(began - 3600, began + 3 * 366 * 86_400))
        captured = {"steps": [], "tables": {}, "hud_bucket": {"data/repo/x.json": {"trend": days}}, "dead_letters": {}}
        [document] = normal_form(captured, rules)["hud_bucket"]
        shown.append(document["doc"]["trend"])
    assert shown[0] == shown[1] == [{"day": "<date-1>"}, {"day": "<date>"}]


def test_a_steps_head_passes_are_one_per_commit_however_often_it_booked_one() -> None:
    """A step whose callbacks outlasted the settle time books a head's pass twice (new ticket, new due time, a resend
    a second later): it reads as the step that booked it once. Another commit's pass, a changed field, still shows."""

    def head(sha: str, ticket: str, due: float, delay: int, upstream: str = "pytorch/pytorch") -> dict[str, Any]:
        body = {"kind": "head", "head_sha": sha, "upstream": upstream, "render": ticket, "not_before": due}
        return {"queue": "ChecksQueue", "body": json.dumps(body), "delay_s": delay}

    once = form([step("5", queues=[head("b" * 40, "1" * 32, NOW + 5, 5)])])
    twice = form([step("5", queues=[head("b" * 40, "2" * 32, NOW + 1, 1), head("b" * 40, "3" * 32, NOW + 9, 5)])])
    assert as_text(once) == as_text(twice)
    two_heads = form([step("5", queues=[head("b" * 40, "1" * 32, NOW + 5, 5), head("c" * 40, "4" * 32, NOW + 5, 5)])])
    assert len(two_heads["steps"][0]["queues"]) == 2
    elsewhere = form([step("5", queues=[head("b" * 40, "1" * 32, NOW + 5, 5, upstream="pytorch/other")])])
    assert as_text(elsewhere) != as_text(once)
