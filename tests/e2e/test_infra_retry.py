"""The relay's one retry of an infrastructure failure, on `crcr local`, judged by the GitHub double.

The reporter sends ChecksQueue a `rerun` message for every infra failure of a run's first attempt of an L3/L4 PR
job; the test also puts that message on the stack's ChecksQueue itself, as the reporter does, so the check-run
writer's side is judged whatever the reporter sends: one rerun-failed-jobs per downstream run, however many
messages ask, and none for attempt 2.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from crcr.contracts.check_messages import RerunRequest
from tests.conftest import Relay
from tests.doubles.github_double import Reply
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import Scenario, oidc  # noqa: F401 - oidc is a fixture
from tests.e2e.test_check_runs import JOB4, L4, REPO4, UPSTREAM, shows, start, wait, wait_runs
from tests.e2e.test_relay import only_allowed_endpoints

pytestmark = pytest.mark.e2e
STATE_TABLE = "crcr-local-StateTable"


def job_row(s: Scenario, job_name: str, attempt: int) -> dict[str, Any]:
    [row] = [j for j in s.jobs() if (j["job_name"], int(j["run_attempt"])) == (job_name, attempt)]
    return row


def send_rerun(s: Scenario, job_name: str = "build-and-test", attempt: int = 1) -> None:
    """What the reporter sends after recording an infra failure of an L3/L4 PR job."""
    row = job_row(s, job_name, attempt)
    message = RerunRequest(
        upstream=UPSTREAM,
        head_sha=s.head_sha,
        delivery_id=s.delivery,
        repo=L4,
        dispatch_id=row["dispatch_id"],
        run_id=row["run_id"],
        run_attempt=attempt,
        job_name=job_name,
    )
    stack = s.relay.stack
    stack.client("sqs").send_message(QueueUrl=stack.queue_urls["ChecksQueue"], MessageBody=message.model_dump_json())


def marker(s: Scenario, dispatch_id: str, run_id: str) -> str | None:
    item = (
        s.relay.stack.client("dynamodb")
        .get_item(
            TableName=STATE_TABLE,
            Key={"pk": {"S": f"RERUN#{dispatch_id}"}, "sk": {"S": f"RUN#{run_id}"}},
            ConsistentRead=True,
        )
        .get("Item")
    )
    return item["status"]["S"] if item else None


def infra_failure(s: Scenario, token: str, job_name: str = "build-and-test", attempt: int = 1) -> None:
    body = s.body(L4, job_name=job_name, run_attempt=attempt, status="completed", conclusion="failure")
    assert s.post(body | {"failure_kind": "infra"}, token) == (200, {"status": "recorded"})


def test_an_infra_failure_is_rerun_once_and_never_again_for_a_second_message_or_attempt_2(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    github = s.relay.github
    github.add_workflow_run(L4, 777, head_sha=s.head_sha, status="completed", conclusion="failure")
    token = s.token(L4)
    for job in ("build-and-test", "lint"):  # two jobs of one run, both lost to the infrastructure
        infra_failure(s, token, job)
    wait_runs(s, shows(JOB4, "completed", "failure"))

    send_rerun(s, "build-and-test")
    send_rerun(s, "lint")  # the run's other failed job
    wait(lambda: github.reruns(L4) == [777])
    send_rerun(s, "build-and-test")  # the same message again (a stream retry)
    time.sleep(3)
    assert github.reruns(L4) == [777]
    dispatch_id = job_row(s, "build-and-test", 1)["dispatch_id"]
    assert marker(s, dispatch_id, "777") == "requested"
    assert s.relay.metric("InfraRetryRequested") == 1
    # The rerun was a content-creating call on the downstream's installation, with a token for it alone, and
    # took a slot of that installation's budget after the dispatch's (one pacing cell, two calls paced).
    [rerun] = [r for r in github.requests if r.path.endswith("/rerun-failed-jobs")]
    info = github.token_info(rerun.headers["authorization"].split()[-1])
    assert info is not None and info.repository_ids == frozenset({5003}) and info.installation_id == 103
    cell = s.relay.stack.client("dynamodb").get_item(
        TableName=STATE_TABLE, Key={"pk": {"S": "PACE#103"}, "sk": {"S": "CONTENT"}}, ConsistentRead=True
    )["Item"]
    assert cell["version"] == {"N": "2"}

    # Attempt 2 reports normally, and fails on the infrastructure again: reported, not retried a second time.
    attempt2 = s.token(L4, run_attempt=2)
    assert s.post(s.body(L4, run_attempt=2), attempt2)[0] == 200
    infra_failure(s, attempt2, attempt=2)
    send_rerun(s, attempt=2)
    wait(lambda: s.relay.metric("RerunIgnored.reason=not_first_attempt") == 1)
    time.sleep(1)
    assert github.reruns(L4) == [777]
    assert marker(s, dispatch_id, "777") == "requested"
    wait_runs(s, shows(JOB4, "completed", "failure"))
    only_allowed_endpoints(s.relay)  # the endpoints docs/contracts.md lists, only


def test_the_retrys_passing_attempt_replaces_the_failure_and_a_refused_rerun_is_marked(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc)
    github = s.relay.github
    github.add_workflow_run(L4, 777, head_sha=s.head_sha, status="completed", conclusion="failure")
    infra_failure(s, s.token(L4))
    wait_runs(s, shows(JOB4, "completed", "failure"))
    send_rerun(s)
    wait(lambda: github.reruns(L4) == [777])

    attempt2 = s.token(L4, run_attempt=2)
    assert s.post(s.body(L4, run_attempt=2), attempt2)[0] == 200
    assert s.post(s.body(L4, run_attempt=2, status="completed", conclusion="success"), attempt2)[0] == 200
    wait_runs(s, lambda f: shows(JOB4, "completed", "success")(f) and shows(REPO4, "completed", "success")(f))
    assert len([r for r in github.check_runs(UPSTREAM) if r["name"] == JOB4]) == 1  # the same check run, in place

    # A second job of the same dispatch on another run, which GitHub refuses to re-run: marked refused.
    github.add_workflow_run(L4, 778, head_sha=s.head_sha, status="completed", conclusion="failure")
    github.script(
        "POST", r"/repos/[^/]+/[^/]+/actions/runs/778/rerun-failed-jobs", [Reply.error(422, "Unprocessable Entity")]
    )
    other = s.token(L4, run_id=778)
    body = s.body(L4, run_id=778, job_name="docs", status="completed", conclusion="failure")
    assert s.post(body | {"url": f"https://github.com/{L4}/actions/runs/778", "failure_kind": "infra"}, other)[0] == 200
    send_rerun(s, "docs")
    dispatch_id = job_row(s, "docs", 1)["dispatch_id"]
    wait(lambda: marker(s, dispatch_id, "778") is not None)
    assert marker(s, dispatch_id, "778") == "refused"
    assert github.reruns(L4) == [777]
    assert s.relay.metric("InfraRetryRequested") == 1
