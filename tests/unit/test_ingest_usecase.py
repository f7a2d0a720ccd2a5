"""Ingest: a delivery that never reached the queue is not lost to deduplication."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crcr.app.ingest import IngestDeps, Outcome, ingest
from crcr.domain.allowlist import Allowlist, Entry
from crcr.domain.errors import BadRequest, PayloadTooLarge
from crcr.domain.levels import Level
from crcr.domain.signature import sign
from tests.unit.fakes import FakeBlobs, FakeClock, FakeDeliveries, FakeEventQueue, RecordingMetrics, StaticAllowlist

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


def rejected(body: bytes, event: str = "pull_request") -> BadRequest:
    hdrs = {"x-github-event": event, "x-github-delivery": "d-1", "x-hub-signature-256": sign(b"k", body)}
    with pytest.raises(BadRequest) as caught:
        ingest(body, hdrs, deps(FakeEventQueue(), FakeDeliveries()))
    return caught.value


def changed(path: str, value: object, base: bytes = BODY) -> bytes:
    doc = json.loads(base)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[last] = value
    return json.dumps(doc).encode()


PUSH = (Path(__file__).resolve().parents[2] / "examples" / "events" / "push.main.json").read_bytes()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("pull_request.head.sha", "a" * 300_000),  # 202 and then stuck in a queue message, a ticket, a table key
        ("pull_request.head.sha", "A" * 40),  # GitHub's SHAs are lower-case hex
        ("pull_request.base.sha", "abc"),
        ("pull_request.head.ref", "r" * 245),  # refs/heads/ + 245 bytes is over GitHub's 255
        ("pull_request.head.ref", "main\n"),
        ("pull_request.base.ref", "a..b"),
        ("pull_request.head.repo.full_name", "fork/" + "x" * 101),
        ("pull_request.number", 2**31),
        ("pull_request.number", 0),
        ("pull_request.labels", [{"name": f"l{i}"} for i in range(501)]),
        ("pull_request.labels", [{"name": "x" * 101}]),
        ("pull_request.updated_at", "u" * 41),
        ("repository.full_name", "pytorch/pytorch\n"),  # `$` matched before a final newline
        ("repository.full_name", "pytorch/pyt\u043erch"),  # Cyrillic o: not a GitHub name at all
        ("repository.default_branch", "ma in"),
        ("repository.id", 2**63),
        ("installation.id", -1),
    ],
)
def test_pull_request_fields_the_planner_carries_are_checked_at_the_door(path: str, value: object) -> None:
    error = rejected(changed(path, value))
    assert error.field == (path + ".0.name" if path.endswith("labels") and len(value) == 1 else path)  # type: ignore[arg-type]
    assert len(error.message) < 400  # the value itself is never echoed


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("after", "f" * 300_000),
        ("before", "xyz"),
        ("ref", "refs/heads/" + "b" * 245),
        ("ref", "main"),  # a push names a full ref
        ("commits.0.id", "not-a-sha"),
    ],
)
def test_push_fields_the_planner_carries_are_checked_at_the_door(path: str, value: object) -> None:
    assert rejected(changed(path, value, PUSH), "push").field == path


@pytest.mark.parametrize(
    ("literal", "field"),
    [
        ("[" * 100_000 + "]" * 100_000, "x." + ".".join(["0"] * 63)),  # RecursionError: was a 500
        ("9" * 5_000, "x"),  # ValueError (Python's 4,300-digit limit): was a 500
        ("9" * 39, "x"),
        ("NaN", "x"),
        ("1e400", "x"),
        ('"\\udfff"', "x"),
    ],
)
def test_bodies_the_relay_cannot_carry_are_400_naming_where(literal: str, field: str) -> None:
    body = BODY.replace(b"{", b'{"x": ' + literal.encode() + b", ", 1)
    error = rejected(body)
    assert error.field == field


def test_a_branch_of_244_bytes_and_a_ref_of_255_pass() -> None:
    queue = FakeEventQueue()
    body = changed("pull_request.head.ref", "b" * 244)
    assert ingest(body, headers(body), deps(queue, FakeDeliveries())).outcome is Outcome.ACCEPTED
    push = changed("ref", "refs/heads/" + "\u00e9" * 122, PUSH)  # 255 bytes of UTF-8
    hdrs = headers(push) | {"x-github-event": "push"}
    assert ingest(push, hdrs, deps(queue, FakeDeliveries())).outcome is not None


class Runs:
    """The runs queue and the bound runs, recording what ingest sent and read."""

    def __init__(self, bound: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.sent: list[tuple[object, float]] = []
        self.reads: list[tuple[str, str]] = []
        self._bound = bound

    def send_run(self, message: object, delay_s: float = 0.0) -> None:
        self.sent.append((message, delay_s))

    def bound(self, repo: str, run_id: str) -> object | None:
        self.reads.append((repo, run_id))
        return object() if run_id in self._bound else None


BACKEND = {"full_name": "org/backend", "id": 5001, "owner": {"id": 77}}


def run_event(action: str = "completed", **run: object) -> bytes:
    return json.dumps(
        {
            "action": action,
            "workflow_run": {
                "id": 30433642,
                "name": "CI",
                "display_title": "crcr pull_request " + "0123456789abcdef" * 2,
                "event": "repository_dispatch",
                "status": "completed",
                "conclusion": "success",
                "run_attempt": 1,
                "html_url": "https://github.com/org/backend/actions/runs/30433642",
                "path": ".github/workflows/ci.yml",
                "head_branch": "main",
                "head_repository": BACKEND,
            }
            | run,
            "repository": BACKEND,
            "installation": {"id": 101},
        }
    ).encode()


def run_headers(body: bytes, event: str = "workflow_run") -> dict[str, str]:
    return {"x-github-event": event, "x-github-delivery": "d-run", "x-hub-signature-256": sign(b"k", body)}


def with_runs(runs: Runs, deliveries: FakeDeliveries, queue: FakeEventQueue) -> IngestDeps:
    import dataclasses  # noqa: PLC0415

    allowlist = StaticAllowlist(Allowlist((Entry("org/backend", Level.L2),)))
    return dataclasses.replace(
        deps(queue, deliveries), runs=runs, bound_runs=runs, run_settle_s=30.0, allowlist=allowlist
    )


def test_a_run_the_relay_started_goes_to_the_runs_queue_a_completion_after_the_settle_time() -> None:
    runs, deliveries, queue = Runs(), FakeDeliveries(), FakeEventQueue()
    for action, delay in (("requested", 0.0), ("completed", 30.0)):
        body = run_event(action)
        assert ingest(body, run_headers(body), with_runs(runs, deliveries, queue)).outcome is Outcome.ACCEPTED
        message, waited = runs.sent[-1]
        assert (getattr(message, "dispatch_id"), getattr(message, "action"), waited) == (  # noqa: B009
            "0123456789abcdef" * 2,
            action,
            delay,
        )
    assert queue.sent == [] and deliveries.rows == {}  # never the upstream's queue, no dedupe write


@pytest.mark.parametrize(
    ("event", "body", "why"),
    [
        ("workflow_run", run_event(event="push"), "a push run"),
        ("workflow_run", run_event(event="schedule", display_title="nightly"), "a scheduled run"),
        ("workflow_run", run_event(display_title="build 7"), "no dispatch id in the title"),
        ("workflow_run", run_event(display_title="crcr " + "a" * 32 + " " + "b" * 32), "two dispatch ids"),
        ("workflow_run", run_event(action="queued"), "an action the relay does not read"),
        ("workflow_job", run_event(), "a job event"),
    ],
)
def test_runs_that_are_not_the_relays_are_dropped_with_no_read_or_write(event: str, body: bytes, why: str) -> None:
    runs, deliveries, queue = Runs(), FakeDeliveries(), FakeEventQueue()
    result = ingest(body, run_headers(body, event), with_runs(runs, deliveries, queue))
    assert result.outcome is Outcome.IGNORED, why
    assert (runs.sent, runs.reads, queue.sent, deliveries.rows) == ([], [], [], {}), why


def test_a_workflow_dispatch_run_without_the_id_in_its_title_costs_one_read() -> None:
    runs, deliveries, queue = Runs(bound={"30433642"}), FakeDeliveries(), FakeEventQueue()
    body = run_event(event="workflow_dispatch", display_title="CI")
    assert ingest(body, run_headers(body), with_runs(runs, deliveries, queue)).outcome is Outcome.ACCEPTED
    other = run_event(event="workflow_dispatch", display_title="CI", id=99)
    assert ingest(other, run_headers(other), with_runs(runs, deliveries, queue)).outcome is Outcome.IGNORED
    assert runs.reads == [("org/backend", "30433642"), ("org/backend", "99")]


def test_a_run_event_with_a_bad_signature_is_refused_before_it_is_read() -> None:
    from crcr.domain.errors import BadSignature  # noqa: PLC0415

    runs = Runs()
    body = run_event()
    with pytest.raises(BadSignature):
        ingest(
            body,
            run_headers(body) | {"x-hub-signature-256": sign(b"wrong", body)},
            with_runs(runs, FakeDeliveries(), FakeEventQueue()),
        )
    assert runs.sent == []
