"""Regression tracking as the reporter runs it (crcr.app.regressions): a downstream job's branch results, placed in
the branch's order, open, narrow and close its regressions, kept per job and listed in the HUD's regressions.json."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.adapters.ledger import dispatched_row
from crcr.app.budget import Budget
from crcr.app.checks_booking import job_message
from crcr.app.pages import REGRESSIONS, serve
from crcr.app.ports.github import GitHubRejected, GitHubUnavailable
from crcr.app.ports.jobs import JobRecord
from crcr.app.regression_notices import NoticeDeps, tell
from crcr.app.regressions import DOC_KEY, RECENT_RESULTS, RegressionDeps, track, track_job
from crcr.app.summaries import SummaryDeps
from crcr.contracts.check_messages import RegressionNotice
from crcr.domain.known import parse_condensed
from crcr.domain.regressions import CLOSED_KEPT_S, BranchCommit, Tracked
from crcr.ops.regressions import cancel
from tests.unit.fakes import (
    FakeChecksQueue,
    FakeClock,
    FakeDispatchQueue,
    FakeIssueComments,
    FakePacer,
    FakeRegressions,
    FakeResultsRows,
    FakeState,
    RecordingMetrics,
    StaticAllowlist,
    door,
)
from tests.unit.test_summaries import FakeDocs

UPSTREAM, REPO = "pytorch/pytorch", "org/backend"
T0 = 1_800_000_000.0


def sha(n: int) -> str:
    return f"{n:040x}"


def pushed(n: int, files: tuple[str, ...] | None = ("torch/core.py",)) -> BranchCommit:
    return BranchCommit(sha(n), T0 + 60 * n, parent=sha(n - 1), pr=1000 + n, title=f"Change {n} (#{1000 + n})",
                        author=f"dev{n}", files=files)  # fmt: skip


def result(
    n: int,
    conclusion: str = "success",
    *,
    attempt: int = 1,
    kind: str | None = None,
    event: str = "push",
    state: str = "completed",
    job: str = "test",
) -> JobRecord:
    return JobRecord(
        dispatch_id=f"dsp-{n}", run_id=str(500 + n), run_attempt=attempt, job_name=job, workflow_name="CI",
        state=state, conclusion=conclusion if state == "completed" else None, fingerprint=f"{n}{attempt}", url="",
        repo=REPO, repo_id=1, level=4, delivery_id=f"d{n}", upstream=UPSTREAM, head_sha=sha(n), pr=None, device=None,
        dispatched_at=T0 + 60 * n + 1, started_at=None, completed_at=T0 + 60 * n + 30, callback_payload="",
        version=2, event_type=event, failure_kind=kind,
    )  # fmt: skip


@dataclass
class World:
    state: FakeState = field(default_factory=FakeState)
    rows: FakeResultsRows = field(default_factory=FakeResultsRows)
    store: FakeRegressions = field(default_factory=FakeRegressions)
    docs: FakeDocs = field(default_factory=FakeDocs)
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)
    clock: FakeClock = field(default_factory=lambda: FakeClock(T0 + 86_400))
    allowlist: str = f"L2:\n  - {REPO}\n"

    def deps(self) -> RegressionDeps:
        return RegressionDeps(
            results=self.rows, branch=self.state, store=self.store, metrics=self.metrics, clock=self.clock,
            docs=SummaryDeps(docs=self.docs, metrics=self.metrics, clock=self.clock),
            allowlist=StaticAllowlist(parse_allowlist(self.allowlist)),
        )  # fmt: skip

    def push(self, *numbers: int) -> None:
        self.state.record_commits(UPSTREAM, [pushed(n) for n in numbers])

    def report(self, *jobs: JobRecord) -> None:
        self.rows.record(list(jobs))
        track(list(jobs), self.deps())

    def listed(self) -> list[dict[str, object]]:
        return list(self.docs.doc(DOC_KEY)["regressions"])


def test_ten_pushes_failing_from_the_sixth_open_one_regression_blaming_the_sixth_commits_pr() -> None:
    world = World()
    world.push(*range(1, 11))
    for n in range(1, 11):
        world.report(result(n, "success" if n <= 5 else "failure", kind=None if n <= 5 else "test"))
    [regression] = world.store.regressions_of(UPSTREAM)
    assert (regression.last_pass, regression.first_fail, regression.last_fail) == (sha(5), sha(6), sha(10))
    [blamed] = regression.blamelist
    assert (blamed.sha, blamed.pr, blamed.title, blamed.author) == (sha(6), 1006, "Change 6 (#1006)", "dev6")
    assert regression.open and not regression.told
    assert world.metrics.counts["RegressionOpened"] == 1  # once, however many red results came after
    [listed] = world.listed()
    assert listed["state"] == "open" and listed["first_fail"] == sha(6)
    assert listed == json.loads(json.dumps(regression.to_json()))


def test_a_nightly_testing_every_fourth_commit_blames_the_four_commits_and_its_path_filter_names_the_suspects() -> None:
    world = World(allowlist=f"L2:\n  - {REPO}\nrepos:\n  {REPO}:\n    paths: ['torch/backends/**']\n")
    world.push(*range(1, 13))
    world.state.record_commits(UPSTREAM, [replace(pushed(7), files=("torch/backends/mine.py",))])
    world.state.record_commits(UPSTREAM, [replace(pushed(8), files=None)])  # too many files to tell: suspected
    world.report(result(4, event="nightly"))
    world.report(result(8, "failure", event="nightly"))
    [regression] = world.store.regressions_of(UPSTREAM)
    assert [b.sha for b in regression.blamelist] == [sha(5), sha(6), sha(7), sha(8)]
    assert [b.sha for b in regression.blamelist if b.suspect] == [sha(7), sha(8)]
    world.report(result(12, event="nightly"))  # fixed since
    [closed] = world.store.regressions_of(UPSTREAM)
    assert closed.state == "closed" and (closed.last_fail, closed.fixed_by) == (sha(8), sha(12))
    assert closed.closed_at == world.clock.t and world.metrics.counts["RegressionClosed"] == 1
    assert world.listed()[0]["state"] == "closed"
    # Listed a while after it was fixed, then forgotten.
    world.clock.t += CLOSED_KEPT_S + 1
    world.report(result(12, event="nightly", attempt=2))
    assert world.store.regressions_of(UPSTREAM) == [] and world.listed() == []


def test_a_retry_that_passes_an_infra_failure_and_a_time_out_open_nothing() -> None:
    world = World()
    world.push(*range(1, 6))
    world.report(result(1))
    world.report(result(2, "failure", kind="test"), result(2, "success", attempt=2))  # flaky
    world.report(result(3, "failure", kind="infra"))
    world.report(result(4, state="timed_out"))
    world.report(result(5, "cancelled"))
    assert world.store.regressions_of(UPSTREAM) == [] and world.store.writes == 0
    assert DOC_KEY not in world.docs.docs


def test_a_pass_that_comes_late_narrows_the_range_and_the_regression_stays_told() -> None:
    world = World()
    world.push(*range(1, 8))
    world.report(result(1), result(6, "failure"))
    [wide] = world.store.regressions_of(UPSTREAM)
    assert [b.sha for b in wide.blamelist] == [sha(n) for n in range(2, 7)]
    key = (UPSTREAM, REPO, "CI", "test")
    world.store.jobs[key] = ([replace(wide, told=True)], world.store.jobs[key][1])  # its owners were told
    world.report(result(4))  # a result on an earlier commit, reported late
    [narrow] = world.store.regressions_of(UPSTREAM)
    assert (narrow.last_pass, narrow.first_fail) == (sha(4), sha(6)) and narrow.told
    assert narrow.opened_at == wide.opened_at and world.metrics.counts["RegressionOpened"] == 1


def test_a_failure_that_turns_flaky_later_takes_its_regression_back() -> None:
    world = World()
    world.push(1, 2)
    world.report(result(1), result(2, "failure"))
    assert len(world.store.regressions_of(UPSTREAM)) == 1
    world.report(result(2, "success", attempt=2))
    assert world.store.regressions_of(UPSTREAM) == [] and world.listed() == []


def test_an_open_regression_older_than_the_results_looked_at_stays_open_until_a_pass() -> None:
    world = World()
    last = RECENT_RESULTS + 10
    world.push(*range(1, last + 2))
    world.report(result(1), result(2, "failure"))
    world.rows.record([result(n, "failure") for n in range(3, last + 1)])
    world.report(result(last, "failure", attempt=2))  # its newest results are all red
    [still] = world.store.regressions_of(UPSTREAM)
    assert still.open and (still.last_pass, still.first_fail, still.last_fail) == (sha(1), sha(2), sha(last))
    world.report(result(last + 1))
    [fixed] = world.store.regressions_of(UPSTREAM)
    assert fixed.fixed_by == sha(last + 1) and fixed.first_fail == sha(2)


def test_a_result_on_a_commit_never_seen_pushed_is_not_placed_and_pr_results_are_not_read() -> None:
    world = World()
    world.push(1, 3)
    world.report(result(1), result(2, "failure"))  # 2 was never pushed (as far as the relay knows)
    world.report(replace(result(3, "failure"), pr=42, event_type="pull_request"))
    assert world.store.regressions_of(UPSTREAM) == []


def test_tracking_fails_open_and_is_counted() -> None:
    world = World()
    world.push(1, 2)

    class Down(FakeRegressions):
        def job_regressions(self, *args: str) -> tuple[list[object], int]:  # type: ignore[override]
            raise ConnectionError("DynamoDB unreachable")

    world.store = Down()
    world.report(result(1), result(2, "failure"))  # no exception: the batch goes on
    assert world.metrics.counts["RegressionTrackingFailed"] == 1
    world.store = FakeRegressions()
    assert len(track_job(result(2, "failure"), world.deps())) == 1  # the job's next look finds it


def test_the_hud_route_serves_the_regressions_as_tracked_and_an_empty_list_before_any() -> None:
    world = World()
    assert json.loads(serve(REGRESSIONS, world.docs, {}).body) == {"schema": 1, "regressions": []}
    world.push(1, 2)
    world.report(result(1), result(2, "failure"))
    answer = serve(REGRESSIONS, world.docs, {})
    assert answer.status == 200 and answer.headers["content-type"] == "application/json"
    assert json.loads(answer.body)["regressions"] == [t.to_json() for t in world.store.regressions_of(UPSTREAM)]


def test_a_regression_that_opens_asks_once_for_its_notice_on_the_pr_of_its_first_failing_commit() -> None:
    world = World()
    queue = FakeChecksQueue()
    world.push(1, 2)
    world.state.record_commits(UPSTREAM, [replace(pushed(3), pr=None)])  # a direct push: no PR to tell on
    deps = replace(world.deps(), notices=queue)
    world.rows.record([result(1), result(2, "failure")])
    track([result(2, "failure")], deps)
    [(ask, _)] = queue.sent
    assert (ask.kind, ask.pr, ask.head_sha, ask.repo, ask.workflow_name, ask.job_name) == (
        "notice", 1002, sha(2), REPO, "CI", "test",
    )  # fmt: skip
    world.rows.record([result(3, "failure")])
    track([result(3, "failure")], deps)  # the same regression goes on: nothing more to ask
    assert len(queue.sent) == 1
    other = replace(result(3, "failure"), job_name="lint")
    world.rows.record([replace(result(1), job_name="lint"), replace(result(2), job_name="lint"), other])
    track([other], deps)  # opens on the direct push
    assert len(queue.sent) == 1 and world.metrics.counts["RegressionNotTold"] == 1


def notice_world() -> tuple[World, NoticeDeps, FakeIssueComments, RegressionNotice]:
    world = World()
    world.push(1, 2)
    world.report(result(1), result(2, "failure"))
    api = FakeIssueComments()
    allowlist = StaticAllowlist(parse_allowlist(f"L2:\n  - {REPO}: [alice, bob]\n"))
    deps = NoticeDeps(api=api, store=world.store, allowlist=allowlist, pacer=FakePacer(), metrics=world.metrics,
                      clock=world.clock, door=door())  # fmt: skip
    message = RegressionNotice(upstream=UPSTREAM, head_sha=sha(2), repo=REPO, pr=1002, job_name="test")
    return world, deps, api, message.model_copy(update={"workflow_name": "CI"})


def test_a_notice_mentions_the_owners_once_however_often_its_message_comes() -> None:
    world, deps, api, message = notice_world()
    assert tell(message, deps, Budget()) == "told now"
    assert tell(message, deps, Budget()) == "told"  # a redelivered message writes nothing more
    [(_, _, body)] = api.writes
    assert "@alice @bob" in body and f"{sha(1)[:10]}" in body and f"- {sha(2)[:10]} #1002" in body
    [kept] = world.store.regressions_of(UPSTREAM)
    assert kept.told and world.metrics.counts["RegressionTold"] == 1


def test_a_notice_github_cannot_take_now_is_retried_and_one_it_refuses_is_not() -> None:
    world, deps, api, message = notice_world()
    api.errors = [GitHubUnavailable("502")]
    with pytest.raises(GitHubUnavailable):
        tell(message, deps, Budget())
    assert not world.store.regressions_of(UPSTREAM)[0].told  # the claim is given back: the retry writes it
    assert tell(message, deps, Budget()) == "told now" and len(api.writes) == 1
    world, deps, api, message = notice_world()
    api.errors = [GitHubRejected(403, "locked conversation")]
    assert tell(message, deps, Budget()) == "refused" and world.metrics.counts["RegressionNoticeRefused"] == 1
    assert tell(message, deps, Budget()) == "told" and api.writes == []


def test_a_notice_writes_the_job_name_as_inert_text() -> None:
    world, deps, api, message = notice_world()
    evil = "x @evil #1 [a](http://e)"  # a downstream names its jobs
    [t], version = world.store.jobs.pop((UPSTREAM, REPO, "CI", "test"))
    world.store.jobs[(UPSTREAM, REPO, "CI", evil)] = ([replace(t, job_name=evil)], version)
    assert tell(message.model_copy(update={"job_name": evil}), deps, Budget()) == "told now"
    [(_, _, body)] = api.writes
    assert "@evil" not in body.replace("@\u200b", "") and "[a](http://e)" not in body


class History:
    """GitHub's comparison of two commits of the branch: what it lists, and how often it was asked."""

    def __init__(self, commits: list[BranchCommit]) -> None:
        self.commits, self.asked = commits, 0

    def commits_between(self, upstream: str, base_sha: str, head_sha: str) -> list[BranchCommit] | None:
        self.asked += 1
        shas = [c.sha for c in self.commits]
        return self.commits[shas.index(base_sha) + 1 : shas.index(head_sha) + 1]


class Budget1:
    def __init__(self, calls: int) -> None:
        self.left = calls

    def hit(self, key: str, now: float) -> float:
        self.left -= 1
        return 0.0 if self.left >= 0 else 60.0


def test_a_range_with_commits_the_relay_never_saw_pushed_is_filled_by_one_comparison() -> None:
    world = World()
    world.push(1, 2, 6, 7)  # the pushes of 3, 4 and 5 never reached the relay (a webhook window lost)
    history = History([pushed(n) for n in range(1, 8)])
    deps = replace(world.deps(), history=history, compare_budget=Budget1(10))
    world.rows.record([result(2), result(6, "failure")])
    [found] = track_job(result(6, "failure"), deps)
    assert [b.sha for b in found.blamelist] == [sha(n) for n in (3, 4, 5, 6)] and history.asked == 1
    assert [b.pr for b in found.blamelist] == [1003, 1004, 1005, 1006]
    world.rows.record([result(7, "failure")])
    track_job(result(7, "failure"), deps)  # the same range: never asked again
    assert history.asked == 1 and world.metrics.counts["RegressionCompared"] == 1


def test_a_comparison_over_the_hours_budget_or_failing_leaves_the_range_as_known() -> None:
    world = World()
    world.push(1, 2, 6)
    history = History([pushed(n) for n in range(1, 7)])
    deps = replace(world.deps(), history=history, compare_budget=Budget1(0))
    world.rows.record([result(2), result(6, "failure")])
    [found] = track_job(result(6, "failure"), deps)
    assert [b.sha for b in found.blamelist] == [sha(6)] and history.asked == 0  # what the relay saw
    assert world.metrics.counts["RegressionCompareSkipped"] == 1

    class Down(History):
        def commits_between(self, upstream: str, base_sha: str, head_sha: str) -> list[BranchCommit] | None:
            raise GitHubUnavailable("502")

    world = World()
    world.push(1, 2, 6)
    world.rows.record([result(2), result(6, "failure")])
    [found] = track_job(result(6, "failure"), replace(world.deps(), history=Down([])))
    assert [b.sha for b in found.blamelist] == [sha(6)] and world.metrics.counts["RegressionCompareFailed"] == 1


def test_a_failure_of_tests_upstream_disabled_opens_no_regression_and_pages_nobody() -> None:
    world = World()
    world.push(*range(1, 5))
    queue = FakeChecksQueue()
    disabled = parse_condensed(
        {"test_mm (__main__.TestLinalg)": ["7", "https://github.com/pytorch/pytorch/issues/7", []]}
    )
    deps = replace(world.deps(), known=lambda: disabled, attempts=world.rows, notices=queue)
    known_only = json.dumps([{"name": "test_mm", "classname": "test_linalg.TestLinalg"}])
    world.rows.record([result(1), replace(result(2, "failure"), failed_tests=known_only)])
    assert track_job(result(2, "failure"), deps) == [] and queue.sent == []  # only a disabled test failed
    reads = world.rows.reads
    world.rows.record(
        [replace(result(3, "failure"), failed_tests=json.dumps([{"name": "test_new", "classname": "T"}]))]
    )
    [found] = track_job(result(3, "failure"), deps)
    assert (found.last_pass, found.first_fail) == (sha(1), sha(3))  # the known failure said nothing of the code
    assert [b.sha for b in found.blamelist] == [sha(2), sha(3)] and len(queue.sent) == 1
    assert world.metrics.counts["RegressionKnownUpstream"] >= 1
    reads = world.rows.reads
    world.rows.record([result(4, "failure")])
    assert [(t.last_pass, t.first_fail) for t in track_job(result(4, "failure"), deps)] == [(sha(1), sha(3))]
    assert world.rows.reads == reads + 1  # the range kept is not read again; the known failure before it is


class DayBudget:
    def __init__(self, left: int) -> None:
        self.left = left

    def hit(self, repo: str, now: float, per_day: int) -> float:
        self.left -= 1
        return 0.0 if self.left >= 0 else 3600.0


def bisect_world(runs_per_day: int = 6, budget: int = 10) -> tuple[World, RegressionDeps, FakeDispatchQueue]:
    world = World()
    world.push(*range(1, 8))
    queue = FakeDispatchQueue()
    allow = f"L3:\n  gpu:\n    {REPO}: [alice]\nrepos:\n  {REPO}:\n    bisect: {{runs_per_day: {runs_per_day}}}\n"
    deps = replace(world.deps(), allowlist=StaticAllowlist(parse_allowlist(allow)), dispatches=queue,
                   bisect_budget=DayBudget(budget))  # fmt: skip
    world.rows.record([result(2), result(6, "failure")])  # a nightly every fourth commit: (2, 6]
    return world, deps, queue


def bisected(world: World, deps: RegressionDeps, n: int, conclusion: str, **changes: object) -> list[Tracked]:
    run = replace(result(n, conclusion, event="bisect"), dispatch_id=f"bisect-{n}", **changes)
    world.rows.record([run])
    return track_job(run, deps)


def test_a_range_of_four_commits_is_bisected_one_run_at_a_time_and_two_runs_name_the_culprit() -> None:
    world, deps, queue = bisect_world()
    [t] = track_job(result(6, "failure"), deps)
    [first] = queue.sent
    assert (first.event_type, first.head_sha, first.target_repo, first.level.name) == ("bisect", sha(4), REPO, "L3")
    assert first.bisect == {"workflow": "CI", "job": "test", "last_pass": sha(2), "first_fail": sha(6),
                            "testing": sha(4)}  # fmt: skip
    assert (t.bisect_pending, t.bisect_runs, t.bisect_limit) == (sha(4), 1, 2)
    track_job(result(6, "failure", attempt=2), deps)
    assert len(queue.sent) == 1  # its run has not reported: nothing more
    bisected(world, deps, 4, "success")
    assert [m.head_sha for m in queue.sent] == [sha(4), sha(5)]
    [t] = bisected(world, deps, 5, "failure")
    assert (t.culprit, t.last_pass, t.first_fail, t.bisect_runs, t.bisect_pending) == (sha(5), sha(4), sha(5), 2, None)
    assert len(queue.sent) == 2 and t.to_json()["culprit"] == sha(5)
    # One delivery id per job and tested commit: the dispatcher's ledger sends a repeated ask once.
    assert first.delivery_id.startswith("bisect-") and first.delivery_id != queue.sent[1].delivery_id


def test_a_buildkite_downstream_is_bisected_through_its_pipeline() -> None:
    _, deps, queue = bisect_world()
    allow = (
        f"L3:\n  gpu:\n    {REPO}: [alice]\nrepos:\n  {REPO}:\n    bisect: {{runs_per_day: 6}}\n"
        "    repository_id: 42\n    buildkite: {organization: vllm, pipeline: ci, branch: dev}\n"
    )
    deps = replace(deps, allowlist=StaticAllowlist(parse_allowlist(allow)))
    track_job(result(6, "failure"), deps)
    [first] = queue.sent
    assert (first.event_type, first.head_sha, first.repository_id) == ("bisect", sha(4), 42)
    assert first.buildkite is not None and (first.buildkite.pipeline, first.buildkite.branch) == ("ci", "dev")


def test_bisection_waits_for_its_budget_stops_without_a_result_and_when_cancelled() -> None:
    world, deps, queue = bisect_world(budget=0)
    [t] = track_job(result(6, "failure"), deps)
    assert queue.sent == [] and t.bisect_runs == 0 and world.metrics.counts["BisectPaused"] == 1
    deps = replace(deps, bisect_budget=DayBudget(5))
    track_job(result(6, "failure", attempt=2), deps)  # the next look, another day
    assert [m.head_sha for m in queue.sent] == [sha(4)]
    [t] = bisected(world, deps, 4, "failure", failure_kind="infra")  # says nothing of the code
    assert t.bisect_stopped == "no_result" and len(queue.sent) == 1

    world, deps, queue = bisect_world()
    track_job(result(6, "failure"), deps)
    assert cancel(world.store, UPSTREAM, REPO) == 1
    [t] = bisected(world, deps, 4, "success")
    assert t.bisect_stopped == "cancelled" and len(queue.sent) == 1  # the range still narrows, nothing more is sent
    assert [b.sha for b in t.blamelist] == [sha(5), sha(6)]


def test_a_downstream_that_does_not_allow_it_is_never_bisected_and_bisection_runs_have_no_check_runs() -> None:
    _, deps, queue = bisect_world()
    deps = replace(deps, allowlist=StaticAllowlist(parse_allowlist(f"L3:\n  gpu:\n    {REPO}: [alice]\n")))
    track_job(result(6, "failure"), deps)
    assert queue.sent == []
    run = replace(result(4, event="bisect"), level=4)
    assert job_message(run) is None and job_message(replace(run, event_type="push")) is not None


def test_a_sent_bisection_dispatch_books_no_check_run_pass() -> None:
    image = {"pk": {"S": "DLV#bisect-1"}, "sk": {"S": f"DSP#{REPO}"}, "state": {"S": "dispatched"}}
    image |= {"level": {"N": "4"}, "upstream": {"S": UPSTREAM}, "head_sha": {"S": sha(4)}, "repo": {"S": REPO}}
    record = {"dynamodb": {"NewImage": image | {"event_type": {"S": "push"}}, "OldImage": {"state": {"S": "sending"}}}}
    assert dispatched_row(record) is not None
    record["dynamodb"]["NewImage"] = image | {"event_type": {"S": "bisect"}}
    assert dispatched_row(record) is None


def test_an_allowlist_that_cannot_be_read_pauses_bisection_and_keeps_the_regression() -> None:
    world, deps, queue = bisect_world()

    class Unreadable:
        def current(self) -> object:
            raise ConnectionError("S3 unreachable")

    [t] = track_job(result(6, "failure"), replace(deps, allowlist=Unreadable()))  # type: ignore[arg-type]
    assert t.open and t.bisect_runs == 0 and queue.sent == []
    assert world.metrics.counts["BisectPaused"] == 1
