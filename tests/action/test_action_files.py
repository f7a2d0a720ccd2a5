"""action.yml and the example downstream workflow keep the safe pattern that the linters cannot see."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / "action" / "action.yml"
REPORT = ROOT / "action" / "report.py"
WORKFLOW = ROOT / "examples" / "workflows" / "downstream.yml"
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def env_name(input_name: str) -> str:
    return "CRCR_" + input_name.upper().replace("-", "_")


def test_every_input_reaches_the_script_through_env_only() -> None:
    action = load(ACTION)
    [step] = action["runs"]["steps"]
    source = REPORT.read_text()

    assert action["runs"]["using"] == "composite"
    assert step["run"] == 'python3 "$GITHUB_ACTION_PATH/report.py"'
    # Besides the inputs, only the job's own check-run id (a number GitHub sets, not user input).
    assert step["env"] == {env_name(name): f"${{{{ inputs.{name} }}}}" for name in action["inputs"]} | {
        "CRCR_OWN_CHECK_RUN_ID": "${{ job.check_run_id }}"
    }
    for name in step["env"]:
        assert f'"{name}"' in source, f"report.py never reads {name}"


def test_action_defaults() -> None:
    inputs = load(ACTION)["inputs"]

    assert inputs["status"]["required"] is True
    assert inputs["audience"]["default"] == "crcr"
    assert inputs["client-payload"]["default"] == "${{ toJSON(github.event.client_payload) }}"
    assert inputs["workflow-name"]["default"] == "${{ github.workflow }}"
    assert inputs["job-name"]["default"] == "${{ github.job }}"


def test_only_the_reporting_jobs_may_mint_oidc_tokens() -> None:
    jobs = load(WORKFLOW)["jobs"]

    assert load(WORKFLOW)["permissions"] == {}
    assert jobs["build-and-test"]["permissions"] == {"contents": "read"}
    reporting = {name for name, job in jobs.items() if any(s.get("uses") == "$/action" for s in job["steps"])}
    assert reporting == {"report-start", "report-result"}
    for name in reporting:
        assert jobs[name]["permissions"] == {"contents": "read", "id-token": "write"}
        assert not any("run" in step or "actions/checkout" in step.get("uses", "") for step in jobs[name]["steps"])


def test_the_result_is_reported_whatever_happened_for_the_job_that_ran() -> None:
    jobs = load(WORKFLOW)["jobs"]
    [start] = jobs["report-start"]["steps"]
    [result] = jobs["report-result"]["steps"]

    assert jobs["report-result"]["if"] == "always()"
    assert set(jobs["report-result"]["needs"]) == {"report-start", "build-and-test"}
    assert start["with"]["status"] == "in_progress"
    assert result["with"]["status"] == "completed"
    assert result["with"]["conclusion"] == "${{ needs.build-and-test.result }}"
    # Both report the build job, not themselves (the relay keys a job by its name).
    assert start["with"]["job-name"] == result["with"]["job-name"] == "build-and-test"


def test_no_expression_is_spliced_into_a_script_and_third_party_actions_are_pinned() -> None:
    for job in load(WORKFLOW)["jobs"].values():
        for step in job["steps"]:
            assert "${{" not in step.get("run", "")
            uses = step.get("uses", "$/")
            assert uses.startswith("$/") or PINNED.match(uses), uses
