"""Planning: which targets an upstream event goes to, per level settings and PR state."""

from __future__ import annotations

from dataclasses import replace

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.domain.planning import UpstreamEvent, Verdict, ciflow_tag, plan

ALLOWLIST = parse_allowlist(
    """\
L1: [a/one]
L2: [b/two]
L3:
  rocm: {c/three: x}
L4: [d/four]
repos:
  b/two: {skip_drafts: true, branches: ["release/*"]}
  c/three: {events: [pull_request]}
  d/four: {trusted_authors_only: true}
"""
)
PR = UpstreamEvent(
    kind="pull_request",
    action="opened",
    repo="pytorch/pytorch",
    head_sha="abc",
    pr_number=1,
    ref="feature",
    default_branch="main",
    author_association="CONTRIBUTOR",
)
PUSH = UpstreamEvent(
    kind="push", action=None, repo="pytorch/pytorch", head_sha="def", ref="refs/heads/main", default_branch="main"
)


def verdicts(event: UpstreamEvent) -> dict[str, tuple[Verdict, str]]:
    return {d.entry.repo: (d.verdict, d.reason) for d in plan(event, ALLOWLIST)}


@pytest.mark.parametrize("action", ["opened", "reopened", "synchronize", "ready_for_review", "closed"])
def test_pr_actions_dispatch_to_every_level(action: str) -> None:
    got = verdicts(replace(PR, action=action))
    assert {repo for repo, (v, _) in got.items() if v is Verdict.DISPATCH} == {"a/one", "b/two", "c/three", "d/four"}


@pytest.mark.parametrize("action", ["edited", "assigned", "review_requested", "unlabeled"])
def test_other_pr_actions_dispatch_nothing(action: str) -> None:
    assert all(v is Verdict.SKIP for v, _ in verdicts(replace(PR, action=action)).values())


def test_drafts_skipped_only_where_asked() -> None:
    got = verdicts(replace(PR, draft=True))
    assert got["b/two"] == (Verdict.SKIP, "draft")
    assert got["a/one"][0] is Verdict.DISPATCH


def test_push_to_default_branch_unless_branches_set() -> None:
    got = verdicts(PUSH)
    assert got["a/one"][0] is Verdict.DISPATCH
    assert got["b/two"] == (Verdict.SKIP, "branch_filtered")  # only release/*
    assert got["c/three"] == (Verdict.SKIP, "event_disabled")  # pull_request only
    got = verdicts(replace(PUSH, ref="refs/heads/release/2.11"))
    assert got["b/two"][0] is Verdict.DISPATCH
    assert got["a/one"] == (Verdict.SKIP, "branch_filtered")


@pytest.mark.parametrize(
    ("change", "reason"), [({"deleted": True}, "branch_deleted"), ({"ref": "refs/tags/v2.11.0"}, "not_a_branch")]
)
def test_branch_deletions_and_tags_are_not_dispatched(change: dict[str, object], reason: str) -> None:
    assert verdicts(replace(PUSH, **change))["a/one"] == (Verdict.SKIP, reason)  # type: ignore[arg-type]


def test_first_time_contributor_held_then_released_by_ciflow_label() -> None:
    newcomer = replace(PR, author_association="FIRST_TIME_CONTRIBUTOR")
    assert verdicts(newcomer)["d/four"] == (Verdict.HOLD, "untrusted_author")
    assert verdicts(newcomer)["a/one"][0] is Verdict.DISPATCH  # other repos do not wait
    labeled = replace(newcomer, action="labeled", added_label="ciflow/trunk", labels=("ciflow/trunk",))
    assert verdicts(labeled)["d/four"] == (Verdict.RELEASE, "ciflow_label")
    assert verdicts(labeled)["a/one"] == (Verdict.SKIP, "label_only")  # already dispatched on open
    # Once labelled, new pushes to the PR go through.
    assert verdicts(replace(labeled, action="synchronize"))["d/four"][0] is Verdict.DISPATCH


def test_a_non_ciflow_label_releases_nothing() -> None:
    event = replace(
        PR, author_association="NONE", action="labeled", added_label="module: rocm", labels=("module: rocm",)
    )
    assert verdicts(event)["d/four"] == (Verdict.SKIP, "label_only")


NIGHTLY = parse_allowlist(
    """\
L2:
  - n/nightly:
      events: [nightly]
  - p/prs
  - q/pushes-only
L4:
  - r/required
  - s/periodic
repos:
  q/pushes-only: {events: [push]}
  s/periodic: {ciflow: [periodic]}
"""
)
CIFLOW = replace(PUSH, ref="refs/tags/ciflow/trunk/171234", head_sha="f" * 40, pr_number=171234, ciflow="trunk")


def nightly_verdicts(event: UpstreamEvent) -> dict[str, tuple[Verdict, str]]:
    return {d.entry.repo: (d.verdict, d.reason) for d in plan(event, NIGHTLY)}


@pytest.mark.parametrize("event", [PR, PUSH, CIFLOW, replace(PR, action="labeled", added_label="ciflow/trunk")])
def test_a_nightly_only_downstream_gets_no_webhook(event: UpstreamEvent) -> None:
    assert nightly_verdicts(event)["n/nightly"] == (Verdict.SKIP, "nightly_only")


def test_a_ciflow_trunk_push_goes_to_those_taking_part_in_pull_requests() -> None:
    got = nightly_verdicts(CIFLOW)
    assert got["p/prs"] == (Verdict.DISPATCH, "ciflow/trunk")
    assert got["r/required"] == (Verdict.DISPATCH, "ciflow/trunk")
    assert got["q/pushes-only"] == (Verdict.SKIP, "event_disabled")
    assert got["s/periodic"] == (Verdict.SKIP, "ciflow_not_wanted")  # it asked for ciflow/periodic instead


def test_other_ciflow_tags_only_where_asked_and_deleting_a_tag_dispatches_nothing() -> None:
    periodic = replace(CIFLOW, ref="refs/tags/ciflow/periodic/171234", ciflow="periodic")
    got = nightly_verdicts(periodic)
    assert {repo for repo, (v, _) in got.items() if v is Verdict.DISPATCH} == {"s/periodic"}
    deleted = nightly_verdicts(replace(CIFLOW, deleted=True))
    assert all(v is Verdict.SKIP for v, _ in deleted.values())
    assert deleted["r/required"] == (Verdict.SKIP, "tag_deleted")


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("refs/tags/ciflow/trunk/171234", ("trunk", 171234)),
        ("refs/tags/ciflow/inductor-periodic/5", ("inductor-periodic", 5)),
        ("refs/tags/ciflow/trunk/0", None),
        ("refs/tags/ciflow/trunk/12a", None),
        ("refs/heads/ciflow/trunk/12", None),
        ("refs/tags/ciflow/trunk/12/extra", None),
        ("refs/tags/v2.11.0", None),
    ],
)
def test_ciflow_tags_name_their_pr(ref: str, expected: tuple[str, int] | None) -> None:
    assert ciflow_tag(ref) == expected
