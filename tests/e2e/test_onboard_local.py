"""`crcr onboard` against a running `crcr local` and its sandbox GitHub: the App key is one the test generates,
the entry it prints passes `crcr allowlist check` with the sandbox's repository id, and the workflow it writes
passes actionlint (staged as `make workflow-lint` stages the example) and zizmor."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.local.sandbox import _ids as sandbox_ids
from crcr.local.stack import LocalStack
from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
BASE_ALLOWLIST = """\
# The relay's allowlist before onboarding: no L3 section and no repos: section yet.
L1:
  - pytorch-fdn/oota-stub
L4:
  - riscv/pytorch-riscv-ci: riscv-oncall
"""


@pytest.fixture(scope="module")
def app_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ).decode()


@pytest.fixture(scope="module")
def stack(app_key_pem: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    allowlist = tmp_path_factory.mktemp("allowlist") / "allowlist.yaml"
    allowlist.write_text(BASE_ALLOWLIST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_ENDPOINT"))}
    # No CRCR_GITHUB_API_URL: the stack serves its sandbox GitHub, which checks App JWTs with this key's public half.
    # The App is installed on the allowlist's repositories and, as a maintainer would have done before onboarding,
    # on the two this module onboards; nowhere else.
    env |= {
        "CRCR_ALLOWLIST": str(allowlist),
        "CRCR_GITHUB_APP_PRIVATE_KEY": app_key_pem,
        "CRCR_SANDBOX_INSTALLED": "intel/torch-xpu-ops,amd/rocm-ci",
    }
    with LocalStack(port=0, env=env, root=ROOT) as running:
        assert running.sandbox is not None
        yield running


def onboard(
    stack: LocalStack,
    app_key_pem: str,
    cwd: Path,
    *args: str,
    api_url: str | None = None,
    allowlist: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The command with the relay's variables, as an operator runs it against this stack."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))}
    env |= {
        "CRCR_GITHUB_API_URL": api_url or stack.env["CRCR_GITHUB_API_URL"],
        "CRCR_GITHUB_APP_ID": stack.env["CRCR_GITHUB_APP_ID"],
        "CRCR_GITHUB_APP_PRIVATE_KEY": app_key_pem,
    }
    if allowlist:
        env["CRCR_ALLOWLIST"] = allowlist
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "onboard", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_printed_entry_passes_allowlist_check_with_the_sandboxs_id(
    stack: LocalStack, app_key_pem: str, tmp_path: Path
) -> None:
    repo = "intel/torch-xpu-ops"
    assert stack.sandbox is not None
    before = len(stack.sandbox.requests)

    done = onboard(stack, app_key_pem, tmp_path, repo, "--level", "L3", "--device", "xpu")

    assert done.returncode == 0, done.stderr
    repository_id = sandbox_ids(repo)[1]  # the id the sandbox gives this name in every token response
    assert f"  ok      repository id {repository_id} (listed by an installation token down-scoped to {repo})" in (
        done.stdout
    )
    # The entry is the block between its heading and "Next:".
    lines = done.stdout.splitlines()
    entry = "\n".join(lines[lines.index("L3:") : lines.index("Next:") - 1]) + "\n"
    assert entry == f"L3:\n  xpu:\n    - {repo}\nrepos:\n  {repo}:\n    repository_id: {repository_id}\n"
    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text(BASE_ALLOWLIST + entry)

    check = subprocess.run(
        [str(BIN / "crcr"), "allowlist", "check", str(allowlist)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert check.returncode == 0, check.stderr
    assert any(line.split()[:3] == [repo, "L3", "xpu"] for line in check.stdout.splitlines()), check.stdout
    assert check.stdout.splitlines()[-1] == "3 repositories"
    listed = parse_allowlist(allowlist.read_text()).get(repo)
    assert listed is not None and listed.settings.repository_id == repository_id
    # The sandbox saw the App's JWT on the installation lookup and issued the down-scoped token.
    assert [(m, p, s) for m, p, s in stack.sandbox.requests[before:]] == [
        ("GET", f"/repos/{repo}/installation", 200),
        ("POST", f"/app/installations/{sandbox_ids(repo)[0]}/access_tokens", 201),
    ]


def test_the_written_workflow_passes_actionlint_and_zizmor(stack: LocalStack, app_key_pem: str, tmp_path: Path) -> None:
    done = onboard(stack, app_key_pem, tmp_path, "amd/rocm-ci", "--level", "L4", "--out", "out", "--json")
    assert done.returncode == 0, done.stderr
    [written] = json.loads(done.stdout)["files"]
    assert written == "out/.github/workflows/crcr.yml"
    # Staged as `make workflow-lint` stages the example: a project (.git and .github/workflows) of its own.
    stage = tmp_path / "downstream"
    (stage / ".git").mkdir(parents=True)
    (stage / ".github" / "workflows").mkdir(parents=True)
    (stage / ".github" / "workflows" / "crcr.yml").write_text((tmp_path / written).read_text())

    lint = subprocess.run(
        [str(BIN / "actionlint"), f"-shellcheck={BIN / 'shellcheck'}", "-pyflakes=", ".github/workflows/crcr.yml"],
        cwd=stage,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    audit = subprocess.run(
        [str(BIN / "zizmor"), "--offline", "--no-progress", ".github/workflows/crcr.yml"],
        cwd=stage,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_a_key_the_sandbox_does_not_know_is_refused_in_one_line(
    stack: LocalStack, app_key_pem: str, tmp_path: Path
) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ).decode()

    done = onboard(stack, pem, tmp_path, "intel/torch-xpu-ops", "--level", "L2")

    assert done.returncode == 1
    assert done.stderr == (
        "crcr onboard: 401: GET /repos/intel/torch-xpu-ops/installation: A JSON web token could not be decoded\n"
    )


def test_a_misspelt_repository_is_not_installed_on_the_sandbox(
    stack: LocalStack, app_key_pem: str, tmp_path: Path
) -> None:
    """The sandbox installs the App only where the allowlist or CRCR_SANDBOX_INSTALLED says: a typo fails there."""
    done = onboard(stack, app_key_pem, tmp_path, "intel/torch-xpu-opz", "--level", "L2")

    assert done.returncode == 1
    assert done.stderr == "crcr onboard: the App is not installed on intel/torch-xpu-opz\n"
    assert not (tmp_path / "crcr-onboard").exists()


def test_the_sandbox_installs_the_app_on_the_allowlists_repositories(
    stack: LocalStack, app_key_pem: str, tmp_path: Path
) -> None:
    done = onboard(stack, app_key_pem, tmp_path, "riscv/pytorch-riscv-ci", "--level", "L4", "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["installation_id"] == sandbox_ids("riscv/pytorch-riscv-ci")[0]


def test_a_wrong_api_url_is_not_taken_for_an_app_not_installed(
    stack: LocalStack, app_key_pem: str, tmp_path: Path
) -> None:
    """The relay's own port answers 404 to GitHub's paths, as a wrong host would: that is not "not installed"."""
    done = onboard(stack, app_key_pem, tmp_path, "intel/torch-xpu-ops", "--level", "L2", api_url=stack.url)

    assert done.returncode == 1
    assert done.stderr.startswith(
        f"crcr onboard: CRCR_GITHUB_API_URL {stack.url} does not answer as GitHub's API for this App ("
    ), done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_an_unreachable_api_is_told_apart(stack: LocalStack, app_key_pem: str, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"

    done = onboard(stack, app_key_pem, tmp_path, "intel/torch-xpu-ops", "--level", "L2", api_url=closed)

    assert done.returncode == 1
    assert done.stderr.startswith(f"crcr onboard: GitHub at CRCR_GITHUB_API_URL {closed} is unreachable or failing: ")
    assert len(done.stderr.splitlines()) == 1


def test_onboard_reads_the_current_allowlist_and_prints_the_move_as_a_diff(
    stack: LocalStack, app_key_pem: str, tmp_path: Path
) -> None:
    """A repository already at L4 asked for at L3: the change moves it (it printed an L3 entry that, merged, made
    the allowlist fail with "listed twice")."""
    repo = "riscv/pytorch-riscv-ci"
    allowlist = stack.env["CRCR_ALLOWLIST"]

    done = onboard(stack, app_key_pem, tmp_path, repo, "--level", "L3", "--device", "riscv", allowlist=allowlist)

    assert done.returncode == 0, done.stderr
    out = done.stdout
    diff = out[out.index("--- a/allowlist.yaml") : out.index("\n\nNext:")].splitlines()
    assert "-  - riscv/pytorch-riscv-ci: riscv-oncall" in diff and "-L4:" in diff
    at = diff.index("+L3:")
    assert diff[at : at + 3] == ["+L3:", "+  riscv:", '+    - riscv/pytorch-riscv-ci: ["riscv-oncall"]']
    assert f"+    repository_id: {sandbox_ids(repo)[1]}" in diff
    assert "Apply the allowlist change above, check the file with `crcr allowlist check FILE`" in out
    # Applied, it is a valid allowlist with the repository at L3 and nothing else changed.
    patch = subprocess.run(
        ["patch", "-o", str(tmp_path / "after.yaml"), allowlist],
        input="\n".join(diff) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert patch.returncode == 0, patch.stdout + patch.stderr
    after = parse_allowlist((tmp_path / "after.yaml").read_text())
    moved = after.get(repo)
    assert moved is not None and (moved.level.name, moved.device, moved.oncalls) == ("L3", "riscv", ("riscv-oncall",))
    assert [e.repo for e in after.entries if e.repo != repo] == ["pytorch-fdn/oota-stub"]


def test_running_onboard_again_never_overwrites_a_changed_file_without_force(
    stack: LocalStack, app_key_pem: str, tmp_path: Path
) -> None:
    first = onboard(stack, app_key_pem, tmp_path, "amd/rocm-ci", "--level", "L2")
    assert first.returncode == 0, first.stderr
    written = tmp_path / "crcr-onboard" / "amd-rocm-ci" / ".github" / "workflows" / "crcr.yml"
    written.write_text(written.read_text() + "# a maintainer's edit\n")
    again = onboard(stack, app_key_pem, tmp_path, "amd/rocm-ci", "--level", "L2")
    assert again.returncode == 1
    assert again.stderr == (
        "crcr onboard: crcr-onboard/amd-rocm-ci/.github/workflows/crcr.yml exists and differs: "
        "--force to overwrite it\n"
    )
    assert written.read_text().endswith("# a maintainer's edit\n")

    forced = onboard(stack, app_key_pem, tmp_path, "amd/rocm-ci", "--level", "L2", "--force")

    assert forced.returncode == 0, forced.stderr
    assert not written.read_text().endswith("# a maintainer's edit\n")
    # The same files again need no --force: nothing would be lost.
    assert onboard(stack, app_key_pem, tmp_path, "amd/rocm-ci", "--level", "L2").returncode == 0
