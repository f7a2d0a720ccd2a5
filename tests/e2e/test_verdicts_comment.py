"""The signal an author acts on, end to end on `crcr local`: a push baseline, then a PR with a new and a
pre-existing L4 failure, an infrastructure failure the relay re-runs once and which then passes, an L3
failure that joins the comment when its label is added, and an L2 failure that never does. One comment,
edited in place, with the right verdicts, and each owner of a new failure mentioned once."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Relay, event_body, http
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import REPO_IDS, oidc  # noqa: F401 - oidc is a fixture
from tests.e2e.test_pr_comment import COMMENT_PERMISSIONS

pytestmark = pytest.mark.e2e
UPSTREAM, PR = "pytorch/pytorch", 170001
L2, L3, L4, L4B = "org-two/l2-repo", "org-three/l3-repo", "org-four/L4-Repo", "org-five/l4-b"
IDS = REPO_IDS | {L4B: 5010}
ALLOWLIST = """\
L2:
  - org-two/l2-repo: oncall-two
L3:
  gpu:
    org-three/l3-repo: [oncall-three]
L4:
  - org-four/L4-Repo: [oncall-four]
  - org-five/l4-b: [oncall-five]
"""
BASE = "b" * 40


def wait(predicate: Callable[[], Any], timeout_s: float = 30.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not predicate():
        time.sleep(0.2)
    assert predicate()


class Flow:
    def __init__(self, relay: Relay, oidc: OidcIssuer) -> None:  # noqa: F811
        self.relay, self.oidc = relay, oidc
        self.runs = 1000

    def report(self, repo: str, event: int, job: str, conclusion: str | None, attempt: int = 1, **extra: Any) -> int:
        """One job of the repository's `event`-th dispatch reports; returns its run id."""
        dispatch = self.relay.github.dispatches(repo)[event]
        run_id = extra.pop("run_id", None) or self.next_run()
        body = (
            {
                "schema_version": 1,
                "ticket": dispatch["client_payload"]["ticket"],
                "status": "completed" if conclusion else "in_progress",
                "workflow_name": "CI",
                "job_name": job,
                "run_id": run_id,
                "run_attempt": attempt,
                "url": f"https://github.com/{repo}/actions/runs/{run_id}",
            }
            | ({"conclusion": conclusion} if conclusion else {})
            | extra
        )
        token = self.oidc.token(
            repository=repo, repository_id=IDS[repo], run_id=run_id, run_attempt=attempt,
            job_workflow_ref=f"{repo}/.github/workflows/ci.yml@refs/heads/main",
        )  # fmt: skip
        headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
        status, reply = http("POST", f"{self.relay.url}/callback", json.dumps(body).encode(), headers)
        assert (status, reply) == (200, {"status": "recorded"})
        return int(run_id)

    def next_run(self) -> int:
        self.runs += 1
        return self.runs

    def writes(self) -> list[tuple[str, int, str]]:
        return self.relay.github.comment_writes(UPSTREAM)

    def last_body(self) -> str:
        return self.writes()[-1][2]


def row(body: str, repo: str, job: str) -> str | None:
    """The comment's table row for a job of a repository, if it lists it."""
    section = body.split(f"#### `{repo}`", 1)
    if len(section) < 2:
        return None
    found = re.search(rf"^\| CI / {re.escape(job)} \|.*$", section[1].split("#### ", 1)[0], re.M)
    return found.group(0) if found else None


def test_one_comment_tells_an_author_which_downstream_failures_are_theirs(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    relay = relay_factory(
        allowlist=ALLOWLIST,
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_COMMENT_SETTLE_S": "2"},
    )
    github = relay.github
    github.install(L4B, installation_id=110, repo_id=IDS[L4B])
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=COMMENT_PERMISSIONS)
    github.add_issue(UPSTREAM, PR)
    flow = Flow(relay, oidc)

    # The baseline: a push to main, whose results are the branch's.
    push = json.loads(event_body("push.main.json"))
    push["after"] = BASE
    push["commits"] = [push["commits"][0] | {"id": BASE, "timestamp": "2026-11-29T10:00:00Z"}]
    push["head_commit"] = push["commits"][0]
    assert relay.post("push", json.dumps(push).encode(), str(uuid.uuid4()))[0] == 202
    relay.wait_dispatches({L2: 1, L3: 1, L4: 1, L4B: 1}, settle_s=0)
    flow.report(L4, 0, "build", "success")
    flow.report(L4, 0, "test", "failure")  # already broken on main
    flow.report(L4B, 0, "lint", "success")
    flow.report(L2, 0, "unit", "success")

    # The PR, based on that commit.
    pr = json.loads(event_body("pull_request.opened.json"))
    pr["pull_request"]["base"]["sha"] = BASE
    github.add_commit(UPSTREAM, pr["pull_request"]["head"]["sha"])
    assert relay.post("pull_request", json.dumps(pr).encode(), str(uuid.uuid4()))[0] == 202
    relay.wait_dispatches({L2: 2, L3: 2, L4: 2, L4B: 2}, settle_s=0)
    flow.report(L4, 1, "build", "failure")  # passed on the base: new
    flow.report(L4, 1, "test", "failure")  # failed on the base too: pre-existing
    flow.report(L2, 1, "unit", "failure")  # L2: recorded, never in the comment
    flow.report(L3, 1, "gpu-test", "failure")  # L3 without its label: not in the comment yet
    # A runner died on l4-b: the relay re-runs it once before anyone is told, and the retry passes.
    lint_run = flow.next_run()
    github.add_workflow_run(L4B, lint_run, head_sha=pr["pull_request"]["head"]["sha"], status="completed")
    flow.report(L4B, 1, "lint", "failure", run_id=lint_run, failure_kind="infra")
    wait(lambda: github.reruns(L4B) == [lint_run])
    wait(lambda: len(flow.writes()) >= 1)
    first = flow.last_body()
    assert flow.writes()[0][0] == "POST"
    assert "**new**" in (row(first, L4, "build") or "") and "pre-existing" in (row(first, L4, "test") or "")
    assert row(first, L4B, "lint") is None  # its re-run is pending: not told yet
    assert L2 not in first and row(first, L3, "gpu-test") is None
    flow.report(L4B, 1, "lint", "success", attempt=2, run_id=lint_run)

    # The label arrives: the L3 repository's failure joins the comment.
    labeled = json.loads(json.dumps(pr))
    labeled["action"] = "labeled"
    labeled["label"] = {"name": "ciflow/crcr/gpu"}
    labeled["pull_request"]["labels"] = [{"name": "ciflow/crcr/gpu"}]
    labeled["pull_request"]["updated_at"] = "2026-11-29T20:00:00Z"
    assert relay.post("pull_request", json.dumps(labeled).encode(), str(uuid.uuid4()))[0] in (200, 202)

    def settled() -> bool:
        body = flow.last_body() if flow.writes() else ""
        return "flaky" in (row(body, L4B, "lint") or "") and "no baseline" in (row(body, L3, "gpu-test") or "")

    wait(settled, timeout_s=60)
    time.sleep(4)  # room for a stray write
    writes = flow.writes()
    assert [method for method, _, _ in writes][:1] == ["POST"] and {cid for _, cid, _ in writes} == {writes[0][1]}
    assert len([c for c in github.comments(UPSTREAM, PR) if c["performed_via_github_app"]]) == 1
    body = flow.last_body()
    assert "**new**" in (row(body, L4, "build") or "")
    assert "pre-existing" in (row(body, L4, "test") or "")
    assert "flaky" in (row(body, L4B, "lint") or "")
    assert "no baseline" in (row(body, L3, "gpu-test") or "")
    assert L2 not in body
    # Only the owners of a new failure are mentioned, and the mention is written once.
    mentions = [m for _, _, b in writes for m in re.findall(r"(?<![`\w])@(oncall-\w+)", b)]
    assert set(mentions) == {"oncall-four"}
    assert all(b.count("@oncall-four") <= 1 for _, _, b in writes)
    assert github.reruns(L4B) == [lint_run]  # retried once, never again
    # The pages name the commit each verdict compared: the push's result for new and pre-existing, none otherwise.
    head = pr["pull_request"]["head"]["sha"]
    status, doc = http("GET", f"{relay.url}/hud/data/commit/{head}.json")
    compared = {(j["repo"], j["job"]): j.get("verdict_baseline") for j in doc["jobs"].values() if j.get("verdict")}
    assert status == 200 and compared[(L4, "build")] == compared[(L4, "test")] == BASE
    assert compared[(L3, "gpu-test")] is None
