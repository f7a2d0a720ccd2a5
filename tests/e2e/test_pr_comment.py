"""The PR comment on `crcr local`, judged by the GitHub double's issue-comment API: one comment per PR, created at
the first L3/L4 failure and edited in place (even after the relay lost its row), owners mentioned once, a burst
of callbacks costing one write, nothing for a closed PR, an infrastructure failure kept back until its automatic
re-run reports, and the installation's budget shared with check runs.

Everything goes the relay's own way: real callbacks with real tokens, the reporter's verdicts and its `comment`
messages, the checks queue, the pacer. A `new` verdict needs a baseline, so the tests that want one first push
the PR's base commit to the default branch (the planner records its place) and report a scheduled run of the
job passing on it (`baseline`).
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import DEFAULT_ALLOWLIST, LISTED, Relay, event_body
from tests.doubles.github_double import Reply
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import Scenario, oidc, scheduled_body  # noqa: F401 - oidc is a fixture
from tests.e2e.test_relay import only_allowed_endpoints

pytestmark = pytest.mark.e2e
L4 = "org-four/L4-Repo"
UPSTREAM = "pytorch/pytorch"
PR = 170001
STATE_TABLE = "crcr-local-StateTable"
# The L4 repository's owner is its oncall; it takes pull requests only (the baseline's push dispatches nothing
# to it, so each test's PR has one dispatch there).
ALLOWLIST = DEFAULT_ALLOWLIST.replace("  - org-four/L4-Repo\n", "  - org-four/L4-Repo: [oncall-four]\n") + (
    "repos:\n  org-four/L4-Repo:\n    events: [pull_request]\n"
)
COMMENT_PERMISSIONS = {
    "actions": "write",
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "pull_requests": "write",
    "metadata": "read",
}


def start(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    settle_s: float = 2,
    env: dict[str, str] | None = None,
    allowlist: str = ALLOWLIST,
) -> Scenario:
    relay = relay_factory(
        allowlist=allowlist,
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_COMMENT_SETTLE_S": str(settle_s)}
        | (env or {}),
    )
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=COMMENT_PERMISSIONS)
    relay.github.add_issue(UPSTREAM, PR)
    doc = json.loads(event_body("pull_request.opened.json"))
    relay.github.add_commit(UPSTREAM, doc["pull_request"]["head"]["sha"])
    assert relay.post("pull_request", json.dumps(doc).encode(), str(uuid.uuid4()))[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    return Scenario(relay, oidc, "", doc["pull_request"]["head"]["sha"])


def baseline(s: Scenario, *jobs: str) -> None:
    """The PR's base commit pushed to the default branch, and each job passing on it in a scheduled run."""
    base = json.loads(event_body("pull_request.opened.json"))["pull_request"]["base"]["sha"]
    s.relay.github.add_commit(UPSTREAM, base)
    push = json.loads(event_body("push.main.json"))
    push["after"] = base
    push["commits"] = [push["commits"][0] | {"id": base, "timestamp": "2026-11-29T10:00:00Z"}]
    push["head_commit"] = push["commits"][0]
    assert s.relay.post("push", json.dumps(push).encode())[0] == 202
    ddb = s.relay.stack.client("dynamodb")
    key = {"pk": {"S": f"BRANCH#{UPSTREAM}"}, "sk": {"S": f"C#{base}"}}
    wait(lambda: "Item" in ddb.get_item(TableName=STATE_TABLE, Key=key))
    for n, job in enumerate(jobs):
        nightly = s.token(L4, event_name="schedule", run_id=500 + n)
        body = scheduled_body(base, workflow_name="CI", job_name=job, run_id=500 + n)
        assert s.post(body | {"url": f"https://github.com/{L4}/actions/runs/{500 + n}"}, nightly)[0] == 200


def report(s: Scenario, job_name: str, conclusion: str, run_attempt: int = 1, **extra: Any) -> None:
    token = s.token(L4, run_attempt=run_attempt)
    body = s.body(L4, job_name=job_name, status="completed", conclusion=conclusion, run_attempt=run_attempt)
    assert s.post(body | extra, token)[0] == 200


def wait(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not predicate():
        time.sleep(0.1)
    assert predicate()


def writes(s: Scenario) -> list[tuple[str, int, str]]:
    return s.relay.github.comment_writes(UPSTREAM)


def ours(s: Scenario) -> list[dict[str, Any]]:
    return [c for c in s.relay.github.comments(UPSTREAM, PR) if c["performed_via_github_app"]]


def test_one_comment_created_at_the_first_failure_then_edited_in_place_owners_mentioned_once(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    baseline(s, "test", "later")
    report(s, "build", "success")
    time.sleep(4)
    assert writes(s) == []  # never a comment that only says green

    report(s, "test", "failure")  # passed on the baseline: new
    wait(lambda: len(writes(s)) == 1)
    [(method, comment_id, body)] = writes(s)
    assert method == "POST"
    assert "<!-- crcr:pr-comment upstream=pytorch/pytorch pr=170001 -->" in body
    assert "#### `org-four/L4-Repo` · L4" in body and "| CI / test | 1 |" in body and "**new**" in body
    assert "Owners: @oncall-four" in body
    assert "[github.com](https://github.com/org-four/L4-Repo/actions/runs/777)" in body

    # The failure goes away (a re-run passes): the same comment says so, and the mention leaves it.
    report(s, "test", "success", run_attempt=2)
    wait(lambda: len(writes(s)) == 2)
    assert writes(s)[-1][:2] == ("PATCH", comment_id)
    assert "All passing again" in writes(s)[-1][2] and "flaky (passed on retry)" in writes(s)[-1][2]
    assert "@oncall-four" not in writes(s)[-1][2]

    # The relay loses its row for the PR (a cold start that lost the stored id): the marker finds the comment.
    ddb = s.relay.stack.client("dynamodb")
    key = {"pk": {"S": f"PR#{UPSTREAM}#{PR}"}, "sk": {"S": "COMMENT"}}
    assert "Item" in ddb.get_item(TableName=STATE_TABLE, Key=key)
    ddb.delete_item(TableName=STATE_TABLE, Key=key)
    report(s, "later", "failure")
    wait(lambda: len(writes(s)) == 3)
    method, again_id, body = writes(s)[-1]
    assert (method, again_id) == ("PATCH", comment_id)  # never a second comment
    # Mentioned once per PR and repository: the owner is named again, without a link.
    assert "Owners: `@oncall-four`" in body and "| CI / later | 1 |" in body
    time.sleep(3)
    assert [m for m, _, _ in writes(s)] == ["POST", "PATCH", "PATCH"] and len(ours(s)) == 1
    # The endpoints docs/contracts.md lists: the three issue-comment endpoints and nothing else new.
    only_allowed_endpoints(s.relay)


def test_a_burst_of_callbacks_costs_one_write(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    # The relay's default settle time: a render waits until no change has been asked about for 5 s. On a busy
    # 2-core machine the reporter's asks for a burst of 20 can come more than 2 s apart (a stream batch is asked
    # about when it is done), which is a burst as the relay defines it only with the default.
    s = start(relay_factory, oidc, settle_s=5)
    token = s.token(L4)
    answered = [time.time()]
    for i in range(20):  # 20 jobs failing within about 2 s; the reporter asks for the comment after each
        assert s.post(s.body(L4, job_name=f"job-{i:02d}", status="completed", conclusion="failure"), token)[0] == 200
        answered.append(time.time())
    # A burst: no pause between two reports as long as the settle time (a busy host stretches the whole burst, to
    # more than 10 s at a load of 9 on 2 cores, not the pauses within it).
    longest_pause_s = max(later - earlier for earlier, later in itertools.pairwise(answered))
    wait(lambda: len(writes(s)) >= 1, timeout_s=60)
    time.sleep(5)  # room for a stray second write
    [(method, _, body)] = writes(s)
    assert method == "POST" and all(f"| CI / job-{i:02d} | 1 |" in body for i in range(20))
    assert "no baseline" in body and longest_pause_s < 5
    # However the stream batched the 20 records (and so how many check-run passes asked for the comment), none
    # became a second write.
    assert s.relay.metric("PrCommentCreated") == 1 and s.relay.metric("PrCommentUpdated") == 0


def test_a_closed_pr_gets_no_comment(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    [opened] = s.relay.github.dispatches(L4)
    doc = json.loads(event_body("pull_request.opened.json"))
    doc["action"], doc["pull_request"]["state"] = "closed", "closed"
    doc["pull_request"]["updated_at"] = "2026-11-29T19:00:00Z"
    assert s.relay.post("pull_request", json.dumps(doc).encode())[0] == 202
    wait(lambda: len(s.relay.github.dispatches(L4)) == 2)  # closed is dispatched too, for clean-ups
    # The opened dispatch's job fails after the PR was closed.
    body = {
        "schema_version": 1, "ticket": opened["client_payload"]["ticket"], "status": "completed",
        "conclusion": "failure", "workflow_name": "CI", "job_name": "test", "run_id": 777, "run_attempt": 1,
        "url": f"https://github.com/{L4}/actions/runs/777",
    }  # fmt: skip
    assert s.post(body, s.token(L4))[0] == 200
    wait(lambda: s.relay.metric("PrCommentSkipped.reason=closed") >= 1)
    time.sleep(3)
    assert writes(s) == [] and not [r for r in s.relay.github.requests if "/issues/" in r.path]


def test_an_infra_failure_is_told_only_after_its_automatic_rerun_reports(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    s.relay.github.add_workflow_run(L4, 777, head_sha=s.head_sha, status="completed", conclusion="failure")
    report(s, "build-and-test", "failure", failure_kind="infra")
    wait(lambda: s.relay.github.reruns(L4) == [777])  # the relay re-runs it once
    time.sleep(4)
    assert writes(s) == []  # nobody is told while the re-run is pending
    report(s, "build-and-test", "failure", run_attempt=2)  # the re-run fails too, on its own
    wait(lambda: len(writes(s)) == 1)
    [(method, _, body)] = writes(s)
    assert method == "POST" and "| CI / build-and-test | 2 |" in body and "no baseline" in body
    assert "| CI / build-and-test | 1 |" not in body


def test_github_refusing_the_comment_goes_to_the_dlq_with_the_reason(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    locked = Reply.error(403, "Unable to create comment because issue is locked.")
    s.relay.github.script("POST", rf"/repos/{UPSTREAM}/issues/{PR}/comments", [locked])
    report(s, "test", "failure")
    sqs = s.relay.stack.client("sqs")
    dlq = s.relay.stack.queue_urls["ChecksDLQ"]
    found: list[dict[str, Any]] = []

    def dead() -> bool:
        got = sqs.receive_message(QueueUrl=dlq, MessageAttributeNames=["All"], WaitTimeSeconds=1)
        found.extend(m for m in got.get("Messages", []) if json.loads(m["Body"])["kind"] == "comment")
        return bool(found)

    wait(dead)
    reason = found[0]["MessageAttributes"]["failure_reason"]["StringValue"]
    assert "403" in reason and "locked" in reason
    # The next change books a new render, and the comment is made then.
    report(s, "other", "failure")
    wait(lambda: len(writes(s)) == 1)


def test_comment_writes_share_the_installations_budget_with_check_runs(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    # A budget of 4 at once and one write every 1.5 s after it: 12 per-job check runs have to wait for it
    # however slowly the callbacks arrive (posting them would have to take 12 s for the budget to refill).
    per_job = ALLOWLIST + "    check_runs: per_job\n"
    # The installation's budget alone: one downstream here, its share (CRCR_DOWNSTREAM_WRITE_SHARE) the whole of it.
    env = {"CRCR_GITHUB_WRITE_RATES": "40/60+4", "CRCR_DOWNSTREAM_WRITE_SHARE": "1"}
    s = start(relay_factory, oidc, env=env, allowlist=per_job)
    token = s.token(L4)
    jobs = [f"job-{i:02d}" for i in range(12)]
    for job in jobs:  # 12 check runs created, then completed
        assert s.post(s.body(L4, job_name=job), token)[0] == 200
    for job in jobs:
        assert s.post(s.body(L4, job_name=job, status="completed", conclusion="failure"), token)[0] == 200
    wait(lambda: len(writes(s)) == 1, timeout_s=120)

    # The budget bound the check runs; whether the comment found a free slot or waited for one depends on when the
    # passes came back for theirs (they wait until the rest of their writes fit, leaving single slots to others).
    def completed() -> bool:
        runs = [r for r in s.relay.github.check_runs(UPSTREAM) if r["status"] == "completed"]
        return len(runs) == len(jobs) + 1  # each job's and the repository's, whatever waiting merged on the way

    wait(completed, timeout_s=120)
    assert s.relay.metric("CheckRunPaced") > 0
    content = sorted(
        r.time
        for r in s.relay.github.requests
        if r.method in ("POST", "PATCH") and ("/check-runs" in r.path or "/comments" in r.path) and r.status
    )
    # One budget: check runs and the comment together stay within the burst and one write per 1.5 s after it
    # (the dispatch's own write booked the budget before them).
    for i, t in enumerate(content):
        assert sum(1 for u in content[i:] if u - t < 6.0) <= 4 + 4 + 1
