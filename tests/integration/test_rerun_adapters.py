"""Re-run adapters over the wire: the state table's claim and marker rows on moto server, and the Actions
API's run and re-run endpoints on the GitHub double."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from crcr.adapters.github import GitHubApp, GitHubReruns
from crcr.adapters.reruns import DynamoReruns
from crcr.adapters.table import LEDGER_TTL_S
from crcr.app.ports.github import GitHubRejected
from crcr.app.ports.reruns import RerunClaim, WorkflowRun
from tests.conftest import APP_ID
from tests.doubles.github_double import GitHubDouble, Reply
from tests.integration.aws import dynamodb
from tests.unit.fakes import permit

TABLE = "state"


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    with dynamodb(StateTable="state") as client:
        yield client


def test_one_message_at_a_time_decides_a_runs_retry_and_the_marker_is_put_once(ddb: Any) -> None:
    a, b = DynamoReruns(ddb, TABLE), DynamoReruns(ddb, TABLE)
    assert a.claim_rerun("disp-1", "777", "a", now=100.0, lease_s=30.0) is RerunClaim.CLAIMED
    assert b.claim_rerun("disp-1", "777", "b", now=101.0, lease_s=30.0) is RerunClaim.BUSY
    assert b.claim_rerun("disp-1", "778", "b", now=101.0, lease_s=30.0) is RerunClaim.CLAIMED  # another run
    assert a.mark_rerun("disp-1", "777", "requested", now=102.0)
    b.release_rerun("disp-1", "777", "b")  # not b's claim: it stays
    assert b.claim_rerun("disp-1", "777", "b", now=103.0, lease_s=30.0) is RerunClaim.BUSY
    a.release_rerun("disp-1", "777", "a")
    assert b.claim_rerun("disp-1", "777", "b", now=104.0, lease_s=30.0) is RerunClaim.DONE  # decided: never again
    assert not b.mark_rerun("disp-1", "777", "refused", now=105.0)  # the first outcome stands

    marker = ddb.get_item(TableName=TABLE, Key={"pk": {"S": "RERUN#disp-1"}, "sk": {"S": "RUN#777"}})["Item"]
    assert marker["status"] == {"S": "requested"}
    assert int(marker["expires_at"]["N"]) == 102 + LEDGER_TTL_S  # kept as long as the ledger row
    # A DONE claim leaves no claim row behind; a crashed holder's claim lapses after its lease.
    claims = ddb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :p AND begins_with(sk, :c)",
        ExpressionAttributeValues={":p": {"S": "RERUN#disp-1"}, ":c": {"S": "CLAIM#"}},
    )["Items"]
    assert [c["sk"]["S"] for c in claims] == ["CLAIM#778"]
    assert a.claim_rerun("disp-1", "778", "a", now=120.0, lease_s=30.0) is RerunClaim.BUSY
    assert a.claim_rerun("disp-1", "778", "a", now=132.0, lease_s=30.0) is RerunClaim.CLAIMED
    with pytest.raises(ValueError, match="unknown re-run status"):
        a.mark_rerun("disp-1", "778", "maybe", now=133.0)


def test_the_run_is_read_with_its_attempt_and_only_already_running_is_a_no_op(
    github: GitHubDouble, app_key_pem: str
) -> None:
    repo = "org-four/L4-Repo"
    github.install(repo, installation_id=104, repo_id=5003)
    github.add_workflow_run(repo, 777, status="completed", conclusion="failure")
    reruns = GitHubReruns(GitHubApp(github.url, APP_ID, app_key_pem, time.time))
    assert reruns.installation_for(repo) == 104
    assert reruns.workflow_run(repo, "777") == WorkflowRun("completed", 1)
    assert reruns.rerun_failed_jobs(repo, "777", permit=permit(action="rerun", repo=repo))
    assert reruns.workflow_run(repo, "777") == WorkflowRun("queued", 2)
    assert not reruns.rerun_failed_jobs(
        repo, "777", permit=permit(action="rerun", repo=repo)
    )  # 403 "This workflow is already running"
    assert github.reruns(repo) == [777]

    github.add_workflow_run(repo, 778, status="completed", conclusion="success")
    with pytest.raises(GitHubRejected, match="cannot be retried"):
        reruns.rerun_failed_jobs(repo, "778", permit=permit(action="rerun", repo=repo))
    github.script("POST", r"/repos/.*/actions/runs/779/rerun-failed-jobs", [Reply.error(404)])
    github.add_workflow_run(repo, 779, status="completed", conclusion="failure")
    with pytest.raises(GitHubRejected):
        reruns.rerun_failed_jobs(repo, "779", permit=permit(action="rerun", repo=repo))
    # Each call used a token down-scoped to the downstream with actions:write (GitHub adds metadata:read).
    used = {r.headers["authorization"].split()[-1] for r in github.requests if "/actions/runs/" in r.path}
    for token in used:
        info = github.token_info(token)
        assert info is not None and info.repository_ids == frozenset({5003})
        assert info.permissions == {"actions": "write", "metadata": "read"}
