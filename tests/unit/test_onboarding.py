"""`crcr onboard`'s rules: the allowlist entry, the ci_providers.yml entry, the rendered CI files, the use case."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.onboard import onboard
from crcr.app.ports.github import NotInstalled, RepoToken
from crcr.domain.allowlist import BuildkitePipeline, build_allowlist
from crcr.domain.levels import Level
from crcr.domain.onboarding import (
    ACTION_PLACEHOLDER,
    REPORT_STEP_KEYS,
    OnboardError,
    OnboardRequest,
    allowlist_entry,
    buildkite_pipeline,
    check_action_ref,
    ci_providers_entry,
    downstream_workflow,
    entry_document,
    parse_request,
)

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = (ROOT / "examples" / "workflows" / "downstream.yml").read_text()
PIPELINE = (ROOT / "examples" / "buildkite" / "pipeline.yml").read_text()
PINNED = "pytorch/crcr/action@" + "a1" * 20


@pytest.mark.parametrize(
    ("args", "entry"),
    [
        (("Org/Repo", "L1"), "L1:\n  - Org/Repo\nrepos:\n  Org/Repo:\n    repository_id: 42\n"),
        (("org/repo", "l2"), "L2:\n  - org/repo\nrepos:\n  org/repo:\n    repository_id: 42\n"),
        (("org/repo", "L3", "xpu"), "L3:\n  xpu:\n    - org/repo\nrepos:\n  org/repo:\n    repository_id: 42\n"),
        (("org/repo", "L3", "on"), 'L3:\n  "on":\n    - org/repo\nrepos:\n  org/repo:\n    repository_id: 42\n'),
        (("org/repo", "L3", "1"), 'L3:\n  "1":\n    - org/repo\nrepos:\n  org/repo:\n    repository_id: 42\n'),
        (("org/repo", "L4"), "L4:\n  - org/repo\nrepos:\n  org/repo:\n    repository_id: 42\n"),
    ],
)
def test_github_entries_read_back_as_the_entry_they_describe(args: tuple[str, ...], entry: str) -> None:
    request = parse_request(*args)

    text = allowlist_entry(request, 42)

    assert text == entry
    [listed] = parse_allowlist(text).entries  # what `crcr allowlist check` reads
    assert (listed.repo, listed.level.name, listed.device) == (args[0], args[1].upper(), (args[2:] or (None,))[0])
    assert listed.settings.repository_id == 42


def test_the_yaml_reads_back_to_the_document_the_rules_checked() -> None:
    for args in (("org/repo", "L3", "on"), ("org/yes", "L2"), ("o-1/r.e_p-o", "L4")):
        request = parse_request(*args)
        [ours] = build_allowlist(entry_document(request, 7)).entries
        [theirs] = parse_allowlist(allowlist_entry(request, 7)).entries
        assert (theirs.repo, theirs.level, theirs.device, theirs.settings) == (
            ours.repo,
            ours.level,
            ours.device,
            ours.settings,
        )


def test_a_buildkite_entry_names_the_pipeline_and_pins_no_id() -> None:
    request = parse_request("Acme/XPU-Backend", "L2", buildkite="acme/xpu-ci")

    text = allowlist_entry(request, None)

    assert text == (
        "L2:\n  - Acme/XPU-Backend\nrepos:\n  Acme/XPU-Backend:\n"
        "    buildkite: {organization: acme, pipeline: xpu-ci}\n"
    )
    [entry] = parse_allowlist(text).entries
    assert entry.settings.buildkite == BuildkitePipeline("acme", "xpu-ci", "main")
    assert entry.settings.repository_id is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("not-a-repo", "L2"), "'not-a-repo' is not an owner/repo name"),
        (("org/repo", "L5"), "--level must be one of L1, L2, L3, L4, got 'L5'"),
        (("org/repo", "L3"), "--level L3 needs --device"),
        (("org/repo", "L2", "xpu"), "--device is for L3 only (the level is L2)"),
        (("org/repo", "L3", "x y"), "L3: 'x y' is not a device name"),
        (("org/repo", "L2", None, "acme"), "--buildkite must be organization/pipeline (slugs), got 'acme'"),
        (("org/repo", "L2", None, "acme/a/b"), "--buildkite must be organization/pipeline"),
        (("org/repo", "L2", None, "Acme/ci"), "repos.org/repo.buildkite.organization must be a Buildkite slug"),
    ],
)
def test_bad_requests_are_refused_with_the_reason(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(OnboardError) as caught:
        parse_request(*args)

    assert message in caught.value.message


def test_the_ci_providers_entry_is_pytorchs_constrained_form() -> None:
    doc = yaml.safe_load(ci_providers_entry("Acme/XPU-Backend"))

    assert doc == {
        "providers": {
            "buildkite": {
                "repo_map": {
                    "<organization_id>/<pipeline_id>": {
                        "repo": "Acme/XPU-Backend",
                        "required_claims": {"build_source": ["api"], "step_key": list(REPORT_STEP_KEYS)},
                    }
                }
            }
        }
    }


def test_the_required_step_keys_are_the_example_pipelines_reporting_steps() -> None:
    steps = yaml.safe_load(PIPELINE)["steps"]
    reporting = [s["key"] for s in steps if "python3 .buildkite/crcr/report.py" in s["command"]]

    assert tuple(reporting) == REPORT_STEP_KEYS


def test_the_workflow_changes_only_the_action_reference_and_its_comments() -> None:
    text = downstream_workflow(WORKFLOW, "org/repo", PINNED, "pytorch/pytorch")

    example = yaml.safe_load(WORKFLOW)
    for job in example["jobs"].values():
        for step in job["steps"]:
            if step.get("uses") == "$/action":
                step["uses"] = PINNED
    assert yaml.safe_load(text) == example
    assert "$/action" not in text
    assert text.count(f"      - uses: {PINNED}\n") == 2
    assert "# Written for org/repo by `crcr onboard`" in text
    assert text.startswith(WORKFLOW.split("# Copy it to")[0])  # the safe-shape explanation is kept


def test_the_workflow_placeholder_and_another_upstream() -> None:
    text = downstream_workflow(WORKFLOW, "org/repo", ACTION_PLACEHOLDER, "acme/upstream")

    assert text.count(ACTION_PLACEHOLDER) == 3  # both jobs and the header that explains it
    assert "repository: acme/upstream\n" in text and "pytorch/pytorch" not in text


def test_the_pipeline_takes_the_relay_url_and_upstream() -> None:
    same = buildkite_pipeline(PIPELINE, "pytorch/pytorch", None)
    text = buildkite_pipeline(PIPELINE, "acme/upstream", "https://relay.acme.dev")

    assert same == PIPELINE
    assert "https://github.com/acme/upstream.git" in text and "pytorch/pytorch" not in text
    assert text.count("CRCR_RELAY_URL=https://relay.acme.dev python3") == 2
    assert yaml.safe_load(text)["steps"][0]["key"] == "crcr-report-start"


def test_an_example_of_another_shape_is_refused_rather_than_half_rewritten() -> None:
    with pytest.raises(OnboardError, match="shape"):
        downstream_workflow(WORKFLOW.replace("$/action", "./action"), "org/repo", PINNED, "pytorch/pytorch")
    with pytest.raises(OnboardError, match="not an owner/repo"):
        buildkite_pipeline(PIPELINE, "pytorch", None)


@pytest.mark.parametrize(
    "ref", ["pytorch/crcr/action@v1", "pytorch/crcr/action@" + "A1" * 20, "crcr/action", "$/action@" + "a" * 40]
)
def test_the_action_reference_must_be_a_full_commit(ref: str) -> None:
    with pytest.raises(OnboardError, match="--action-ref"):
        check_action_ref(ref)


@dataclass
class RecordingGitHub:
    """The RepoLookup port, recording each call; GitHub spells the repository its own way."""

    installed: dict[str, tuple[int, int, str]]  # lower-case name -> (installation id, repository id, full name)
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def installation_for(self, repo: str) -> int:
        self.calls.append(("installation_for", repo))
        if repo.lower() not in self.installed:
            raise NotInstalled(f"the App is not installed on {repo}")
        return self.installed[repo.lower()][0]

    def repo_token(self, installation_id: int, repo: str, permissions: dict[str, str] | None = None) -> RepoToken:
        self.calls.append(("repo_token", installation_id, repo, permissions))
        _, repo_id, full_name = self.installed[repo.lower()]
        return RepoToken("ghs_x", repo_id, full_name, 0.0)


def test_the_use_case_asks_for_the_installation_then_a_metadata_token() -> None:
    github = RecordingGitHub({"org/repo": (7, 1001, "Org/Repo")})

    result = onboard(parse_request("org/repo", "L4"), github)

    assert github.calls == [("installation_for", "org/repo"), ("repo_token", 7, "org/repo", {"metadata": "read"})]
    assert (result.repo, result.installation_id, result.repository_id) == ("Org/Repo", 7, 1001)
    assert result.allowlist_entry == "L4:\n  - Org/Repo\nrepos:\n  Org/Repo:\n    repository_id: 1001\n"
    assert [c.result for c in result.checks] == ["ok", "ok"]
    assert result.ci_providers_entry is None


def test_the_use_case_lets_not_installed_through_and_asks_nothing_for_buildkite() -> None:
    github = RecordingGitHub({})

    with pytest.raises(NotInstalled, match="org/repo"):
        onboard(parse_request("org/repo", "L2"), github)
    result = onboard(parse_request("org/other", "L2", buildkite="acme/ci"), github)

    assert github.calls == [("installation_for", "org/repo")]
    assert [c.result for c in result.checks] == ["skipped"]
    assert result.repository_id is None and result.ci_providers_entry == ci_providers_entry("org/other")


def test_the_request_keeps_its_level() -> None:
    assert parse_request("o/r", "l3", "gpu") == OnboardRequest("o/r", Level.L3, "gpu", None)


def test_the_app_manifest_asks_for_what_the_relay_uses_and_nothing_more() -> None:
    manifest = json.loads((ROOT / "infra" / "github-app-manifest.json").read_text())

    assert manifest["default_permissions"] == {
        "actions": "write",  # re-runs of downstream runs; finding the run a dispatch started; its jobs
        "checks": "write",  # upstream check runs
        "contents": "write",  # repository_dispatch; reading a github: allowlist; the demotion PR's branch and file
        "issues": "write",  # the PR comment (issue comments API); reactions to rerun commands
        "metadata": "read",  # a commenter's permission on the upstream
        "pull_requests": "write",  # the PR comment; a PR's files (path filters); the demotion PR and its label
    }
    # issue_comment: `@<app> rerun …` commands on upstream PRs; workflow_run: GitHub's record of each run the relay
    # started in a downstream (actions: read, within actions: write).
    assert sorted(manifest["default_events"]) == [
        "check_run", "check_suite", "issue_comment", "pull_request", "push", "workflow_run"
    ]  # fmt: skip
    assert manifest["hook_attributes"] == {"url": "https://crcr.example.com/webhook", "active": True}
    assert manifest["public"] is True  # downstream organizations install it
    assert set(manifest) <= {"name", "url", "hook_attributes", "redirect_url", "description", "public"} | {
        "default_permissions",
        "default_events",
    }
