"""A Buildkite nightly build reported as vLLM's reporter reports it, on `crcr local`: one step posts PyTorch's body
for every job of the build with the tested commit in a top-level `pytorch_head_sha` and a delivery id of its own per
job. The relay files the whole build as one scheduled run of that commit: in the HUD push (PyTorch's HUD port), the
export and the nightly page."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crcr.adapters.results import DynamoResults
from crcr.ops.torchci_rows import select_rows
from tests.conftest import HUD_TOKEN, Relay, http
from tests.doubles.buildkite_double import BuildkiteDouble
from tests.doubles.buildkite_oidc import BuildkiteOidc
from tests.doubles.hud import HudDouble
from tests.e2e.test_buildkite_dispatch import ALLOWLIST, BK_REPO

pytestmark = pytest.mark.e2e
UPSTREAM = "pytorch/pytorch"
SHA, OTHER = "c0ffee" + "1" * 34, "c0ffee" + "2" * 34
BUILD_NUMBER = 4711
JOBS = {"build / cuda": "passed", "test / cuda": "failed", "test / rocm": "passed"}
CONCLUSION = {"passed": "success", "failed": "failure"}


@pytest.fixture
def agent() -> Iterator[BuildkiteOidc]:
    with BuildkiteOidc(audience="crcr", organization_slug="vllm", pipeline_slug="ci") as issuer:
        yield issuer


@pytest.fixture
def relay(relay_factory: Callable[..., Relay], agent: BuildkiteOidc, hud: HudDouble, tmp_path: Path) -> Iterator[Relay]:
    providers = tmp_path / "ci_providers.yml"
    providers.write_text(
        f"providers:\n  buildkite:\n    repo_map:\n      {agent.organization_id}/{agent.pipeline_id}:\n"
        f"        repo: {BK_REPO}\n"
    )
    with BuildkiteDouble() as buildkite:
        relay = relay_factory(
            ALLOWLIST,
            env={
                "CRCR_BUILDKITE_API_URL": buildkite.url,
                "CRCR_BUILDKITE_API_TOKEN": buildkite.token,
                "CRCR_BUILDKITE_OIDC_ISSUER": agent.url,
                "CRCR_OIDC_AUDIENCE": "crcr",
                "CRCR_CI_PROVIDERS": str(providers),
                "CRCR_HUD_URL": hud.url,
                "CRCR_HUD_TOKEN": HUD_TOKEN,
            },
        )
        relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975)
        relay.github.add_commit(UPSTREAM, SHA)
        yield relay


def reported(job_name: str, state: str, **top: Any) -> dict[str, Any]:
    """vLLM's nightly reporter's body for one job of the build (its fields as it sends them)."""
    job_id = f"0184990a-0000-4fa8-9968-{list(JOBS).index(job_name):012d}"
    return {
        "delivery_id": f"buildkite-{BUILD_NUMBER}-{job_id}",
        "event_type": "nightly",
        "pytorch_head_sha": SHA,
        "workflow": {
            "status": "completed",
            "conclusion": CONCLUSION[state],
            "run_id": BUILD_NUMBER,
            "run_attempt": 1,
            "name": "ci",
            "job_name": job_name,
            "url": f"https://buildkite.com/vllm/ci/builds/{BUILD_NUMBER}#{job_id}",
            "started_at": "2026-12-06T02:00:00Z",
        },
    } | top


def post(relay: Relay, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    return http("POST", f"{relay.url}/callback", json.dumps(body).encode(), headers)


def wait(condition: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not condition():
        time.sleep(0.2)
    return condition()


def test_a_nightly_build_of_several_jobs_is_one_scheduled_run_of_one_commit(
    relay: Relay, agent: BuildkiteOidc, hud: HudDouble
) -> None:
    # The reporting step's own token: a scheduled build (not a webhook's), its number the body's run_id.
    token = agent.mint(build_source="schedule", build_number=BUILD_NUMBER)
    # Refused first, and nothing of it kept: a body naming two commits, a pytorch_head_sha that is no SHA.
    status, reply = post(relay, reported("build / cuda", "passed", payload={"head_sha": OTHER}), token)
    assert (status, reply["field"]) == (400, "payload.head_sha"), reply
    status, reply = post(relay, reported("build / cuda", "passed", pytorch_head_sha="main"), token)
    assert (status, reply["field"]) == (400, "pytorch_head_sha"), reply
    for job_name, state in JOBS.items():
        assert post(relay, reported(job_name, state), token) == (200, {"status": "recorded"}), job_name

    # PyTorch's HUD (the port): one commit, one delivery id and one run for the whole build, a row per job.
    rows = wait(lambda: len(hud.rows) == len(JOBS) and list(hud.rows.values()))
    assert sorted(r["job_name"] for r in rows) == sorted(JOBS)
    assert {(r["pytorch_head_sha"], r["delivery_id"], r["run_id"], r["event_type"]) for r in rows} == {
        (SHA, "scheduled", str(BUILD_NUMBER), "nightly")
    }
    assert {r["job_name"]: r["conclusion"] for r in rows} == {name: CONCLUSION[s] for name, s in JOBS.items()}

    # The export: the same rows PyTorch's HUD built.
    table = relay.stack.function_env["CRCR_RESULTS_TABLE"]
    exported = select_rows(DynamoResults(relay.stack.client("dynamodb"), table).all_jobs())
    assert {(r["pytorch_head_sha"], r["delivery_id"], r["run_id"]) for r in exported} == {
        (SHA, "scheduled", str(BUILD_NUMBER))
    }
    assert len(exported) == len(JOBS)

    # The nightly page: one day, one repository, the build's jobs, every one on the commit.
    def nightly() -> dict[str, Any]:
        status, doc = http("GET", f"{relay.url}/hud/data/nightly.json")
        return doc if status == 200 else {}

    doc = wait(lambda: (d := nightly()) and sum(len(r.get(BK_REPO, {})) for r in d["days"].values()) == 3 and d)
    [day] = doc["days"].values()
    assert sorted(day) == [BK_REPO]
    assert {name.split("/", 1)[1]: (cell["sha"], cell["state"]) for name, cell in day[BK_REPO].items()} == {
        name: (SHA, CONCLUSION[state]) for name, state in JOBS.items()
    }
