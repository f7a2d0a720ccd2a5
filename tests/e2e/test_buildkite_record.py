"""Buildkite's own record of the builds the relay created, on `crcr local` against the Buildkite double: when a
build should have finished and its agents' reports did not all come, the sweeper reads the build once and records
what no report said, as Buildkite says it ended; a build still running keeps running; none is timed out falsely."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LISTED, Relay, event_body, http
from tests.doubles.buildkite_double import BuildkiteDouble, Reply
from tests.doubles.buildkite_oidc import BuildkiteOidc
from tests.doubles.hud import HudDouble
from tests.e2e.test_buildkite_dispatch import ALLOWLIST, BK_REPO, wait_builds

pytestmark = pytest.mark.e2e
START_S, RUN_S = 3, 4  # CRCR_START_TIMEOUT_S, CRCR_RUN_TIMEOUT_S: the sweeper asks within seconds


@dataclass
class Build:
    relay: Relay
    buildkite: BuildkiteDouble
    agent: BuildkiteOidc
    build: dict[str, Any]
    delivery: str

    def play(self, jobs: list[tuple[str, str]], state: str) -> dict[str, str]:
        """The build's jobs as Buildkite now has them: their ids by name."""
        played = self.buildkite.play("vllm", "ci", self.build["number"], jobs, state)
        return {job["name"]: job["id"] for job in played}

    def report(self, job: str, job_id: str, **changes: Any) -> tuple[int, dict[str, Any]]:
        body = {
            "schema_version": 1,
            "ticket": self.build["env"]["CRCR_TICKET"],
            "status": "in_progress",
            "workflow_name": "ci",
            "job_name": job,
            "run_id": self.build["id"],
            "run_attempt": 1,
            "url": self.build["web_url"],
        } | changes
        token = self.agent.mint(build_number=self.build["number"], build_id=self.build["id"], job_id=job_id)
        headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
        return http("POST", f"{self.relay.url}/callback", json.dumps(body).encode(), headers)

    def rows(self) -> dict[str, dict[str, Any]]:
        """The results table's rows of the build, by job name ("" for the dispatch's own row)."""
        ddb = self.relay.stack.client("dynamodb")
        items = ddb.scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
        found = [{k: next(iter(v.values())) for k, v in item.items()} for item in items]
        return {j["job_name"]: j for j in found if j.get("repo") == BK_REPO}


@pytest.fixture
def built(relay_factory: Callable[..., Relay], tmp_path: Path) -> Iterator[Build]:
    with (
        BuildkiteOidc(audience="crcr", organization_slug="vllm", pipeline_slug="ci") as agent,
        BuildkiteDouble() as buildkite,
    ):
        providers = tmp_path / "ci_providers.yml"
        providers.write_text(
            "providers:\n  buildkite:\n    repo_map:\n"
            f"      {agent.organization_id}/{agent.pipeline_id}:\n        repo: {BK_REPO}\n"
        )
        buildkite.add_pipeline("vllm", "ci")
        relay = relay_factory(
            ALLOWLIST,
            env={
                "CRCR_BUILDKITE_API_URL": buildkite.url,
                "CRCR_BUILDKITE_API_TOKEN": buildkite.token,
                "CRCR_BUILDKITE_OIDC_ISSUER": agent.url,
                "CRCR_OIDC_AUDIENCE": "crcr",
                "CRCR_CI_PROVIDERS": str(providers),
                "CRCR_START_TIMEOUT_S": str(START_S),
                "CRCR_RUN_TIMEOUT_S": str(RUN_S),
                "CRCR_SWEEP_INTERVAL_S": "1",
            },
        )
        delivery = str(uuid.uuid4())
        assert relay.post("pull_request", event_body("pull_request.opened.json"), delivery)[0] == 202
        wait_builds(buildkite, 1, settle_s=0)
        relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
        [build] = buildkite.builds("vllm", "ci")
        yield Build(relay, buildkite, agent, build, delivery)


def wait_for(check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    return check()


def build_reads(s: Build) -> list[Any]:
    return [r for r in s.buildkite.requests if r.method == "GET" and r.path.endswith(f"/builds/{s.build['number']}")]


def test_a_build_whose_agents_never_reported_is_recorded_as_buildkite_says_it_ended(
    built: Build, hud: HudDouble
) -> None:
    s = built
    ids = s.play([("test", "failed"), ("lint", "passed")], "failed")
    rows = wait_for(lambda: (r := s.rows()) and {"test", "lint"} <= set(r) and r)
    assert {name: (r["state"], r["conclusion"]) for name, r in rows.items()} == {
        "test": ("completed", "failure"),
        "lint": ("completed", "success"),
    }
    assert rows["test"]["check_run_id"] == ids["test"] and rows["test"]["source"] == "buildkite"
    assert s.relay.metric("BuildRead") == 1
    assert len(build_reads(s)) == 1  # one read of the build, when it should have finished

    # PyTorch's HUD gets one row per job, as if the agents had reported, and nothing timed out.
    def pushed() -> list[str]:
        return [
            p["untrusted"]["callback_payload"]["workflow"]["conclusion"]
            for p in hud.pushes
            if p["trusted"]["verified_repo"] == BK_REPO
            and p["untrusted"]["callback_payload"]["workflow"].get("conclusion")
        ]

    assert sorted(wait_for(lambda: len(pushed()) >= 2 and pushed())) == ["failure", "success"]
    assert not [j for j in s.rows().values() if j.get("state") == "timed_out"]


def test_a_build_still_running_keeps_running_and_a_job_whose_completion_was_lost_gets_buildkites_end(
    built: Build,
) -> None:
    s = built
    ids = s.play([("test", "running")], "running")
    assert s.report("test", ids["test"]) == (200, {"status": "recorded"})  # its completion never comes
    # Past its run's time-out the sweeper asks: Buildkite says it runs, so it runs on.
    assert wait_for(lambda: s.relay.metric("BuildStillRunning") >= 1, 20)
    assert s.rows()["test"]["state"] == "in_progress"
    s.play([("test", "passed")], "passed")
    done = wait_for(lambda: s.rows()["test"]["state"] != "in_progress" and s.rows()["test"], 20)
    assert done, s.rows()
    assert (done["conclusion"], done["check_run_id"], done["source"]) == ("success", ids["test"], "buildkite+report")
    assert set(s.rows()) == {"test"}  # no record of the dispatch timed out beside it


def test_buildkite_unavailable_is_asked_again_and_a_build_it_no_longer_has_is_timed_out_as_before(
    built: Build,
) -> None:
    s = built
    path = rf"/v2/organizations/vllm/pipelines/ci/builds/{s.build['number']}"
    s.buildkite.script("GET", path, [Reply(502), *[Reply.error(404, "No build found")] * 50])
    row = wait_for(lambda: s.rows().get(""), 25)
    assert row and (row["state"], row["conclusion"]) == ("timed_out", "timed_out"), s.rows()
    assert s.relay.metric("SweepBuildkiteUnavailable") == 1  # the 502: asked again, not timed out
    assert s.relay.metric("SweepBuildkiteRefused") >= 1  # then 404: Buildkite cannot tell, so it times out
    assert len(build_reads(s)) >= 2
