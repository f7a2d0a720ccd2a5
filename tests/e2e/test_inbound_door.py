"""The inbound door on `crcr local`, against the GitHub double: run events that are not the dispatched repository's
own run (another id under its name, another owner, a workflow outside the pin, a fork, another installation, another
repository's run titled with its dispatch) bind nothing, an outsider's flood costs no queue message or retry, and the
genuine run and report are recorded."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import DEFAULT_ALLOWLIST, Relay
from tests.doubles.github_double import GitHubDouble
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import REPO_IDS, Scenario, oidc  # noqa: F401 - oidc is a fixture
from tests.e2e.test_github_record import L2, L4, rows, start, wait_for

pytestmark = pytest.mark.e2e

L4_INSTALLATION = 103  # as tests/conftest.py's relay_factory installs it


def pinned_relay(
    relay_factory: Callable[..., Relay],
    github: GitHubDouble,
    oidc: OidcIssuer,  # noqa: F811
) -> tuple[Scenario, int]:
    """L4 dispatched to once by a relay whose allowlist pins L4's owner (GitHub's id of org-four) and workflow file;
    and that owner id."""
    github.install(L4, installation_id=L4_INSTALLATION, repo_id=REPO_IDS[L4])
    github.install("org-four/probe", installation_id=L4_INSTALLATION)
    owner_id = int(github.add_workflow_run("org-four/probe", 1, event="push")["repository"]["owner"]["id"])
    pins = f"    repository_owner_id: {owner_id}\n    workflows: ['{L4}/.github/workflows/ci.yml@refs/heads/*']\n"
    s = start(relay_factory, oidc, {L4: ("build",)}, allowlist=DEFAULT_ALLOWLIST + f"repos:\n  {L4}:\n{pins}")
    return s, owner_id


def test_run_events_not_the_dispatched_repositorys_own_bind_nothing_and_its_own_run_is_recorded(
    relay_factory: Callable[..., Relay],
    github: GitHubDouble,
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s, owner_id = pinned_relay(relay_factory, github, oidc)
    [run] = wait_for(lambda: github.runs_of(L4))
    dispatch_id = s.dispatch_payload(L4)["dispatch_id"]
    assert dispatch_id in run["display_title"]
    genuine = {"action": "completed", "workflow_run": run | {"status": "completed", "conclusion": "success"}}
    genuine |= {"repository": run["repository"], "installation": {"id": L4_INSTALLATION}}

    def impostor(run_id: int, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        event = copy.deepcopy(genuine)
        event["workflow_run"]["id"] = run_id
        change(event)
        return event

    def recreated(e: dict[str, Any]) -> None:  # deleted and created again under the name: a new id
        e["repository"]["id"] = e["workflow_run"]["head_repository"]["id"] = 9_999

    def other_owner(e: dict[str, Any]) -> None:
        e["repository"]["owner"]["id"] = e["workflow_run"]["head_repository"]["owner"]["id"] = owner_id + 1

    def fork(e: dict[str, Any]) -> None:
        e["workflow_run"]["head_repository"] |= {"id": 7_001, "full_name": "mallory/L4-Repo"}

    def other_repository(e: dict[str, Any]) -> None:  # L2's own run, titled with L4's dispatch
        l2 = e["repository"] | {"id": REPO_IDS[L2], "full_name": L2, "name": "l2-repo"}
        e["repository"] = e["workflow_run"]["head_repository"] = l2
        e["installation"] = {"id": 101}

    cases: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
        "repository_id": (recreated, "RunUnbound"),  # no id pin: GitHub's id of the name at dispatch binds it
        "repository_owner_id": (other_owner, "RunEventDropped"),
        "workflow": (lambda e: e["workflow_run"].update(path=".github/workflows/release.yml"), "RunEventDropped"),
        "head_repository": (fork, "RunEventDropped"),
        "installation": (lambda e: e.update(installation={"id": 999}), "RunUnbound"),
        "repository": (other_repository, "RunUnbound"),
    }
    for i, (reason, (change, _)) in enumerate(cases.items()):
        assert github.deliver("workflow_run", impostor(880_001 + i, change)).status_code in (200, 202), reason
    for reason, (_, metric) in cases.items():
        assert wait_for(lambda m=f"{metric}.reason={reason}": s.relay.metric(m) == 1), (reason, s.relay.stack.status())
    assert s.relay.metric("IdentityRefused") == len(cases)
    assert not [j for j in s.jobs() if str(j.get("run_id", "")).startswith("88000")]
    assert not [r for r in github.requests if "/runs/88000" in r.path]  # nothing was asked of GitHub about them

    # The dispatched run itself, and its job's report, are recorded; a report from another owner is refused.
    token = s.token(L4, run_id=run["id"], repository_owner_id=owner_id)
    assert s.post(s.body(L4, job_name="build", run_id=run["id"]), token)[0] == 200
    stranger = s.token(L4, run_id=run["id"], repository_owner_id=owner_id + 1)
    status, reply = s.post(s.body(L4, job_name="lint", run_id=run["id"]), stranger)
    assert (status, reply["field"]) == (403, "repository_owner_id")
    github.start_run(L4, run["id"])
    github.finish_run(L4, run["id"], "success")
    row = wait_for(lambda: (j := rows(s, L4).get("build")) and j.get("state") == "completed" and j)
    assert row and row["conclusion"] == "success" and s.relay.metric("RunBound") == 1


def test_a_flood_of_signed_run_events_from_outside_the_allowlist_is_never_queued_nor_retried(
    relay_factory: Callable[..., Relay],
    github: GitHubDouble,
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s, _ = pinned_relay(relay_factory, github, oidc)
    [run] = wait_for(lambda: github.runs_of(L4))
    time.sleep(1.0)  # the genuine run's `requested` event queued and bound
    accepted = s.relay.metric("RunEventAccepted")
    outsider = {"id": 66_000, "full_name": "mallory/L4-Repo", "name": "L4-Repo", "owner": {"id": 66}}
    flood = 300
    started = time.monotonic()
    for i in range(flood):  # titled with the genuine dispatch's id, as an attacker who saw the run would
        event = {
            "action": ("requested", "completed")[i % 2],
            "workflow_run": run | {"id": 770_000 + i, "repository": outsider, "head_repository": outsider},
            "repository": outsider,
            "installation": {"id": 6_600},
        }
        assert github.deliver("workflow_run", event).status_code == 200
    spent = time.monotonic() - started
    assert s.relay.metric("RunEventDropped.reason=not_allowlisted") == flood
    assert s.relay.metric("RunEventAccepted") == accepted  # not one RunsQueue message
    time.sleep(1.5)  # what a queued message would take to come back
    assert s.relay.metric("RunEventRetried") == s.relay.metric("RunUnbound") == 0
    # The genuine downstream's run events are still bound, and its run recorded.
    github.start_run(L4, run["id"])
    github.finish_run(L4, run["id"], "success")
    row = wait_for(lambda: (j := rows(s, L4).get("build")) and j.get("state") == "completed" and j)
    assert row and row["conclusion"] == "success" and s.relay.metric("RunBound") == 1
    print(f"{flood} outsider events answered in {spent:.1f} s")
