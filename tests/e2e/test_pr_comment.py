"""The PR comment on `crcr local`, judged by the GitHub double's issue-comment API: one comment per PR, created at
the first L3/L4 failure and edited in place (even after the relay lost its row), owners mentioned once, a burst
of callbacks costing one edit, nothing for a closed PR, and the installation's budget shared with check runs.

Two stand-ins for work that lands separately (the reporter): the reporter will send a `comment` message after
each recorded change of an L3/L4 job on a PR; here the test sends it, right after each callback, the way the
reporter will (`ask`). And the reporter computes each failed job's verdict; here a test that needs a specific
verdict writes it onto the job row through `DynamoResults`, as the reporter will before it sends the message
(`judge`). Everything else is the relay's own path: real callbacks with real tokens, the checks queue, pacing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from crcr.adapters.results import DynamoResults
from crcr.contracts.messages import CheckSyncMessage
from tests.conftest import DEFAULT_ALLOWLIST, LISTED, Relay, event_body
from tests.doubles.github_double import Reply
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import Scenario, oidc  # noqa: F401 - oidc is a fixture

pytestmark = pytest.mark.e2e
L4 = "org-four/L4-Repo"
UPSTREAM = "pytorch/pytorch"
PR = 170001
ALLOWLIST = DEFAULT_ALLOWLIST.replace("  - org-four/L4-Repo\n", "  - org-four/L4-Repo: [oncall-four]\n")
COMMENT_PERMISSIONS = {
    "actions": "write",
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "pull_requests": "write",
    "metadata": "read",
}


def start(relay_factory: Callable[..., Relay], oidc: OidcIssuer) -> Scenario:  # noqa: F811
    relay = relay_factory(
        allowlist=ALLOWLIST,
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_COMMENT_SETTLE_S": "2"},
    )
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=COMMENT_PERMISSIONS)
    relay.github.add_issue(UPSTREAM, PR)
    doc = json.loads(event_body("pull_request.opened.json"))
    relay.github.add_commit(UPSTREAM, doc["pull_request"]["head"]["sha"])
    assert relay.post("pull_request", json.dumps(doc).encode(), str(uuid.uuid4()))[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    return Scenario(relay, oidc, "", doc["pull_request"]["head"]["sha"])


def close(s: Scenario) -> None:
    doc = json.loads(event_body("pull_request.opened.json"))
    doc["action"], doc["pull_request"]["state"] = "closed", "closed"
    doc["pull_request"]["updated_at"] = "2026-11-29T19:00:00Z"
    assert s.relay.post("pull_request", json.dumps(doc).encode())[0] == 202
    ddb = s.relay.stack.client("dynamodb")
    key = {"pk": {"S": f"PR#{UPSTREAM}#{PR}"}, "sk": {"S": "HEAD"}}
    wait(lambda: ddb.get_item(TableName="crcr-local-StateTable", Key=key)["Item"]["closed"]["BOOL"])


def ask(s: Scenario) -> None:
    """What the reporter sends after a recorded change of an L3/L4 job on the PR."""
    message = CheckSyncMessage(kind="comment", upstream=UPSTREAM, head_sha=s.head_sha, pr=PR)
    sqs = s.relay.stack.client("sqs")
    sqs.send_message(QueueUrl=s.relay.stack.queue_urls["ChecksQueue"], MessageBody=message.model_dump_json())


def results(s: Scenario) -> DynamoResults:
    return DynamoResults(s.relay.stack.client("dynamodb"), "crcr-local-ResultsTable")


def judge(s: Scenario, job_name: str, verdict: str, run_attempt: int = 1) -> None:
    """The reporter's verdict on a failed job, written onto its row as the reporter will before it asks."""
    store = results(s)
    [row] = [
        j for j in store.jobs_for_head(UPSTREAM, s.head_sha) if (j.job_name, j.run_attempt) == (job_name, run_attempt)
    ]
    current = store.get_job(row.dispatch_id, row.run_id, row.run_attempt, row.job_name)
    assert current is not None
    assert store.put_job(replace(current, verdict=verdict, version=current.version + 1), current.version)


def report(
    s: Scenario, job_name: str, conclusion: str, run_attempt: int = 1, verdict: str | None = None, asking: bool = True
) -> None:
    token = s.token(L4, run_attempt=run_attempt)
    body = s.body(L4, job_name=job_name, status="completed", conclusion=conclusion, run_attempt=run_attempt)
    assert s.post(body, token)[0] == 200
    if verdict is not None:
        judge(s, job_name, verdict, run_attempt)
    if asking:
        ask(s)


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
    report(s, "build", "success")
    time.sleep(4)
    assert writes(s) == []  # never a comment that only says green

    report(s, "test", "failure", verdict="new")
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
    assert "All passing again" in writes(s)[-1][2] and "@oncall-four" not in writes(s)[-1][2]

    # The relay loses its row for the PR (a cold start that lost the stored id): the marker finds the comment.
    ddb = s.relay.stack.client("dynamodb")
    key = {"pk": {"S": f"PR#{UPSTREAM}#{PR}"}, "sk": {"S": "COMMENT"}}
    assert "Item" in ddb.get_item(TableName="crcr-local-StateTable", Key=key)
    ddb.delete_item(TableName="crcr-local-StateTable", Key=key)
    report(s, "later", "failure", verdict="new")
    wait(lambda: len(writes(s)) == 3)
    method, again_id, body = writes(s)[-1]
    assert (method, again_id) == ("PATCH", comment_id)  # never a second comment
    # Mentioned once per PR and repository: the owner is named again, without a link.
    assert "Owners: `@oncall-four`" in body and "| CI / later | 1 |" in body
    time.sleep(3)
    assert [m for m, _, _ in writes(s)] == ["POST", "PATCH", "PATCH"] and len(ours(s)) == 1


def test_a_burst_of_callbacks_costs_one_write(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    token = s.token(L4)
    started = time.time()
    for i in range(20):  # 20 jobs failing within about 2 s, each recorded change asking for the comment
        assert s.post(s.body(L4, job_name=f"job-{i:02d}", status="completed", conclusion="failure"), token)[0] == 200
        ask(s)
    burst_s = time.time() - started
    wait(lambda: len(writes(s)) >= 1)
    time.sleep(5)  # room for a stray second write
    [(method, _, body)] = writes(s)
    assert method == "POST" and all(f"| CI / job-{i:02d} | 1 |" in body for i in range(20))
    assert burst_s < 10
    assert s.relay.metric("PrCommentCreated") == 1 and s.relay.metric("PrCommentSkipped.reason=coalesced") >= 15


def test_a_closed_pr_gets_no_comment(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    report(s, "test", "failure", verdict="new", asking=False)
    close(s)
    ask(s)
    wait(lambda: s.relay.metric("PrCommentSkipped.reason=closed") >= 1)
    time.sleep(3)
    assert writes(s) == [] and not [r for r in s.relay.github.requests if "/issues/" in r.path]


def test_github_refusing_the_comment_goes_to_the_dlq_with_the_reason(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    locked = Reply.error(403, "Unable to create comment because issue is locked.")
    s.relay.github.script("POST", rf"/repos/{UPSTREAM}/issues/{PR}/comments", [locked])
    report(s, "test", "failure", verdict="new")
    sqs = s.relay.stack.client("sqs")
    dlq = s.relay.stack.queue_urls["ChecksDLQ"]
    found: list[dict[str, Any]] = []

    def dead() -> bool:
        got = sqs.receive_message(QueueUrl=dlq, MessageAttributeNames=["All"], WaitTimeSeconds=1)
        found.extend(got.get("Messages", []))
        return bool(found)

    wait(dead)
    reason = found[0]["MessageAttributes"]["failure_reason"]["StringValue"]
    assert "403" in reason and "locked" in reason
    assert json.loads(found[0]["Body"])["kind"] == "comment"
    # The next change books a new render, and the comment is made then.
    report(s, "other", "failure", verdict="pre-existing")
    wait(lambda: len(writes(s)) == 1)


def test_comment_writes_share_the_installations_budget_with_check_runs(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    token = s.token(L4)
    jobs = [f"job-{i:02d}" for i in range(12)]
    for job in jobs:  # 12 check runs created, then completed: more than the burst of 16 at once
        assert s.post(s.body(L4, job_name=job), token)[0] == 200
    for job in jobs:
        assert s.post(s.body(L4, job_name=job, status="completed", conclusion="failure"), token)[0] == 200
        ask(s)
    wait(lambda: len(writes(s)) == 1, timeout_s=60)
    assert s.relay.metric("CheckRunPaced") > 0 and s.relay.metric("PrCommentPaced") > 0
    content = sorted(
        r.time
        for r in s.relay.github.requests
        if r.method in ("POST", "PATCH") and ("/check-runs" in r.path or "/comments" in r.path) and r.status
    )
    # One budget: check runs and the comment together stay within a burst of 16 and about one a second after it.
    assert sum(1 for t in content if t - content[0] < 3.0) <= 16 + 3 + 1
