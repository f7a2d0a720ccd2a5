"""Upstream check runs for L4 and labelled L3 jobs, judged by the GitHub double's check-run API."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import LISTED, Relay, event_body
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import REPO_IDS, Scenario, oidc  # noqa: F401 - oidc is a fixture

pytestmark = pytest.mark.e2e
L2, L3, L4 = "org-two/l2-repo", "org-three/l3-repo", "org-four/L4-Repo"
UPSTREAM = "pytorch/pytorch"


def start(relay_factory: Callable[..., Relay], oidc: OidcIssuer, labels: tuple[str, ...] = ()) -> Scenario:  # noqa: F811
    relay = relay_factory(env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr"})
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975)
    doc = json.loads(event_body("pull_request.opened.json"))
    doc["pull_request"]["labels"] += [{"name": label} for label in labels]
    relay.github.add_commit(UPSTREAM, doc["pull_request"]["head"]["sha"])
    delivery = str(uuid.uuid4())
    assert relay.post("pull_request", json.dumps(doc).encode(), delivery)[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    return Scenario(relay, oidc, delivery, doc["pull_request"]["head"]["sha"])


def check_runs(s: Scenario, expected: int, timeout_s: float = 15.0) -> list[dict[str, Any]]:
    deadline = time.time() + timeout_s
    while time.time() < deadline and len(s.relay.github.check_runs(UPSTREAM)) < expected:
        time.sleep(0.1)
    time.sleep(1.0)  # room for a duplicate to show
    return s.relay.github.check_runs(UPSTREAM)


def writes(s: Scenario) -> list[str]:
    return [f"{r.method} {r.status}" for r in s.relay.github.requests if "/check-runs" in r.path]


def test_an_l4_job_is_one_check_run_moving_forward_in_place(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    token = s.token(L4)
    assert s.post(s.body(L4), token)[0] == 200
    [run] = check_runs(s, 1)
    assert run["name"] == f"crcr/{L4}/CI/build-and-test" and run["status"] == "in_progress"
    assert run["head_sha"] == s.head_sha
    assert run["details_url"] == f"https://github.com/{L4}/actions/runs/777"
    assert run["external_id"] == f"{L4}:777:170001"

    done = s.body(
        L4, status="completed", conclusion="failure", test_results={"passed": 9, "failed": 1, "skipped": 0, "total": 10}
    )
    assert s.post(done, token)[0] == 200
    assert s.post(done, token)[1] == {"status": "duplicate"}  # no second write
    assert s.post(s.body(L4), token)[1] == {"status": "duplicate"}  # late in_progress: no regression
    time.sleep(2)
    [run] = s.relay.github.check_runs(UPSTREAM)
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    assert "9 passed, 1 failed" in run["output"]["summary"]
    assert writes(s) == ["POST 201", "PATCH 200"]  # created once, then PATCHed


def test_l3_needs_its_label_and_l2_never_gets_one(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    assert s.post(s.body(L2), s.token(L2))[0] == 200
    assert s.post(s.body(L3), s.token(L3))[0] == 200
    time.sleep(2)
    assert s.relay.github.check_runs(UPSTREAM) == []


def test_l3_with_its_device_label_gets_a_check_run(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc, labels=("ciflow/crcr/gpu",))
    assert s.post(s.body(L3, status="completed", conclusion="success"), s.token(L3))[0] == 200
    [run] = check_runs(s, 1)
    assert run["name"] == f"crcr/{L3}/CI/build-and-test"
    assert (run["status"], run["conclusion"]) == ("completed", "success")


def label_event(s: Scenario, action: str, label: str, labels: list[str]) -> bytes:
    doc = json.loads(event_body("pull_request.opened.json"))
    doc["action"] = action
    doc["label"] = {"name": label}
    doc["pull_request"]["labels"] = [{"name": name} for name in labels]
    doc["pull_request"]["updated_at"] = "2026-11-29T18:30:00Z"
    return json.dumps(doc).encode()


def test_l3_label_added_while_jobs_run_backfills_in_progress(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    token = s.token(L3)
    assert s.post(s.body(L3, job_name="build"), token)[0] == 200
    assert s.post(s.body(L3, job_name="test"), token)[0] == 200
    time.sleep(1)
    assert s.relay.github.check_runs(UPSTREAM) == []
    assert s.relay.post("pull_request", label_event(s, "labeled", "ciflow/crcr/gpu", ["ciflow/crcr/gpu"]))[0] == 202
    runs = check_runs(s, 2)
    assert sorted((r["name"], r["status"]) for r in runs) == [
        (f"crcr/{L3}/CI/build", "in_progress"),
        (f"crcr/{L3}/CI/test", "in_progress"),
    ]
    # ... and the jobs carry on updating them in place.
    assert s.post(s.body(L3, job_name="build", status="completed", conclusion="success"), token)[0] == 200
    time.sleep(2)
    build = next(r for r in s.relay.github.check_runs(UPSTREAM) if r["name"].endswith("/build"))
    assert (build["status"], build["conclusion"]) == ("completed", "success")
    assert len(s.relay.github.check_runs(UPSTREAM)) == 2
    assert len(s.relay.github.dispatches(L3)) == 1  # nothing dispatched again


def test_l3_label_added_after_jobs_finished_creates_completed_runs(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    assert s.post(s.body(L3, status="completed", conclusion="failure"), s.token(L3))[0] == 200
    time.sleep(1)
    s.relay.post("pull_request", label_event(s, "labeled", "ciflow/crcr/gpu", ["ciflow/crcr/gpu"]))
    [run] = check_runs(s, 1)
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    assert len(s.relay.github.dispatches(L3)) == 1


def test_removing_the_label_leaves_existing_runs_following_their_jobs(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc, labels=("ciflow/crcr/gpu",))
    token = s.token(L3)
    assert s.post(s.body(L3), token)[0] == 200
    check_runs(s, 1)
    s.relay.post("pull_request", label_event(s, "unlabeled", "ciflow/crcr/gpu", []))
    time.sleep(1)
    assert s.post(s.body(L3, status="completed", conclusion="success"), token)[0] == 200
    assert s.post(s.body(L3, job_name="later"), token)[0] == 200  # a new job after removal: no run
    time.sleep(2)
    [run] = s.relay.github.check_runs(UPSTREAM)
    assert (run["status"], run["conclusion"]) == ("completed", "success")


def rerequest(s: Scenario, run: dict[str, Any]) -> int:
    doc = {
        "action": "rerequested",
        "check_run": {
            "id": run["id"],
            "name": run["name"],
            "head_sha": run["head_sha"],
            "external_id": run["external_id"],
            "status": run["status"],
            "conclusion": run["conclusion"],
        },
        "repository": {"id": 65600975, "full_name": UPSTREAM, "default_branch": "main"},
        "sender": {"login": "a-maintainer"},
    }
    return s.relay.post("check_run", json.dumps(doc).encode())[0]


def wait(predicate: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not predicate():
        time.sleep(0.1)


def test_a_rerun_from_the_checks_tab_reruns_the_downstream_run_once_and_updates_in_place(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    github = s.relay.github
    github.add_workflow_run(L4, 777, head_sha=s.head_sha, status="completed", conclusion="failure")
    assert s.post(s.body(L4, status="completed", conclusion="failure"), s.token(L4))[0] == 200
    [run] = check_runs(s, 1)

    assert rerequest(s, run) == 202
    wait(lambda: github.reruns(L4) == [777])
    assert github.reruns(L4) == [777]
    assert rerequest(s, run) == 202  # the run is queued again now: a no-op
    time.sleep(2)
    assert github.reruns(L4) == [777]

    # The second attempt reports with its own token, and moves the same check run.
    attempt2 = s.token(L4, run_attempt=2)
    assert s.post(s.body(L4, run_attempt=2), attempt2) == (200, {"status": "recorded"})
    wait(lambda: github.check_runs(UPSTREAM)[0]["status"] == "in_progress")
    assert s.post(s.body(L4, run_attempt=2, status="completed", conclusion="success"), attempt2)[0] == 200
    wait(lambda: github.check_runs(UPSTREAM)[0]["conclusion"] == "success")
    [again] = github.check_runs(UPSTREAM)
    assert again["id"] == run["id"] and (again["status"], again["conclusion"]) == ("completed", "success")


def test_a_suite_rerun_reruns_each_downstream_run_once_and_ignores_other_apps(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    github = s.relay.github
    github.add_workflow_run(L4, 777, head_sha=s.head_sha, status="completed", conclusion="failure")
    token = s.token(L4)
    for job in ("build", "test"):  # two jobs of one downstream run
        assert s.post(s.body(L4, job_name=job, status="completed", conclusion="failure"), token)[0] == 200
    check_runs(s, 2)
    github.add_check_run(UPSTREAM, name="crcr/evil/repo/CI/x", head_sha=s.head_sha, conclusion="failure")
    suite = github.check_suite_id(UPSTREAM, s.head_sha)
    doc = {
        "action": "rerequested",
        "check_suite": {"id": suite, "head_sha": s.head_sha, "status": "completed", "conclusion": "failure"},
        "repository": {"id": 65600975, "full_name": UPSTREAM, "default_branch": "main"},
    }
    assert s.relay.post("check_suite", json.dumps(doc).encode())[0] == 202
    wait(lambda: bool(github.reruns(L4)))
    time.sleep(1.5)
    assert github.reruns(L4) == [777]
