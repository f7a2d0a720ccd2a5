"""Ingest: a delivery that never reached the queue is not lost to deduplication."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crcr.app.ingest import IngestDeps, Outcome, ingest
from crcr.domain.errors import PayloadTooLarge
from crcr.domain.signature import sign
from tests.unit.fakes import FakeBlobs, FakeClock, FakeDeliveries, FakeEventQueue, RecordingMetrics

BODY = (Path(__file__).resolve().parents[2] / "examples" / "events" / "pull_request.opened.json").read_bytes()


def deps(queue: FakeEventQueue, deliveries: FakeDeliveries, blobs: FakeBlobs | None = None) -> IngestDeps:
    return IngestDeps(
        secrets=(b"k",),
        upstream="PyTorch/PyTorch",
        deliveries=deliveries,
        events=queue,
        blobs=blobs or FakeBlobs(),
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        max_body_bytes=1_000_000,
        inline_body_bytes=4_000,
    )


def headers(body: bytes) -> dict[str, str]:
    return {"x-github-event": "pull_request", "x-github-delivery": "d-1", "x-hub-signature-256": sign(b"k", body)}


def test_a_delivery_whose_enqueue_failed_is_sent_again_on_redelivery() -> None:
    deliveries = FakeDeliveries()
    broken = FakeEventQueue(fail=True)
    with pytest.raises(ConnectionError):
        ingest(BODY, headers(BODY), deps(broken, deliveries))  # the handler answers 500; GitHub shows it failed
    working = FakeEventQueue()
    assert ingest(BODY, headers(BODY), deps(working, deliveries)).outcome is Outcome.ACCEPTED
    assert len(working.sent) == 1
    assert ingest(BODY, headers(BODY), deps(working, deliveries)).outcome is Outcome.DUPLICATE
    assert len(working.sent) == 1


def test_bodies_over_the_inline_limit_travel_by_reference_intact() -> None:
    queue, blobs = FakeEventQueue(), FakeBlobs()
    doc = json.loads(BODY)
    doc["pull_request"]["body"] = "x" * 10_000
    body = json.dumps(doc).encode()
    assert ingest(body, headers(body), deps(queue, FakeDeliveries(), blobs)).outcome is Outcome.ACCEPTED
    [message] = queue.sent
    assert message.body is None and blobs.items[message.body_ref or ""] == body


def test_size_is_checked_before_the_signature_is_computed() -> None:
    with pytest.raises(PayloadTooLarge):
        ingest(b"x" * 1_000_001, {}, deps(FakeEventQueue(), FakeDeliveries()))


def test_escaping_is_counted_when_deciding_to_offload() -> None:
    """A body of quotes and backslashes grows as a JSON string inside the queue message."""
    doc = json.loads(BODY)
    doc["pull_request"]["body"] = '\\"' * 1_000  # 2,000 characters that escape to 4,000
    body = json.dumps(doc).encode()
    for limit, offloaded in ((len(body) + 500, True), (len(body) + 5_000, False)):
        queue = FakeEventQueue()
        ready = deps(queue, FakeDeliveries(), FakeBlobs())
        ready = IngestDeps(**{**ready.__dict__, "inline_body_bytes": limit})
        ingest(body, headers(body), ready)
        assert (queue.sent[0].body_ref is not None) is offloaded
