"""Replay of a webhook delivery: GitHub's redelivery (same X-GitHub-Delivery) is a duplicate, and so is a captured
body and signature sent again under a new delivery id (GitHub's HMAC covers the body only, so ingest claims the
body's digest as well as the id; docs/security.md, "Replay")."""

from __future__ import annotations

import hashlib

from crcr.app.ingest import Outcome, ingest
from crcr.domain.signature import sign
from tests.unit.fakes import FakeDeliveries, FakeEventQueue
from tests.unit.test_ingest_usecase import BODY, deps


def delivered(delivery: str) -> dict[str, str]:
    return {"x-github-event": "pull_request", "x-github-delivery": delivery, "x-hub-signature-256": sign(b"k", BODY)}


def test_a_redelivered_delivery_is_queued_once() -> None:
    queue, deliveries = FakeEventQueue(), FakeDeliveries()
    assert ingest(BODY, delivered("d-1"), deps(queue, deliveries)).outcome is Outcome.ACCEPTED
    assert ingest(BODY, delivered("d-1"), deps(queue, deliveries)).outcome is Outcome.DUPLICATE
    assert len(queue.sent) == 1


def test_a_captured_body_replayed_under_a_new_delivery_id_is_not_queued_again() -> None:
    queue, deliveries = FakeEventQueue(), FakeDeliveries()
    assert ingest(BODY, delivered("d-1"), deps(queue, deliveries)).outcome is Outcome.ACCEPTED
    replayed = ingest(BODY, delivered("d-2"), deps(queue, deliveries))  # the same signed bytes, a fresh header
    assert replayed.outcome is Outcome.DUPLICATE and len(queue.sent) == 1
    assert "another delivery id" in replayed.reason


def test_a_different_body_under_a_new_delivery_id_is_queued() -> None:
    queue, deliveries = FakeEventQueue(), FakeDeliveries()
    other = BODY.rstrip() + b"\n"  # the same event, other bytes: GitHub never sends two events alike to the byte
    assert other != BODY
    for delivery, body in (("d-1", BODY), ("d-2", other)):
        headers = {
            "x-github-event": "pull_request",
            "x-github-delivery": delivery,
            "x-hub-signature-256": sign(b"k", body),
        }
        assert ingest(body, headers, deps(queue, deliveries)).outcome is Outcome.ACCEPTED
    assert len(queue.sent) == 2


def test_a_reused_delivery_id_claims_nothing_for_its_other_body() -> None:
    """D with X is accepted; D with Y is a duplicate that leaves Y unclaimed; Y under its own id is accepted."""
    queue, deliveries = FakeEventQueue(), FakeDeliveries()
    other = BODY.rstrip() + b"\n"

    def headers(delivery: str, body: bytes) -> dict[str, str]:
        return {
            "x-github-event": "pull_request",
            "x-github-delivery": delivery,
            "x-hub-signature-256": sign(b"k", body),
        }

    assert ingest(BODY, headers("d-1", BODY), deps(queue, deliveries)).outcome is Outcome.ACCEPTED
    reused = ingest(other, headers("d-1", other), deps(queue, deliveries))
    assert reused.outcome is Outcome.DUPLICATE and "another body" in reused.reason
    assert ingest(other, headers("d-2", other), deps(queue, deliveries)).outcome is Outcome.ACCEPTED
    sent = [(m.delivery_id, m.body_sha256) for m in queue.sent]
    assert sent == [("d-1", hashlib.sha256(BODY).hexdigest()), ("d-2", hashlib.sha256(other).hexdigest())]
