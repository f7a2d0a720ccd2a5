"""PyTorch's ci_providers.yml and the Buildkite identity rules: only mapped pipelines, by UUID, with every
required claim, and only the build the relay created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crcr.adapters.allowlist_source import parse_providers
from crcr.domain.allowlist import Entry
from crcr.domain.callback_rules import buildkite_pipeline, check_buildkite_build, check_buildkite_scheduled
from crcr.domain.errors import Forbidden, Unavailable
from crcr.domain.levels import Level
from crcr.domain.providers import PipelineRule, ProvidersError

EVENTS = Path(__file__).resolve().parents[1] / "events" / "pytorch"
ORG = "018b5ec5-c236-4037-ba08-d8a5d29bcdae"
VLLM = "018cdabc-d930-49f6-9085-634c4cb582ed"
ASCEND = "0190a2f4-5c6d-4e7f-8a9b-0c1d2e3f4a5b"
BUILD = "019583d7-3737-4e38-af67-f7cc356bd580"
JOB = "0184990a-477b-4fa8-9968-496074483cee"


def test_pytorchs_file_loads_unchanged_in_both_forms() -> None:
    providers = parse_providers((EVENTS / "ci_providers.yml").read_bytes())
    assert providers.pipeline(ORG, VLLM) == PipelineRule("vllm-project/vllm", (("build_branch", ("main",)),))
    assert providers.pipeline(ORG.upper(), ASCEND) == PipelineRule("vllm-project/vllm-ascend")
    assert len(providers) == 2  # the legacy copy counts only when repo_map is empty
    assert len(parse_providers((EVENTS / "ci_providers.old.yml").read_bytes())) == 0


def test_the_legacy_flat_section_is_read_when_repo_map_is_empty() -> None:
    providers = parse_providers(f"buildkite:\n  {ORG}/{VLLM}: vllm-project/vllm\n")
    assert providers.pipeline(ORG, VLLM) == PipelineRule("vllm-project/vllm")


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ("providers:\n  buildkite:\n    repo_map:\n      vllm/ci: vllm-project/vllm\n", "line 4: .*UUIDs"),
        (f"providers:\n  buildkite:\n    repo_map:\n      {ORG}/{VLLM}: not-a-repo\n", "not an owner/repo"),
        (
            f"providers:\n  buildkite:\n    repo_map:\n      {ORG}/{VLLM}: {{repo: a/b, token: x}}\n",
            "unknown key 'token'",
        ),
        (f"buildkite:\n  {ORG}/{VLLM}: a/b\n  {ORG}/{VLLM}: c/d\n", "duplicate key"),
        ("gitlab: {}\n", "unknown top-level key 'gitlab'"),
        (f"buildkite:\n  {ORG}/{VLLM}: {{repo: a/b, required_claims: {{build_branch: []}}}}\n", "non-empty list"),
        ("providers: [", "not valid YAML"),
    ],
)
def test_a_bad_document_is_refused_naming_the_problem(doc: str, named: str) -> None:
    with pytest.raises(ProvidersError, match=named):
        parse_providers(doc)


def claims(**changes: Any) -> dict[str, Any]:
    """A Buildkite agent token's claims, as Buildkite documents them, with the two optional ids."""
    base = {
        "iss": "https://agent.buildkite.com",
        "sub": f"organization:vllm:pipeline:ci:ref:refs/heads/main:commit:{'9' * 40}:step:report",
        "organization_slug": "vllm",
        "pipeline_slug": "ci",
        "build_number": 1514,
        "build_branch": "main",
        "build_commit": "9" * 40,
        "step_key": "report",
        "job_id": JOB,
        "agent_id": "0184990a-4782-42b5-afc1-16715b10b8ff",
        "build_source": "api",
        "runner_environment": "self-hosted",
        "organization_id": ORG,
        "pipeline_id": VLLM,
    }
    return {k: v for k, v in (base | changes).items() if v is not None}


PROVIDERS = parse_providers((EVENTS / "ci_providers.yml").read_bytes())


def test_a_mapped_pipeline_speaks_for_its_repository_and_nothing_else_does() -> None:
    assert buildkite_pipeline(claims(), PROVIDERS).repo == "vllm-project/vllm"
    refusals = {
        "organization_id": claims(organization_id=None),  # minted without --claim
        "pipeline_id": claims(organization_id="0190a2f4-0000-4000-8000-000000000000"),  # another organization
        "build_branch": claims(build_branch="someone:main"),  # a fork's branch, prefixed by Buildkite
    }
    for field, token in refusals.items():
        with pytest.raises(Forbidden) as caught:
            buildkite_pipeline(token, PROVIDERS)
        assert caught.value.field == field
    # Slugs are never identity: right slugs, unknown ids.
    with pytest.raises(Forbidden, match="not mapped"):
        buildkite_pipeline(claims(pipeline_id="0190a2f4-1111-4111-8111-111111111111"), PROVIDERS)


VLLM_ENTRY = Entry("vllm-project/vllm", Level.L2)


def build_check(token: dict[str, object], run_id: str = BUILD, **changes: object) -> str:
    """The relay created build 1514 (BUILD) for vLLM's dispatch: the job id `token` may report on it with."""
    kwargs: dict[str, Any] = {"entry": VLLM_ENTRY, "repo": VLLM_ENTRY.repo, "build_number": 1514, "build_id": BUILD}
    kwargs |= {"run_id": run_id, "check_run_id": None} | changes
    entry, job = check_buildkite_build(token, **kwargs)
    assert entry is VLLM_ENTRY
    return job


def test_only_the_build_the_relay_created_reports_on_its_dispatch() -> None:
    assert build_check(claims()) == JOB
    for token, run_id, check_run_id, field in (
        (claims(build_number=1515), BUILD, None, "build_number"),  # another build of the pipeline (a fork's PR)
        (claims(), "019583d7-0000-4e38-af67-f7cc356bd580", None, "run_id"),
        (claims(), BUILD, "1234", "check_run_id"),
        (claims(job_id=None), BUILD, None, "job_id"),
    ):
        with pytest.raises(Forbidden) as caught:
            build_check(token, run_id, check_run_id=check_run_id)
        assert caught.value.field == field
    with pytest.raises(Unavailable):  # the 201 not recorded yet: retry shortly
        build_check(claims(), build_number=None, build_id=None)


def test_a_scheduled_build_must_not_come_from_a_webhook() -> None:
    assert check_buildkite_scheduled(claims(build_source="schedule"), run_id=BUILD, check_run_id=JOB) == JOB
    with pytest.raises(Forbidden) as caught:
        check_buildkite_scheduled(claims(build_source="webhook"), run_id=BUILD, check_run_id=None)
    assert caught.value.field == "build_source"
    with pytest.raises(Forbidden) as caught:
        check_buildkite_scheduled(claims(build_source="schedule", build_id="0" * 8), run_id=BUILD, check_run_id=None)
    assert caught.value.field == "run_id"
    # vLLM's nightly reporter names its build by number (run_id: int(build_number)), the rest by UUID.
    numbered = claims(build_source="schedule", build_number=1514, build_id=BUILD)
    assert check_buildkite_scheduled(numbered, run_id="1514", check_run_id=None) == JOB
    with pytest.raises(Forbidden) as caught:
        check_buildkite_scheduled(numbered, run_id="1515", check_run_id=None)  # another build's number
    assert caught.value.field == "run_id"


def test_a_bad_edit_never_replaces_the_last_good_map() -> None:
    from crcr.adapters.allowlist_source import CachedProviders  # noqa: PLC0415
    from tests.unit.fakes import RecordingMetrics  # noqa: PLC0415

    documents = [
        (EVENTS / "ci_providers.yml").read_bytes(),
        b"providers:\n  buildkite:\n    repo_map:\n      vllm/ci: vllm-project/vllm\n",  # slugs: refused
    ]
    errors: list[str] = []
    metrics = RecordingMetrics()
    cached = CachedProviders(lambda: documents.pop(0), metrics, lambda: 0.0, refresh_s=0, on_error=errors.append)
    assert len(cached.current()) == 2
    assert len(cached.current()) == 2  # the slug-keyed edit was refused; the last good map stays
    assert (metrics.counts["ProvidersLoaded"], metrics.counts["ProvidersRejected"]) == (1, 1)
    assert "line 4" in errors[0] and "UUIDs" in errors[0]


@pytest.mark.parametrize("claim", ["build_number", "build_source", "build_id"])
def test_buildkite_claims_of_the_wrong_type_are_refused_naming_them(claim: str) -> None:
    """A list in build_source was a TypeError (a 500) in the frozenset lookup."""
    for value in (["1514"], {"n": 1}, True, 15.14):
        with pytest.raises(Forbidden) as caught:
            if claim == "build_number":
                build_check(claims(build_number=value))
            else:
                check_buildkite_scheduled(claims(build_source="api") | {claim: value}, run_id=BUILD, check_run_id=None)
        assert caught.value.field == claim


def test_ids_and_required_claims_of_the_wrong_type_never_match() -> None:
    for name in ("organization_id", "pipeline_id"):
        for value in ([ORG], {"id": ORG}, 7, "x" * 1001):
            with pytest.raises(Forbidden) as caught:
                buildkite_pipeline(claims(**{name: value}), PROVIDERS)
            assert caught.value.field == name
    nested: object = "main"
    for _ in range(5_000):  # its text (str()) would recurse past Python's limit
        nested = [nested]
    with pytest.raises(Forbidden) as caught:
        buildkite_pipeline(claims(build_branch=nested), PROVIDERS)
    assert caught.value.field == "build_branch"


def test_the_map_compares_uuids_folding_ascii_only() -> None:
    assert PROVIDERS.pipeline(ORG.upper(), VLLM) is not None
    with pytest.raises(ProvidersError):
        parse_providers(f"providers:\n  buildkite:\n    repo_map:\n      {ORG}/{VLLM}: v\u0456llm/vllm\n".encode())
