"""Allowlist: PyTorch's YAML loads unchanged; every mistake names its line; bad files never replace good ones."""

from __future__ import annotations

import pytest
import yaml

from crcr.adapters.allowlist_source import CachedAllowlist, parse_allowlist
from crcr.domain.allowlist import BuildkitePipeline, build_allowlist
from crcr.domain.errors import AllowlistError
from crcr.domain.levels import Level
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
        "    skip_drafts: true\n    repository_id: 42\n    trusted_authors_only: true\n    check_runs: per_repo\n"
    )
    entry = parse_allowlist(doc).get("org3/repo3")
    assert entry is not None
    assert entry.settings.events == frozenset({"push"})
    assert entry.settings.branches == ("main", "release/*")
    assert entry.settings.skip_drafts and entry.settings.trusted_authors_only
    assert entry.settings.repository_id == 42
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
