"""Set-up says what it does: each step of building .venv and .tools-venv (what `make demo` and `make test` start
with) is announced with its expected duration instead of minutes of silent pip, and `make build` says which of
SAM's messages are expected and that `crcr local` is how the handlers run here, not `sam local`."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import ROOT


def dry_run(*targets: str) -> list[str]:
    """The commands make would run (`-B`: as on a fresh clone), without running them."""
    done = subprocess.run(
        ["make", "-n", "-B", *targets], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize(("target", "venv"), [("venv", ".venv"), ("template-lint", ".tools-venv")])
def test_every_set_up_step_is_announced_with_its_duration(target: str, venv: str) -> None:
    lines = dry_run(target)
    steps = [i for i, line in enumerate(lines) if re.search(r"-m (venv|pip install)", line) and venv in line]

    assert steps, lines
    for i in steps:
        announced = lines[i - 1]
        assert announced.startswith("echo "), f"{lines[i]!r} runs unannounced"
        assert re.search(r"\(about \d+ s|\(\d+ to \d+ minutes\)|s; up to \d+ s", announced), announced
    assert lines[steps[-1] + 2] == f'echo "  {venv} ready"'


def test_make_build_explains_the_expected_warnings_and_points_to_crcr_local() -> None:
    said = " ".join(line.removeprefix("echo ").strip('"') for line in dry_run("build") if line.startswith("echo "))

    assert "expected along the way, one 'requirements.txt file not found' per function" in said
    assert "'sam local invoke' needs Docker: here, crcr local runs the same handlers" in said
