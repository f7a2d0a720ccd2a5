"""Settings checked before the relay runs: `crcr local` refuses to print `ready`, and a function's cold start fails,
with one line per problem naming the variable, or the file and line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from crcr.adapters import preflight
from crcr.composition.planner import build_planner_deps
from crcr.settings import ConfigError, Settings
from tests.conftest import ROOT

GOOD = "L2:\n  - org/repo\n"
BUILDKITE = (
    "L2:\n  - vllm-project/vllm\nrepos:\n  vllm-project/vllm:\n    buildkite: {organization: vllm, pipeline: ci}\n"
)


def local(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))}
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "local", *args],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (None, "CRCR_ALLOWLIST: {path}: No such file or directory"),
        ("L1:\n  - a/b\n  - A/B\n", "CRCR_ALLOWLIST: {path}:3: A/B is listed twice (first at line 2)"),
        ("L1: [\n", "CRCR_ALLOWLIST: {path}:2: not valid YAML: expected the node content, but found '<stream end>'"),
        ("{}\n", "CRCR_ALLOWLIST: {path} lists no repository, so no event would be dispatched"),
    ],
    ids=["missing", "twice", "yaml", "empty"],
)
def test_crcr_local_refuses_a_bad_allowlist_in_one_line_before_ready(
    tmp_path: Path, text: str | None, line: str
) -> None:
    path = tmp_path / "allowlist.yaml"
    if text is not None:
        path.write_text(text)

    done = local({"CRCR_ALLOWLIST": str(path)}, "--port", "0")

    assert done.returncode == 2
    assert done.stdout == ""  # no ready line
    [problem] = done.stderr.splitlines()
    assert problem.startswith("crcr local: " + line.format(path=path)), problem


def test_every_problem_is_its_own_line_naming_its_variable(tmp_path: Path) -> None:
    done = local(
        {
            "CRCR_ALLOWLIST": str(tmp_path / "nope.yaml"),
            "CRCR_HUD_URL": "hud.example.com/api",
            "CRCR_OIDC_ISSUER": "http://issuer.example.com",
            "CRCR_START_TIMEOUT_S": "an hour",
        },
        "--port",
        "0",
    )

    assert done.returncode == 2 and done.stdout == ""
    assert sorted(done.stderr.splitlines()) == [
        "crcr local: CRCR_HUD_URL: must be an http(s) URL with a host, got 'hud.example.com/api'",
        "crcr local: CRCR_OIDC_ISSUER: must be an https URL (plain http only on loopback), got "
        "'http://issuer.example.com'",
        "crcr local: CRCR_START_TIMEOUT_S: Input should be a valid integer, unable to parse string as an integer "
        "(got 'an hour')",
    ]


def test_crcr_locals_schedules_and_queue_timeout_are_settings_checked_before_ready(tmp_path: Path) -> None:
    """The schedule periods and the visibility timeout are read once, in Settings: a period of zero would run a
    function without a pause, and a word is no number of seconds; each is refused naming its variable."""
    (tmp_path / "a.yaml").write_text(GOOD)
    done = local(
        {
            "CRCR_ALLOWLIST": str(tmp_path / "a.yaml"),
            "CRCR_SWEEP_INTERVAL_S": "0",
            "CRCR_EXPORT_INTERVAL_S": "-1",
            "CRCR_LEVEL_INTERVAL_S": "0.5",  # a fraction of a second is a period
            "CRCR_LOCAL_VISIBILITY_TIMEOUT_S": "soon",
        },
        "--port",
        "0",
    )

    assert done.returncode == 2 and done.stdout == ""
    assert sorted(done.stderr.splitlines()) == [
        "crcr local: CRCR_EXPORT_INTERVAL_S: Input should be greater than 0 (got '-1')",
        "crcr local: CRCR_LOCAL_VISIBILITY_TIMEOUT_S: Input should be a valid integer, unable to parse string as an "
        "integer (got 'soon')",
        "crcr local: CRCR_SWEEP_INTERVAL_S: Input should be greater than 0 (got '0')",
    ]


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        done = local({"CRCR_ALLOWLIST": str(tmp_path / "a.yaml")}, "--port", str(port))

    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"crcr local: --port {port}: 127.0.0.1:{port} is in use (another crcr local?); --port 0 picks a free one\n"
    )


def test_a_buildkite_downstream_without_ci_providers_is_refused(tmp_path: Path) -> None:
    """The sandbox Buildkite's reports were all refused, and vllm vanished from the HUD, with nothing said."""
    (tmp_path / "a.yaml").write_text(BUILDKITE)

    done = local({"CRCR_ALLOWLIST": str(tmp_path / "a.yaml")}, "--port", "0")

    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(
        "crcr local: CRCR_CI_PROVIDERS: not set, but the allowlist builds vllm-project/vllm on Buildkite"
    )
    assert len(done.stderr.splitlines()) == 1


def test_ci_providers_that_map_no_pipeline_to_a_buildkite_downstream_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(BUILDKITE.replace("vllm-project/vllm", "acme/other"))
    settings = Settings(allowlist=str(tmp_path / "a.yaml"), ci_providers=str(ROOT / "examples" / "ci_providers.yml"))

    assert preflight.documents(settings) == [
        f"CRCR_CI_PROVIDERS: {ROOT / 'examples' / 'ci_providers.yml'} maps no Buildkite pipeline to acme/other, "
        "which the allowlist builds on Buildkite: every report of its would be refused"
    ]
    assert (
        preflight.documents(settings.model_copy(update={"allowlist": str(ROOT / "examples" / "allowlist.yaml")})) == []
    )


def test_an_empty_allowlist_passes_when_it_is_meant(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("L1: []\n")
    settings = Settings.from_env({"CRCR_ALLOWLIST": str(tmp_path / "a.yaml"), "CRCR_ALLOW_EMPTY_ALLOWLIST": "true"})

    assert preflight.documents(settings) == []


def test_keys_given_in_the_environment_must_parse_as_what_they_are() -> None:
    settings = Settings.from_env(
        {
            "CRCR_GITHUB_APP_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nno\n-----END RSA PRIVATE KEY-----\n",
            "CRCR_TICKET_SIGNING_KEY": "secret",
        }
    )

    assert preflight.keys(settings) == [
        "CRCR_GITHUB_APP_PRIVATE_KEY: not an RSA private key in PEM (the App's .pem file as GitHub issues it)",
        "CRCR_TICKET_SIGNING_KEY: must be an Ed25519 private key in PKCS#8 PEM",
    ]


def test_a_remote_source_is_checked_for_its_form_only() -> None:
    settings = Settings(allowlist="s3://bucket-without-key")

    assert preflight.documents(settings) == [
        "CRCR_ALLOWLIST: allowlist source 's3://bucket-without-key': expected s3://bucket/key"
    ]
    assert preflight.documents(Settings(allowlist="s3://bucket/allowlist.yaml")) == []


def test_the_planners_cold_start_fails_naming_the_file_and_line(tmp_path: Path) -> None:
    """The same check at a function's cold start: the planner no longer starts and fails every message after it."""
    path = tmp_path / "allowlist.yaml"
    path.write_text("L1:\n  - org/repo\nL2:\n  - org/repo\n")
    settings = Settings(
        allowlist=str(path),
        state_table="t",
        dispatch_queue_url="http://127.0.0.1:1/q",
        dispatch_dlq_url="http://127.0.0.1:1/d",
        bodies_bucket="b",
    )

    with pytest.raises(ConfigError) as caught:
        build_planner_deps(settings)

    assert caught.value.problems == [f"CRCR_ALLOWLIST: {path}:4: org/repo is listed twice (first at line 2)"]
