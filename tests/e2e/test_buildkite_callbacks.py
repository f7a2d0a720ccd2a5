"""Buildkite results on `crcr local`: real agent-shaped tokens from an independent issuer, the relay's own
build, PyTorch's ci_providers.yml; every way in for another build, pipeline, organization or CI refused."""

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
from tests.doubles.buildkite_double import BuildkiteDouble
from tests.doubles.buildkite_oidc import BuildkiteOidc
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_buildkite_dispatch import ALLOWLIST, BK_REPO, wait_builds
from tests.e2e.test_callback import REPO_IDS, oidc  # noqa: F401 - oidc is a fixture

pytestmark = pytest.mark.e2e
L2 = "org-two/l2-repo"


@pytest.fixture
def agent() -> Iterator[BuildkiteOidc]:
    with BuildkiteOidc(audience="crcr", organization_slug="vllm", pipeline_slug="ci") as issuer:
        yield issuer


@dataclass
class Built:
    relay: Relay
    agent: BuildkiteOidc
    github_oidc: OidcIssuer
    build: dict[str, Any]
    head_sha: str
    delivery: str

    def body(self, **changes: Any) -> dict[str, Any]:
        body = {
            "schema_version": 1,
            "ticket": self.build["env"]["CRCR_TICKET"],
            "status": "in_progress",
            "workflow_name": "ci",
            "job_name": "test",
            "run_id": self.build["id"],
            "run_attempt": 1,
            "url": self.build["web_url"],
        }
        return {k: v for k, v in (body | changes).items() if v is not None}

    def token(self, **claims: Any) -> str:
        defaults = {"build_number": self.build["number"], "build_id": self.build["id"], "job_id": JOB}
        return self.agent.mint(**(defaults | claims))

    def post(self, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
        headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
        return http("POST", f"{self.relay.url}/callback", json.dumps(body).encode(), headers)


JOB = "0184990a-477b-4fa8-9968-496074483cee"


@pytest.fixture
def built(
    relay_factory: Callable[..., Relay],
    agent: BuildkiteOidc,
    oidc: OidcIssuer,  # noqa: F811
    tmp_path: Path,
) -> Iterator[Built]:
    providers = tmp_path / "ci_providers.yml"
    providers.write_text(
        "providers:\n  buildkite:\n    repo_map:\n"
        f"      {agent.organization_id}/{agent.pipeline_id}:\n"
        f"        repo: {BK_REPO}\n        required_claims:\n          build_branch: [main]\n"
    )
    with BuildkiteDouble() as buildkite:
        buildkite.add_pipeline("vllm", "ci")
        relay = relay_factory(
            ALLOWLIST,
            env={
                "CRCR_BUILDKITE_API_URL": buildkite.url,
                "CRCR_BUILDKITE_API_TOKEN": buildkite.token,
                "CRCR_BUILDKITE_OIDC_ISSUER": agent.url,
                "CRCR_OIDC_ISSUER": oidc.url,
                "CRCR_OIDC_AUDIENCE": "crcr",
                "CRCR_CI_PROVIDERS": str(providers),
            },
        )
        pr = event_body("pull_request.opened.json")
        delivery = str(uuid.uuid4())
        assert relay.post("pull_request", pr, delivery)[0] == 202
        wait_builds(buildkite, 1, settle_s=0)
        relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
        [build] = buildkite.builds("vllm", "ci")
        yield Built(relay, agent, oidc, build, json.loads(pr)["pull_request"]["head"]["sha"], delivery)


def test_the_build_the_relay_created_reports_and_reaches_the_hud_on_the_dispatched_commit(
    built: Built, hud: HudDouble
) -> None:
    s = built
    assert s.post(s.body(check_run_id=JOB), s.token()) == (200, {"status": "recorded"})
    done = s.body(
        status="completed", conclusion="failure", test_results={"passed": 9, "failed": 1, "skipped": 0, "total": 10}
    )
    assert s.post(done, s.token()) == (200, {"status": "recorded"})
    assert s.post(done, s.token()) == (200, {"status": "duplicate"})
    deadline = time.time() + 15
    while time.time() < deadline and len(hud.pushes) < 2:
        time.sleep(0.1)
    [(key, row)] = hud.rows.items()
    assert key == f"{BK_REPO}/{s.delivery}/ci/test/{JOB}"  # one row per job attempt, keyed by the job's id
    assert (row["pr_number"], row["pytorch_head_sha"], row["run_id"]) == (170001, s.head_sha, s.build["id"])
    assert (row["status"], row["conclusion"], row["downstream_repo_level"]) == ("completed", "failure", "L2")
    assert row["workflow_run_url"] == s.build["web_url"]


def test_other_builds_pipelines_organizations_and_cis_are_refused(built: Built, hud: HudDouble) -> None:
    s = built
    other = str(uuid.uuid4())
    refused = {
        # A fork's pull request built by the same pipeline: Buildkite prefixes the fork owner to the branch.
        "fork branch": (s.body(), s.token(build_branch="someone:main", build_number=s.build["number"] + 1)),
        # The same pipeline's next build on main (anyone who can start a build): not the dispatched build.
        "another build": (s.body(), s.token(build_number=s.build["number"] + 1)),
        "unmapped pipeline": (s.body(), s.token(pipeline_id=other)),
        "another organization": (s.body(), s.token(organization_id=other)),
        "no pipeline ids": (s.body(), s.token(optional=())),
        "another build's id": (s.body(run_id=other), s.token()),
        "another job's id": (s.body(check_run_id="0184990a-0000-4fa8-9968-496074483cee"), s.token()),
    }
    fields = {name: s.post(body, token) for name, (body, token) in refused.items()}
    assert {name: (status, reply["field"]) for name, (status, reply) in fields.items()} == {
        "fork branch": (403, "build_branch"),
        "another build": (403, "build_number"),
        "unmapped pipeline": (403, "pipeline_id"),
        "another organization": (403, "pipeline_id"),
        "no pipeline ids": (403, "organization_id"),
        "another build's id": (403, "run_id"),
        "another job's id": (403, "check_run_id"),
    }
    # The Buildkite ticket from a GitHub Actions run of the very repository, and the reverse.
    github = s.github_oidc.token(
        repository=BK_REPO, repository_id=4242, run_id=777, run_attempt=1,
        job_workflow_ref=f"{BK_REPO}/.github/workflows/ci.yml@refs/heads/main",
    )  # fmt: skip
    status, reply = s.post(s.body(run_id=777), github)
    assert (status, reply["field"]) == (403, "ticket")
    [sent] = s.relay.github.dispatches(L2)
    github_ticket = sent["client_payload"]["ticket"]
    # A Buildkite token dressed in GitHub's claims for org-two/l2-repo, with that repository's ticket.
    dressed = s.token(repository=L2, repository_id=REPO_IDS[L2], event_name="repository_dispatch", run_id="777")
    status, reply = s.post(s.body(ticket=github_ticket, run_id=777), dressed)
    assert (status, reply["field"]) == (403, "ticket")
    time.sleep(1)
    assert hud.attempts == []  # nothing refused was recorded
