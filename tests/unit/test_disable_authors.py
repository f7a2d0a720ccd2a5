"""A failure is `known` only from a DISABLED issue its author could file: PyTorch's bot, or someone with write access
to the upstream (asked of GitHub's double over HTTP, remembered an hour, a bounded number of times a refresh)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace

import pytest

from crcr.adapters.allowlist_source import CachedKnownFailures
from crcr.adapters.disabled_issues import GitHubAuthorPermissions, GitHubDisabledIssues
from crcr.adapters.github import GitHubApp
from crcr.app.disable_authors import AuthorAnswer, DisableAuthors
from crcr.app.page_entries import _failure
from crcr.app.ports.pulls import PrInfo
from crcr.app.verdicts import judgement
from crcr.domain.known import DisableIssue, condensed_from_issues, known_refs, parse_condensed, parse_known_refs
from crcr.domain.markdown import known_links
from crcr.settings import ConfigError, Settings
from tests.conftest import APP_ID
from tests.doubles.github_double import DEFAULT_PERMISSIONS, GitHubDouble, Reply
from tests.unit.fakes import FakeClock, RecordingMetrics
from tests.unit.test_verdicts import BASE, HEAD, OLDER, World, on_branch, record

UPSTREAM = "pytorch/pytorch"
ISSUE = "https://github.com/pytorch/pytorch/issues/{}"
ZWSP = "\u200b"


@dataclass
class KeptAnswers:
    """The AuthorAnswers port in memory (the state table's is tests/integration/test_adapters.py's subject)."""

    rows: dict[str, AuthorAnswer] = field(default_factory=dict)

    def answers(self, upstream: str) -> dict[str, AuthorAnswer]:
        return dict(self.rows)

    def remember(self, upstream: str, login: str, answer: AuthorAnswer) -> None:
        self.rows[login] = answer


@dataclass
class Setup:
    github: GitHubDouble
    clock: FakeClock
    metrics: RecordingMetrics
    kept: KeptAnswers
    fetch: GitHubDisabledIssues

    def known(self) -> dict[str, str | None]:
        """One refresh: each test the list makes known, with its issue's author."""
        doc = parse_condensed(json.loads(self.fetch()))
        return {name: d.author for (name, _), d in doc.by_test.items()}

    def lookups(self) -> list[str]:
        return [r.path.rsplit("/", 2)[-2] for r in self.github.requests if r.path.endswith("/permission")]


@pytest.fixture
def setup(github: GitHubDouble, app_key_pem: str) -> Setup:
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions={**DEFAULT_PERMISSIONS, "issues": "read"})
    clock, metrics, kept = FakeClock(), RecordingMetrics(), KeptAnswers()
    app = GitHubApp(github.url, APP_ID, app_key_pem, time.time)
    authors = DisableAuthors(GitHubAuthorPermissions(app), kept, metrics, clock.now)
    return Setup(github, clock, metrics, kept, GitHubDisabledIssues(app, UPSTREAM, metrics, clock.now, authors))


def disable(github: GitHubDouble, number: int, test: str, author: str, association: str) -> None:
    github.add_search_issue(UPSTREAM, number, f"DISABLED {test} (__main__.TestLinalg)", "Platforms:",
                            author=author, association=association)  # fmt: skip


def test_an_outsiders_disabled_issue_leaves_the_failure_new_and_a_maintainers_makes_it_known_by_them(
    setup: Setup,
) -> None:
    github = setup.github
    github.add_collaborator(UPSTREAM, "maintainer", "maintain")  # GitHub says `permission: write` for it
    github.add_collaborator(UPSTREAM, "triager", "triage")  # may label issues, not disable tests
    disable(github, 170300, "test_matmul", "maintainer", "MEMBER")
    disable(github, 170301, "test_conv", "outsider", "NONE")
    disable(github, 170302, "test_add", "contributor", "CONTRIBUTOR")  # merged a PR once: read access
    disable(github, 170303, "test_sub", "triager", "COLLABORATOR")
    cached = CachedKnownFailures(setup.fetch, setup.metrics, setup.clock.now, 1800.0)
    assert {n: d.author for (n, _), d in cached.current().by_test.items()} == {"test_matmul": "maintainer"}
    # The outsider cost no lookup (its association says it cannot have write access); the others one each.
    assert sorted(setup.lookups()) == ["contributor", "maintainer", "triager"]
    counts = setup.metrics.counts
    assert (
        counts["DisabledIssueRefused.reason=association"] == 1 and counts["DisabledIssueRefused.reason=permission"] == 2
    )
    assert counts["IssueAuthorLookedUp"] == 3

    world = World(prs={7: PrInfo(HEAD, BASE)}, times={OLDER: 10.0, BASE: 20.0})
    deps = replace(world.deps(), known=cached.current)
    for test, verdict in (("test_conv", "new"), ("test_add", "new"), ("test_sub", "new"), ("test_matmul", "known")):
        job = replace(record(), failed_tests=json.dumps([{"name": test, "classname": "test_linalg.TestLinalg"}]))
        world.rows = [on_branch(BASE, "success", "p1"), job]  # it passed on the PR's base
        assert judgement(job, deps).verdict == verdict, test
    known = judgement(job, deps)
    assert known.known_issues == f"{ISSUE.format(170300)}@maintainer"
    # Where a maintainer reads it: the comment and the check run (known_links), the pages (the job's failure detail).
    assert known_links(known.known_issues) == f"([#{ZWSP}170300]({ISSUE.format(170300)}) by @{ZWSP}maintainer)"
    page = _failure(replace(job, verdict="known", known_issues=known.known_issues))
    assert page["known_issues"] == [ISSUE.format(170300)]
    assert page["known_authors"] == {ISSUE.format(170300): "maintainer"}


def test_a_bots_issue_counts_without_a_lookup_and_a_none_association_costs_none(setup: Setup) -> None:
    disable(setup.github, 170310, "test_bot", "pytorch-bot[bot]", "NONE")  # as the flaky-test bot files them
    for n, association in enumerate(("NONE", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR")):
        disable(setup.github, 170320 + n, f"test_new_{n}", f"newcomer{n}", association)
    assert setup.known() == {"test_bot": "pytorch-bot[bot]"}
    assert setup.lookups() == [] and setup.kept.rows == {}
    assert setup.metrics.counts["DisabledIssueRefused.reason=association"] == 3
    # An issue whose author GitHub no longer names (or names oddly) counts for nothing either.
    nobody = [DisableIssue(1, ISSUE.format(1), "DISABLED test_a (__main__.A)", "", author, "MEMBER")
              for author in (None, "", "not a login")]  # fmt: skip
    assert setup.fetch.authors.accepted(UPSTREAM, nobody) == [] and setup.lookups() == []
    assert setup.metrics.counts["DisabledIssueRefused.reason=no_author"] == 3


def test_a_bot_counts_only_when_the_settings_name_it() -> None:
    assert Settings.from_env({}).disabled_tests_bots == "pytorch-bot[bot]"  # test-infra's verifyDisableTestIssueBot
    assert Settings.from_env(
        {"CRCR_DISABLED_TESTS_BOTS": " pytorch-bot[bot], other-bot[bot] "}
    ).disabled_tests_bots == ("pytorch-bot[bot],other-bot[bot]")
    assert Settings.from_env({"CRCR_DISABLED_TESTS_BOTS": "none"}).disabled_tests_bots == ""  # every author is asked
    with pytest.raises(ConfigError, match="CRCR_DISABLED_TESTS_BOTS: must be GitHub logins"):
        Settings.from_env({"CRCR_DISABLED_TESTS_BOTS": "pytorch bot"})


def test_an_unnamed_bot_is_asked_like_anyone(setup: Setup) -> None:
    setup.fetch.authors.bots = frozenset()
    disable(setup.github, 170330, "test_bot", "pytorch-bot[bot]", "CONTRIBUTOR")
    assert setup.known() == {} and setup.lookups() == ["pytorch-bot[bot]"]


def test_an_answer_is_kept_an_hour_then_asked_again(setup: Setup) -> None:
    setup.github.add_collaborator(UPSTREAM, "maintainer", "write")
    disable(setup.github, 170340, "test_matmul", "maintainer", "COLLABORATOR")
    disable(setup.github, 170341, "test_conv", "reader", "CONTRIBUTOR")
    assert setup.known() == {"test_matmul": "maintainer"} and len(setup.lookups()) == 2
    setup.clock.t += 1800  # the next refresh, within the hour: GitHub is not asked
    assert setup.known() == {"test_matmul": "maintainer"} and len(setup.lookups()) == 2
    # Write access taken away: counted until the answer is an hour old, then asked again and refused.
    setup.github.add_collaborator(UPSTREAM, "maintainer", "read")
    setup.clock.t += 1800
    assert setup.known() == {} and len(setup.lookups()) == 4
    assert setup.metrics.counts["IssueAuthorLookedUp"] == 4


def test_lookups_are_bounded_per_refresh_and_the_rest_wait_for_the_next(setup: Setup) -> None:
    setup.fetch.authors.lookups_per_refresh = 2
    for n in range(3):
        setup.github.add_collaborator(UPSTREAM, f"dev{n}", "write")
        disable(setup.github, 170350 + n, f"test_{n}", f"dev{n}", "MEMBER")
    assert setup.known() == {"test_0": "dev0", "test_1": "dev1"}  # in the issues' order; dev2 is not counted yet
    assert setup.metrics.counts["DisabledIssueRefused.reason=unchecked"] == 1
    setup.clock.t += 1800
    assert len(setup.known()) == 3 and setup.lookups() == ["dev0", "dev1", "dev2"]
    setup.clock.t += 1800  # dev0's and dev1's answers are an hour old: asked again, dev2's still stands
    assert len(setup.known()) == 3 and setup.lookups()[3:] == ["dev0", "dev1"]


def test_a_lookup_github_fails_counts_nothing_and_asks_no_more_this_refresh(setup: Setup) -> None:
    for n in range(3):
        setup.github.add_collaborator(UPSTREAM, f"dev{n}", "admin")
        disable(setup.github, 170360 + n, f"test_{n}", f"dev{n}", "MEMBER")
    setup.github.script("GET", r".*/collaborators/dev0/permission", [Reply.error(502)])
    assert setup.known() == {}
    counts = setup.metrics.counts
    assert counts["IssueAuthorLookupFailed"] == 1 and counts["DisabledIssueRefused.reason=lookup_failed"] == 1
    assert counts["DisabledIssueRefused.reason=unchecked"] == 2 and setup.kept.rows == {}
    setup.clock.t += 1800  # GitHub answers again: every one is asked
    assert len(setup.known()) == 3 and setup.lookups() == ["dev0", "dev0", "dev1", "dev2"]


def test_the_row_keeps_each_issue_with_its_author_and_reads_rows_without_them() -> None:
    issues = [
        DisableIssue(1, ISSUE.format(1), "DISABLED test_a (__main__.A)", "", "dev-1", "MEMBER"),
        DisableIssue(2, ISSUE.format(2), "DISABLED test_b (__main__.B)", "", "pytorch-bot[bot]", "NONE"),
    ]
    known = parse_condensed(condensed_from_issues(issues))
    refs = known_refs(known.by_test.values())
    assert refs == f"{ISSUE.format(1)}@dev-1 {ISSUE.format(2)}@pytorch-bot[bot]"
    assert parse_known_refs(refs) == [(ISSUE.format(1), "dev-1"), (ISSUE.format(2), "pytorch-bot[bot]")]
    assert parse_known_refs(ISSUE.format(3)) == [(ISSUE.format(3), None)]  # from a file, or written before authors
    # A bot's login is shown as GitHub spells it, Markdown escaped, mentioning no one.
    assert known_links(refs).endswith(f"by @{ZWSP}pytorch-bot\\[bot\\])")
    assert known_links(ISSUE.format(3)) == f"([#{ZWSP}3]({ISSUE.format(3)}))"
