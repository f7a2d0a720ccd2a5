"""PyTorch's HUD rows are write-once after completion: the reporter pushes a job as finished once, with its
verdict and failing tests, and a 409 that still comes is a duplicate, never a dead letter.

The HUD here is the port of torchci's route (crcr.local.torchci), write-once guard included, behind the Hud port.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from crcr.app.outbound import Permit
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.pulls import PrInfo
from crcr.app.ports.torchci import TorchciRejected, TorchciUnavailable
from crcr.app.report import ReportDeps, judge, report_change
from crcr.app.summaries import SummaryDeps
from crcr.domain.failed_tests import cap, to_json
from crcr.local.torchci import TorchciHud
from tests.unit.fakes import FakeClock, RecordingMetrics, door
from tests.unit.test_summaries import FakeDocs
from tests.unit.test_verdicts import BASE, World, on_branch, record


class PortedHud:
    """The Hud port in front of torchci's route, as the HTTP client would see it."""

    def __init__(self) -> None:
        self.torchci = TorchciHud("t")

    def push(self, envelope: dict[str, Any], *, permit: Permit) -> None:
        status, reply = self.torchci.handle("POST", {"x-hud-internal-bot": "t"}, json.dumps(envelope).encode())
        if status >= 500:
            raise TorchciUnavailable(f"HUD answered {status}")
        if status >= 400:
            raise TorchciRejected(status, json.dumps(reply))


class Letters:
    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], str]] = []

    def send(self, envelope: dict[str, Any], reason: str) -> None:
        self.sent.append((envelope, reason))


def reporter(world: World) -> tuple[ReportDeps, PortedHud, Letters, RecordingMetrics]:
    hud, letters, metrics = PortedHud(), Letters(), RecordingMetrics()
    deps = ReportDeps(
        torchci=hud, dead_letters=letters, metrics=metrics, verdicts=world.deps(), sleep=lambda _: None, door=door()
    )
    return deps, hud, letters, metrics


def stream(images: list[JobRecord], deps: ReportDeps, world: World) -> None:
    """Each image as the table's stream hands it over (old, new), the row's verdict as the reporter set it."""
    previous: dict[tuple[str, int], JobRecord] = {}
    for image in images:
        key = (image.dispatch_id, image.run_attempt)
        old = previous.get(key)
        world.rows = [r for r in world.rows if (r.dispatch_id, r.run_attempt) != key] + [image]
        if judge(old, image, deps):
            report_change(old, image, deps)
            previous[key] = image
            continue
        # The reporter wrote the verdict: the stream's next image of the row carries it.
        verdict = world.verdicts[(image.dispatch_id, image.run_attempt, image.job_name)]
        judged = replace(image, verdict=verdict, version=image.version + 1)
        previous[key] = image
        assert judge(image, judged, deps)
        report_change(image, judged, deps)
        previous[key] = judged


FAILING = to_json(cap([{"name": "test_add", "classname": "TestOps", "message": "expected 2, got 3", "duration": 1.5}]))


def test_a_failed_attempt_and_its_passing_rerun_reach_the_hud_once_each_as_finished() -> None:
    world = World(prs={7: PrInfo("d" * 40, BASE)}, times={BASE: 20.0})
    world.rows = [on_branch(BASE, "success", "p1")]
    deps, hud, letters, metrics = reporter(world)
    first_running = record("in_progress", None, version=1)
    first_failed = replace(record(version=2), failed_tests=FAILING)
    second_running = record("in_progress", None, attempt=2, version=1)
    second_passed = record("completed", "success", attempt=2, version=2)
    stream([first_running, first_failed, second_running, second_passed], deps, world)
    # The failed attempt is flaky now: crcr's own records say so, the HUD keeps what it had.
    assert world.verdicts[("dsp-pr", 1, "test")] == "flaky"
    flaky = replace(first_failed, verdict="flaky", version=4)
    report_change(replace(first_failed, verdict="new", version=3), flaky, deps)

    assert hud.torchci.answers == [200, 200, 200, 200]  # nothing refused, nothing written twice as finished
    assert letters.sent == []
    assert metrics.counts["HudPushWithheld"] == 1
    rows = {row["run_attempt"]: row for row in hud.torchci.table.values()}
    assert rows[1]["status"] == "completed" and rows[1]["conclusion"] == "failure"
    assert json.loads(rows[1]["failed_tests_json"]) == json.loads(FAILING)  # in the one finished push
    assert rows[2]["conclusion"] == "success" and "failed_tests_json" not in rows[2]
    # Each attempt is its own record: its own check_run_id.
    assert {row["check_run_id"] for row in rows.values()} == {"crcr-900-1", "crcr-900-2"}


def test_the_one_finished_push_of_a_judged_failure_carries_its_verdict() -> None:
    world = World(prs={7: PrInfo("d" * 40, BASE)}, times={BASE: 20.0})
    failed = record(version=2)
    world.rows = [on_branch(BASE, "success", "p1")]
    deps, hud, _, _ = reporter(world)
    pushed: list[dict[str, Any]] = []
    real = hud.push
    hud.push = lambda envelope, permit: (pushed.append(envelope), real(envelope, permit=permit))[1]  # type: ignore[method-assign]
    stream([failed], deps, world)
    assert [p["trusted"]["verdict"] for p in pushed] == ["new"]


def test_a_genuine_result_after_the_relay_timed_the_job_out_stays_with_the_relay() -> None:
    world = World()
    deps, hud, letters, metrics = reporter(world)
    running = record("in_progress", None, level=2, version=1)
    swept = replace(record("timed_out", level=2, version=2), fingerprint="swept")
    late = record("completed", "success", level=2, version=3)
    stream([running, swept, late], deps, world)
    assert hud.torchci.answers == [200, 200]
    assert [row["conclusion"] for row in hud.torchci.table.values()] == ["timed_out"]
    assert metrics.counts["HudPushWithheld"] == 1 and letters.sent == []


def test_a_push_the_hud_already_took_is_a_duplicate_not_a_dead_letter() -> None:
    world = World()
    deps, hud, letters, metrics = reporter(world)
    done = record("completed", "success", level=2)
    report_change(None, done, deps)
    report_change(None, done, deps)  # the stream handed the record over again (a retried batch)
    assert hud.torchci.answers == [200, 409]
    assert metrics.counts["HudDuplicate"] == 1 and metrics.counts["TorchciRejected"] == 0
    assert letters.sent == []


def test_a_ciflow_push_is_filed_under_its_pr_and_is_never_a_baseline() -> None:
    world = World()
    deps, hud, _, _ = reporter(world)
    ciflow = replace(record("completed", "success", level=2, event="push"), ciflow="trunk")
    report_change(None, ciflow, deps)
    [row] = hud.torchci.table.values()
    assert (row["pr_number"], row["pytorch_head_sha"], row["event_type"]) == (7, "d" * 40, "push")
    # Without the pull_request object (as PyTorch's relay forwards the push) torchci still finds the PR.
    from crcr.app.torchci import envelope  # noqa: PLC0415

    push = envelope(ciflow)
    del push["untrusted"]["callback_payload"]["payload"]["pull_request"]
    status, _ = hud.torchci.handle("POST", {"x-hud-internal-bot": "t"}, json.dumps(push).encode())
    assert status == 409  # the same row, already completed
    from crcr.local.torchci import extract_dynamo_record  # noqa: PLC0415

    assert extract_dynamo_record(push)["pr_number"] == 7


def test_a_push_the_hud_refuses_is_counted_on_its_repository_page_once() -> None:
    class Refusing:
        def push(self, envelope: dict[str, Any], *, permit: Permit) -> None:
            raise TorchciRejected(400, "workflow.name is too long")

    world = World()
    docs = FakeDocs()
    deps, _, letters, metrics = reporter(world)
    deps = replace(deps, torchci=Refusing(), summaries=SummaryDeps(docs=docs, metrics=metrics, clock=FakeClock()))
    job = record("completed", "success", pr=None, event="push")
    report_change(None, job, deps)
    report_change(None, job, deps)  # the stream retried the record: one refusal, two dead letters
    assert len(letters.sent) == 2
    refused = docs.doc(f"repo/{job.repo.lower()}.json")["refused"]
    assert refused["total"] == 1 and list(refused["reasons"]) == ["HUD push refused (HTTP 400)"]
    assert [r.get("refused") for r in docs.doc("index.json")["repos"]] == [1]
