"""The upstream's default branch and its regressions in the state table, on moto's DynamoDB with the template's state
table: a commit GitHub did not have is refused from memory for minutes only, and only to the downstream that asked, so
one downstream's early report cannot get every downstream's reports on that commit refused; the branch's commits come
back in order with what a blamelist shows; a job's regressions are kept with a version."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from crcr.adapters.branch import DynamoBranch
from crcr.adapters.regressions import DynamoRegressions
from crcr.adapters.table import lookup_key
from crcr.domain.regressions import Blamed, BranchCommit, Tracked
from tests.integration.aws import dynamodb

UPSTREAM, SHA, T0 = "pytorch/pytorch", "c" * 40, 1_800_000_000.0
A, B = "org-two/l2-repo", "org-four/L4-Repo"  # two downstreams


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    with dynamodb(StateTable="state") as client:
        yield client


def test_a_commit_github_did_not_have_is_forgotten_after_ten_minutes_and_one_it_had_is_kept(ddb: Any) -> None:
    branch = DynamoBranch(ddb, "state")
    assert branch.commit_seen(UPSTREAM, SHA, T0, A) is None  # never asked
    branch.remember_commit(UPSTREAM, SHA, False, T0, A)
    assert branch.commit_seen(UPSTREAM, SHA, T0 + 60, A) is False  # a report a minute later: no second lookup
    # Ten minutes on, the item may still be in the table (DynamoDB's TTL deletes within days), and is no answer:
    # the next report on that commit asks GitHub again, which by then may have it.
    assert branch.commit_seen(UPSTREAM, SHA, T0 + 601, A) is None
    branch.remember_commit(UPSTREAM, SHA, True, T0 + 601, A)
    assert branch.commit_seen(UPSTREAM, SHA, T0 + 30 * 86_400, A) is True
    # A commit seen pushed to the default branch needs no lookup at all.
    branch.record_commits(UPSTREAM, [BranchCommit("d" * 40, T0)])
    assert branch.commit_seen(UPSTREAM, "d" * 40, T0 + 86_400, A) is True


def test_not_an_upstream_commit_is_remembered_for_the_downstream_that_asked_and_found_for_everyone(ddb: Any) -> None:
    """Red team: one downstream's report of a commit GitHub did not have yet got every downstream's report of it
    refused, without a lookup, for ten minutes."""
    branch, sha = DynamoBranch(ddb, "state"), "e" * 40
    branch.remember_commit(UPSTREAM, sha, False, T0, A)
    assert branch.commit_seen(UPSTREAM, sha, T0 + 60, A) is False
    assert branch.commit_seen(UPSTREAM, sha, T0 + 60, B) is None  # B's report asks GitHub itself
    assert branch.commit_seen(UPSTREAM, sha, T0 + 60, A.upper()) is False  # a repository's name in any case
    branch.remember_commit(UPSTREAM, sha, True, T0 + 60, B)  # pushed since: GitHub finds it for B
    assert branch.commit_seen(UPSTREAM, sha, T0 + 61, A) is True  # and that answer is everyone's, A's too
    # What the table kept before: one "not found" for everyone, which now answers no one.
    ddb.put_item(TableName="state", Item=lookup_key(UPSTREAM, "f" * 40) | {"found": {"BOOL": False}})
    assert branch.commit_seen(UPSTREAM, "f" * 40, T0, A) is None


def test_the_branchs_commits_are_read_back_in_order_with_what_a_blamelist_shows(ddb: Any) -> None:
    branch = DynamoBranch(ddb, "state")
    upstream = "pytorch/blame"
    first = [
        BranchCommit(f"{i:040x}", T0 + 10, place=i, pr=100 + i, title=f"Change {i} (#{100 + i})") for i in range(3)
    ]
    later = BranchCommit("e" * 40, T0 + 5, parent=first[-1].sha, author="alice", files=("torch/a.py",))
    branch.record_commits(upstream, first)
    branch.record_commits(upstream, [later])
    branch.record_commits(upstream, first[:1])  # a redelivered push changes nothing
    found = branch.commits_between(upstream, T0, T0 + 10)
    # Ordered by time, then by place in the push; a commit's fields come back as written.
    assert [c.sha for c in found] == [later.sha] + [c.sha for c in first]
    assert found[0] == later and found[1:] == first
    assert [c.sha for c in branch.commits_between(upstream, T0 + 6, T0 + 10)] == [c.sha for c in first]
    assert branch.commits_between(upstream, T0 + 11, T0 + 20) == []
    assert branch.commit_times(upstream, [later.sha]) == {later.sha: T0 + 5}


def test_a_jobs_regressions_are_kept_with_a_version_and_listed_for_the_upstream(ddb: Any) -> None:
    store = DynamoRegressions(ddb, "state")
    blamed = (Blamed("f" * 40, pr=12, title="Change (#12)", author="alice", suspect=False),)
    one = Tracked("Org/Backend", "CI", "test", "e" * 40, "f" * 40, "f" * 40, blamed, opened_at=T0)
    assert store.job_regressions(UPSTREAM, "org/backend", "CI", "test") == ([], 0)
    assert store.save_job_regressions(UPSTREAM, "org/backend", "CI", "test", [one], 0)
    assert not store.save_job_regressions(UPSTREAM, "org/backend", "CI", "test", [one], 0)  # another writer's first
    kept, version = store.job_regressions(UPSTREAM, "ORG/backend", "CI", "test")
    assert kept == [one] and version == 1
    closed = replace(one, fixed_by="a" * 40, closed_at=T0 + 60, told=True)
    assert store.save_job_regressions(UPSTREAM, "org/backend", "CI", "test", [closed], version)
    other = replace(one, job_name="build", opened_at=T0 - 1)
    assert store.save_job_regressions(UPSTREAM, "org/backend", "CI", "build", [other], 0)
    assert store.regressions_of(UPSTREAM) == [other, closed]
    assert store.regressions_of("other/upstream") == []
    assert store.save_job_regressions(UPSTREAM, "org/backend", "CI", "build", [], 1)  # none left: the item goes
    assert store.job_regressions(UPSTREAM, "org/backend", "CI", "build") == ([], 0)
