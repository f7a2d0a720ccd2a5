"""examples/buildkite/pipeline.yml: valid for Buildkite's own schema, and the safe shape no schema can see."""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "examples" / "buildkite" / "pipeline.yml"
REPORT = "python3 .buildkite/crcr/report.py"
REPORTING = ("crcr-report-start", "crcr-report-result")


def load() -> dict[str, Any]:
    data = yaml.safe_load(PIPELINE.read_text())
    assert isinstance(data, dict)
    return data


def steps() -> dict[str, dict[str, Any]]:
    return {step["key"]: step for step in load()["steps"]}


def test_the_pipeline_is_valid_for_buildkites_schema() -> None:
    schema = json.loads(importlib.resources.files("buildkite_sdk").joinpath("schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)

    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(load()), key=lambda e: list(e.path))

    assert [f"{list(e.path)}: {e.message}" for e in errors] == []


def test_one_build_step_and_two_reporting_steps() -> None:
    assert list(steps()) == ["crcr-report-start", "build-and-test", "crcr-report-result"]
    for step in steps().values():
        assert set(step) <= {
            "label",
            "key",
            "command",
            "env",
            "depends_on",
            "allow_dependency_failure",
            "timeout_in_minutes",
        }
        assert step["timeout_in_minutes"] > 0


def test_only_the_reporting_steps_run_the_helper_or_ask_for_tokens() -> None:
    for key, step in steps().items():
        runs_helper = REPORT in step["command"]
        assert runs_helper == (key in REPORTING), key
        assert "oidc" not in step["command"]
    build = steps()["build-and-test"]
    assert "env" not in build
    # The upstream code runs in a subshell without the agent's job credentials.
    assert (
        "unset BUILDKITE_AGENT_ACCESS_TOKEN BUILDKITE_AGENT_JOB_API_SOCKET BUILDKITE_AGENT_JOB_API_TOKEN"
        in (build["command"])
    )
    assert "https://github.com/pytorch/pytorch.git" in build["command"]  # the upstream is named, not taken from env


def test_both_reports_name_the_build_step_and_the_result_follows_it_whatever_happened() -> None:
    start, result = steps()["crcr-report-start"], steps()["crcr-report-result"]

    assert start["env"] == {"CRCR_STATUS": "in_progress", "CRCR_JOB_NAME": "build-and-test"}
    assert result["env"] == {
        "CRCR_STATUS": "completed",
        "CRCR_OUTCOME_STEP": "build-and-test",
        "CRCR_JOB_NAME": "build-and-test",
    }
    assert result["depends_on"] == ["crcr-report-start", "build-and-test"]
    assert result["allow_dependency_failure"] is True
    assert "depends_on" not in start and "depends_on" not in steps()["build-and-test"]


def test_the_relay_url_is_pinned_in_each_reporting_command() -> None:
    for key in REPORTING:
        assert f"CRCR_RELAY_URL=https://crcr.example.com {REPORT}" in steps()[key]["command"]


def test_no_value_is_interpolated_into_a_command_at_upload() -> None:
    # Buildkite replaces $VAR / ${VAR} when the pipeline is uploaded; only $$ reaches the shell as a literal $.
    for key, step in steps().items():
        single = re.findall(r"(?<!\$)\$(?!\$)", step["command"].replace("$$", ""))
        assert single == [], key
        for value in step.get("env", {}).values():
            assert "$" not in value
