"""POST /webhook at the edge: signature before parse, clear errors naming the field, every GitHub example 2xx."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from crcr.domain.signature import sign
from tests.conftest import WEBHOOK_SECRET, Relay, event_body, http

pytestmark = pytest.mark.e2e
OCTOKIT = Path(__file__).resolve().parents[1] / "events" / "octokit"


def post_raw(relay: Relay, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    return http("POST", f"{relay.url}/webhook", body, headers)


def signed(body: bytes, event: str = "pull_request", delivery: str = "d-edge-1") -> dict[str, str]:
    return {
        "x-github-event": event,
        "x-github-delivery": delivery,
        "x-hub-signature-256": sign(WEBHOOK_SECRET.encode(), body),
    }


def test_signature_is_checked_before_anything_is_parsed(relay: Relay) -> None:
    garbage = b"\xff\xfe not json at all \x00"
    status, reply = post_raw(relay, garbage, signed(b"something else"))
    assert status == 401 and reply["error"] == "bad_signature" and reply["field"] == "X-Hub-Signature-256"
    status, reply = post_raw(relay, garbage, {"x-github-event": "push", "x-github-delivery": "d"})
    assert status == 401 and "missing" in str(reply["message"])
    assert relay.metric("WebhookRejected.reason=bad_signature") == 2


def test_signed_bytes_that_are_not_utf8_json_get_400_not_500(relay: Relay) -> None:
    body = b"\xff\xfe\x00binary"
    status, reply = post_raw(relay, body, signed(body))
    assert status == 400 and reply["field"] == "body"


@pytest.mark.parametrize(
    ("drop", "field"), [("x-github-delivery", "X-GitHub-Delivery"), ("x-github-event", "X-GitHub-Event")]
)
def test_missing_headers_name_the_header(relay: Relay, drop: str, field: str) -> None:
    body = event_body("pull_request.opened.json")
    headers = signed(body)
    del headers[drop]
    status, reply = post_raw(relay, body, headers)
    assert status == 400 and reply["field"] == field


def test_a_malformed_pull_request_names_the_field(relay: Relay) -> None:
    doc = json.loads(event_body("pull_request.opened.json"))
    del doc["pull_request"]["head"]["sha"]
    body = json.dumps(doc).encode()
    status, reply = post_raw(relay, body, signed(body))
    assert status == 400 and reply["field"] == "pull_request.head.sha"
    assert relay.metric("WebhookRejected.reason=bad_request") == 1


def test_bodies_over_the_limit_get_413(relay: Relay) -> None:
    """As in AWS, the HTTP API's payload quota refuses it before the webhook function runs (the function's own
    413 for the same limit is covered in tests/unit/test_ingest_usecase.py)."""
    body = b'{"pad": "' + b"z" * (10 * 1024 * 1024) + b'"}'
    status, reply = post_raw(relay, body, signed(body))
    assert (status, reply) == (413, {"message": "Request Entity Too Large"})
    assert relay.stack.invocations.get("WebhookFunction", 0) == 0


def test_ping_is_answered(relay: Relay) -> None:
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    assert post_raw(relay, body, signed(body, event="ping")) == (200, {"status": "pong", "delivery_id": "d-edge-1"})


def test_every_published_github_example_is_answered_2xx(relay: Relay) -> None:
    """Each of GitHub's example payloads, aimed at the upstream, signed, and posted as GitHub would."""
    answered: dict[int, int] = {}
    posted = 0
    for path in sorted(OCTOKIT.glob("*.json")):
        event = path.stem
        for i, example in enumerate(json.loads(path.read_text())):
            doc = example["payload"]
            if isinstance(doc.get("repository"), dict):
                doc["repository"]["full_name"] = "pytorch/pytorch"
            body = json.dumps(doc).encode()
            status, reply = post_raw(relay, body, signed(body, event=event, delivery=f"{event}-{i}"))
            assert 200 <= status < 300, f"{event}[{i}] ({example['action']}): {status} {reply}"
            answered[status] = answered.get(status, 0) + 1
            posted += 1
    assert posted >= 300 and answered.get(202, 0) >= 10  # the PR and push examples went all the way in
    # ... and the planner digested every accepted one without a retry.
    deadline = time.time() + 20
    while time.time() < deadline and relay.stack.invocations.get("PlannerFunction", 0) == 0:
        time.sleep(0.2)
    time.sleep(2)
    assert relay.metric("EventRetried") == 0
