"""`crcr onboard` and `crcr app-manifest` as subprocesses, against the independent GitHub double."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import APP_ID
from tests.doubles.github_double import GitHubDouble, Reply

ROOT = Path(__file__).resolve().parents[2]


def crcr(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def env(github: GitHubDouble, app_key_pem: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))}
    return base | {
        "CRCR_GITHUB_API_URL": github.url,
        "CRCR_GITHUB_APP_ID": APP_ID,
        "CRCR_GITHUB_APP_PRIVATE_KEY": app_key_pem,
        "CRCR_GITHUB_TIMEOUT_S": "2",
    }


def test_an_installed_repository_gets_its_id_and_githubs_spelling(
    github: GitHubDouble, env: dict[str, str], tmp_path: Path
) -> None:
    github.install("Intel/Torch-XPU-Ops", installation_id=77, repo_id=987654)

    done = crcr(env, tmp_path, "onboard", "intel/torch-xpu-ops", "--level", "L3", "--device", "xpu", "--json")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["repo"], result["installation_id"], result["repository_id"]) == ("Intel/Torch-XPU-Ops", 77, 987654)
    assert result["allowlist_entry"] == (
        "L3:\n  xpu:\n    - Intel/Torch-XPU-Ops\nrepos:\n  Intel/Torch-XPU-Ops:\n    repository_id: 987654\n"
    )
    assert result["files"] == ["crcr-onboard/Intel-Torch-XPU-Ops/.github/workflows/crcr.yml"]
    assert (tmp_path / result["files"][0]).is_file()
    # Only the two endpoints docs/contracts.md allows for this, and a token for that one repository with metadata only.
    assert [(r.method, r.path) for r in github.requests] == [
        ("GET", "/repos/intel/torch-xpu-ops/installation"),
        ("POST", "/app/installations/77/access_tokens"),
    ]
    assert github.requests[1].json == {"repositories": ["torch-xpu-ops"], "permissions": {"metadata": "read"}}
    assert github.unexpected == []


def test_no_report_writes_the_workflow_with_no_report_step_and_no_token_permission(
    github: GitHubDouble, env: dict[str, str], tmp_path: Path
) -> None:
    github.install("org/simple-ci", installation_id=78, repo_id=55501)

    done = crcr(env, tmp_path, "onboard", "org/simple-ci", "--level", "L2", "--no-report", "--json")

    assert done.returncode == 0, done.stderr
    [written] = json.loads(done.stdout)["files"]
    workflow = yaml.safe_load((tmp_path / written).read_text())
    # Only the run-name the relay binds the run by; no job may mint an OIDC token, none uses the report action.
    assert workflow["run-name"] == "crcr ${{ github.event.action }} ${{ github.event.client_payload.dispatch_id }}"
    assert workflow["permissions"] == {}
    assert all("id-token" not in (job.get("permissions") or {}) for job in workflow["jobs"].values())
    assert "crcr/action" not in (tmp_path / written).read_text()
    assert workflow[True] == {"repository_dispatch": {"types": ["pull_request", "push"]}}  # YAML's `on`

    refused = crcr(env, tmp_path, "onboard", "org/ci", "--level", "L2", "--buildkite", "o/p", "--no-report")
    assert refused.returncode == 2 and "--no-report is for GitHub Actions downstreams" in refused.stderr


def test_the_human_output_names_the_checks_the_entry_and_what_is_left(
    github: GitHubDouble, env: dict[str, str], tmp_path: Path
) -> None:
    github.install("org/repo", installation_id=5, repo_id=1001)
    ref = "pytorch/crcr/action@" + "0123456789" * 4

    done = crcr(env, tmp_path, "onboard", "org/repo", "--level", "L4", "--out", "here", "--action-ref", ref)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "crcr onboard: org/repo at L4, GitHub Actions",
        "  ok      the App is installed on org/repo (installation 5)",
        "  ok      repository id 1001 (listed by an installation token down-scoped to org/repo)",
        "  wrote   here/.github/workflows/crcr.yml",
        "",
        "Allowlist entry (merge into the allowlist's L4: and repos: sections where it has them):",
        "",
        "L4:",
        "  - org/repo",
        "repos:",
        "  org/repo:",
        "    repository_id: 1001",
        "",
        "Next:",
        "  1. Commit .github/workflows/crcr.yml to org/repo's default branch.",
        "  2. Add the allowlist entry, check the file with `crcr allowlist check FILE`, publish it.",
    ]
    assert (tmp_path / "here/.github/workflows/crcr.yml").read_text().count(f"uses: {ref}\n") == 2


def test_a_repository_the_app_is_not_installed_on_fails_in_one_line(
    github: GitHubDouble, env: dict[str, str], tmp_path: Path
) -> None:
    github.install("org/other", installation_id=5, repo_id=1001)

    done = crcr(env, tmp_path, "onboard", "org/missing", "--level", "L2")

    assert done.returncode == 1
    assert done.stderr == "crcr onboard: the App is not installed on org/missing\n"
    assert done.stdout == ""
    assert not (tmp_path / "crcr-onboard").exists()


@pytest.mark.parametrize(
    ("setup", "code", "message"),
    [
        ("down", 1, "crcr onboard: GitHub at CRCR_GITHUB_API_URL http://127.0.0.1:"),
        ("bad_key", 2, "crcr onboard: CRCR_GITHUB_APP_PRIVATE_KEY is not the App's private key"),
        ("no_app_id", 2, "crcr onboard: missing configuration: CRCR_GITHUB_APP_ID"),
        ("other_key", 1, "crcr onboard: 401: GET /repos/org/repo/installation: A JSON web token could not be decoded"),
    ],
)
def test_configuration_and_github_failures_are_one_line(
    github: GitHubDouble, env: dict[str, str], tmp_path: Path, setup: str, code: int, message: str
) -> None:
    github.install("org/repo", installation_id=5, repo_id=1001)
    if setup == "down":
        github.script("GET", r"/repos/org/repo/installation", [Reply(502)])
    elif setup == "bad_key":
        env["CRCR_GITHUB_APP_PRIVATE_KEY"] = (
            "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----\n"
        )
    elif setup == "no_app_id":
        del env["CRCR_GITHUB_APP_ID"]
    else:
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        env["CRCR_GITHUB_APP_PRIVATE_KEY"] = other.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        ).decode()

    done = crcr(env, tmp_path, "onboard", "org/repo", "--level", "L2")

    assert done.returncode == code
    assert done.stderr.startswith(message), done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_a_buildkite_downstream_asks_nothing_of_github(github: GitHubDouble, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))}  # no App at all
    env["CRCR_CALLBACK_URL"] = "https://relay.acme.dev/callback"

    done = crcr(env, tmp_path, "onboard", "acme/xpu-backend", "--level", "L2", "--buildkite", "acme/xpu-ci", "--json")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["checks"][0]["result"] == "skipped"
    assert "the App need not be installed" in result["checks"][0]["detail"]
    assert result["installation_id"] is None and result["repository_id"] is None
    assert '"<organization_id>/<pipeline_id>":' in result["ci_providers_entry"]
    out = tmp_path / "crcr-onboard" / "acme-xpu-backend"
    assert result["files"] == [
        "crcr-onboard/acme-xpu-backend/.buildkite/crcr.yml",
        "crcr-onboard/acme-xpu-backend/.buildkite/crcr/report.py",
    ]
    assert (out / ".buildkite/crcr/report.py").read_bytes() == (ROOT / "action" / "report.py").read_bytes()
    assert (out / ".buildkite/crcr.yml").read_text().count("CRCR_RELAY_URL=https://relay.acme.dev python3") == 2
    assert github.requests == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["org/repo", "--level", "L3"], "crcr onboard: --level L3 needs --device"),
        (["org/repo", "--level", "L2", "--action-ref", "org/crcr/action@v1"], "crcr onboard: --action-ref must be"),
        (["org", "--level", "L2"], "crcr onboard: 'org' is not an owner/repo name"),
    ],
)
def test_bad_arguments_exit_2_before_github_is_asked(
    github: GitHubDouble, env: dict[str, str], tmp_path: Path, args: list[str], message: str
) -> None:
    done = crcr(env, tmp_path, "onboard", *args)

    assert done.returncode == 2
    assert done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1
    assert github.requests == []


def test_an_unwritable_out_fails_in_one_line(github: GitHubDouble, env: dict[str, str], tmp_path: Path) -> None:
    github.install("org/repo", installation_id=5, repo_id=1001)
    (tmp_path / "file").write_text("")

    done = crcr(env, tmp_path, "onboard", "org/repo", "--level", "L2", "--out", "file/sub")

    assert done.returncode == 1
    assert done.stderr.startswith("crcr onboard: ") and "Not a directory" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_app_manifest_fills_the_webhook_url_and_writes_a_form(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRCR_")}
    url = "https://crcr.acme.dev/webhook"

    done = crcr(env, tmp_path, "app-manifest", "--webhook-url", url, "--org", "acme", "--form", "form.html")

    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    template = json.loads((ROOT / "infra" / "github-app-manifest.json").read_text())
    assert manifest == template | {"url": "https://crcr.acme.dev", "hook_attributes": {"url": url, "active": True}}
    page = (tmp_path / "form.html").read_text()
    state = re.search(r"state=([A-Za-z0-9_-]+)", done.stderr)
    assert state is not None
    action = html.unescape(re.search(r'<form action="([^"]+)" method="post">', page).group(1))  # type: ignore[union-attr]
    assert action == f"https://github.com/organizations/acme/settings/apps/new?state={state.group(1)}"
    value = re.search(r'<input type="hidden" name="manifest" value="([^"]*)">', page)
    assert value is not None and json.loads(html.unescape(value.group(1))) == manifest


def test_a_shadow_relays_app_may_only_read_and_hears_only_what_it_plans_from(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRCR_")}
    done = crcr(env, tmp_path, "app-manifest", "--shadow", "--webhook-url", "https://shadow.acme.dev/webhook")
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    assert set(manifest["default_permissions"].values()) == {"read"}
    assert manifest["default_events"] == ["pull_request", "push"] and "shadow" in manifest["description"]


def test_app_manifest_refuses_a_webhook_url_that_is_not_https(tmp_path: Path) -> None:
    done = crcr(dict(os.environ), tmp_path, "app-manifest", "--webhook-url", "http://crcr.acme.dev/webhook")

    assert done.returncode == 2
    assert done.stderr.startswith("crcr app-manifest: --webhook-url must be an https URL")
