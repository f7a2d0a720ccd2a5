"""On `crcr local`: downstreams that skip what does not concern them (one listing of a PR's files per head, no
dispatch where the paths filter excludes the change, the L4 repository's required check concluded skipped), and
re-runs asked for in a PR comment by someone with access (and only by them)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import Relay, event_body, http
from tests.doubles.github_double import Reply
from tests.doubles.oidc_issuer import OidcIssuer

pytestmark = pytest.mark.e2e

UPSTREAM = "pytorch/pytorch"
L4 = "org-four/L4-Repo"
ALLOWLIST = f"""\
L1:
  - org-one/l1-repo
L2:
  - org-two/l2-repo
L3:
  gpu:
    org-three/l3-repo: [oncall-three]
L4:
  - {L4}
repos:
  {L4}:
    paths: ["torch/**", "aten/**"]
  org-two/l2-repo:
    paths_ignore: ["docs/**"]
"""


def test_a_pr_touching_only_docs_skips_filtered_downstreams_and_concludes_the_required_check(
    relay_factory: Callable[..., Relay],
) -> None:
    relay = relay_factory(ALLOWLIST)
    grants = {"contents": "write", "checks": "write", "pull_requests": "write", "metadata": "read"}
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=grants)
    pr = json.loads(event_body("pull_request.opened.json"))
    number, head = pr["pull_request"]["number"], pr["pull_request"]["head"]["sha"]
    relay.github.add_commit(UPSTREAM, head)
    relay.github.set_pull_files(UPSTREAM, number, ["docs/index.md", ("docs/new.md", "docs/old.md")], head=head)
    assert relay.post("pull_request", event_body("pull_request.opened.json"))[0] == 202
    relay.wait_dispatches({"org-one/l1-repo": 1, "org-three/l3-repo": 1})
    assert relay.github.dispatches(L4) == [] and relay.github.dispatches("org-two/l2-repo") == []
    deadline = time.time() + 30
    runs: list[dict[str, object]] = []
    while time.time() < deadline and not runs:
        runs = [r for r in relay.github.check_runs(UPSTREAM) if r["name"] == f"crcr/{L4}" and r["head_sha"] == head]
        time.sleep(0.2)
    [check] = runs
    assert (check["status"], check["conclusion"]) == ("completed", "skipped")
    assert "no matching files" in str(check["output"])
    listings = [r for r in relay.github.requests if "/compare/" in r.path]
    assert [r.path.rsplit("...", 1)[1] for r in listings] == [head]  # one comparison of the head, not one each
    # The listing also tells every dispatched downstream what the change touches (advice for its own test selection).
    [sent] = relay.github.dispatches("org-one/l1-repo")
    assert sent["client_payload"]["changes"] == {
        "files": pr["pull_request"]["changed_files"],  # GitHub's count
        "complete": True,
        "dirs": ["docs"],
        "paths": ["docs/index.md", "docs/new.md", "docs/old.md"],  # a renamed file under both its names
        "tests": [],
    }

    # The next head touches torch/: every downstream is dispatched again.
    synced = json.loads(event_body("pull_request.opened.json"))
    synced["action"] = "synchronize"
    synced["pull_request"]["head"]["sha"] = "e" * 40
    synced["pull_request"]["updated_at"] = "2099-01-01T00:00:00Z"
    relay.github.set_pull_files(UPSTREAM, number, ["torch/nn/functional.py"], head="e" * 40)
    assert relay.post("pull_request", json.dumps(synced).encode())[0] == 202
    relay.wait_dispatches({L4: 1, "org-two/l2-repo": 1})
    assert relay.metric("DispatchSkipped.reason=no_matching_files") == 2
    [sent] = relay.github.dispatches(L4)
    assert (sent["client_payload"]["changes"]["paths"], sent["client_payload"]["changes"]["dirs"]) == (
        ["torch/nn/functional.py"],
        ["torch"],
    )


def test_a_head_is_skipped_only_on_its_own_files_never_on_what_the_pr_became_or_an_answer_that_is_no_listing(
    relay_factory: Callable[..., Relay],
) -> None:
    """Red team: head A touches torch/, a force-push made the PR docs-only (B) before A's event was planned, so the
    PR's file listing was B's; A was skipped and its required check concluded skipped, which GitHub counts as
    passing."""
    relay = relay_factory(ALLOWLIST)
    grants = {"contents": "write", "checks": "write", "pull_requests": "write", "metadata": "read"}
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=grants)
    pr = json.loads(event_body("pull_request.opened.json"))
    number, head = pr["pull_request"]["number"], pr["pull_request"]["head"]["sha"]
    relay.github.add_commit(UPSTREAM, head)
    relay.github.set_pull_files(UPSTREAM, number, ["torch/csrc/autograd/engine.cpp"], head=head)  # A
    relay.github.set_pull_files(UPSTREAM, number, ["docs/index.md"], head="b" * 40)  # B: what the PR lists now
    assert relay.post("pull_request", event_body("pull_request.opened.json"))[0] == 202
    relay.wait_dispatches({L4: 1, "org-two/l2-repo": 1}, settle_s=0)
    assert [r.path for r in relay.github.requests if "/pulls/" in r.path and r.path.endswith("/files")] == []

    # A comparison GitHub answers 200 with something that is no list of files: unknown, so dispatched, not skipped.
    synced = json.loads(event_body("pull_request.opened.json"))
    synced["action"] = "synchronize"
    synced["pull_request"] |= {"head": synced["pull_request"]["head"] | {"sha": "c" * 40}, "updated_at": "2099-01-01"}
    relay.github.set_pull_files(UPSTREAM, number, ["docs/index.md"], head="c" * 40)
    relay.github.script("GET", r"/repos/.*/compare/.*", [Reply(status=200, body={"files": "docs/index.md"})])
    assert relay.post("pull_request", json.dumps(synced).encode())[0] == 202
    relay.wait_dispatches({L4: 2, "org-two/l2-repo": 2}, settle_s=0)
    assert relay.metric("DispatchSkipped.reason=no_matching_files") == 0
    assert relay.metric("ChangedFilesUnknown") == 1


REPO_IDS = {"org-one/l1-repo": 5000, "org-two/l2-repo": 5001, "org-three/l3-repo": 5002, L4: 5003}


@pytest.fixture
def oidc() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        yield issuer


def _comment_event(number: int, comment: dict[str, Any], login: str, association: str | None = None) -> bytes:
    made = {"id": comment["id"], "body": comment["body"], "user": {"login": login, "type": "User"}}
    doc = {
        "action": "created",
        "issue": {"number": number, "pull_request": {"url": f"https://api.github.com/repos/{UPSTREAM}/pulls/{number}"}},
        "comment": made | ({"author_association": association} if association else {}),
        "repository": {"id": 65600975, "full_name": UPSTREAM, "default_branch": "main"},
        "sender": {"login": login, "type": "User"},
    }
    return json.dumps(doc).encode()


def test_a_maintainers_rerun_comment_reruns_the_failed_jobs_once_and_an_outsiders_does_nothing(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer
) -> None:
    relay = relay_factory(
        ALLOWLIST.replace('    paths: ["torch/**", "aten/**"]\n', "    check_runs: per_repo\n"),
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_GITHUB_APP_SLUG": "crcr-bot"},
    )
    github = relay.github
    grants = {"contents": "write", "checks": "write", "issues": "write", "pull_requests": "write", "metadata": "read"}
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=grants)
    pr = json.loads(event_body("pull_request.opened.json"))
    number, head = pr["pull_request"]["number"], pr["pull_request"]["head"]["sha"]
    github.add_commit(UPSTREAM, head)
    github.set_pull_files(UPSTREAM, number, ["torch/x.py"], head=head)
    assert relay.post("pull_request", event_body("pull_request.opened.json"))[0] == 202
    relay.wait_dispatches({L4: 1}, settle_s=0)
    [sent] = github.dispatches(L4)
    github.add_workflow_run(L4, 777, head_sha="f" * 40, status="completed", conclusion="failure")
    body = {
        "schema_version": 1, "ticket": sent["client_payload"]["ticket"], "status": "completed", "conclusion": "failure",
        "workflow_name": "CI", "job_name": "test", "run_id": 777, "run_attempt": 1,
        "url": f"https://github.com/{L4}/actions/runs/777",
    }  # fmt: skip
    claims = {"repository": L4, "repository_id": REPO_IDS[L4], "run_id": 777, "run_attempt": 1,
              "job_workflow_ref": f"{L4}/.github/workflows/ci.yml@refs/heads/main"}  # fmt: skip
    headers = {"content-type": "application/json", "authorization": f"Bearer {oidc.token(**claims)}"}
    assert http("POST", f"{relay.url}/callback", json.dumps(body).encode(), headers) == (200, {"status": "recorded"})

    github.add_issue(UPSTREAM, number)
    github.add_collaborator(UPSTREAM, "maintainer", "triage")
    outsider = github.add_comment(UPSTREAM, number, f"@crcr-bot rerun {L4}", user="outsider")
    assert relay.post("issue_comment", _comment_event(number, outsider, "outsider"))[0] == 202
    command = github.add_comment(UPSTREAM, number, f"Flaky runner, retrying.\n@crcr-bot rerun {L4}", user="maintainer")
    assert relay.post("issue_comment", _comment_event(number, command, "maintainer"))[0] == 202
    deadline = time.time() + 30
    while time.time() < deadline and not (github.reruns(L4) and github.reactions(command["id"])):
        time.sleep(0.2)
    time.sleep(1.5)  # long enough for a second re-run or an outsider's reaction to show
    assert github.reruns(L4) == [777]  # exactly the named downstream's failed run, once
    assert github.reactions(command["id"]) == ["rocket"] and github.reactions(outsider["id"]) == []
    assert relay.metric("CommandAccepted") == 1 and relay.metric("CommandIgnored.reason=not_allowed") == 1
    # A comment that is not a command is not even queued.
    chatter = github.add_comment(UPSTREAM, number, "LGTM", user="maintainer")
    assert relay.post("issue_comment", _comment_event(number, chatter, "maintainer"))[0] == 200


def test_a_dispatch_whose_post_timed_out_after_github_accepted_it_starts_one_run_not_two(
    relay_factory: Callable[..., Relay],
) -> None:
    relay = relay_factory(env={"CRCR_RUN_SETTLE_S": "1"})
    github = relay.github
    # L4's workflow carries the dispatch id in its run-name (as examples/workflows/downstream.yml does); L2's does not.
    github.set_dispatch_workflow(L4, lambda body: f"crcr {body['event_type']} {body['client_payload']['dispatch_id']}")
    github.set_dispatch_workflow("org-two/l2-repo", lambda body: "CI")
    for repo in (L4, "org-two/l2-repo"):  # GitHub carries the POST out, then answers after the relay gave up
        github.script("POST", f"/repos/{repo}/dispatches", [Reply.accept_then_hang(4.0)])
    assert relay.post("pull_request", event_body("pull_request.opened.json"))[0] == 202
    relay.wait_dispatches({"org-two/l2-repo": 2, "org-one/l1-repo": 1}, timeout_s=60, settle_s=3)
    assert len(github.dispatches(L4)) == 1  # found its run by the dispatch id: not sent again
    l4_runs = [r for r in github.requests if r.method == "GET" and r.path == f"/repos/{L4}/actions/runs"]
    assert l4_runs and l4_runs[0].query["event"] == ["repository_dispatch"]
    assert len(github.dispatches("org-two/l2-repo")) == 2  # no id in its run-name: sent again, as before
    assert relay.metric("DispatchRunFound") == 1 and relay.metric("DispatchRunNotFound") == 1


def test_rerun_all_dispatches_again_only_what_ended_without_a_run_and_only_once_per_head(
    relay_factory: Callable[..., Relay],
) -> None:
    """Red team: `@<app> rerun all` dispatched the downstreams the path filters skipped and those still running,
    once per comment (5 comments, 6 runs of one commit)."""
    pending = "org-five/pending"
    allowlist = ALLOWLIST.replace(f"L4:\n  - {L4}\n", f"L4:\n  - {L4}\n  - {pending}\n")
    relay = relay_factory(allowlist, env={"CRCR_GITHUB_APP_SLUG": "crcr-bot", "CRCR_START_TIMEOUT_S": "2",
                                          "CRCR_SWEEP_INTERVAL_S": "86400"})  # fmt: skip
    github = relay.github
    grants = {"contents": "write", "checks": "write", "issues": "write", "pull_requests": "write", "metadata": "read"}
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=grants)
    github.install(pending, installation_id=107, repo_id=5004)
    pr = json.loads(event_body("pull_request.opened.json"))
    number, head = pr["pull_request"]["number"], pr["pull_request"]["head"]["sha"]
    github.add_commit(UPSTREAM, head)
    github.set_pull_files(UPSTREAM, number, ["docs/index.md"], head=head)  # L4's paths skip it; pending has none
    assert relay.post("pull_request", event_body("pull_request.opened.json"))[0] == 202
    relay.wait_dispatches({pending: 1}, settle_s=0)
    github.add_issue(UPSTREAM, number)
    github.add_collaborator(UPSTREAM, "maintainer", "write")

    def comment() -> None:
        made = github.add_comment(UPSTREAM, number, "@crcr-bot rerun all", user="maintainer")
        assert relay.post("issue_comment", _comment_event(number, made, "maintainer"))[0] == 202
        deadline = time.time() + 30
        while time.time() < deadline and not github.reactions(made["id"]):
            time.sleep(0.2)
        assert github.reactions(made["id"])  # answered: planned

    def repo_check(repo: str) -> dict[str, Any]:
        runs = [r for r in github.check_runs(UPSTREAM) if r["name"] == f"crcr/{repo}" and r["head_sha"] == head]
        return runs[0] if runs else {}

    deadline = time.time() + 30
    while time.time() < deadline and not (repo_check(L4).get("conclusion") and repo_check(pending)):
        time.sleep(0.2)
    for _ in range(5):  # pending's dispatch has no job yet; L4's paths skipped the head
        comment()
    assert (len(github.dispatches(L4)), len(github.dispatches(pending))) == (0, 1)
    assert relay.metric("CommandSkipped.reason=still_running") == 5
    assert relay.metric("CommandSkipped.reason=skipped_on_head") == 5

    # pending's dispatch times out (no job ever started): now one comment dispatches it again, and only one does.
    time.sleep(2.1)
    relay.stack.invoke("SweeperFunction", {"source": "aws.events", "detail-type": "Scheduled Event"})
    deadline = time.time() + 30
    while time.time() < deadline and repo_check(pending).get("conclusion") != "timed_out":
        time.sleep(0.2)
    for _ in range(3):
        comment()
    relay.wait_dispatches({pending: 2})
    assert len(github.dispatches(pending)) == 2 and github.dispatches(L4) == []
    assert relay.metric("CommandSkipped.reason=already_dispatched") == 2


def test_command_comments_from_anyone_cost_one_permission_read_a_while_and_stop_at_an_hourly_budget(
    relay_factory: Callable[..., Relay],
) -> None:
    """Red team: every `@<app> rerun …` comment from anyone cost an uncached permission read of the upstream's
    installation (60 comments, 60 reads)."""
    relay = relay_factory(ALLOWLIST, env={"CRCR_GITHUB_APP_SLUG": "crcr-bot"})
    github = relay.github
    grants = {"contents": "write", "checks": "write", "issues": "write", "pull_requests": "write", "metadata": "read"}
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=grants)
    number = json.loads(event_body("pull_request.opened.json"))["pull_request"]["number"]
    github.add_issue(UPSTREAM, number)
    for _ in range(25):
        made = github.add_comment(UPSTREAM, number, "@crcr-bot rerun all", user="outsider")
        assert relay.post("issue_comment", _comment_event(number, made, "outsider"))[0] == 202

    def ignored(reason: str) -> int:
        return relay.metric(f"CommandIgnored.reason={reason}")

    deadline = time.time() + 60
    while time.time() < deadline and ignored("not_allowed") + ignored("over_budget") < 25:
        time.sleep(0.2)
    assert (ignored("not_allowed"), ignored("over_budget")) == (20, 5)  # 20 an hour from one author
    reads = [r for r in github.requests if r.path.endswith("/collaborators/outsider/permission")]
    assert len(reads) == 1  # the answer is remembered: one read for the lot


def test_command_comments_from_strangers_are_refused_without_asking_github_anything(
    relay_factory: Callable[..., Relay],
) -> None:
    """Red team: 60 logins commenting `@<app> rerun all` cost 60 permission reads of the upstream's installation, each
    login its own (the per-author budget and the remembered answer are per login)."""
    relay = relay_factory(ALLOWLIST, env={"CRCR_GITHUB_APP_SLUG": "crcr-bot"})
    github = relay.github
    grants = {"contents": "write", "checks": "write", "issues": "write", "pull_requests": "write", "metadata": "read"}
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=grants)
    number = json.loads(event_body("pull_request.opened.json"))["pull_request"]["number"]
    github.add_issue(UPSTREAM, number)
    strangers = ("NONE", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR")
    for n in range(60):
        login = f"stranger-{n}"
        made = github.add_comment(UPSTREAM, number, "@crcr-bot rerun all", user=login)
        assert relay.post("issue_comment", _comment_event(number, made, login, strangers[n % 3]))[0] == 202
    # Anyone GitHub shows a tie for is still asked about, as before: a contributor with no access is refused by role.
    made = github.add_comment(UPSTREAM, number, "@crcr-bot rerun all", user="contributor")
    assert relay.post("issue_comment", _comment_event(number, made, "contributor", "CONTRIBUTOR"))[0] == 202

    def ignored() -> int:
        return sum(relay.metric(f"CommandIgnored.reason={why}") for why in ("stranger", "not_allowed", "over_budget"))

    deadline = time.time() + 60
    while time.time() < deadline and ignored() < 61:
        time.sleep(0.2)
    assert relay.metric("CommandIgnored.reason=stranger") == 60
    assert relay.metric("CommandIgnored.reason=not_allowed") == 1
    reads = [r.path for r in github.requests if "/collaborators/" in r.path]
    assert reads == [f"/repos/{UPSTREAM}/collaborators/contributor/permission"]  # one, for the contributor only
    assert not any("/reactions" in r.path for r in github.requests)  # nobody was answered
