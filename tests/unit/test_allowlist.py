"""Allowlist: PyTorch's YAML loads unchanged; every mistake names its line; bad files never replace good ones."""

from __future__ import annotations

import re

import pytest
import yaml

from crcr.adapters.allowlist_source import CachedAllowlist, parse_allowlist
from crcr.domain.allowlist import BuildkitePipeline, WorkflowTarget, build_allowlist
from crcr.domain.errors import AllowlistError
from crcr.domain.levels import Level
from tests.conftest import ROOT
from tests.unit.fakes import RecordingMetrics

PYTORCH_FORMAT = """\
L1:
  - org1/repo1
  - org2/repo2: oncall1, oncall2
L2:
  - org3/repo3
L3:
  device1:
    org4/repo4: [oncall3, oncall4]
L4:
  - org5/repo5: oncall5
"""


def test_pytorch_format_loads_unchanged() -> None:
    allowlist = parse_allowlist(PYTORCH_FORMAT)
    assert allowlist.table() == [
        ("org1/repo1", "L1", "", ""),
        ("org2/repo2", "L1", "", "oncall1, oncall2"),
        ("org3/repo3", "L2", "", ""),
        ("org4/repo4", "L3", "device1", "oncall3, oncall4"),
        ("org5/repo5", "L4", "", "oncall5"),
    ]


def test_names_compare_case_insensitively() -> None:
    entry = parse_allowlist(PYTORCH_FORMAT).get("ORG4/Repo4")
    assert entry is not None and entry.level is Level.L3 and entry.device == "device1"


def test_repos_settings_apply() -> None:
    doc = PYTORCH_FORMAT + (
        "repos:\n  org3/repo3:\n    events: [push]\n    branches: [main, 'release/*']\n"
        "    skip_drafts: true\n    repository_id: 42\n    repository_owner_id: 7\n    trusted_authors_only: true\n"
        "    check_runs: per_repo\n"
    )
    entry = parse_allowlist(doc).get("org3/repo3")
    assert entry is not None
    assert entry.settings.events == frozenset({"push"})
    assert entry.settings.branches == ("main", "release/*")
    assert entry.settings.skip_drafts and entry.settings.trusted_authors_only
    assert (entry.settings.repository_id, entry.settings.repository_owner_id) == (42, 7)
    assert entry.settings.check_runs == "per_repo"
    assert parse_allowlist(PYTORCH_FORMAT).get("org3/repo3").settings.check_runs == "auto"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("doc", "line", "words"),
    [
        ("L1:\n  - org1/repo1\nL2:\n  - ORG1/repo1\n", 4, "listed twice (first at line 2)"),
        ("L1:\n  - org1/repo1\n  - not a repo\n", 3, "not an owner/repo name"),
        ("L1:\n  - org1/repo1\nL5:\n  - org2/repo2\n", 3, "unknown top-level key 'L5'"),
        ("L1:\n  - org1/repo1\nrepos:\n  org1/repo1:\n    skip_draft: true\n", 5, "unknown key 'skip_draft'"),
        ("L1:\n  - org1/repo1\nrepos:\n  org9/other:\n    skip_drafts: true\n", 4, "not listed under any level"),
        ("L1:\n  - org1/repo1\nL1:\n  - org2/repo2\n", 3, "duplicate key 'L1'"),
        ("L1:\n  - org1/repo1\n  - [unclosed\n", 4, "not valid YAML"),
        ("L1:\n  - org1/repo1\nrepos:\n  org1/repo1:\n    events: [issues]\n", 5, "unknown event 'issues'"),
        ("L1:\n  - org1/repo1\nrepos:\n  org1/repo1:\n    check_runs: per_step\n", 5, "one of auto, per_job, per_repo"),
        ("L3:\n  'bad device!':\n    org1/repo1: x\n", 2, "is not a device name"),
        ("L1:\n  - org1/repo1\nrepos:\n  org1/repo1:\n    repository_owner_id: '7'\n", 5, "a positive integer"),
    ],
)
def test_errors_name_the_line(doc: str, line: int, words: str) -> None:
    with pytest.raises(AllowlistError) as caught:
        parse_allowlist(doc)
    assert caught.value.line == line
    assert words in caught.value.message
    assert caught.value.message.startswith(f"line {line}: ")


def test_a_bad_document_never_replaces_the_last_good_one() -> None:
    documents = [PYTORCH_FORMAT.encode(), b"L1:\n  - broken name\n", None]
    metrics = RecordingMetrics()
    errors: list[str] = []
    clock = iter(range(0, 1000, 100))
    cached = CachedAllowlist(lambda: documents.pop(0), metrics, lambda: float(next(clock)), 60, errors.append)

    assert len(cached.current()) == 5
    assert len(cached.current()) == 5  # the bad document was fetched and refused
    assert len(cached.current()) == 5  # unchanged source
    assert metrics.counts["AllowlistLoaded"] == 1
    assert metrics.counts["AllowlistRejected"] == 1
    assert "line 2" in errors[0]


def test_no_allowlist_at_all_is_an_error_not_an_empty_relay() -> None:
    cached = CachedAllowlist(lambda: b"L9: []\n", RecordingMetrics(), lambda: 0.0)
    with pytest.raises(AllowlistError):
        cached.current()


def test_a_buildkite_pipeline_is_a_repository_setting() -> None:
    doc = yaml.safe_load(
        "L2:\n  - vllm-project/vllm\nrepos:\n  vllm-project/vllm:\n    buildkite: {organization: vllm, pipeline: ci}\n"
    )
    [entry] = build_allowlist(doc).entries
    assert entry.settings.buildkite == BuildkitePipeline("vllm", "ci", "main")
    for bad, named in (
        ("{organization: vllm}", "organization and pipeline"),
        ("{organization: Vllm, pipeline: ci}", "buildkite.organization"),
        ("{organization: vllm, pipeline: ci, token: x}", "unknown key 'token'"),
    ):
        broken = yaml.safe_load(f"L2:\n  - vllm-project/vllm\nrepos:\n  vllm-project/vllm:\n    buildkite: {bad}\n")
        with pytest.raises(AllowlistError, match=named):
            build_allowlist(broken)


def test_a_workflow_file_is_dispatched_through_workflow_dispatch_by_choice() -> None:
    def entry(setting: str) -> WorkflowTarget | None:
        doc = yaml.safe_load(f"L2:\n  - org/ci\nrepos:\n  org/ci:\n    workflow: {setting}\n")
        return build_allowlist(doc).entries[0].settings.workflow

    assert entry("ci.yml") == WorkflowTarget("ci.yml", "main")
    assert entry("{file: crcr.yaml, ref: release/2.9}") == WorkflowTarget("crcr.yaml", "release/2.9")
    for bad, named in (
        ("ci", ".yml or .yaml name"),
        ("../ci.yml", ".yml or .yaml name"),
        ("{file: ci.yml, branch: main}", "a mapping with file"),
        ("{file: ci.yml, ref: 'a..b'}", "ref must be a branch name"),
    ):
        with pytest.raises(AllowlistError, match=named):
            entry(bad)
    both = "L2:\n  - org/ci\nrepos:\n  org/ci:\n    workflow: ci.yml\n    buildkite: {organization: o, pipeline: p}\n"
    with pytest.raises(AllowlistError, match=re.escape("workflow (GitHub Actions) or buildkite, not both")):
        build_allowlist(yaml.safe_load(both))
    # Without the key, repository_dispatch as before.
    plain = build_allowlist(yaml.safe_load("L2:\n  - org/ci\n")).entries[0]
    assert plain.settings.workflow is None


PYTORCH_CURRENT = (ROOT / "tests/events/pytorch/allowlist.yml").read_text()


def test_pytorchs_current_allowlist_loads_unchanged() -> None:
    allowlist = parse_allowlist(PYTORCH_CURRENT)
    rows = {e.repo: (e.level.name, e.device, e.oncalls, e.settings.nightly_only) for e in allowlist.entries}
    assert rows == {
        "pytorch-fdn/oota-stub": ("L1", None, (), False),
        "intel/torch-xpu-ops": ("L1", None, ("xpu-oncall", "intel-ci"), False),
        "NVIDIA/pytorch-windows-ci": ("L1", None, (), True),
        "example-org/l1-listed-oncalls": ("L1", None, ("a-oncall", "b-oncall"), False),
        "ascend/pytorch-npu-ci": ("L2", None, (), False),
        "TorchedHat/pytorch-redhat-ci": ("L2", None, (), True),
        "vllm-project/vllm": ("L2", None, ("vllm-oncall", "vllm-infra"), True),
        "example-org/l2-empty-entry": ("L2", None, (), False),
        "rocm/pytorch-rocm-ci": ("L3", "rocm", ("rocm-oncall",), False),
        "apple/pytorch-mps-ci": ("L3", "mps", ("mps-oncall",), False),
        "example-org/l3-nightly": ("L3", "npu", ("npu-oncall",), True),
        "example-org/l3-nightly-no-oncalls": ("L3", "npu", (), True),
        "riscv/pytorch-riscv-ci": ("L4", None, ("riscv-oncall",), False),
        "example-org/l4-nightly": ("L4", None, ("l4-oncall",), True),
    }
    assert allowlist.get("vllm-project/vllm").settings.events == frozenset({"nightly"})  # type: ignore[union-attr]


def test_crcr_settings_still_apply_beside_the_mapping_form() -> None:
    doc = PYTORCH_CURRENT + "repos:\n  vllm-project/vllm:\n    buildkite: {organization: vllm, pipeline: ci}\n"
    entry = parse_allowlist(doc).get("vllm-project/vllm")
    assert entry is not None and entry.settings.nightly_only and entry.settings.buildkite is not None
    both = "L2:\n  - org/a:\n      events: [nightly, pull_request]\n"
    mixed = parse_allowlist(both).get("org/a")
    assert mixed is not None and not mixed.settings.nightly_only
    ciflow = parse_allowlist("L4:\n  - org/a\nrepos:\n  org/a:\n    ciflow: [trunk, periodic]\n").get("org/a")
    assert ciflow is not None and ciflow.settings.ciflow == ("trunk", "periodic")


@pytest.mark.parametrize(
    ("doc", "line", "words"),
    [
        ("L2:\n  - org/a:\n      event: [nightly]\n", 3, "unknown key 'event' in its entry"),
        ("L2:\n  - org/a:\n      events: [nighty]\n", 3, "unknown event 'nighty'"),
        ("L2:\n  - org/a:\n      events: []\n", 3, "non-empty list of events"),
        ("L2:\n  - org/a:\n      events: nightly\n", 3, "non-empty list of events"),
        ("L3:\n  npu:\n    org/a:\n      oncalls: {x: 1}\n", 4, "oncalls must be"),
        (
            "L2:\n  - org/a:\n      events: [nightly]\nrepos:\n  org/a:\n    events: [push]\n",
            6,
            "already gives its events",
        ),
        ("L2:\n  - org/a\nrepos:\n  org/a:\n    ciflow: [trunk/x]\n", 5, "list of ciflow names"),
    ],
)
def test_mapping_form_errors_name_the_line(doc: str, line: int, words: str) -> None:
    with pytest.raises(AllowlistError) as caught:
        parse_allowlist(doc)
    assert caught.value.line == line, caught.value.message
    assert words in caught.value.message
