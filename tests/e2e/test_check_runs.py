"""Upstream check runs for L4 and labelled L3 dispatches, judged by the GitHub double's check-run API."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from crcr.adapters.observability import TOTALS
from tests.conftest import DEFAULT_ALLOWLIST, LISTED, Relay, event_body
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import REPO_IDS, Scenario, oidc  # noqa: F401 - oidc is a fixture

pytestmark = pytest.mark.e2e
L2, L3, L4 = "org-two/l2-repo", "org-three/l3-repo", "org-four/L4-Repo"
UPSTREAM = "pytorch/pytorch"
JOB4, REPO4 = f"crcr/{L4}/CI/build-and-test", f"crcr/{L4}"
JOB3, REPO3 = f"crcr/{L3}/CI/build-and-test", f"crcr/{L3}"


def start(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    labels: tuple[str, ...] = (),
    allowlist: str = DEFAULT_ALLOWLIST,
    env: dict[str, str] | None = None,
) -> Scenario:
    relay = relay_factory(
        allowlist=allowlist, env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr"} | (env or {})
    )
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975)
    doc = json.loads(event_body("pull_request.opened.json"))
    doc["pull_request"]["labels"] += [{"name": label} for label in labels]
    relay.github.add_commit(UPSTREAM, doc["pull_request"]["head"]["sha"])
    delivery = str(uuid.uuid4())
    assert relay.post("pull_request", json.dumps(doc).encode(), delivery)[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    return Scenario(relay, oidc, delivery, doc["pull_request"]["head"]["sha"])


def runs(s: Scenario) -> dict[str, dict[str, Any]]:
    """Check runs on the upstream by name; a second run of one name would be a duplicate, so fail on it."""
    found = s.relay.github.check_runs(UPSTREAM)
    by_name = {(r["head_sha"], r["name"]): r for r in found}
    assert len(by_name) == len(found), "two check runs of one name on one commit"
    return {name: r for (sha, name), r in by_name.items() if sha == s.head_sha}


def wait_runs(s: Scenario, until: Callable[[dict[str, dict[str, Any]]], bool], timeout_s: float = 15.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not until(runs(s)):
        time.sleep(0.1)
    assert until(runs(s)), sorted((n, r["status"], r["conclusion"]) for n, r in runs(s).items())


def shows(name: str, status: str, conclusion: str | None = None) -> Callable[[dict[str, dict[str, Any]]], bool]:
    return lambda found: name in found and (found[name]["status"], found[name]["conclusion"]) == (status, conclusion)


def writes(s: Scenario, name: str) -> list[str]:
    """The POST and PATCHes that went to one check run, in order."""
    ids = {r["id"] for r in s.relay.github.check_runs(UPSTREAM) if r["name"] == name and r["head_sha"] == s.head_sha}
    out = []
    for r in s.relay.github.requests:
        sent = r.json or {}
        if (
            r.method == "POST"
            and r.path.endswith("/check-runs")
            and (sent.get("name"), sent.get("head_sha"))
            == (
                name,
                s.head_sha,
            )
        ):
            out.append(f"POST {r.status}")
        elif r.method == "PATCH" and "/check-runs/" in r.path and int(r.path.rsplit("/", 1)[1]) in ids:
            out.append(f"PATCH {r.status}")
    return out


def test_an_l4_job_is_one_check_run_moving_forward_in_place(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    # The repository's check run exists as soon as the dispatch is sent, before anything reports.
    wait_runs(s, shows(REPO4, "queued"))
    assert "waiting for the first job" in runs(s)[REPO4]["output"]["summary"]

    token = s.token(L4)
    assert s.post(s.body(L4), token)[0] == 200
    wait_runs(s, lambda found: shows(JOB4, "in_progress")(found) and shows(REPO4, "in_progress")(found))
    run = runs(s)[JOB4]
    assert run["details_url"] == f"https://github.com/{L4}/actions/runs/777"
    assert run["external_id"] == f"{L4}:777:170001"

    done = s.body(
        L4, status="completed", conclusion="failure", test_results={"passed": 9, "failed": 1, "skipped": 0, "total": 10}
    )
    assert s.post(done, token)[0] == 200
    assert s.post(done, token)[1] == {"status": "duplicate"}  # no second write
    assert s.post(s.body(L4), token)[1] == {"status": "duplicate"}  # late in_progress: no regression
    wait_runs(
        s, lambda found: shows(JOB4, "completed", "failure")(found) and shows(REPO4, "completed", "failure")(found)
    )
    assert "9 passed, 1 failed" in runs(s)[JOB4]["output"]["summary"]
    assert "build-and-test: **failure**" in runs(s)[REPO4]["output"]["summary"]
    time.sleep(1.5)  # room for a stray write to show
    assert writes(s, JOB4) == ["POST 201", "PATCH 200"]  # created once, then PATCHed
    assert writes(s, REPO4) == ["POST 201", "PATCH 200", "PATCH 200"]  # queued -> in_progress -> completed
    assert set(runs(s)) == {JOB4, REPO4}


def test_l3_needs_its_label_and_l2_never_gets_one(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    assert s.post(s.body(L2), s.token(L2))[0] == 200
    assert s.post(s.body(L3), s.token(L3))[0] == 200
    wait_runs(s, shows(REPO4, "queued"))  # the L4 repository's, created at dispatch
    time.sleep(1.5)
    assert set(runs(s)) == {REPO4}


def test_l3_with_its_device_label_gets_a_check_run(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc, labels=("ciflow/crcr/gpu",))
    wait_runs(s, shows(REPO3, "queued"))  # labelled at dispatch: shown from the start, like L4
    assert s.post(s.body(L3, status="completed", conclusion="success"), s.token(L3))[0] == 200
    wait_runs(
        s, lambda found: shows(JOB3, "completed", "success")(found) and shows(REPO3, "completed", "success")(found)
    )


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
    wait_runs(s, shows(REPO4, "queued"))
    time.sleep(1)
    assert set(runs(s)) == {REPO4}
    assert s.relay.post("pull_request", label_event(s, "labeled", "ciflow/crcr/gpu", ["ciflow/crcr/gpu"]))[0] == 202
    build, test = f"crcr/{L3}/CI/build", f"crcr/{L3}/CI/test"
    wait_runs(s, lambda f: all(shows(n, "in_progress")(f) for n in (build, test, REPO3)))
    # ... and the jobs carry on updating them in place.
    assert s.post(s.body(L3, job_name="build", status="completed", conclusion="success"), token)[0] == 200
    wait_runs(s, shows(build, "completed", "success"))
    assert shows(test, "in_progress")(runs(s)) and shows(REPO3, "in_progress")(runs(s))
    assert set(runs(s)) == {build, test, REPO3, REPO4}
    assert len(s.relay.github.dispatches(L3)) == 1  # nothing dispatched again


def test_l3_label_added_after_jobs_finished_creates_completed_runs(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    assert s.post(s.body(L3, status="completed", conclusion="failure"), s.token(L3))[0] == 200
    time.sleep(1)
    s.relay.post("pull_request", label_event(s, "labeled", "ciflow/crcr/gpu", ["ciflow/crcr/gpu"]))
    wait_runs(s, lambda f: shows(JOB3, "completed", "failure")(f) and shows(REPO3, "completed", "failure")(f))
    assert writes(s, JOB3) == ["POST 201"]  # created completed: one write
    assert len(s.relay.github.dispatches(L3)) == 1


def test_removing_the_label_leaves_existing_runs_following_their_jobs(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc, labels=("ciflow/crcr/gpu",))
    token = s.token(L3)
    assert s.post(s.body(L3), token)[0] == 200
    wait_runs(s, shows(JOB3, "in_progress"))
    s.relay.post("pull_request", label_event(s, "unlabeled", "ciflow/crcr/gpu", []))
    time.sleep(1)
    assert s.post(s.body(L3, status="completed", conclusion="success"), token)[0] == 200
    assert s.post(s.body(L3, job_name="later"), token)[0] == 200  # a new job after removal: no run of its own
    wait_runs(s, shows(JOB3, "completed", "success"))
    time.sleep(1.5)
    assert f"crcr/{L3}/CI/later" not in runs(s)
    # The repository's run, which existed, keeps following: a job is still running.
    assert shows(REPO3, "in_progress")(runs(s))


def rerequest(s: Scenario, run: dict[str, Any], sender: str = "a-maintainer") -> int:
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
        "sender": {"login": sender},
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
    wait_runs(s, shows(JOB4, "completed", "failure"))
    run = runs(s)[JOB4]

    assert rerequest(s, run) == 202
    wait(lambda: github.reruns(L4) == [777])
    assert github.reruns(L4) == [777]
    # Another maintainer clicks too (an event of its own: the same bytes again would be a replayed duplicate).
    assert rerequest(s, runs(s)[JOB4], sender="another-maintainer") == 202  # the run is queued again: a no-op
    time.sleep(2)
    assert github.reruns(L4) == [777]

    # The second attempt reports with its own token, and moves the same check run.
    attempt2 = s.token(L4, run_attempt=2)
    assert s.post(s.body(L4, run_attempt=2), attempt2) == (200, {"status": "recorded"})
    wait_runs(s, lambda f: shows(JOB4, "in_progress")(f) and shows(REPO4, "in_progress")(f))
    assert s.post(s.body(L4, run_attempt=2, status="completed", conclusion="success"), attempt2)[0] == 200
    wait_runs(s, lambda f: shows(JOB4, "completed", "success")(f) and shows(REPO4, "completed", "success")(f))
    assert runs(s)[JOB4]["id"] == run["id"]


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
    wait_runs(s, lambda f: all(shows(f"crcr/{L4}/CI/{job}", "completed", "failure")(f) for job in ("build", "test")))
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


def test_a_newer_commit_cancels_the_old_commits_queued_runs_and_leaves_running_ones(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc, labels=("ciflow/crcr/gpu",))
    assert s.post(s.body(L3), s.token(L3))[0] == 200  # L3 started on the old commit; L4 did not
    wait_runs(
        s,
        lambda f: all(shows(n, st)(f) for n, st in ((REPO4, "queued"), (REPO3, "in_progress"), (JOB3, "in_progress"))),
    )

    newer = "b" * 40
    s.relay.github.add_commit(UPSTREAM, newer)
    doc = json.loads(event_body("pull_request.opened.json"))
    doc["action"] = "synchronize"
    doc["pull_request"]["head"]["sha"] = newer
    doc["pull_request"]["labels"] = [{"name": "ciflow/crcr/gpu"}]
    doc["pull_request"]["updated_at"] = "2026-11-29T19:00:00Z"
    assert s.relay.post("pull_request", json.dumps(doc).encode())[0] == 202

    wait_runs(s, shows(REPO4, "completed", "cancelled"))
    old = runs(s)[REPO4]
    assert newer in old["output"]["summary"] and "superseded" in old["output"]["title"]
    assert shows(REPO3, "in_progress")(runs(s)) and shows(JOB3, "in_progress")(runs(s))  # running: left alone
    # The newer commit gets its own runs; nothing on it is cancelled.
    on_newer = Scenario(s.relay, s.oidc, s.delivery, newer)
    wait_runs(on_newer, lambda f: shows(REPO4, "queued")(f) and shows(REPO3, "queued")(f))
    assert writes(s, REPO4) == ["POST 201", "PATCH 200"]


def test_a_head_that_comes_back_after_a_force_push_has_its_check_runs_current_again(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    """Red team: force-pushing A, then B, then A again left A's required check `cancelled` ("superseded by B") for
    good, while the relay dispatched A again and B was the commit no longer wanted."""
    s = start(relay_factory, oidc)
    wait_runs(s, shows(REPO4, "queued"))
    other = "b" * 40
    s.relay.github.add_commit(UPSTREAM, other)

    def push(sha: str, at: str) -> None:
        doc = json.loads(event_body("pull_request.opened.json"))
        doc["action"] = "synchronize"
        doc["pull_request"]["head"]["sha"] = sha
        doc["pull_request"]["updated_at"] = at
        assert s.relay.post("pull_request", json.dumps(doc).encode())[0] == 202

    push(other, "2026-11-29T19:00:00Z")
    wait_runs(s, shows(REPO4, "completed", "cancelled"))
    on_other = Scenario(s.relay, s.oidc, s.delivery, other)
    wait_runs(on_other, shows(REPO4, "queued"))

    push(s.head_sha, "2026-11-29T19:05:00Z")  # back to A
    s.relay.wait_dispatches({L4: 3}, settle_s=0)  # A, B, then A again
    wait_runs(s, shows(REPO4, "queued"))  # A's required check is waiting for its dispatch again
    assert "waiting for the first job" in runs(s)[REPO4]["output"]["summary"]
    wait_runs(on_other, shows(REPO4, "completed", "cancelled"))  # B is the superseded one now
    assert s.head_sha in runs(on_other)[REPO4]["output"]["summary"]

    # A's new dispatch reports: the same check run follows it to its end.
    latest = s.relay.github.dispatches(L4)[-1]["client_payload"]
    done = {"schema_version": 1, "ticket": latest["ticket"], "status": "completed", "conclusion": "success",
            "workflow_name": "CI", "job_name": "build-and-test", "run_id": 777, "run_attempt": 1,
            "url": f"https://github.com/{L4}/actions/runs/777"}  # fmt: skip
    assert s.post(done, s.token(L4))[0] == 200
    wait_runs(s, shows(REPO4, "completed", "success"))
    assert writes(s, REPO4)[0] == "POST 201" and len(writes(s, REPO4)) >= 3  # one run, PATCHed in place


PER_REPO = DEFAULT_ALLOWLIST + "repos:\n  org-four/L4-Repo:\n    check_runs: per_repo\n"


def test_per_repo_writes_one_check_run_listing_the_jobs_in_two_writes(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc, allowlist=PER_REPO)
    wait_runs(s, shows(REPO4, "queued"))
    token = s.token(L4)
    for job in ("build", "test"):
        assert s.post(s.body(L4, job_name=job), token)[0] == 200
    assert s.post(s.body(L4, job_name="build", status="completed", conclusion="success"), token)[0] == 200
    assert s.post(s.body(L4, job_name="test", status="completed", conclusion="failure"), token)[0] == 200
    wait_runs(s, shows(REPO4, "completed", "failure"))
    summary = runs(s)[REPO4]["output"]["summary"]
    assert "CI / build: **success**" in summary and "CI / test: **failure**" in summary
    time.sleep(1.5)
    assert set(runs(s)) == {REPO4}
    assert writes(s, REPO4) == ["POST 201", "PATCH 200"]  # queued at dispatch, then the result


def test_over_the_installation_budget_writes_wait_and_none_is_lost(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    # A budget of 4 at once and one write every 1.5 s after it: 12 per-job check runs have to wait for it
    # however slowly the callbacks arrive (a loaded host once posted them slower than the default budget refilled).
    paced_before = TOTALS["CheckRunPaced"]
    per_job = DEFAULT_ALLOWLIST + "repos:\n  org-four/L4-Repo:\n    check_runs: per_job\n"
    # The installation's budget alone: one downstream here, its share (CRCR_DOWNSTREAM_WRITE_SHARE) the whole of it.
    env = {"CRCR_GITHUB_WRITE_RATES": "40/60+4", "CRCR_DOWNSTREAM_WRITE_SHARE": "1"}
    s = start(relay_factory, oidc, allowlist=per_job, env=env)
    token = s.token(L4)
    jobs = [f"job-{i:02d}" for i in range(12)]
    for job in jobs:  # 12 jobs x 2 states + the repository's run: more than the burst of 4
        assert s.post(s.body(L4, job_name=job), token)[0] == 200
    for job in jobs:
        assert s.post(s.body(L4, job_name=job, status="completed", conclusion="success"), token)[0] == 200
    names = [f"crcr/{L4}/CI/{job}" for job in jobs]
    wait_runs(
        s,
        lambda f: all(shows(n, "completed", "success")(f) for n in names) and shows(REPO4, "completed", "success")(f),
        timeout_s=120,
    )
    assert TOTALS["CheckRunPaced"] > paced_before
    times = sorted(r.time for r in s.relay.github.requests if "/check-runs" in r.path and r.method in ("POST", "PATCH"))
    # Within the burst and one write per 1.5 s after it, in any 6 s (the dispatch's own write booked it first).
    for i, t in enumerate(times):
        assert sum(1 for u in times[i:] if u - t < 6.0) <= 4 + 4 + 1
    assert all(len(writes(s, n)) <= 2 for n in names)  # never more than created + completed
