"""Self-tests of the Buildkite agent OIDC issuer double and its stand-in agent: real keys, real HTTP, PyJWT judges."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from jwt import PyJWKSet

from tests.doubles.buildkite_oidc import DEFAULT_CLAIMS, BuildkiteOidc, StandInAgent

# Buildkite's documented example token (buildkite.com/docs/agent/cli/reference/oidc), without build_tag (a build
# without a tag has none), plus the two optional claims crcr asks for.
DOCUMENTED = set(DEFAULT_CLAIMS) - {"build_tag"}


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        return json.load(response)


def verify(token: str, issuer: str, audience: str) -> dict[str, Any]:
    """A correct verifier: discovery -> jwks_uri -> key by kid; RS256 only; iss, aud, exp, nbf, iat required."""
    discovery = _get_json(issuer + "/.well-known/openid-configuration")
    assert discovery["issuer"] == issuer
    assert discovery["id_token_signing_alg_values_supported"] == ["RS256"]
    keys = PyJWKSet.from_dict(_get_json(discovery["jwks_uri"]))
    key = keys[jwt.get_unverified_header(token)["kid"]]
    claims: dict[str, Any] = jwt.decode(
        token,
        key,
        algorithms=["RS256"],
        audience=audience,
        issuer=issuer,
        options={"require": ["iss", "aud", "exp", "iat", "nbf", "sub"]},
    )
    return claims


@pytest.fixture
def bk() -> Iterator[BuildkiteOidc]:
    with BuildkiteOidc(audience="crcr") as double:
        yield double


def test_a_minted_token_verifies_and_carries_exactly_buildkites_claims(bk: BuildkiteOidc) -> None:
    claims = verify(bk.mint(), bk.issuer, "crcr")

    assert set(claims) == DOCUMENTED | {"organization_id", "pipeline_id"}
    assert list(claims)[:6] == ["iss", "sub", "aud", "iat", "nbf", "exp"]  # the documented order
    assert claims["iss"] == bk.url
    assert claims["aud"] == "crcr" == bk.audience
    assert claims["nbf"] == claims["iat"] and claims["exp"] - claims["iat"] == 300
    assert type(claims["build_number"]) is int
    assert claims["sub"] == (
        f"organization:acme-inc:pipeline:xpu-ci:ref:refs/heads/main:commit:{claims['build_commit']}"
        ":step:crcr-report-result"
    )
    assert (claims["organization_id"], claims["pipeline_id"]) == (bk.organization_id, bk.pipeline_id)
    header = jwt.get_unverified_header(bk.mint())
    assert header == {"alg": "RS256", "kid": bk.kid, "typ": "JWT"}


def test_overrides_optional_claims_tags_and_deletions(bk: BuildkiteOidc) -> None:
    plain = verify(bk.mint(optional=()), bk.issuer, "crcr")
    tagged = verify(bk.mint(build_tag="v1.0.0", step_key="build", optional=("build_id",)), bk.issuer, "crcr")
    bare = bk.claims(build_number=None, organization_id=None)

    assert "organization_id" not in plain and "pipeline_id" not in plain
    assert tagged["build_tag"] == "v1.0.0" and tagged["build_id"] == bk.build_id
    assert ":ref:refs/tags/v1.0.0:" in tagged["sub"] and tagged["sub"].endswith(":step:build")
    assert "build_number" not in bare and "organization_id" not in bare
    with pytest.raises(ValueError, match="not a claim Buildkite adds"):
        bk.claims(optional=("repository",))


def test_the_agent_api_mints_for_its_job_with_the_claims_asked(bk: BuildkiteOidc, tmp_path: Path) -> None:
    job = bk.job("crcr-report-start", retry_count=1)
    agent = StandInAgent(tmp_path / "bin")
    env = {**job.env(), "PATH": agent.path_env()}
    argv = ["buildkite-agent", "oidc", "request-token", "--audience", "crcr", "--claim", "organization_id,pipeline_id"]

    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)

    assert done.returncode == 0, done.stderr
    claims = verify(done.stdout.strip(), bk.issuer, "crcr")
    assert claims["job_id"] == job.job_id == env["BUILDKITE_JOB_ID"]
    assert claims["step_key"] == "crcr-report-start" == env["BUILDKITE_STEP_KEY"]
    assert str(claims["build_number"]) == env["BUILDKITE_BUILD_NUMBER"]
    assert claims["organization_id"] == env["BUILDKITE_ORGANIZATION_ID"]
    assert claims["pipeline_id"] == env["BUILDKITE_PIPELINE_ID"]
    assert env["BUILDKITE_BUILD_ID"] == bk.build_id and env["BUILDKITE_RETRY_COUNT"] == "1"
    assert bk.token_requests == [(job.job_id, {"audience": "crcr", "claims": ["organization_id", "pipeline_id"]})]
    [request] = [r for r in bk.requests if r.method == "POST"]
    assert request.headers["authorization"] == f"Token {job.access_token}"
    assert agent.calls() == [[str(agent.path), *argv[1:]]]


def test_without_claims_or_audience_the_agent_api_uses_buildkites_defaults(bk: BuildkiteOidc, tmp_path: Path) -> None:
    job = bk.job()
    agent = StandInAgent(tmp_path / "bin")
    env = {**job.env(), "PATH": agent.path_env()}

    done = subprocess.run(
        ["buildkite-agent", "oidc", "request-token"], env=env, capture_output=True, text=True, timeout=30, check=False
    )

    claims = jwt.decode(done.stdout.strip(), options={"verify_signature": False})
    assert claims["aud"] == "https://buildkite.com/acme-inc"
    assert set(claims) == DOCUMENTED


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"BUILDKITE_AGENT_ACCESS_TOKEN": "bkaj_stolen"}, 401),
        ({"BUILDKITE_JOB_ID": "0184990a-0000-4000-8000-000000000000"}, 401),
    ],
)
def test_a_refusal_exits_77_like_the_agent(
    bk: BuildkiteOidc, tmp_path: Path, change: dict[str, str], status: int
) -> None:
    agent = StandInAgent(tmp_path / "bin")
    env = {**bk.job().env(), "PATH": agent.path_env(), **change}

    done = subprocess.run(
        ["buildkite-agent", "oidc", "request-token", "--audience", "crcr"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert done.returncode == 77
    assert f": {status} " in done.stderr and done.stdout == ""


def test_an_unknown_claim_is_refused_and_a_5xx_is_not_a_refusal(bk: BuildkiteOidc, tmp_path: Path) -> None:
    job = bk.job()
    agent = StandInAgent(tmp_path / "bin")
    env = {**job.env(), "PATH": agent.path_env()}
    run = ["buildkite-agent", "oidc", "request-token", "--audience", "crcr", "--claim"]

    unknown = subprocess.run([*run, "repository"], env=env, capture_output=True, text=True, timeout=30, check=False)
    bk.fail_next(f"/v3/jobs/{job.job_id}/oidc/tokens", 1, 503)
    down = subprocess.run([*run, "pipeline_id"], env=env, capture_output=True, text=True, timeout=30, check=False)

    assert (unknown.returncode, down.returncode) == (77, 1)
    assert "Invalid claim: repository" in unknown.stderr


def test_the_stand_in_answers_step_outcomes(tmp_path: Path) -> None:
    agent = StandInAgent(tmp_path / "bin", outcomes={"build-and-test": "hard_failed"})
    env = {"PATH": agent.path_env(), "HOME": os.environ.get("HOME", "/")}
    known = subprocess.run(
        ["buildkite-agent", "step", "get", "outcome", "--step", "build-and-test"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    missing = subprocess.run(
        ["buildkite-agent", "step", "get", "outcome", "--step", "nope"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert (known.returncode, known.stdout) == (0, "hard_failed\n")
    assert missing.returncode == 1 and "No step found" in missing.stderr
