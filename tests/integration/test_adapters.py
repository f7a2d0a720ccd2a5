"""Adapters against real services over HTTP: moto server (S3, DynamoDB) and the GitHub double."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from crcr.adapters.allowlist_source import CachedAllowlist, CachedKnownFailures, fetcher_for
from crcr.adapters.author_answers import DynamoAuthorAnswers
from crcr.adapters.changes import GitHubBranchHistory
from crcr.adapters.check_runs import DynamoCheckRuns
from crcr.adapters.deliveries import DynamoDeliveries
from crcr.adapters.disabled_issues import GitHubAuthorPermissions, GitHubDisabledIssues
from crcr.adapters.github import GitHubApp, GitHubIssueComments
from crcr.adapters.pacer import DynamoPacer
from crcr.adapters.pr_comment import DynamoPrComment
from crcr.adapters.pulls import DynamoPullRequests
from crcr.adapters.rate_limits import DynamoRateLimiter
from crcr.adapters.reruns import DynamoReruns
from crcr.adapters.torchci_keys import DynamoTorchciKeys
from crcr.app.disable_authors import DisableAuthors
from crcr.app.ports.comment import CommentRow
from crcr.app.ports.deliveries import Claim
from crcr.app.ports.github import GitHubRejected
from crcr.app.ports.jobs import JobLimitReached
from crcr.app.ports.pulls import HeadRecord
from crcr.domain.checks import Known
from crcr.domain.comment import Posted
from crcr.domain.errors import AllowlistError
from crcr.domain.known import parse_condensed
from crcr.local.stack import free_port
from tests.conftest import APP_ID, ROOT, http
from tests.doubles.github_double import DEFAULT_PERMISSIONS, GitHubDouble
from tests.unit.fakes import RecordingMetrics, permit

GOOD = b"L1:\n  - org-one/l1-repo\nL4:\n  - org-four/L4-Repo: oncall\n"
BAD = b"L1:\n  - org-one/l1-repo\n  - org-one/L1-REPO\n"
UPSTREAM = {**DEFAULT_PERMISSIONS, "issues": "write"}  # the App on the upstream (it comments on PRs)


@pytest.fixture(scope="module")
def aws() -> Iterator[dict[str, Any]]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    http("POST", f"{url}/moto-api/reset")
    kwargs = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "t", "aws_secret_access_key": "t"}
    yield {"s3": boto3.client("s3", **kwargs), "dynamodb": boto3.client("dynamodb", **kwargs)}
    server.stop()


def test_allowlist_from_s3_refreshes_and_refuses_bad_edits(aws: dict[str, Any]) -> None:
    s3 = aws["s3"]
    s3.create_bucket(Bucket="config")
    s3.put_object(Bucket="config", Key="crcr/allowlist.yaml", Body=GOOD)
    cached = CachedAllowlist(
        fetcher_for("s3://config/crcr/allowlist.yaml", lambda: s3, lambda: None), RecordingMetrics(), time.time, 0
    )
    assert len(cached.current()) == 2
    s3.put_object(Bucket="config", Key="crcr/allowlist.yaml", Body=BAD)
    assert len(cached.current()) == 2
    s3.put_object(Bucket="config", Key="crcr/allowlist.yaml", Body=GOOD + b"L2: [org-two/l2-repo]\n")
    assert len(cached.current()) == 3


def test_allowlist_from_github_uses_the_app_token_and_etags(github: GitHubDouble, app_key_pem: str) -> None:
    github.install("pytorch/test-infra", installation_id=9, repo_id=77)
    github.put_file("pytorch/test-infra", "crcr/allowlist.yaml", "main", GOOD)
    app = GitHubApp(github.url, APP_ID, app_key_pem, time.time)
    metrics = RecordingMetrics()
    source = "github:pytorch/test-infra/crcr/allowlist.yaml@main"
    cached = CachedAllowlist(fetcher_for(source, lambda: None, lambda: app), metrics, time.time, 0)
    assert cached.current().get("org-four/l4-repo") is not None
    assert cached.current().get("org-four/l4-repo") is not None
    contents = [r for r in github.requests if "/contents/" in r.path]
    assert [r.status for r in contents] == [200, 304]  # the second read cost no rate limit
    token = github.token_info(contents[0].headers["authorization"].split()[-1])
    assert token is not None and token.permissions.get("contents") == "read"
    assert token.repository_ids == frozenset({77})
    github.put_file("pytorch/test-infra", "crcr/allowlist.yaml", "main", BAD)
    assert len(cached.current()) == 2 and metrics.counts["AllowlistRejected"] == 1


def test_pacer_shares_one_budget_across_workers(aws: dict[str, Any]) -> None:
    ddb = aws["dynamodb"]
    _table(ddb, "pace")
    workers = [DynamoPacer(ddb, "pace"), DynamoPacer(ddb, "pace")]
    waits = [workers[i % 2].acquire(1, now=1000.0) for i in range(20)]
    assert waits[:16] == [0.0] * 16 and all(w > 0 for w in waits[16:])
    assert workers[0].acquire(2, now=1000.0) == 0.0  # another installation, its own budget


def _table(ddb: Any, name: str) -> None:
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def test_delivery_and_body_are_claimed_together_or_not_at_all(aws: dict[str, Any]) -> None:
    """One transaction: a repeated id with another body claims neither, so that body is accepted under its own id
    later; a body seen under another id is a replay and takes no id."""
    _table(aws["dynamodb"], "deliveries")
    state = DynamoDeliveries(aws["dynamodb"], "deliveries")
    x, y = "a" * 64, "b" * 64
    assert state.claim_delivery("D", "push", 100.0, x) is Claim.NEW
    assert state.claim_delivery("D", "push", 101.0, x) is Claim.PENDING  # not queued yet: send it again
    state.mark_queued("D", 102.0)
    assert state.claim_delivery("D", "push", 103.0, x) is Claim.QUEUED
    assert state.claim_delivery("D", "push", 104.0, y) is Claim.REUSED
    assert state.claim_delivery("E", "push", 105.0, x) is Claim.REPLAYED
    body_y = aws["dynamodb"].get_item(TableName="deliveries", Key={"pk": {"S": f"BODY#{y}"}, "sk": {"S": "META"}})
    assert "Item" not in body_y  # the reused id left no claim on Y's body
    assert (
        aws["dynamodb"].get_item(TableName="deliveries", Key={"pk": {"S": "DLV#E"}, "sk": {"S": "META"}}).get("Item")
        is None
    )  # nor did the replay take its id
    assert state.claim_delivery("E", "push", 106.0, y) is Claim.NEW


def test_one_pass_per_head_at_a_time_and_a_crashed_pass_lapses(aws: dict[str, Any]) -> None:
    _table(aws["dynamodb"], "checks")
    a, b = DynamoCheckRuns(aws["dynamodb"], "checks"), DynamoCheckRuns(aws["dynamodb"], "checks")
    head = ("pytorch/pytorch", "a" * 40)
    # A burst of requests is one booking: the first ticket stays, each adds its dispatch and moves the due time on.
    assert a.book_head(*head, "t1", 100.0, 102.0, 0.0, {"d1 o/r"}) == "t1"
    assert b.book_head(*head, "t2", 101.0, 103.0, 0.0, {"d1 o/q"}) == "t1"
    # Not due yet (asked for at 101 with a 2 s settle): not taken; due: taken, the row as it stood returned.
    locked, row = a.lock_head(*head, "t1", 102.0, 90.0, due_by=102.5, booked_before=70.0)
    assert locked is None and row.due_at == 103.0
    locked, row = a.lock_head(*head, "t1", 103.0, 90.0, due_by=103.5, booked_before=73.0)
    assert locked is not None and row.rows == {"d1 o/r", "d1 o/q"} and row.pending == "t1"
    assert b.lock_head(*head, "t1", 104.0, 90.0, 104.5, 74.0)[0] is None  # one pass at a time
    assert b.lock_head(*head, None, 104.0, 90.0, 104.5, 74.0)[0] is None  # a write of its own waits too
    # What the pass wrote is recorded at the version it read; a stale version is refused.
    assert a.record_check(*head, "crcr/o/r", Known(7, "queued", None), 0, 104.0)
    assert not b.record_check(*head, "crcr/o/r", Known(8, "queued", None), 0, 104.0)
    assert a.record_check(*head, "crcr/o/r", Known(7, "completed", "success"), 1, 105.0)
    assert a.checks_of_head(*head) == {"crcr/o/r": (Known(7, "completed", "success"), 2)}
    # A request while it runs: the pass ends, told to run once more then; the rows it settled are forgotten.
    assert b.book_head(*head, "t3", 105.0, 107.0, 0.0, set()) == "t1"
    assert a.finish_head(*head, "t1", locked, 106.0, {"d1 o/r"}, keep=False) == 107.0
    locked, row = a.lock_head(*head, "t1", 107.0, 90.0, 107.5, 77.0)
    assert locked is not None and row.rows == {"d1 o/q"}
    # That pass dies; after its lease another takes over, and its late finish changes nothing.
    assert b.lock_head(*head, None, 150.0, 90.0, 150.5, 120.0)[0] is None
    taken, _ = b.lock_head(*head, None, 198.0, 90.0, 198.5, 168.0)
    assert taken is not None
    assert a.finish_head(*head, "t1", locked, 199.0, {"d1 o/q"}, keep=False) is None
    assert b.finish_head(*head, None, taken, 199.0, set(), keep=False) is None
    # The booking outlived its dead pass; nothing asked for since: the next request joins it, and it ends at last.
    assert a.book_head(*head, "t4", 200.0, 202.0, 0.0, set()) == "t1"
    locked, _ = a.lock_head(*head, "t1", 202.0, 90.0, 202.5, 172.0)
    assert locked is not None and a.finish_head(*head, "t1", locked, 203.0, set(), keep=False) is None
    assert a.book_head(*head, "t5", 204.0, 206.0, 0.0, set()) == "t5"  # a new booking: its own message


def test_a_hud_key_is_held_by_the_first_job_that_reports_it(aws: dict[str, Any]) -> None:
    _table(aws["dynamodb"], "hudkeys")
    keys = DynamoTorchciKeys(aws["dynamodb"], "hudkeys")
    key = json.dumps(["CI", "build", "7001"])
    first, second = "run 11 attempt 1", "run 11 attempt 2"
    assert keys.claim("d1", key, first, now=100.0, max_jobs=10) is None
    assert keys.claim("d1", key, first, now=101.0, max_jobs=10) is None  # the same job reporting again
    assert keys.claim("d1", key, second, now=102.0, max_jobs=10) == first  # another attempt with the first one's run
    assert keys.claim("d2", key, second, now=103.0, max_jobs=10) is None  # another dispatch has its own rows
    assert keys.claim("d1", "x" * 5000, second, now=104.0, max_jobs=10) is None  # any length: stored by its digest
    [count, item] = aws["dynamodb"].query(
        TableName="hudkeys",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "HUD#d2"}},
    )["Items"]
    assert item["owner"]["S"] == second and int(item["expires_at"]["N"]) == 103 + 90 * 86_400
    assert count["sk"]["S"] == "#JOBS" and count["jobs"]["N"] == "1"


def test_a_dispatch_holds_at_most_its_limit_of_jobs_each_counted_once(aws: dict[str, Any]) -> None:
    _table(aws["dynamodb"], "jobcaps")
    keys = DynamoTorchciKeys(aws["dynamodb"], "jobcaps")
    for i in range(3):
        assert keys.claim("d1", f"job-{i}", f"run 1 attempt {i}", now=100.0, max_jobs=3) is None
        assert keys.claim("d1", f"job-{i}", f"run 1 attempt {i}", now=101.0, max_jobs=3) is None  # counted once
    with pytest.raises(JobLimitReached):
        keys.claim("d1", "job-3", "run 1 attempt 3", now=102.0, max_jobs=3)
    assert keys.claim("d1", "job-0", "run 2 attempt 1", now=103.0, max_jobs=3) == "run 1 attempt 0"
    assert keys.claim("d2", "job-3", "run 1 attempt 3", now=104.0, max_jobs=3) is None  # another dispatch
    held = aws["dynamodb"].query(
        TableName="jobcaps", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "HUD#d1"}}
    )["Items"]
    assert len(held) == 4 and [i["jobs"]["N"] for i in held if i["sk"]["S"] == "#JOBS"] == ["3"]
    # A job that names no check-run id holds no key: it only counts, against the same limit.
    assert keys.claim("d3", None, "run 1 attempt 1", now=105.0, max_jobs=2) is None
    assert keys.claim("d3", "job-1", "run 2 attempt 1", now=105.0, max_jobs=2) is None
    with pytest.raises(JobLimitReached):
        keys.claim("d3", None, "run 3 attempt 1", now=106.0, max_jobs=2)
    held = aws["dynamodb"].query(
        TableName="jobcaps", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "HUD#d3"}}
    )["Items"]
    assert sorted(i["sk"]["S"] for i in held)[0] == "#JOBS" and len(held) == 2  # the count and job-1's key


def test_a_new_pr_head_returns_the_head_it_replaced(aws: dict[str, Any]) -> None:
    _table(aws["dynamodb"], "heads")
    state = DynamoPullRequests(aws["dynamodb"], "heads")
    assert state.record_pr_head("pytorch/pytorch", 5, "a" * 40, "2026-11-29T10:00:00Z") == HeadRecord(True)
    # the same head again
    assert state.record_pr_head("pytorch/pytorch", 5, "a" * 40, "2026-11-29T10:01:00Z") == HeadRecord(True)
    assert state.record_pr_head("pytorch/pytorch", 5, "b" * 40, "2026-11-29T10:02:00Z") == HeadRecord(True, "a" * 40)
    # an older event delivered late stores nothing
    assert state.record_pr_head("pytorch/pytorch", 5, "c" * 40, "2026-11-29T09:00:00Z") == HeadRecord(False)
    info = state.pr_info("pytorch/pytorch", 5)
    assert info is not None and info.head_sha == "b" * 40


def test_the_pr_comment_row_books_one_render_locks_it_and_keeps_what_was_posted(aws: dict[str, Any]) -> None:
    _table(aws["dynamodb"], "comments")
    a, b = DynamoPrComment(aws["dynamodb"], "comments"), DynamoPrComment(aws["dynamodb"], "comments")
    up, pr = "pytorch/pytorch", 5
    assert a.get_comment(up, pr) == CommentRow()
    # The first request books its render; later ones join it and push its due time on.
    assert a.book_render(up, pr, "t1", now=100.0, due_at=105.0, stale_before=0.0) == "t1"
    assert b.book_render(up, pr, "t2", now=102.0, due_at=107.0, stale_before=0.0) == "t1"
    row = a.get_comment(up, pr)
    assert (row.pending, row.pending_since, row.due_at, row.version) == ("t1", 100.0, 107.0, 0)
    assert b.lock_comment(up, pr, "t2", 0, now=108.0, lease_s=25.0) is None  # not its booking
    assert a.lock_comment(up, pr, "t1", 0, now=108.0, lease_s=25.0) == 1
    assert a.lock_comment(up, pr, "t1", 1, now=109.0, lease_s=25.0) is None  # one render at a time
    # A request while it renders keeps the booking alive: the same render runs once more afterwards.
    assert b.book_render(up, pr, "t3", now=110.0, due_at=115.0, stale_before=0.0) == "t1"
    posted = Posted(777, "h1", frozenset({"org/r alice"}), frozenset({"org/r alice"}), ("failing aaaaaaa x",))
    assert a.release_comment(up, pr, 1, now=111.0, posted=posted)
    assert not b.release_comment(up, pr, 1, now=111.0)  # the lock is gone: version moved on
    assert a.end_render(up, pr, "t1", now=111.0) == 115.0
    assert a.lock_comment(up, pr, "t1", 2, now=115.0, lease_s=25.0) == 3
    assert a.release_comment(up, pr, 3, now=116.0)
    assert a.end_render(up, pr, "t1", now=116.0) is None  # nothing asked for meanwhile: the booking is over
    row = a.get_comment(up, pr)
    assert (row.posted, row.searched, row.pending, row.due_at) == (posted, True, None, None)
    # A booking whose message was lost is taken over once stale, never while its render holds the lock.
    assert a.book_render(up, pr, "t4", now=200.0, due_at=205.0, stale_before=0.0) == "t4"
    assert a.lock_comment(up, pr, "t4", 4, now=205.0, lease_s=25.0) == 5
    assert b.book_render(up, pr, "t5", now=2000.0, due_at=2005.0, stale_before=1500.0) == "t5"  # lock lapsed
    a.drop_render(up, pr, "t5")
    assert a.get_comment(up, pr).pending is None
    # What the comment reads of the relay's automatic re-runs: the marker the re-run handler writes.
    marks = DynamoReruns(aws["dynamodb"], "comments")
    assert marks.rerun_state("d1", "77") is None
    aws["dynamodb"].put_item(
        TableName="comments",
        Item={"pk": {"S": "RERUN#d1"}, "sk": {"S": "RUN#77"}, "status": {"S": "requested"}},
    )
    assert marks.rerun_state("d1", "77") == "requested"


def test_issue_comments_through_the_app_token_find_only_the_apps_own(github: GitHubDouble, app_key_pem: str) -> None:
    perms = {"issues": "write", "pull_requests": "write", "checks": "write", "metadata": "read"}
    github.install("pytorch/pytorch", installation_id=1, repo_id=65600975, permissions=perms)
    github.add_issue("pytorch/pytorch", 5)
    comments = GitHubIssueComments(GitHubApp(github.url, APP_ID, app_key_pem, time.time))
    github.add_comment("pytorch/pytorch", 5, "a person's words")
    github.add_comment("pytorch/pytorch", 5, "another App's words", app_slug="other-app")
    for i in range(120):
        github.add_comment("pytorch/pytorch", 5, f"chatter {i}")
    cid = comments.create_comment("pytorch/pytorch", 5, "ours", permit=permit(action="comment"))
    comments.update_comment("pytorch/pytorch", cid, "ours, edited", permit=permit(action="comment"))
    found = comments.list_comments("pytorch/pytorch", 5)
    assert len(found) == 123 and [c.body for c in found if c.ours] == ["ours, edited"]
    token = github.token_info(github.requests[-1].headers["authorization"].split()[1])
    assert token is not None and token.repository_ids == frozenset({65600975})  # the upstream alone
    assert dict(token.permissions) == {"issues": "write", "pull_requests": "write", "metadata": "read"}
    with pytest.raises(GitHubRejected) as refused:
        comments.update_comment("pytorch/pytorch", cid, "x" * 70_000, permit=permit(action="comment"))
    assert refused.value.status == 422


@pytest.mark.parametrize("name", ["../../x", "org/..", "./repo", "org%2F..%2F..%2Fx"])
def test_a_repository_name_that_walks_the_path_is_never_sent(github: GitHubDouble, app_key_pem: str, name: str) -> None:
    app = GitHubApp(github.url, APP_ID, app_key_pem, time.time)
    with pytest.raises(GitHubRejected, match=r"'\.' or '\.\.'; not sent"):
        app.request("GET", f"/repos/{name}/installation", f"Bearer {app.app_jwt()}")
    assert github.requests == []  # the App's JWT went nowhere


def test_allowlist_check_prints_the_level_table(tmp_path: Any) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_bytes(GOOD)
    bad.write_bytes(BAD)
    run = [sys.executable, "-m", "crcr.ops.cli", "allowlist", "check"]
    ok = subprocess.run([*run, str(good)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert ok.returncode == 0
    assert "org-four/L4-Repo  L4" in ok.stdout and "2 repositories" in ok.stdout
    broken = subprocess.run([*run, str(bad)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert broken.returncode == 1
    assert "line 3: org-one/L1-REPO is listed twice (first at line 2)" in broken.stderr


def test_allowlist_check_accepts_pytorchs_current_file_unchanged(tmp_path: Any) -> None:
    run = [sys.executable, "-m", "crcr.ops.cli", "allowlist", "check"]
    current = ROOT / "tests/events/pytorch/allowlist.yml"
    ok = subprocess.run([*run, str(current)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "NVIDIA/pytorch-windows-ci" in ok.stdout and "14 repositories" in ok.stdout
    typo = tmp_path / "typo.yml"
    typo.write_text(current.read_text().replace("      events: [nightly]\n", "      events: [nigthly]\n", 1))
    refused = subprocess.run([*run, str(typo)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert refused.returncode == 1
    assert "line 8: NVIDIA/pytorch-windows-ci.events: unknown event 'nigthly'" in refused.stderr


def test_hud_documents_are_replaced_only_if_unchanged_and_a_stale_copy_costs_one_refusal(aws: dict[str, Any]) -> None:
    from crcr.adapters.s3 import S3PageDocs  # noqa: PLC0415

    s3 = aws["s3"]
    s3.create_bucket(Bucket="hud")
    one, two = S3PageDocs(s3, "hud"), S3PageDocs(s3, "hud")  # two reporters
    assert one.get("index.json") == (None, None)
    assert one.put("index.json", {"n": 1}, None)
    assert not two.put("index.json", {"n": 99}, None)  # it exists now: a blind create is refused
    doc, tag = two.get("index.json")
    assert doc == {"n": 1} and two.put("index.json", {"n": 2}, tag)
    # `one` still holds what it wrote: its write from that copy is refused, then it reads the new one.
    stale, stale_tag = one.get("index.json")
    assert stale == {"n": 1} and not one.put("index.json", {"n": 3}, stale_tag)
    fresh, fresh_tag = one.get("index.json")
    assert fresh == {"n": 2} and one.put("index.json", {"n": 3}, fresh_tag)
    assert json.loads(one.read("index.json") or b"") == {"n": 3}
    got = s3.get_object(Bucket="hud", Key="data/index.json")
    assert (got["ContentType"], got["CacheControl"]) == ("application/json", "no-cache")


def test_the_branchs_missing_commits_come_from_githubs_comparison_in_order(
    github: GitHubDouble, app_key_pem: str
) -> None:
    github.install("pytorch/pytorch", installation_id=1, repo_id=65600975)
    shas = [f"{i:040x}" for i in range(1, 6)]
    github.add_history("pytorch/pytorch", [
        {"sha": sha, "parent": shas[i - 1] if i else None, "author": f"dev{i}", "date": f"2026-12-01T10:0{i}:00Z",
         "message": f"Change {i} (#{100 + i})" if i != 3 else "Land it\n\nPull Request resolved: "
         "https://github.com/pytorch/pytorch/pull/999\n"}
        for i, sha in enumerate(shas)
    ])  # fmt: skip
    history = GitHubBranchHistory(GitHubApp(github.url, APP_ID, app_key_pem, time.time))
    found = history.commits_between("pytorch/pytorch", shas[1], shas[4])
    assert found is not None and [c.sha for c in found] == shas[2:]
    assert [(c.parent, c.pr, c.author) for c in found] == [(shas[1], 102, "dev2"), (shas[2], 999, "dev3"),
                                                           (shas[3], 104, "dev4")]  # fmt: skip
    assert (
        found[1].title == "Land it"
        and found[0].committed_at < found[1].committed_at < found[2].committed_at
        and found[0].files is None
    )
    assert history.commits_between("pytorch/pytorch", shas[4], shas[1]) is None  # not an ancestor: cannot say
    assert next(r.path for r in github.requests if "/compare/" in r.path).endswith(f"{shas[1]}...{shas[4]}")


def _disable_issues(github: GitHubDouble, n: int) -> None:
    """`n` open DISABLED issues a minute apart, the 1,000th to 1,002nd in one second; beside them what the search
    finds and the list leaves out: a pull request, a closed issue, a title that only mentions DISABLED."""
    for i in range(n):
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_790_000_000 + 60 * min(i, 999) + 60 * max(0, i - 1001)))
        github.add_search_issue(
            "pytorch/pytorch", 100_000 + i, f"DISABLED test_{i} (__main__.TestSuite{i % 7})",
            "Platforms: rocm" if i % 2 else "", created_at=at,
        )  # fmt: skip
    github.add_search_issue("pytorch/pytorch", 99_001, "DISABLED test_pr (__main__.T)", pull_request=True)
    github.add_search_issue("pytorch/pytorch", 99_002, "DISABLED test_closed (__main__.T)", state="closed")
    github.add_search_issue("pytorch/pytorch", 99_003, "Why was test_x DISABLED (__main__.T)")


def _authors(app: GitHubApp, ddb: Any, metrics: RecordingMetrics, clock: Any) -> DisableAuthors:
    """Whose issues count, GitHub's answers kept in the state table (`authors`)."""
    if "authors" not in ddb.list_tables()["TableNames"]:
        _table(ddb, "authors")
    return DisableAuthors(GitHubAuthorPermissions(app), DynamoAuthorAnswers(ddb, "authors"), metrics, clock)


def test_the_disabled_tests_come_from_githubs_issue_search_past_its_thousand_results(
    github: GitHubDouble, app_key_pem: str, aws: dict[str, Any]
) -> None:
    github.install("pytorch/pytorch", installation_id=1, repo_id=65600975, permissions=UPSTREAM)
    _disable_issues(github, 1150)
    metrics = RecordingMetrics()
    app = GitHubApp(github.url, APP_ID, app_key_pem, time.time)
    fetch = GitHubDisabledIssues(app, "pytorch/pytorch", metrics, time.time, _authors(app, aws["dynamodb"], metrics,
                                 time.time))  # fmt: skip
    known = parse_condensed(json.loads(fetch()))
    # Every open issue's test, once, with its platforms; a PR, a closed issue and a title that merely mentions
    # DISABLED are none of them. Search lists 1,000 per query: the walk went on from the last creation time.
    assert len(known.by_test) == 1150
    assert known.by_test[("test_1001", "TestSuite0")].platforms == ("rocm",)
    assert known.by_test[("test_1000", "TestSuite6")].platforms == ()
    assert {("test_pr", "T"), ("test_closed", "T"), ("test_x", "T")}.isdisjoint(known.by_test)
    searches = [r for r in github.requests if r.path == "/search/issues"]
    assert len(searches) == 12 and all(r.status == 200 for r in searches)
    assert "created:>=" in searches[-1].query["q"][-1] and not metrics.counts.get("DisabledTestsIncomplete")
    # Within a budget of searches a minute shared by every instance: spent, the walk stops and the list stays.
    _table(aws["dynamodb"], "search-budget")
    budget = DynamoRateLimiter(aws["dynamodb"], "search-budget", 5, window_s=60, budget="SEARCH")
    clock = lambda: 1_800_000_000.0  # noqa: E731 - one minute throughout
    cached = CachedKnownFailures(
        GitHubDisabledIssues(app, "pytorch/pytorch", metrics, clock, _authors(app, aws["dynamodb"], metrics, clock),
                             budget), metrics, clock, 1800.0,
    )  # fmt: skip
    with pytest.raises(AllowlistError):
        cached.current()  # nothing loaded yet: the verdicts fail open
    assert metrics.counts["DisabledTestsSearchPaused"] == 1 and metrics.counts["DisabledTestsRejected"] == 1


def test_a_search_refused_by_githubs_search_limit_keeps_the_last_list(
    github: GitHubDouble, app_key_pem: str, aws: dict[str, Any]
) -> None:
    github.install("pytorch/pytorch", installation_id=1, repo_id=65600975, permissions=UPSTREAM)
    _disable_issues(github, 150)
    metrics, now = RecordingMetrics(), [1_800_000_000.0]
    app = GitHubApp(github.url, APP_ID, app_key_pem, time.time)
    fetch = GitHubDisabledIssues(app, "pytorch/pytorch", metrics, lambda: now[0],
                                 _authors(app, aws["dynamodb"], metrics, lambda: now[0]))  # fmt: skip
    cached = CachedKnownFailures(fetch, metrics, lambda: now[0], 1800.0)
    assert len(cached.current()) == 150
    github.search_rate_limit = 0  # every search now answered 403, x-ratelimit-resource: search
    now[0] += 1800
    assert len(cached.current()) == 150 and metrics.counts["DisabledTestsRejected"] == 1
    refused = [r for r in github.requests if r.path == "/search/issues"][-1]
    assert (refused.status, refused.response_headers["x-ratelimit-resource"]) == (403, "search")


def test_who_may_disable_a_test_is_asked_once_an_hour_for_every_reporter_instance(
    github: GitHubDouble, app_key_pem: str, aws: dict[str, Any]
) -> None:
    """GitHub's answers live in the state table: a second instance (a cold start, or one of the stream's parallel
    batches) counts a maintainer's issue at once, without asking again within the hour."""
    github.install("pytorch/pytorch", installation_id=1, repo_id=65600975, permissions=UPSTREAM)
    github.add_collaborator("pytorch/pytorch", "Maintainer", "admin")
    github.add_search_issue("pytorch/pytorch", 170300, "DISABLED test_a (__main__.T)", author="Maintainer",
                            association="MEMBER")  # fmt: skip
    github.add_search_issue("pytorch/pytorch", 170301, "DISABLED test_b (__main__.T)", author="reader",
                            association="CONTRIBUTOR")  # fmt: skip
    now = [1_800_000_000.0]

    def instance() -> tuple[GitHubDisabledIssues, RecordingMetrics]:
        metrics = RecordingMetrics()
        app = GitHubApp(github.url, APP_ID, app_key_pem, time.time)
        authors = _authors(app, aws["dynamodb"], metrics, lambda: now[0])
        return GitHubDisabledIssues(app, "pytorch/pytorch", metrics, lambda: now[0], authors), metrics

    def known(fetch: GitHubDisabledIssues) -> dict[str, str | None]:
        return {name: d.author for (name, _), d in parse_condensed(json.loads(fetch())).by_test.items()}

    first, metrics = instance()
    assert known(first) == {"test_a": "Maintainer"} and metrics.counts["IssueAuthorLookedUp"] == 2
    second, metrics = instance()
    now[0] += 600
    assert known(second) == {"test_a": "Maintainer"} and metrics.counts["IssueAuthorLookedUp"] == 0
    assert metrics.counts["DisabledIssueRefused.reason=permission"] == 1  # the reader's answer, kept too
    now[0] += 3000  # an hour after the first answers: asked again
    assert known(second) == {"test_a": "Maintainer"} and metrics.counts["IssueAuthorLookedUp"] == 2
    asked = [r for r in github.requests if r.path.endswith("/permission")]
    assert len(asked) == 4 and all(r.status == 200 for r in asked)
    # On the upstream's installation, with a token for the upstream alone that may read its metadata only.
    token = github.token_info(asked[0].headers["authorization"].split()[-1])
    assert token is not None and token.installation_id == 1 and token.permissions == {"metadata": "read"}
