"""What the fuzzing found, each pinned by the instance that showed it (the properties cover the classes)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crcr.adapters.allowlist_source import parse_allowlist, parse_providers
from crcr.app.callback_body import parse_report
from crcr.domain.errors import AllowlistError
from crcr.domain.onboarding import allowlist_entry, parse_request
from crcr.domain.providers import ProvidersError
from crcr.ops.cli import main
from tests.conftest import Relay, event_body, http
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer

DEEP = ["[" * 800 + "]" * 800, "{a: " * 800 + "}" * 800, "- " * 800]  # PyYAML gives up near 600


@pytest.mark.parametrize("text", DEEP, ids=["flow-sequence", "flow-mapping", "block-sequence"])
def test_a_yaml_document_nested_past_the_recursion_limit_is_an_allowlist_error(text: str) -> None:
    # Was a RecursionError out of PyYAML: `crcr allowlist check` printed a traceback, not the problem.
    with pytest.raises(AllowlistError, match="nested too deep"):
        parse_allowlist(text)
    with pytest.raises(ProvidersError, match="nested too deep"):
        parse_providers(text)


def test_crcr_allowlist_check_names_a_too_deep_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "allowlist.yaml"
    path.write_text(DEEP[0])
    assert main(["allowlist", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == f"{path}: not valid YAML: nested too deep to read\n"


@pytest.mark.parametrize("organization", ["0", "off", "yes", "null", "2026-01-31", "0123", "1e3"])
def test_crcr_onboard_prints_a_buildkite_slug_yaml_would_read_as_another_type_quoted(organization: str) -> None:
    # `--buildkite 0/ci` printed `organization: 0`, which the allowlist reads as the number 0 and refuses.
    request = parse_request("org/repo", "L2", None, f"{organization}/ci")
    [entry] = parse_allowlist(allowlist_entry(request, None)).entries
    assert entry.settings.buildkite is not None
    assert (entry.settings.buildkite.organization, entry.settings.buildkite.pipeline) == (organization, "ci")


REPORT = {
    "status": "in_progress",
    "job_name": "build",
    "run_id": 777,
    "run_attempt": 1,
    "url": "https://github.com/org/repo/actions/runs/777",
    "check_run_id": None,
}


@pytest.mark.parametrize("shape", ["ours", "pytorch", "scheduled"])
def test_a_report_whose_check_run_id_is_null_is_read_as_not_given(shape: str) -> None:
    # `"check_run_id": null` (documented: the relay derives one) raised a TypeError in pydantic: answered 500.
    if shape == "ours":
        body = {"schema_version": 1, "ticket": "t" * 40, "workflow_name": "CI", **REPORT}
    elif shape == "scheduled":
        body = {"schema_version": 1, "scheduled": True, "head_sha": "c" * 40, "workflow_name": "CI", **REPORT}
        body |= {"status": "completed", "conclusion": "success"}
    else:
        body = {"delivery_id": "d-1", "workflow": {"name": "CI", **REPORT}}
    _, report = parse_report(json.dumps(body).encode())
    assert report.check_run_id is None


@pytest.fixture
def oidc() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        yield issuer


def dispatched_to(relay: Relay, repo: str, delivery: str) -> str:
    """Dispatch a pull request; the ticket `repo` got."""
    assert relay.post("pull_request", event_body("pull_request.opened.json"), delivery)[0] == 202
    relay.wait_dispatches({repo: 1}, settle_s=0)
    [dispatch] = relay.github.dispatches(repo)
    return str(dispatch["client_payload"]["ticket"])


def report(relay: Relay, oidc: OidcIssuer, ticket: str, attempt: int = 1, **fields: Any) -> tuple[int, Any]:
    repo = "org-two/l2-repo"
    token = oidc.token(
        repository=repo,
        repository_id=5001,
        run_id=777,
        run_attempt=attempt,
        job_workflow_ref=f"{repo}/.github/workflows/ci.yml@refs/heads/main",
    )
    body = {
        "schema_version": 1,
        "ticket": ticket,
        "workflow_name": "CI",
        "job_name": "build",
        "run_id": 777,
        "run_attempt": attempt,
        "url": f"https://github.com/{repo}/actions/runs/777",
    } | fields
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    return http("POST", f"{relay.url}/callback", json.dumps(body).encode(), headers)


def settled_rows(hud: HudDouble, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    deadline = time.time() + 20
    while time.time() < deadline and not any(done(r) for r in hud.rows.values()):
        time.sleep(0.1)
    time.sleep(1)  # a second row would arrive by now
    return list(hud.rows.values())


@pytest.mark.e2e
def test_a_job_reported_under_another_workflow_name_keeps_one_row_on_the_hud(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer, hud: HudDouble
) -> None:
    # A job's in_progress under workflow "CI" and its completion under "CI (nightly)" were recorded as one job
    # but pushed to PyTorch's HUD under two keys (the key holds the workflow name): a row stuck in progress.
    relay = relay_factory(env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_HUD_URL": hud.url})
    ticket = dispatched_to(relay, "org-two/l2-repo", "d-workflow-name")
    assert report(relay, oidc, ticket, status="in_progress") == (200, {"status": "recorded"})
    done = {"status": "completed", "conclusion": "success", "workflow_name": "CI (nightly)"}
    assert report(relay, oidc, ticket, **done) == (200, {"status": "recorded"})
    [row] = settled_rows(hud, lambda r: r.get("status") == "completed")
    assert (row["status"], row["workflow_name"]) == ("completed", "CI")


@pytest.mark.e2e
def test_a_check_run_id_another_attempt_already_reported_is_a_conflict(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer, hud: HudDouble
) -> None:
    # Two attempts reporting one check_run_id were two jobs in the results table but one row on PyTorch's HUD
    # (its key holds the check-run id, not the attempt): each push overwrote the other's.
    relay = relay_factory(env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_HUD_URL": hud.url})
    ticket = dispatched_to(relay, "org-two/l2-repo", "d-check-run-id")
    first = {"status": "completed", "conclusion": "failure", "check_run_id": 4242}
    assert report(relay, oidc, ticket, 1, **first) == (200, {"status": "recorded"})
    status, reply = report(relay, oidc, ticket, 2, **(first | {"conclusion": "success"}))
    assert (status, reply["error"], reply["field"]) == (409, "conflict", "check_run_id")
    # Its own id, or none (the relay derives one per attempt), records the second attempt beside the first.
    assert report(relay, oidc, ticket, 2, status="completed", conclusion="success") == (200, {"status": "recorded"})
    rows = settled_rows(hud, lambda r: r.get("run_attempt") == 2)
    assert sorted((r["run_attempt"], r["conclusion"]) for r in rows) == [(1, "failure"), (2, "success")]
