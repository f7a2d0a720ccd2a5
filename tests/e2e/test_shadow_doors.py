"""Shadow means nothing is written, on every path, end to end on `crcr local`: a shadow stack, and a live stack with
shadow downstreams beside live ones, driven through PRs, comment commands, a check-suite re-request, pushes to main,
nightly reports that open a regression with bisection on, a regression notice, a sweeper time-out, a level change
that would open a demotion PR and a known failure. GitHub sees nothing but reads and token mints for a shadow
downstream's sake, PyTorch's HUD nothing of it, and the live downstreams are dispatched, told and pushed as before."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from crcr.adapters.results import DynamoResults
from tests.conftest import Relay, event_body, http
from tests.doubles.github_double import GitHubDouble, RecordedRequest
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import oidc  # noqa: F401 - a fixture
from tests.integration.test_health import job

pytestmark = pytest.mark.e2e
UPSTREAM, SOURCE = "pytorch/pytorch", ".github/crcr-allowlist.yml"
LIVE4, LIVE3 = "org-four/L4-Repo", "org-three/l3-repo"  # live in the live stack
MOVED = "org-five/moved"  # live when its PR is dispatched, then moved to shadow by an allowlist edit
NIGHTLY, SHADOW3 = "org-six/nightly", "org-seven/l3-shadow"  # shadow in both stacks
SHADOWS = (MOVED, NIGHTLY, SHADOW3)
IDS = {LIVE4: 5003, LIVE3: 5002, MOVED: 5070, NIGHTLY: 5060, SHADOW3: 5080}
PR, CULPRIT_PR = 170001, 170102
HEAD = "a" * 40
DISABLED = 170300
DISABLED_URL = f"https://github.com/{UPSTREAM}/issues/{DISABLED}"
ALLOWLIST = f"""\
L2:
  - {NIGHTLY}:
      oncalls: oncall-six
      events: [nightly]
L3:
  gpu:
    {LIVE3}: [oncall-three]
    {SHADOW3}: [oncall-seven]
L4:
  - {LIVE4}: [oncall-four]
  - {MOVED}: [oncall-five]
repos:
  {NIGHTLY}:
    bisect: {{runs_per_day: 6}}
    mode: shadow
  {SHADOW3}:
    mode: shadow
"""
MOVED_BACK = ALLOWLIST + f"  {MOVED}:\n    mode: shadow\n"


def sha(n: int) -> str:
    return hashlib.sha1(f"door commit {n}".encode()).hexdigest()


def push_body(n: int) -> bytes:
    doc = json.loads(event_body("push.main.json"))
    commit = doc["commits"][0] | {
        "id": sha(n), "message": f"Change {n} (#{170100 + n})", "timestamp": f"2026-12-07T10:{n:02d}:00Z",
        "author": {"name": f"Dev {n}", "username": f"dev{n}"},
    }  # fmt: skip
    doc |= {"before": sha(n - 1), "after": sha(n), "commits": [commit], "head_commit": commit}
    return json.dumps(doc).encode()


def comment_event(comment: dict[str, Any], login: str) -> bytes:
    doc = {
        "action": "created",
        "issue": {"number": PR, "pull_request": {"url": f"https://api.github.com/repos/{UPSTREAM}/pulls/{PR}"}},
        "comment": {"id": comment["id"], "body": comment["body"], "user": {"login": login, "type": "User"},
                    "author_association": "MEMBER"},
        "repository": {"id": 65600975, "full_name": UPSTREAM, "default_branch": "main"},
        "sender": {"login": login, "type": "User"},
    }  # fmt: skip
    return json.dumps(doc).encode()


def wait(predicate: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if found := predicate():
            return found
        time.sleep(0.25)
    return predicate()


class Drive:
    """One stack, its GitHub, its HUD and an OIDC issuer, and the steps of the scenario."""

    def __init__(self, relay: Relay, oidc: OidcIssuer, hud: HudDouble) -> None:  # noqa: F811
        self.relay, self.github, self.oidc, self.hud = relay, relay.github, oidc, hud
        self.runs = 3000

    def report(self, repo: str, body: dict[str, Any], event_name: str = "repository_dispatch") -> None:
        token = self.oidc.token(
            repository=repo, repository_id=IDS[repo], run_id=body["run_id"], run_attempt=body["run_attempt"],
            job_workflow_ref=f"{repo}/.github/workflows/ci.yml@refs/heads/main", event_name=event_name,
        )  # fmt: skip
        headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
        status, reply = http("POST", f"{self.relay.url}/callback", json.dumps(body).encode(), headers)
        assert (status, reply) == (200, {"status": "recorded"}), (repo, body, reply)

    def job(self, repo: str, dispatch: int, name: str, conclusion: str | None, **extra: Any) -> int:
        """A job of the downstream's run for its n-th dispatch reports (in progress when `conclusion` is None)."""
        sent = self.github.dispatches(repo)[dispatch]
        self.runs += 1
        body = {
            "schema_version": 1,
            "ticket": sent["client_payload"]["ticket"],
            "workflow_name": "CI",
            "job_name": name,
            "run_id": extra.pop("run_id", self.runs),
            "run_attempt": 1,
            "url": f"https://github.com/{repo}/actions/runs/{self.runs}",
        } | ({"status": "in_progress"} if conclusion is None else {"status": "completed", "conclusion": conclusion})
        self.report(repo, body | extra)
        return int(body["run_id"])

    def nightly(self, head: str, conclusion: str) -> None:
        self.runs += 1
        self.report(NIGHTLY, {
            "schema_version": 1, "scheduled": True, "head_sha": head, "status": "completed", "conclusion": conclusion,
            "workflow_name": "nightly", "job_name": "full-suite", "run_id": self.runs, "run_attempt": 1,
            "url": f"https://github.com/{NIGHTLY}/actions/runs/{self.runs}",
        }, "schedule")  # fmt: skip

    def pull_request(self) -> None:
        doc = json.loads(event_body("pull_request.opened.json"))
        doc["number"] = PR
        doc["pull_request"] |= {"number": PR, "head": doc["pull_request"]["head"] | {"sha": HEAD},
                                "labels": [{"name": "ciflow/crcr/gpu"}]}  # fmt: skip
        self.github.add_commit(UPSTREAM, HEAD)
        self.github.add_issue(UPSTREAM, PR)
        assert self.relay.post("pull_request", json.dumps(doc).encode(), str(uuid.uuid4()))[0] == 202

    def command(self, text: str) -> None:
        made = self.github.add_comment(UPSTREAM, PR, text, user="maintainer")
        assert self.relay.post("issue_comment", comment_event(made, "maintainer"))[0] in (200, 202)

    def suite_rerequested(self) -> None:
        doc = {
            "action": "rerequested",
            "check_suite": {"id": self.github.check_suite_id(UPSTREAM, HEAD), "head_sha": HEAD, "status": "completed",
                            "conclusion": "failure"},
            "repository": {"id": 65600975, "full_name": UPSTREAM, "default_branch": "main"},
        }  # fmt: skip
        assert self.relay.post("check_suite", json.dumps(doc).encode())[0] in (200, 202)

    def pushes(self, count: int) -> None:
        for n in range(1, count + 1):
            assert self.relay.post("push", push_body(n), str(uuid.uuid4()))[0] == 202

    def seed_failing_l3_week(self) -> None:
        """A week of half-failing jobs for both L3 downstreams: the level check would demote each."""
        results = DynamoResults(
            self.relay.stack.client("dynamodb"), self.relay.stack.function_env["CRCR_RESULTS_TABLE"]
        )
        now = time.time()
        for repo in (LIVE3, SHADOW3):
            for i in range(24):
                at = now - 3 * 86_400 + i * 600
                record = job(repo, f"seeded-{i}", "success" if i % 2 else "failure", at, pr=9999, repo_id=IDS[repo])
                assert results.put_job(replace(record, dispatch_id=f"seed-{repo}-{i}"), None)

    def decisions(self) -> list[dict[str, Any]]:
        status, doc = http("GET", f"{self.relay.url}/hud/api/crcr/shadow")
        assert status == 200
        return list(doc["decisions"])

    def withheld(self) -> set[tuple[str, str]]:
        """(write, downstream) of every write the door kept instead of sending."""
        return {(d["event"], d["repo"]) for d in self.decisions() if d["decision"] == "withheld"}

    def regressions(self) -> dict[tuple[str, str], dict[str, Any]]:
        status, doc = http("GET", f"{self.relay.url}/hud/api/crcr/regressions")
        assert status == 200
        return {(r["repo"], r["job_name"]): r for r in doc["regressions"]}


def writes(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    """What a relay asked GitHub to do, but read and mint its own installation tokens."""
    return [r for r in requests if r.method != "GET" and not r.path.split("?")[0].endswith("/access_tokens")]


def mentions(request: RecordedRequest, repos: tuple[str, ...]) -> list[str]:
    said = (request.path + " " + request.body.decode("utf-8", "replace")).lower()
    return [repo for repo in repos if repo.lower() in said]


def start(relay_factory: Callable[..., Relay], github: GitHubDouble, oidc: OidcIssuer, mode: str, tmp: Path) -> Relay:  # noqa: F811
    """The allowlist lives in the upstream (`github:` source, so the level check can propose its PR there)."""
    grants = {"contents": "write", "checks": "write", "issues": "write", "pull_requests": "write",
              "actions": "read", "metadata": "read"}  # fmt: skip
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=grants)
    for n, repo in enumerate((MOVED, NIGHTLY, SHADOW3)):
        github.install(repo, installation_id=170 + n, repo_id=IDS[repo])
    github.add_commit(UPSTREAM, "0" * 40, branch="main")
    github.put_file(UPSTREAM, SOURCE, "0" * 40, ALLOWLIST)
    github.put_file(UPSTREAM, SOURCE, "main", ALLOWLIST)
    github.add_collaborator(UPSTREAM, "maintainer", "maintain")
    github.add_issue(UPSTREAM, CULPRIT_PR)
    disabled = tmp / "disabled-tests-condensed.json"  # as test-infra publishes the tests PyTorch disables
    disabled.write_text(json.dumps({"test_matmul (__main__.TestLinalg)": [str(DISABLED), DISABLED_URL, []]}))
    env = {
        "CRCR_MODE": mode, "CRCR_ALLOWLIST": f"github:{UPSTREAM}/{SOURCE}@main", "CRCR_ALLOWLIST_REFRESH_S": "1",
        "CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_GITHUB_APP_SLUG": "crcr-bot",
        "CRCR_GITHUB_WRITE_RATES": "600/60+100", "CRCR_RUN_TIMEOUT_S": "12", "CRCR_SWEEP_INTERVAL_S": "1",
        "CRCR_LEVEL_INTERVAL_S": "3", "CRCR_DISABLED_TESTS": str(disabled),
    }  # fmt: skip
    return relay_factory(env=env)


def test_a_shadow_stack_writes_nothing_on_any_path(
    relay_factory: Callable[..., Relay],
    github: GitHubDouble,
    hud: HudDouble,
    oidc: OidcIssuer,  # noqa: F811
    tmp_path: Path,
) -> None:
    d = Drive(start(relay_factory, github, oidc, "shadow", tmp_path), oidc, hud)
    d.pull_request()
    d.command(f"@crcr-bot rerun {LIVE4}")
    d.suite_rerequested()
    d.pushes(3)
    wait(lambda: len({x["delivery_id"] for x in d.decisions() if x["event"] == "push"}) == 3)
    d.nightly(sha(1), "success")
    d.nightly(sha(3), "failure")
    d.seed_failing_l3_week()
    # The regression is tracked on crcr's own pages; bisecting it, telling its owners, pushing its rows and proposing
    # the demotions are each kept as what would have been written.
    assert wait(lambda: d.regressions().get((NIGHTLY, "full-suite")))["first_fail"] == sha(3)
    expected = {("dispatch", NIGHTLY), ("notice", NIGHTLY), ("hud_push", NIGHTLY), ("level_pr", LIVE3),
                ("level_pr", SHADOW3)}  # fmt: skip
    assert wait(lambda: expected <= d.withheld()), d.withheld()
    [bisect] = [x for x in d.decisions() if x["event"] == "dispatch" and x["decision"] == "withheld"]
    assert bisect["payload"]["event_type"] == "bisect" and bisect["payload"]["client_payload"]["bisect"]["testing"]
    time.sleep(3)  # a write that would come late has come
    assert writes(github.requests) == [] and hud.attempts == []
    assert all(github.dispatches(repo) == [] for repo in (LIVE4, LIVE3, *SHADOWS))
    assert not [c for c in github.comments(UPSTREAM, PR) if c["performed_via_github_app"]]  # no answer, no comment
    assert d.relay.metric("WriteWithheld") >= len(expected) and d.relay.metric("DispatchSent") == 0


def test_a_live_stack_writes_for_its_live_downstreams_and_nothing_for_its_shadow_ones(
    relay_factory: Callable[..., Relay],
    github: GitHubDouble,
    hud: HudDouble,
    oidc: OidcIssuer,  # noqa: F811
    tmp_path: Path,
) -> None:
    d = Drive(start(relay_factory, github, oidc, "live", tmp_path), oidc, hud)
    d.pull_request()
    d.relay.wait_dispatches({LIVE4: 1, MOVED: 1, LIVE3: 1}, settle_s=0)
    assert wait(lambda: [r for r in github.check_runs(UPSTREAM) if r["name"] == f"crcr/{MOVED}"])  # queued, while live
    # MOVED goes back to shadow: from here on nothing is written for it, though its run still reports and is recorded.
    github.add_commit(UPSTREAM, "1" * 40, branch="main")
    github.put_file(UPSTREAM, SOURCE, "1" * 40, MOVED_BACK)
    github.put_file(UPSTREAM, SOURCE, "main", MOVED_BACK)
    time.sleep(2.5)  # read again after a second (CRCR_ALLOWLIST_REFRESH_S)
    moved_at = len(github.requests)
    matmul = [{"name": "test_matmul", "classname": "test_linalg.TestLinalg", "message": "mismatch"}]
    d.job(MOVED, 0, "unit", "failure", failure_kind="test", failed_tests_detail=matmul)  # a known failure
    d.job(MOVED, 0, "slow", None)  # started, never finished: the sweeper times it out
    github.add_workflow_run(LIVE4, 777, head_sha=HEAD, status="completed", conclusion="failure")
    d.job(LIVE4, 0, "test", "failure", failure_kind="test", run_id=777)
    d.job(LIVE4, 0, "unit", "failure", failure_kind="test", failed_tests_detail=matmul, run_id=777)
    d.command(f"@crcr-bot rerun {MOVED}")  # a shadow downstream: ignored, no reaction, no re-run
    d.pushes(3)
    d.relay.wait_dispatches({LIVE4: 4, LIVE3: 4}, settle_s=0)
    for n, conclusion in enumerate(("success", "failure", "failure"), start=1):
        d.job(LIVE4, n, "test", conclusion, failure_kind="test" if conclusion == "failure" else None)
    d.nightly(sha(1), "success")
    d.nightly(sha(3), "failure")
    d.seed_failing_l3_week()

    # The live downstreams, as before: their check runs, the PR comment (the known failure with its issue, MOVED not
    # in it), the notice of their regression, the re-run asked from the Checks tab, the demotion PR, their HUD rows.
    def commented() -> str | None:
        bodies = [c["body"] for c in github.comments(UPSTREAM, PR) if c["performed_via_github_app"]]
        return bodies[-1] if bodies and DISABLED_URL in bodies[-1] else None  # the known failure, with its issue

    body = wait(commented)
    assert body and f"{LIVE4}`" in body and MOVED not in body and "@oncall-five" not in body
    d.suite_rerequested()
    assert wait(lambda: github.reruns(LIVE4)) == [777]
    notices = wait(lambda: [c["body"] for c in github.comments(UPSTREAM, CULPRIT_PR) if c["performed_via_github_app"]])
    assert len(notices) == 1 and "@oncall-four" in notices[0] and NIGHTLY not in notices[0]
    assert wait(lambda: [p for p in github.pulls(UPSTREAM) if p["head"]["ref"] == f"crcr-demotion/{LIVE3}"])
    assert wait(lambda: {(LIVE4, "test"), (LIVE4, "unit")} <= {(r["downstream_repo"], r["job_name"])
                                                              for r in hud.rows.values()})  # fmt: skip
    names = {r["name"] for r in github.check_runs(UPSTREAM)}
    assert {f"crcr/{LIVE4}/CI/test", f"crcr/{LIVE4}/CI/unit"} <= names

    # The shadow ones: recorded and tracked, each write kept as what would have been written, none sent.
    regression = wait(lambda: d.regressions().get((NIGHTLY, "full-suite")))
    assert regression["first_fail"] == sha(3) and d.regressions()[(LIVE4, "test")]["first_fail"] == sha(2)
    expected = {("dispatch", NIGHTLY), ("notice", NIGHTLY), ("hud_push", NIGHTLY), ("hud_push", MOVED),
                ("level_pr", SHADOW3)}  # fmt: skip
    assert wait(lambda: expected <= d.withheld()), d.withheld()
    timed_out = wait(lambda: [r for r in d.decisions() if r["event"] == "hud_push" and r["repo"] == MOVED
                              and "timed_out" in json.dumps(r["payload"])])  # fmt: skip
    assert timed_out, "the sweeper's time-out of the moved downstream's job is kept, not pushed"
    time.sleep(3)
    leaked = [
        (r.method, r.path, mentions(r, SHADOWS)) for r in writes(github.requests[moved_at:]) if mentions(r, SHADOWS)
    ]
    assert leaked == []
    assert not [a for a in hud.attempts if any(repo in json.dumps(a[1]) for repo in SHADOWS)]  # not one push
    assert [x for x in github.dispatches(NIGHTLY)] == [] and len(github.dispatches(MOVED)) == 1
    assert not [p for p in github.pulls(UPSTREAM) if SHADOW3 in p["head"]["ref"]]
    queued = [r for r in github.check_runs(UPSTREAM) if MOVED in r["name"]]
    assert [(r["name"], r["status"]) for r in queued] == [(f"crcr/{MOVED}", "queued")]  # left as the move found it
