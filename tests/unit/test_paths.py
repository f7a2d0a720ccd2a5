"""Path filters with GitHub Actions' filter-pattern syntax (its cheat sheet's examples), and the planner skipping a
downstream no changed file concerns: recorded, its required check concluded skipped, dispatched when unknown."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.plan import PlannerDeps, plan_event
from crcr.contracts.messages import EventMessage
from crcr.domain.paths import PathFilter, PatternError, check
from tests.unit.fakes import (
    FakeBlobs,
    FakeChecksQueue,
    FakeClock,
    FakeDispatchQueue,
    FakeState,
    RecordingMetrics,
    StaticAllowlist,
    door,
)

EVENTS = Path(__file__).resolve().parents[2] / "examples" / "events"


@pytest.mark.parametrize(
    ("patterns", "path", "matched"),
    [
        (["*"], "README.md", True),
        (["*"], "server/README.md", False),  # * stops at /
        (["*.jsx?"], "page.js", True),  # ? makes the character before it optional
        (["*.jsx?"], "page.jsx", True),
        (["**"], "all/the/files.md", True),
        (["*.js"], "app.js", True),
        (["*.js"], "src/app.js", False),
        (["**.js"], "js/index.js", True),
        (["docs/*"], "docs/README.md", True),
        (["docs/*"], "docs/file.txt", True),
        (["docs/*"], "docs/sub/file.txt", False),
        (["docs/**"], "docs/mona/octocat.txt", True),
        (["docs/**/*.md"], "docs/a/markdown/file.md", True),
        (["**/docs/**"], "src/docs/file.md", True),
        (["**/README.md"], "src/README.md", True),
        (["**/*src/**"], "a/src/app.js", True),
        (["**/*-post.md"], "my-post.md", True),
        (["**/*-post.md"], "path/their-post.md", True),
        (["*.md", "!README.md"], "README.md", False),  # a later negation overrides
        (["*.md", "!README.md", "README*"], "README.md", True),  # and a later pattern again
        (["[ab]*.py"], "axe.py", True),
        (["[ab]*.py"], "cat.py", False),
        (["x+y"], "xxxy", True),  # + repeats the character before it
        (["\\*.py"], "*.py", True),  # \\ escapes
        (["\\*.py"], "a.py", False),
    ],
)
def test_githubs_filter_patterns(patterns: list[str], path: str, matched: bool) -> None:
    assert PathFilter(paths=tuple(patterns)).concerns([path]) is matched


def test_paths_ignore_skips_only_when_every_file_is_ignored() -> None:
    docs = PathFilter(paths_ignore=("docs/**", "*.md"))
    assert not docs.concerns(["docs/a.md", "CHANGELOG.md"])
    assert docs.concerns(["docs/a.md", "torch/nn/functional.py"])
    assert PathFilter().concerns([]) and not PathFilter(paths=("torch/**",)).concerns([])


@pytest.mark.parametrize("bad", ["[abc", "+x", "a\\", "!", "??"])
def test_patterns_github_refuses_are_refused(bad: str) -> None:
    with pytest.raises(PatternError):
        check([bad])


class Files:
    def __init__(self, files: tuple[str, ...] | None) -> None:
        self.files = files
        self.asked: list[tuple[str, str, str]] = []

    def change_files(self, upstream: str, base_sha: str, head_sha: str) -> tuple[str, ...] | None:
        self.asked.append((upstream, base_sha, head_sha))
        return self.files


ALLOWLIST = """\
L2:
  - org/everything
  - org/ignores-docs
L4:
  - org/torch-only
repos:
  org/torch-only: {paths: ["torch/**", "!torch/docs/**"]}
  org/ignores-docs: {paths_ignore: ["docs/**", "**.md"]}
"""


def run(
    doc: dict[str, object], event: str, files: Files, allowlist: str = ALLOWLIST
) -> tuple[FakeDispatchQueue, FakeChecksQueue, RecordingMetrics]:
    queue, checks, metrics = FakeDispatchQueue(), FakeChecksQueue(), RecordingMetrics()
    deps = PlannerDeps(
        upstream="pytorch/pytorch", allowlist=StaticAllowlist(parse_allowlist(allowlist)), blobs=FakeBlobs(),
        prs=FakeState(), branch=FakeState(), dispatches=queue, metrics=metrics, clock=FakeClock(), checks=checks,
        files=files, door=door()
    )  # fmt: skip
    text = json.dumps(doc)
    message = EventMessage(
        delivery_id="d", event=event, received_at=0, body=text, body_sha256=hashlib.sha256(text.encode()).hexdigest()
    )
    plan_event(message, deps)
    return queue, checks, metrics


def test_a_pr_touching_only_docs_goes_only_where_no_filter_excludes_it() -> None:
    pr = json.loads((EVENTS / "pull_request.opened.json").read_text())
    files = Files(("docs/index.md", "docs/api/torch.md"))
    queue, checks, metrics = run(pr, "pull_request", files)
    sent = {m.target_repo: m.skip for m in queue.sent}
    assert sent == {
        "org/everything": None,
        "org/ignores-docs": "no_matching_files",
        "org/torch-only": "no_matching_files",
    }
    head, base = pr["pull_request"]["head"]["sha"], pr["pull_request"]["base"]["sha"]
    assert files.asked == [("pytorch/pytorch", base, head)]  # the head against its base, by SHA; once, not per repo
    # The L4 repository's required check comes anyway, concluded skipped; the L2 one needs none.
    assert [(m.kind, m.repo, m.reason) for m, _ in checks.sent] == [("skip", "org/torch-only", "no_matching_files")]
    assert metrics.counts["TargetSkipped.reason=no_matching_files"] == 2


def test_files_that_cannot_be_known_dispatch_everywhere() -> None:
    pr = json.loads((EVENTS / "pull_request.opened.json").read_text())
    queue, checks, _ = run(pr, "pull_request", Files(None))
    assert all(m.skip is None for m in queue.sent) and len(queue.sent) == 3 and checks.sent == []
    over = json.loads(json.dumps(pr))
    over["pull_request"]["changed_files"] = 300  # as many as one comparison names (it may leave some out): not asked
    files = Files(("docs/a.md",))
    queue, _, _ = run(over, "pull_request", files)
    assert files.asked == [] and all(m.skip is None for m in queue.sent)


def test_a_push_is_judged_by_its_commits_files() -> None:
    push = json.loads((EVENTS / "push.main.json").read_text())
    for commit in push["commits"]:
        commit.update(added=[], removed=[], modified=["torch/docs/conf.py"])
    queue, _, _ = run(push, "push", Files(("never", "asked")))
    assert {m.target_repo: m.skip for m in queue.sent} == {
        "org/everything": None, "org/ignores-docs": None, "org/torch-only": "no_matching_files",
    }  # fmt: skip
    push["commits"][0].pop("modified")  # a commit whose files the payload does not list: unknown
    queue, _, _ = run(push, "push", Files(None))
    assert all(m.skip is None for m in queue.sent)


def test_a_pr_every_filtered_downstream_holds_costs_no_listing_until_it_is_released() -> None:
    """Red team: a first-time contributor's PR was listed (a request of the upstream's budget per push) while every
    downstream held it; the release by a ciflow/ label asks, once."""
    held = (
        ALLOWLIST.replace("repos:\n", "repos:\n  org/everything: {trusted_authors_only: true}\n")
        .replace("org/torch-only: {paths:", "org/torch-only: {trusted_authors_only: true, paths:")
        .replace("org/ignores-docs: {paths_ignore:", "org/ignores-docs: {trusted_authors_only: true, paths_ignore:")
    )
    pr = json.loads((EVENTS / "pull_request.opened.json").read_text())
    pr["pull_request"]["author_association"] = "FIRST_TIME_CONTRIBUTOR"
    files = Files(("torch/x.py",))
    queue, _, _ = run(pr, "pull_request", files, allowlist=held)
    assert queue.sent == [] and files.asked == []
    pr["action"], pr["label"] = "labeled", {"name": "ciflow/trunk"}
    pr["pull_request"]["labels"] = [{"name": "ciflow/trunk"}]
    queue, _, _ = run(pr, "pull_request", files, allowlist=held)
    assert len(files.asked) == 1 and {m.target_repo: m.skip for m in queue.sent} == {
        "org/everything": None, "org/ignores-docs": None, "org/torch-only": None,
    }  # fmt: skip
