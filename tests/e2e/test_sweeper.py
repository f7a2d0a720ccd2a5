"""The sweeper on `crcr local`: a dispatch that never starts and a job that never finishes end timed_out,
visible on the HUD and as check runs; a genuine late result replaces timed_out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import HUD_TOKEN, Relay
from tests.doubles.github_double import Reply
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import Scenario, oidc  # noqa: F401 - oidc is a fixture
from tests.e2e.test_check_runs import L2, L4, UPSTREAM, start

pytestmark = pytest.mark.e2e


@pytest.fixture
def swept(relay_factory: Callable[..., Relay], hud: HudDouble) -> Callable[..., Relay]:
    def make(**env: str) -> Relay:
        return relay_factory(
            env={
                "CRCR_START_TIMEOUT_S": "2",
                "CRCR_RUN_TIMEOUT_S": "3",
                "CRCR_SWEEP_INTERVAL_S": "1",
                "CRCR_HUD_URL": hud.url,
                "CRCR_HUD_TOKEN": HUD_TOKEN,
            }
            | env
        )

    return make


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not predicate():
        time.sleep(0.2)


def test_a_dispatch_that_never_starts_ends_timed_out(
    swept: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    hud: HudDouble,
) -> None:
    s = start(lambda **kw: swept(**kw["env"]), oidc)
    runs = s.relay.github.check_runs

    def repo_runs() -> list[dict[str, object]]:
        return [r for r in runs(UPSTREAM) if r["name"] == f"crcr/{L4}"]

    wait_for(lambda: any(r["status"] == "completed" for r in repo_runs()))
    [repo_run] = repo_runs()  # the one created queued at dispatch, completed in place
    assert (repo_run["status"], repo_run["conclusion"]) == ("completed", "timed_out")
    assert "No job of this dispatch started" in repo_run["output"]["summary"]

    def timed_out() -> list[dict[str, object]]:
        return [p["trusted"] for p in hud.pushes if p["trusted"]["state"] == "timed_out"]

    wait_for(lambda: len(timed_out()) >= 3)
    # Every L2+ dispatch is watched (L2, L3, L4); L1 repositories record nothing, so are never watched.
    assert sorted(str(t["verified_repo"]) for t in timed_out()) == sorted([L2, "org-three/l3-repo", L4])
    assert all(t["head_sha"] == s.head_sha for t in timed_out())
    before = len(hud.pushes)
    time.sleep(2.5)
    assert len(hud.pushes) == before  # swept once, not on every tick


def test_a_job_that_never_finishes_times_out_and_a_late_result_replaces_it(
    swept: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    # A long start timeout: only the run timeout is under test here, however slow the machine.
    s = start(lambda **kw: swept(**kw["env"] | {"CRCR_START_TIMEOUT_S": "60"}), oidc)
    token = s.token(L4)
    assert s.post(s.body(L4), token)[0] == 200  # started: no start timeout for this dispatch
    name = f"crcr/{L4}/CI/build-and-test"

    def job_run(check: str = name) -> dict[str, object]:
        return next((r for r in s.relay.github.check_runs(UPSTREAM) if r["name"] == check), {})

    wait_for(
        lambda: job_run().get("conclusion") == "timed_out" and job_run(f"crcr/{L4}").get("conclusion") == "timed_out"
    )
    assert job_run()["status"] == "completed" and job_run()["conclusion"] == "timed_out"
    assert job_run(f"crcr/{L4}")["conclusion"] == "timed_out"  # the repository's run follows its job
    late = s.body(L4, status="completed", conclusion="success")
    assert s.post(late, s.token(L4)) == (200, {"status": "recorded"})
    wait_for(lambda: job_run().get("conclusion") == "success" and job_run(f"crcr/{L4}").get("conclusion") == "success")
    assert job_run()["conclusion"] == "success"
    assert job_run(f"crcr/{L4}")["conclusion"] == "success"  # a genuine result replaces the relay's timed_out
    [job] = [j for j in s.jobs() if j["job_name"] == "build-and-test"]
    assert (job["state"], job["conclusion"]) == ("completed", "success")


def test_a_job_that_reports_before_its_dispatch_is_marked_sent_is_never_timed_out(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    # GitHub carries out the L4 dispatch at once but answers it only when the test says: the downstream's first
    # job reports while the relay still waits on its POST, so the dispatch is marked sent after its job started.
    release = threading.Event()

    def held(**kw: Any) -> Relay:
        relay = relay_factory(
            **kw | {"env": kw["env"] | {"CRCR_START_TIMEOUT_S": "1", "CRCR_SWEEP_INTERVAL_S": "86400"}}
        )
        relay.github.script("POST", f"/repos/{L4}/dispatches", [Reply.held(release)])
        return relay

    s = start(held, oidc)
    try:
        assert s.post(s.body(L4), s.token(L4)) == (200, {"status": "recorded"})
    finally:
        release.set()
    wait_for(lambda: s.relay.metric("DispatchSent") == 4)
    assert s.relay.metric("DispatchSent") == 4
    time.sleep(1.1)  # past the start time-out of every dispatch, L4's counted from when it was marked sent
    summary = s.relay.stack.invoke("SweeperFunction", {"source": "aws.events", "detail-type": "Scheduled Event"})
    # The dispatches no job reported on are timed out; L4's job had started, so its dispatch is not.
    assert summary["never_started"] == 2, summary
    assert [(j["job_name"], j["state"]) for j in s.jobs() if j["repo"] == L4] == [("build-and-test", "in_progress")]
