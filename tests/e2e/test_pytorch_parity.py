"""PyTorch's side as it stands since September 2026, on `crcr local`: nightly-only downstreams, ciflow/trunk tag
pushes filed under their PR, failing tests, and PyTorch's HUD (the port, write-once guard included) taking every
push."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import jwt
import pytest

from tests.conftest import HUD_TOKEN, Relay, event_body, http
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer

pytestmark = pytest.mark.e2e

UPSTREAM = "pytorch/pytorch"
L4 = "org-four/L4-Repo"
NIGHTLY = "org-two/l2-repo"
ALLOWLIST = f"""\
L1:
  - org-one/l1-repo
L2:
  - {NIGHTLY}:
      oncalls: oncall-two
      events: [nightly]
L3:
  gpu:
    org-three/l3-repo: [oncall-three]
L4:
  - {L4}
"""
REPO_IDS = {"org-one/l1-repo": 5000, NIGHTLY: 5001, "org-three/l3-repo": 5002, L4: 5003}


@pytest.fixture
def oidc() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        yield issuer


@pytest.fixture
def relay(relay_factory: Callable[..., Relay], oidc: OidcIssuer, hud: HudDouble) -> Relay:
    relay = relay_factory(
        ALLOWLIST,
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_HUD_URL": hud.url,
             "CRCR_HUD_TOKEN": HUD_TOKEN},
    )  # fmt: skip
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975)
    return relay


def callback(relay: Relay, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    return http("POST", f"{relay.url}/callback", json.dumps(body).encode(), headers)


def token(oidc: OidcIssuer, repo: str, run_id: int, **claims: Any) -> str:
    return oidc.token(
        repository=repo, repository_id=REPO_IDS[repo], run_id=run_id, run_attempt=1,
        job_workflow_ref=f"{repo}/.github/workflows/ci.yml@refs/heads/main", **claims,
    )  # fmt: skip


def wait(condition: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if found := condition():
            return found
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def test_a_nightly_only_downstream_gets_no_webhook_and_its_scheduled_report_is_recorded(
    relay: Relay, oidc: OidcIssuer, hud: HudDouble
) -> None:
    assert relay.post("pull_request", event_body("pull_request.opened.json"))[0] == 202
    assert relay.post("push", event_body("push.main.json"))[0] == 202
    relay.wait_dispatches({L4: 2, "org-one/l1-repo": 2, "org-three/l3-repo": 2})
    assert relay.github.dispatches(NIGHTLY) == []
    assert relay.metric("TargetSkipped.reason=nightly_only") == 2

    sha = "c" * 40
    relay.github.add_commit(UPSTREAM, sha)
    nightly = {
        "schema_version": 1, "scheduled": True, "head_sha": sha, "status": "completed", "conclusion": "failure",
        "workflow_name": "nightly", "job_name": "full-suite", "run_id": 9001, "run_attempt": 1,
        "url": f"https://github.com/{NIGHTLY}/actions/runs/9001",
        "failed_tests_detail": [{"name": "test_conv", "message": "mismatch", "duration": 3.25}],
    }  # fmt: skip
    assert callback(relay, nightly, token(oidc, NIGHTLY, 9001, event_name="schedule")) == (200, {"status": "recorded"})
    row = wait(lambda: next((r for r in hud.rows.values() if r["downstream_repo"] == NIGHTLY), None))
    assert (row["event_type"], row["pr_number"], row["pytorch_head_sha"]) == ("nightly", 0, sha)
    assert json.loads(row["failed_tests_json"]) == [{"name": "test_conv", "message": "mismatch", "duration": 3.25}]


def test_pytorchs_own_nightly_and_periodic_reports_are_taken_as_pytorchs_relay_takes_them(
    relay: Relay, oidc: OidcIssuer, hud: HudDouble
) -> None:
    """PyTorch's callback action reports a cron run with `event_type: nightly` (or `periodic`) and the upstream
    commit as its delivery id (or in `payload.head_sha`): no dispatch to bind to, one completed callback."""
    sha, other = "d" * 40, "e" * 40
    relay.github.add_commit(UPSTREAM, sha)
    relay.github.add_commit(UPSTREAM, other)

    def theirs(event_type: str, delivery_id: str, run_id: int, status: str = "completed", **payload: Any) -> dict:
        workflow = {
            "status": status,
            "name": "nightly",
            "job_name": "rhel / build",
            "run_id": str(run_id),
            "url": f"https://github.com/{NIGHTLY}/actions/runs/{run_id}",
            "check_run_id": str(run_id * 10),
        }
        if status == "completed":
            workflow |= {"conclusion": "success", "failed_tests_detail": []}
        return {"event_type": event_type, "delivery_id": delivery_id, "payload": payload, "workflow": workflow}

    assert callback(relay, theirs("nightly", sha, 9101), token(oidc, NIGHTLY, 9101, event_name="schedule")) == (
        200,
        {"status": "recorded"},
    )
    body = theirs("periodic", "periodic-run-7", 9102, head_sha=other)
    assert callback(relay, body, token(oidc, NIGHTLY, 9102, event_name="schedule")) == (200, {"status": "recorded"})
    rows = wait(lambda: [r for r in hud.rows.values() if r["downstream_repo"] == NIGHTLY] if len(hud.rows) >= 2 else 0)
    assert sorted((r["event_type"], r["pytorch_head_sha"], r["pr_number"]) for r in rows) == [
        ("nightly", sha, 0),
        ("periodic", other, 0),
    ]
    # As PyTorch's relay: only one completed callback; a commit that is not upstream's is refused.
    code, reply = callback(
        relay, theirs("nightly", sha, 9103, status="in_progress"), token(oidc, NIGHTLY, 9103, event_name="schedule")
    )
    assert (code, reply["field"]) == (400, "workflow.status")
    code, reply = callback(relay, theirs("nightly", "f" * 40, 9104), token(oidc, NIGHTLY, 9104, event_name="schedule"))
    assert (code, reply["field"]) == (403, "head_sha")
    code, reply = callback(
        relay, theirs("nightly", "not-a-sha", 9105), token(oidc, NIGHTLY, 9105, event_name="schedule")
    )
    assert (code, reply["field"]) == (400, "payload.head_sha")


def test_a_ciflow_trunk_push_reaches_l4_as_its_prs_ci_and_lands_in_the_hud_under_the_pr(
    relay: Relay, oidc: OidcIssuer, hud: HudDouble
) -> None:
    pr = json.loads(event_body("pull_request.opened.json"))
    number, head = pr["pull_request"]["number"], pr["pull_request"]["head"]["sha"]
    relay.github.add_commit(UPSTREAM, head)
    tag = event_body("push.main.json", ref=f"refs/tags/ciflow/trunk/{number}", after=head, base_ref=None)
    delivery = str(uuid.uuid4())
    assert relay.post("push", tag, delivery)[0] == 202
    relay.wait_dispatches({L4: 1, "org-one/l1-repo": 1, "org-three/l3-repo": 1})
    assert relay.github.dispatches(NIGHTLY) == []
    [sent] = relay.github.dispatches(L4)
    assert sent["event_type"] == "push"
    payload = sent["client_payload"]
    assert (payload["payload"]["ref"], payload["payload"]["after"]) == (f"refs/tags/ciflow/trunk/{number}", head)
    claims = jwt.decode(payload["ticket"], options={"verify_signature": False})
    assert (claims["pr"], claims["head_sha"]) == (number, head)

    # The L4 repository's required check for this dispatch is its own, beside the PR's.
    wait(lambda: [r for r in relay.github.check_runs(UPSTREAM) if r["name"] == f"crcr/{L4} (ciflow/trunk)"])
    body = {
        "schema_version": 1, "ticket": payload["ticket"], "status": "completed", "conclusion": "failure",
        "workflow_name": "trunk", "job_name": "linux-test", "run_id": 4242, "run_attempt": 1,
        "url": f"https://github.com/{L4}/actions/runs/4242",
        "test_results": {"passed": 9, "failed": 1, "skipped": 0, "total": 10},
        "failed_tests_detail": [{"name": "test_add", "classname": "TestOps", "message": "x" * 600}],
    }  # fmt: skip
    assert callback(relay, body, token(oidc, L4, 4242)) == (200, {"status": "recorded"})
    row = wait(lambda: next((r for r in hud.rows.values() if r["downstream_repo"] == L4), None))
    assert (row["pr_number"], row["pytorch_head_sha"], row["event_type"], row["delivery_id"]) == (
        number, head, "push", delivery,
    )  # fmt: skip
    [test] = json.loads(row["failed_tests_json"])
    assert test == {"name": "test_add", "classname": "TestOps", "message": "x" * 500}
    job_run = wait(
        lambda: next(
            (r for r in relay.github.check_runs(UPSTREAM)
             if r["name"] == f"crcr/{L4}/trunk/linux-test (ciflow/trunk)" and r["status"] == "completed"),
            None,
        )
    )  # fmt: skip
    assert "TestOps.test_add" in job_run["output"]["summary"]
    assert hud.duplicates == []  # nothing was written twice as finished

    # Deleting the tag dispatches nothing.
    gone = event_body("push.main.json", ref=f"refs/tags/ciflow/trunk/{number}", after="0" * 40, deleted=True)
    assert relay.post("push", gone)[0] == 202
    time.sleep(2)
    assert len(relay.github.dispatches(L4)) == 1


def test_a_pr_pytorchs_merge_bot_landed_is_merged_on_its_closed_dispatch_and_its_page(relay: Relay) -> None:
    """The bot pushes the PR's commit to main itself (`Pull Request resolved: <PR URL>` ends its message) and then
    closes the PR: GitHub's `closed` event says `merged: false`."""
    pr = json.loads(event_body("pull_request.opened.json"))
    number, head = pr["pull_request"]["number"], pr["pull_request"]["head"]["sha"]
    assert relay.post("pull_request", json.dumps(pr).encode())[0] == 202
    relay.wait_dispatches({L4: 1}, settle_s=0)
    push = json.loads(event_body("push.main.json"))
    push["commits"][-1]["message"] = (
        f"{pr['pull_request']['title']} (#{number})\n\nPull Request resolved: https://github.com/{UPSTREAM}/pull/"
        f"{number}\nApproved by: https://github.com/a-maintainer\n"
    )
    assert relay.post("push", json.dumps(push).encode())[0] == 202
    relay.wait_dispatches({L4: 2}, settle_s=0)
    closed = json.loads(json.dumps(pr))
    closed["action"] = "closed"
    closed["pull_request"] |= {"state": "closed", "merged": False, "updated_at": "2099-01-01T00:00:00Z"}
    assert relay.post("pull_request", json.dumps(closed).encode())[0] == 202
    relay.wait_dispatches({L4: 3}, settle_s=0)
    sent = relay.github.dispatches(L4)[2]["client_payload"]
    assert (sent["payload"]["action"], sent["payload"]["pull_request"]["merged"], sent["merged"]) == (
        "closed",
        False,  # GitHub's word, passed on as it came
        True,  # the relay's: the push to main landed it
    )
    assert "merged" not in relay.github.dispatches(L4)[0]["client_payload"]  # only a closed PR's dispatch says it

    def page() -> dict[str, Any]:
        status, doc = http("GET", f"{relay.url}/hud/data/commit/{head}.json")
        return doc if status == 200 else {}

    assert wait(lambda: page().get("meta", {}).get("pr_state") == "merged")
