"""The report helper as a Buildkite command step: a stand-in `buildkite-agent` on PATH mints real tokens from the
Buildkite issuer double; a local relay records what the helper sends."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.action.test_report import REPORT, TICKET, FakeGitHubAndRelay, Reply
from tests.doubles.buildkite_oidc import BuildkiteOidc, Job, StandInAgent
from tests.doubles.test_buildkite_oidc import verify

MINT = ["oidc", "request-token", "--audience", "crcr", "--claim", "organization_id,pipeline_id"]
OUTCOME = ["step", "get", "outcome", "--step", "build-and-test"]
SYSTEM_PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass
class Pipeline:
    """One job of a relay-created build, its agent and the relay it reports to."""

    bk: BuildkiteOidc
    relay: FakeGitHubAndRelay
    agent: StandInAgent
    job: Job

    def env(self, **changes: str | None) -> dict[str, str]:
        base = {
            **self.job.env(),
            "PATH": self.agent.path_env(SYSTEM_PATH),
            # What the relay put in the build's env when it created the build (docs/contracts.md).
            "CRCR_TICKET": TICKET,
            "CRCR_CALLBACK_URL": f"{self.relay.url}/callback",
            "CRCR_DELIVERY_ID": "5b7c0d2e-0000-4000-8000-000000000001",
            "CRCR_EVENT_TYPE": "pull_request",
            "CRCR_UPSTREAM_REPO": "pytorch/pytorch",
            "CRCR_UPSTREAM_SHA": "a" * 40,
            "CRCR_UPSTREAM_PR": "7",
            # What the reporting step sets (examples/buildkite/pipeline.yml).
            "CRCR_STATUS": "in_progress",
            "CRCR_JOB_NAME": "build-and-test",
            "CRCR_REPORT_BACKOFF_BASE_S": "0.001",
        }
        return {k: v for k, v in {**base, **changes}.items() if v is not None}

    def run(self, **changes: str | None) -> Run:
        done = subprocess.run(
            [sys.executable, str(REPORT)],
            env=self.env(**changes),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    def callbacks(self) -> list[Any]:
        return self.relay.requests("/callback")

    def agent_calls(self) -> list[list[str]]:
        calls = self.agent.calls()
        assert all(call[0] == str(self.agent.path) for call in calls)
        return [call[1:] for call in calls]


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    with BuildkiteOidc(audience="crcr") as bk, FakeGitHubAndRelay() as relay:
        agent = StandInAgent(tmp_path / "bin", outcomes={"build-and-test": "passed"})
        yield Pipeline(bk, relay, agent, bk.job("crcr-report-start", label=":satellite: crcr: report start"))


def test_in_progress_mints_with_the_agent_and_sends_the_builds_identity(pipeline: Pipeline) -> None:
    run = pipeline.run()

    assert run.code == 0, run.output
    assert pipeline.agent_calls() == [MINT]
    [callback] = pipeline.callbacks()
    env = pipeline.env()
    assert callback.json() == {
        "schema_version": 1,
        "ticket": TICKET,
        "status": "in_progress",
        "workflow_name": "xpu-ci",  # BUILDKITE_PIPELINE_SLUG
        "job_name": "build-and-test",
        "run_id": pipeline.bk.build_id,  # BUILDKITE_BUILD_ID, the build the relay created
        "run_attempt": 1,  # BUILDKITE_RETRY_COUNT + 1
        "url": f"https://buildkite.com/acme-inc/xpu-ci/builds/{pipeline.bk.build_number}",
        "check_run_id": pipeline.job.job_id,  # BUILDKITE_JOB_ID: unique per job attempt
    }
    assert callback.json()["url"] == env["BUILDKITE_BUILD_URL"]
    # The token the relay got is a real Buildkite-shaped one for this very job, with the ids it maps.
    assert callback.headers["authorization"].startswith("Bearer ")
    claims = verify(callback.headers["authorization"].removeprefix("Bearer "), pipeline.bk.issuer, "crcr")
    assert claims == pipeline.bk.claims(**pipeline.job.claims, now=claims["iat"])  # Buildkite's claims, no others
    assert claims["job_id"] == pipeline.job.job_id and claims["step_key"] == "crcr-report-start"
    assert claims["build_number"] == pipeline.bk.build_number
    assert (claims["organization_id"], claims["pipeline_id"]) == (pipeline.bk.organization_id, pipeline.bk.pipeline_id)
    assert run.stdout.splitlines() == [
        f"crcr: this pipeline is {pipeline.bk.organization_id}/{pipeline.bk.pipeline_id} in the relay's "
        "ci_providers.yml",
        "crcr: relay answered recorded",
        "crcr: reported in_progress for build-and-test: recorded",
    ]
    assert "::" not in run.output  # no GitHub workflow commands on Buildkite, and the token is never printed
    assert claims["sub"] not in run.output


@pytest.mark.parametrize(
    ("outcome", "conclusion"),
    [
        ("passed", "success"),
        ("hard_failed", "failure"),
        ("soft_failed", "neutral"),
        ("errored", "failure"),
        ("neutral", "neutral"),
    ],
)
def test_completed_takes_the_build_steps_outcome(tmp_path: Path, outcome: str, conclusion: str) -> None:
    with BuildkiteOidc() as bk, FakeGitHubAndRelay() as relay:
        agent = StandInAgent(tmp_path / "bin", outcomes={"build-and-test": outcome})
        pipeline = Pipeline(bk, relay, agent, bk.job("crcr-report-result", retry_count=2))
        results = '{"passed": 9, "failed": 1, "skipped": 0, "total": 10}'

        run = pipeline.run(CRCR_STATUS="completed", CRCR_OUTCOME_STEP="build-and-test", CRCR_TEST_RESULTS=results)

        assert run.code == 0, run.output
        assert pipeline.agent_calls() == [OUTCOME, MINT]  # the outcome is read before any token is minted
        [callback] = pipeline.callbacks()
        body = callback.json()
        assert (body["status"], body["conclusion"], body["run_attempt"]) == ("completed", conclusion, 3)
        assert body["test_results"] == json.loads(results)
        assert body["check_run_id"] == pipeline.job.job_id


def test_a_given_conclusion_and_names_are_sent_as_given(pipeline: Pipeline) -> None:
    run = pipeline.run(
        CRCR_STATUS="completed",
        CRCR_CONCLUSION="timed_out",
        CRCR_WORKFLOW_NAME="xpu nightly",
        CRCR_JOB_NAME=None,  # default: the step's key
        CRCR_AUDIENCE="https://relay.example.com",
        CRCR_STARTED_AT="2026-12-01T10:00:00Z",
    )

    assert run.code == 0, run.output
    assert pipeline.agent_calls() == [[*MINT[:3], "https://relay.example.com", *MINT[4:]]]
    body = pipeline.callbacks()[0].json()
    assert (body["conclusion"], body["workflow_name"], body["job_name"]) == (
        "timed_out",
        "xpu nightly",
        "crcr-report-start",
    )
    assert body["started_at"] == "2026-12-01T10:00:00Z"


def test_each_attempt_mints_a_fresh_token_and_5xx_is_retried(pipeline: Pipeline) -> None:
    pipeline.relay.reply(Reply(503, {"error": "unavailable"}), Reply(200, {"status": "duplicate"}))
    pipeline.bk.fail_next(f"/v3/jobs/{pipeline.job.job_id}/oidc/tokens", 1, 502)  # the agent exits 1: retried

    run = pipeline.run()

    assert run.code == 0, run.output
    assert pipeline.agent_calls() == [MINT, MINT, MINT]
    assert len(pipeline.callbacks()) == 2
    assert "buildkite-agent oidc request-token failed (exit 1)" in run.stderr
    assert "crcr: relay answered duplicate" in run.stdout


def _one_line(run: Run) -> str:
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_without_the_agent_it_fails_in_one_line_before_any_call(pipeline: Pipeline) -> None:
    run = pipeline.run(PATH=SYSTEM_PATH)

    assert run.code == 1
    assert _one_line(run) == (
        "crcr: buildkite-agent is not on PATH: the report must run in a Buildkite job, where the agent mints its "
        "OIDC token"
    )
    assert pipeline.relay.seen == []


def test_an_agent_refusal_fails_in_one_line_without_retrying(pipeline: Pipeline) -> None:
    run = pipeline.run(BUILDKITE_AGENT_ACCESS_TOKEN="bkaj_revoked")

    assert run.code == 1
    line = _one_line(run)
    assert line.startswith("crcr: buildkite-agent refused to mint an OIDC token (exit 77): fatal: failed to get OIDC")
    assert ": 401 " in line
    assert pipeline.agent_calls() == [MINT]
    assert pipeline.relay.seen == []


def test_a_relay_4xx_fails_in_one_line_with_its_reason(pipeline: Pipeline) -> None:
    pipeline.relay.reply(Reply(403, {"error": "forbidden", "message": "pipeline not mapped", "field": "token"}))

    run = pipeline.run()

    assert run.code == 1
    assert _one_line(run).startswith(
        "crcr: relay rejected the report: HTTP 403 forbidden pipeline not mapped (field: token); the relay's allowlist"
    )
    assert pipeline.agent_calls() == [MINT]  # a 4xx is final
    assert len(pipeline.callbacks()) == 1


def test_an_unfinished_or_unknown_step_has_no_conclusion(pipeline: Pipeline) -> None:
    run = pipeline.run(CRCR_STATUS="completed", CRCR_OUTCOME_STEP="build")

    assert run.code == 1
    assert _one_line(run).startswith(
        "crcr: buildkite-agent step get outcome --step build failed (exit 1): fatal: failed to get step"
    )
    assert pipeline.agent_calls() == [["step", "get", "outcome", "--step", "build"]]
    assert pipeline.relay.seen == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"CRCR_TICKET": None}, "this build was not created by a crcr dispatch: $CRCR_TICKET is not set"),
        ({"CRCR_CALLBACK_URL": ""}, "this build was not created by a crcr dispatch: $CRCR_CALLBACK_URL is not set"),
        ({"CRCR_CALLBACK_URL": "http://relay.example.com/callback"}, "refusing callback_url"),
        ({"CRCR_RELAY_URL": "https://crcr.example.com"}, "not on the relay this workflow trusts"),
        ({"BUILDKITE_BUILD_ID": "1514"}, "$BUILDKITE_BUILD_ID is '1514', not a build UUID"),
        ({"BUILDKITE_RETRY_COUNT": "-1"}, "$BUILDKITE_RETRY_COUNT is '-1', not a number"),
        ({"BUILDKITE_JOB_ID": ""}, "$BUILDKITE_JOB_ID is '', not a job id"),
        ({"CRCR_CHECK_RUN_ID": "123"}, "CRCR_CHECK_RUN_ID is not used on Buildkite"),
        ({"GITHUB_ACTIONS": "true"}, "both $BUILDKITE and $GITHUB_ACTIONS are true"),
        ({"CRCR_STATUS": "done"}, "CRCR_STATUS must be one of in_progress, completed"),
        ({"CRCR_STATUS": "completed"}, "CRCR_CONCLUSION is required when status is completed"),
        ({"CRCR_OUTCOME_STEP": "build-and-test"}, "CRCR_OUTCOME_STEP gives a conclusion"),
        (
            {"CRCR_STATUS": "completed", "CRCR_CONCLUSION": "success", "CRCR_OUTCOME_STEP": "build-and-test"},
            "give CRCR_CONCLUSION or CRCR_OUTCOME_STEP, not both",
        ),
        ({"CRCR_TEST_RESULTS": "passed=3"}, "CRCR_TEST_RESULTS is not JSON"),
        ({"CRCR_TEST_RESULTS": '{"passed": -1, "failed": 0, "skipped": 0, "total": 1}'}, "CRCR_TEST_RESULTS.passed"),
        ({"CRCR_AUDIENCE": " "}, None),  # blank is the default audience, as when unset
    ],
)
def test_inputs_are_checked_before_the_agent_or_the_relay_is_asked(
    pipeline: Pipeline, changes: dict[str, str | None], message: str | None
) -> None:
    run = pipeline.run(**changes)

    if message is None:
        assert run.code == 0, run.output
        assert pipeline.agent_calls() == [MINT]
        return
    assert run.code == 1
    assert message in _one_line(run)
    assert pipeline.agent_calls() == []
    assert pipeline.relay.seen == []


def test_relay_url_pins_the_callback_on_buildkite_too(pipeline: Pipeline) -> None:
    run = pipeline.run(CRCR_RELAY_URL=f"{pipeline.relay.url}/")

    assert run.code == 0, run.output
    assert len(pipeline.callbacks()) == 1


def test_an_unmasked_token_never_reaches_the_log(pipeline: Pipeline) -> None:
    run = pipeline.run()

    token = pipeline.callbacks()[0].headers["authorization"].removeprefix("Bearer ")
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    assert token not in run.output
