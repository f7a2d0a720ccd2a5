"""The PR comment: what it lists and says, how untrusted text is set, who is mentioned once, and how its writer
books, merges and paces renders (recording fakes of the ports)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.checks import CheckDeps, sync
from crcr.app.comment import CommentDeps, sync_comment
from crcr.app.outbound import Permit
from crcr.app.ports.comment import IssueComment
from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.pulls import PrInfo
from crcr.contracts.check_messages import CheckSync, CommentRequest
from crcr.domain.comment import BODY_BUDGET, Posted, View, marker, recover, render, select
from crcr.domain.markdown import ZWSP, handle, safe_url, text
from tests.unit.fakes import (
    FakeChecksQueue,
    FakeClock,
    FakeCommentStore,
    FakeIssueComments,
    FakeJobsByHead,
    FakePacer,
    FakeRerunMarks,
    RecordingMetrics,
    StaticAllowlist,
    door,
)

UPSTREAM, PR, HEAD = "pytorch/pytorch", 170001, "a" * 40
ALLOWLIST = """\
L2:
  - org/l2: someone
L3:
  gpu:
    org/l3: [gpu-oncall]
L4:
  - org/l4: [alice, "@bob", "not a handle!"]
  - org/other: carol
"""

GITHUB_MAX_BODY = 65_536  # GitHub's limit on an issue comment's body


def job(
    repo: str = "org/l4",
    *,
    level: int = 4,
    name: str = "build",
    attempt: int = 1,
    state: str = "completed",
    conclusion: str | None = "failure",
    verdict: str | None = "new",
    triage: str = "",
    url: str = "https://github.com/org/l4/actions/runs/77",
    device: str | None = None,
    run_id: str = "77",
    dispatch: str = "d1",
    head: str = HEAD,
    workflow: str = "CI",
    failure_kind: str | None = None,
) -> JobRecord:
    return JobRecord(
        dispatch_id=dispatch, run_id=run_id, run_attempt=attempt, job_name=name, workflow_name=workflow,
        state=state, conclusion=conclusion if state == "completed" else None, fingerprint=state, url=url,
        repo=repo, repo_id=1, level=level, delivery_id="dlv", upstream=UPSTREAM, head_sha=head, pr=PR,
        device=device, dispatched_at=100.0, started_at=110.0, completed_at=150.0 if state == "completed" else None,
        callback_payload="{}", verdict=verdict if state != "in_progress" else None, triage=triage,
        failure_kind=failure_kind,
    )  # fmt: skip


def view(*jobs: JobRecord, labels: tuple[str, ...] = (), marks: dict[tuple[str, str], str] | None = None) -> View:
    return select(jobs, PR, HEAD, labels, lambda d, r: (marks or {}).get((d, r)))


def owners() -> dict[str, tuple[str, ...]]:
    return {e.key: e.oncalls for e in parse_allowlist(ALLOWLIST).entries}


def body_of(v: View, posted: Posted | None = None, now: float = 1_800_000_000.0) -> str:
    return render(v, upstream=UPSTREAM, pr=PR, owners=owners(), posted=posted or Posted(), now=now).body


def cells(body: str) -> list[list[str]]:
    """Each table row's cells, split on the pipes Markdown would split on (an escaped \\| is not one)."""
    rows = [line for line in body.splitlines() if line.startswith("| ") and "---" not in line]
    return [re.split(r"(?<!\\)\|", line)[1:-1] for line in rows if not line.startswith("| Job ")]


# -- what it lists -----------------------------------------------------------------------------------------


def test_a_new_l4_failure_is_a_row_of_its_repositorys_table_with_its_owners_mentioned() -> None:
    triage = json.dumps({
        "schema_version": 1, "category": "upstream", "confidence": "high", "summary": "aten::add changed",
        "suspected_upstream": {"pr": 169000, "reason": "touches add"},
    })  # fmt: skip
    body = body_of(view(job(triage=triage)))
    assert body.startswith(marker(UPSTREAM, PR) + "\n<!-- crcr:state ")
    assert "❌ **1 downstream job failing** in 1 repository" in body
    assert "#### `org/l4` · L4" in body
    assert "Owners: @alice @bob not a handle\\!" in body  # allowlist names; a non-handle is never a mention
    [row] = cells(body)
    assert [c.strip() for c in row][:4] == [
        "CI / build",
        "1",
        "[github.com](https://github.com/org/l4/actions/runs/77)",
        "**new**",
    ]
    assert "_upstream_, high confidence" in row[4] and "aten::add changed" in row[4]
    assert "suspects upstream PR 169000: touches add" in row[4]  # as text: no #reference to that PR
    assert "their opinion, advice only" in body and "never a merge gate" in body


def test_l3_counts_only_while_labelled_and_l1_l2_never() -> None:
    l3 = job("org/l3", level=3, device="gpu")
    l2 = job("org/l2", level=2)
    assert view(l3, l2).rows == ()
    assert [r.repo for r in view(l3, l2, labels=("ciflow/crcr/GPU",)).rows] == ["org/l3"]


def test_each_job_is_its_newest_attempt_and_one_that_passed_on_a_retry_is_flaky() -> None:
    v = view(job(attempt=1), job(attempt=2, conclusion="success", verdict=None))
    [row] = v.rows
    assert (row.attempt, row.verdict, row.failed) == (2, "flaky", False)
    assert v.status == "passing"
    rendered = render(v, upstream=UPSTREAM, pr=PR, owners=owners(), posted=Posted(), now=0)
    assert rendered.worth_creating  # a failure was recorded, and it says which job is flaky
    assert "flaky (passed on retry)" in rendered.body and "Owners" not in rendered.body
    # A failed retry is the row, not the first attempt.
    [row] = view(job(attempt=1, conclusion="success", verdict=None), job(attempt=2, verdict="pre-existing")).rows
    assert (row.attempt, row.verdict, row.failed) == (2, "pre-existing", True)


def test_an_infra_failure_is_hidden_while_its_automatic_rerun_has_not_reported() -> None:
    infra = job(verdict="infra", failure_kind="infra")
    requested = {("d1", "77"): "requested"}
    retrying = view(infra, marks=requested)
    assert (retrying.rows, retrying.retrying, retrying.status) == ((), 1, "waiting")
    assert "1 infra failure being re-run" in body_of(retrying)
    # Not decided yet (the re-run waits for the rest of its run): hidden too, and looked at again.
    undecided = select([infra], PR, HEAD, (), lambda d, r: None, now=1000.0, hold_s=3600.0)
    assert (undecided.rows, undecided.retrying, undecided.recheck_at) == ((), 1, 1000.0 + (1000.0 - 150.0) / 2)
    # Refused or not retryable: told at once.
    assert len(view(infra, marks={("d1", "77"): "refused"}).rows) == 1
    assert len(view(infra, marks={("d1", "77"): "not_retryable"}).rows) == 1
    # Requested long ago and never reported: shown once the hold is over.
    late = select([infra], PR, HEAD, (), lambda d, r: "requested", now=150.0 + 3600.0, hold_s=3600.0)
    assert len(late.rows) == 1 and late.recheck_at is None
    # The re-run reported: its newest attempt is what counts, and its own infra failure is shown (never re-run).
    running = view(infra, job(attempt=2, state="in_progress"), marks=requested)
    assert (running.rows, running.running) == ((), 1)
    again = view(infra, replace(infra, run_attempt=2), marks=requested)
    assert [(r.attempt, r.verdict) for r in again.rows] == [(2, "infra")]


def test_a_hidden_infra_failure_is_looked_at_again_when_nothing_else_asks() -> None:
    w = World(job(verdict="infra", failure_kind="infra"))
    w.deps = replace(w.deps, retry_hold_s=1e10)
    w.sync(request())
    [(render_message, _)] = w.queue.sent
    w.queue.sent.clear()
    w.clock.t = render_message.not_before or 0
    assert w.sync(render_message) == "nothing_failed; recheck"  # hidden: nothing to tell yet
    [(recheck, delay)] = w.queue.sent
    assert (recheck.ticket, delay) == (None, 900.0)  # looked at less often as the wait grows (at most 15 min)
    w.marks.marks[("d1", "77")] = "refused"  # the re-run handler decided, and asked nobody to look
    assert w.run_queue() == ["booked", "created"]
    assert "infra" in w.api.writes[-1][2]


def test_a_dispatch_nothing_started_on_is_listed_until_a_job_of_it_starts() -> None:
    swept = job(name="", workflow="", state="timed_out", conclusion=None, run_id="0", verdict="no baseline", url="")
    [row] = view(swept).rows
    assert "(no job started)" in body_of(view(swept)) and row.outcome == "timed_out"
    assert view(swept, job(state="in_progress")).rows == ()


def test_a_dispatch_github_started_no_run_for_is_listed_and_tells_its_owners_once() -> None:
    never = job("org/other", name="", workflow="", state="not_started", run_id="0", verdict=None, url="", dispatch="d2")
    v = view(never, job(conclusion="success"))
    [row] = v.rows
    assert (row.repo, row.outcome, row.failed, v.status) == ("org/other", "not_started", True, "failing")
    first = render(v, upstream=UPSTREAM, pr=PR, owners=owners(), posted=Posted(), now=0)
    [cell] = [c for c in cells(first.body)[0] if "no run" in c]
    assert "GitHub started none" in cell
    assert "(no job started)" in first.body
    assert "Owners: @carol" in first.body and first.mentioned == {"org/other carol"}
    # The next edit mentions nobody again; a run that then starts takes the row's place.
    posted = Posted(1, "h", first.mentioned, first.live, first.history)
    again = render(v, upstream=UPSTREAM, pr=PR, owners=owners(), posted=posted, now=0)
    assert again.mentioned == first.mentioned  # nobody newly mentioned
    assert view(never, job("org/other", state="in_progress", dispatch="d2")).rows == ()


def test_a_cancelled_job_is_not_all_passing() -> None:
    v = view(job(conclusion="success"), job(name="other", conclusion="cancelled", verdict=None))
    assert (v.rows, v.status, v.unresolved) == ((), "waiting", 1)
    assert "No failures so far · 1 job cancelled or waiting for approval" in body_of(v)


def test_other_prs_and_scheduled_runs_on_the_same_commit_are_not_this_prs() -> None:
    assert view(replace(job(), pr=5), replace(job(), delivery_id="scheduled")).rows == ()


# -- untrusted text ------------------------------------------------------------------------------------------


HOSTILE = (
    "x | y `z` <img src=x onerror=alert(1)> @everyone [link](https://evil.example) #123 GH-9 www.evil.example **b** \\"
)


def test_a_downstreams_words_cannot_ping_link_inject_html_or_break_the_table() -> None:
    triage = json.dumps({"schema_version": 1, "category": "backend", "confidence": "low", "summary": HOSTILE + "\nx"})
    body = body_of(view(job(name=HOSTILE, workflow="wf|2", triage=triage)))
    [row] = cells(body)
    assert len(row) == 5  # the pipes stayed inside their cells
    for cell in (row[0], row[4]):
        assert "<img" not in cell and "@everyone" not in cell and "](https" not in cell
        assert "#123" not in cell and "GH-9" not in cell and "www.evil" not in cell and "https://evil" not in cell
    assert f"@{ZWSP}everyone" in row[0] and "&lt;img" in row[0] and "\\`z\\`" in row[0] and "\\*\\*b\\*\\*" in row[0]
    assert "\n" not in row[4]
    # The only mentions in the whole body are the allowlist's owners.
    assert set(re.findall(r"(?<![`\w])@([\w-]+)", body)) == {"alice", "bob"}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/o/r/actions/runs/1", "https://github.com/o/r/actions/runs/1"),
        ("https://ci.example/run(1)|x", "https://ci.example/run%281%29%7Cx"),
        ("javascript:alert(1)", None),
        ("https://github.com@evil.example/x", None),
        ("https://evil.example/a b", None),
        ("https://evil.example/<x>", None),
        ("http://xn--e1afmkfd.example/ok", "http://xn--e1afmkfd.example/ok"),
        ("https://пример.example/", None),  # not ASCII: a look-alike host
        ("", None),
    ],
)
def test_only_plain_http_links_are_links(url: str, expected: str | None) -> None:
    assert safe_url(url) == expected


def test_text_is_one_inert_line() -> None:
    assert text("a\u202eb\nc\td") == "a b c d"  # a bidi override cannot reorder what is read
    assert text("x" * 300, 10) == "x" * 9 + "…"
    assert handle("@alice") == "alice" and handle("org/team-x") == "org/team-x" and handle("a b") is None


# -- mentions, history, size -------------------------------------------------------------------------------


def test_owners_are_mentioned_once_per_pr_and_repository_and_only_for_new_failures() -> None:
    first = render(view(job()), upstream=UPSTREAM, pr=PR, owners=owners(), posted=Posted(), now=0)
    assert "Owners: @alice @bob" in first.body
    assert first.mentioned == {"org/l4 alice", "org/l4 bob"}
    posted = Posted(1, "h", first.mentioned, first.live, first.history)
    # Later edits keep that line as it is (a kept mention is not a new one); another repository's owners are
    # mentioned on its own new failure.
    later = render(
        view(job(), job("org/other", name="test")), upstream=UPSTREAM, pr=PR, owners=owners(), posted=posted, now=0
    )
    assert "Owners: @alice @bob" in later.body and "Owners: @carol" in later.body
    assert later.mentioned == first.mentioned | {"org/other carol"}
    # Once their repository's new failure has left the comment, they are named without a link, for good.
    gone = render(view(job("org/other", name="test")), upstream=UPSTREAM, pr=PR, owners=owners(),
                  posted=replace(posted, mentioned=later.mentioned, live=later.live), now=0)  # fmt: skip
    assert gone.live == {"org/other carol"}
    back = render(view(job(), job("org/other", name="test")), upstream=UPSTREAM, pr=PR, owners=owners(),
                  posted=replace(posted, mentioned=gone.mentioned, live=gone.live), now=0)  # fmt: skip
    assert "Owners: `@alice` `@bob`" in back.body and "Owners: @carol" in back.body
    # A pre-existing failure mentions nobody.
    quiet = render(view(job(verdict="pre-existing")), upstream=UPSTREAM, pr=PR, owners=owners(), posted=Posted(), now=0)
    assert "Owners" not in quiet.body and quiet.mentioned == frozenset()


def test_when_everything_passes_again_it_says_so_with_a_short_history() -> None:
    failing = render(view(job()), upstream=UPSTREAM, pr=PR, owners=owners(), posted=Posted(), now=1_800_000_000.0)
    posted = Posted(1, "h", failing.mentioned, failing.live, failing.history)
    fixed = view(job(attempt=2, conclusion="success", verdict=None, name="other"), job(conclusion="success"))
    passing = render(fixed, upstream=UPSTREAM, pr=PR, owners=owners(), posted=posted, now=1_800_003_600.0)
    assert "✅ **All passing again.**" in passing.body
    assert (
        "History: ❌ failing on `aaaaaaa` (2027-01-15 08:00 UTC) → ✅ passing on `aaaaaaa` (2027-01-15 09:00 UTC)"
        in (passing.body)
    )
    assert not passing.worth_creating  # green alone never creates a comment
    history: tuple[str, ...] = ()
    for n in range(12):  # flapping: the history line stays short
        history = render(
            view(job(conclusion="failure" if n % 2 else "success", head=HEAD)),
            upstream=UPSTREAM, pr=PR, owners=owners(), posted=Posted(1, "h", history=history), now=n * 60.0,
        ).history  # fmt: skip
    assert len(history) == 5 and history[0] == "…"


def test_the_body_stays_under_githubs_limit_and_says_what_it_left_out() -> None:
    long_triage = json.dumps({"schema_version": 1, "category": "unknown", "confidence": "low", "summary": "s" * 1000})
    many = [job(f"org/r{i % 40}", name=f"job-{i}-" + "n" * 150, triage=long_triage) for i in range(2000)]
    rendered = render(view(*many), upstream=UPSTREAM, pr=PR, owners={}, posted=Posted(), now=0)
    assert len(rendered.body.encode("utf-16-le")) // 2 <= BODY_BUDGET < GITHUB_MAX_BODY
    assert re.search(r"… and \d+ more jobs not shown", rendered.body)
    assert rendered.body.rstrip().endswith("</sub>")  # the legend and history survive the cut


def test_the_hidden_state_finds_mentions_and_history_again() -> None:
    rendered = render(view(job()), upstream=UPSTREAM, pr=PR, owners=owners(), posted=Posted(), now=0)
    assert recover(rendered.body) == Posted(mentioned=rendered.mentioned, live=rendered.live, history=rendered.history)
    assert recover("no state here") == Posted()
    assert recover("<!-- crcr:state {not json} -->") == Posted()


# -- the writer ---------------------------------------------------------------------------------------------


def request(pr: int = PR) -> CommentRequest:
    return CommentRequest(upstream=UPSTREAM, head_sha=HEAD, pr=pr)


class World:
    def __init__(self, *jobs: JobRecord, closed: bool = False, waits: list[float] | None = None) -> None:
        self.clock = FakeClock(1_800_000_000.0)
        self.store = FakeCommentStore(prs={PR: PrInfo(HEAD, "b" * 40, (), closed)})
        self.api = FakeIssueComments()
        self.jobs = FakeJobsByHead(list(jobs))
        self.marks = FakeRerunMarks()
        self.queue = FakeChecksQueue()
        self.metrics = RecordingMetrics()
        self.pacer = FakePacer(waits=list(waits or []))
        tickets = iter(range(1, 1000))
        self.deps = CommentDeps(
            api=self.api, store=self.store, prs=self.store, jobs=self.jobs, reruns=self.marks, queue=self.queue,
            pacer=self.pacer,
            allowlist=StaticAllowlist(parse_allowlist(ALLOWLIST)), metrics=self.metrics, clock=self.clock,
            settle_s=5.0, max_wait_s=60.0, rand=lambda: 0.5, new_ticket=lambda: f"t{next(tickets)}", door=door()
        )  # fmt: skip

    def sync(self, message: CheckSync) -> str:
        return sync_comment(message, self.deps).detail

    def run_queue(self, advance: float = 0.0) -> list[str]:
        """Deliver what was sent to the queue, in order, moving the clock to each message's due time."""
        details = []
        while self.queue.sent:
            message, _ = self.queue.sent.pop(0)
            self.clock.t = max(self.clock.t, message.not_before or self.clock.t) + advance
            details.append(self.sync(message))
        return details

    def count(self, name: str) -> int:
        return self.metrics.counts[name]


def test_a_burst_of_requests_books_one_render_and_costs_one_write() -> None:
    w = World(job())
    details = [w.sync(request()) for _ in range(20)]
    assert details == ["booked"] + ["coalesced"] * 19
    [(render_message, delay)] = w.queue.sent
    assert (render_message.ticket, delay) == ("t1", 5.0)
    assert w.run_queue() == ["created"]
    assert [kind for kind, _, _ in w.api.writes] == ["create"]
    # Nothing changed: a later request renders the same body and writes nothing.
    w.sync(request())
    assert w.run_queue() == ["unchanged"]
    assert len(w.api.writes) == 1 and w.count("PrCommentSkipped.reason=coalesced") == 19


def test_requests_during_the_wait_push_the_render_on_and_a_steady_stream_still_shows_within_a_minute() -> None:
    w = World(job())
    w.sync(request())
    for _ in range(30):  # a request every 3 s: the render keeps waiting for the burst, up to a minute
        w.clock.t += 3.0
        w.sync(request())
        message, _ = w.queue.sent[0]
        if (message.not_before or 0) <= w.clock.t:
            w.queue.sent.pop(0)
            w.sync(message)
    assert [kind for kind, _, _ in w.api.writes] == ["create"]
    assert w.api.writes and w.clock.t - 1_800_000_000.0 <= 90


def test_a_change_asked_for_while_it_renders_is_rendered_once_more() -> None:
    w = World(job())
    w.sync(request())
    [(message, _)] = w.queue.sent
    w.queue.sent.clear()
    w.clock.t = message.not_before or 0

    class RequestWhileWriting(FakeIssueComments):
        def create_comment(self, upstream: str, pr: int, body: str, *, permit: Permit) -> int:
            w.jobs.rows.append(job("org/other", name="late"))
            assert w.sync(request()) == "coalesced"  # the render in progress owns the booking
            return super().create_comment(upstream, pr, body, permit=permit)

    w.api = RequestWhileWriting()
    w.deps = replace(w.deps, api=w.api)
    assert w.sync(message) == "created; again"
    assert w.run_queue() == ["updated"]
    assert "late" in w.api.writes[-1][2]


def test_a_closed_pr_is_skipped_and_nothing_is_written() -> None:
    w = World(job(), closed=True)
    assert w.sync(request()) == "closed"
    assert (w.queue.sent, w.api.writes) == ([], [])
    assert w.count("PrCommentSkipped.reason=closed") == 1


def test_a_pr_closed_while_its_render_waited_is_not_written() -> None:
    w = World(job())
    w.sync(request())
    w.store.prs[PR] = replace(w.store.prs[PR], closed=True)
    assert w.run_queue() == ["closed"]
    assert w.api.writes == [] and w.store.rows[PR].pending is None


def test_green_alone_never_creates_a_comment_but_edits_one_that_exists() -> None:
    w = World(job(conclusion="success", verdict=None))
    w.sync(request())
    assert w.run_queue() == ["nothing_failed"]
    assert w.api.writes == [] and w.api.listed == 1  # looked once for a comment a lost row may hide
    w.sync(request())
    assert w.run_queue() == ["nothing_failed"] and w.api.listed == 1
    w.jobs.rows = [job()]
    w.sync(request())
    assert w.run_queue() == ["created"]
    w.jobs.rows = [job(attempt=2, conclusion="success", verdict=None)]
    w.sync(request())
    assert w.run_queue() == ["updated"]
    assert "All passing again" in w.api.writes[-1][2]


def test_a_lost_row_finds_its_comment_by_the_marker_and_mentions_nobody_again() -> None:
    w = World(job())
    w.sync(request())
    w.run_queue()
    [(_, comment_id, first)] = w.api.writes
    assert "@alice" in first
    # A person quoting the marker, then the row is lost (a cold start that lost the id, or its TTL).
    w.api.comments[1] = IssueComment(1, "quoting " + marker(UPSTREAM, PR), ours=False)
    w.store.rows.clear()
    w.jobs.rows.append(job("org/l4", name="test"))
    w.sync(request())
    assert w.run_queue() == ["updated"]
    assert [(kind, cid) for kind, cid, _ in w.api.writes] == [("create", comment_id), ("update", comment_id)]
    # Recovered from the comment itself: the mention line stays as it was, and nobody is newly mentioned.
    assert "Owners: @alice @bob" in w.api.writes[-1][2]
    assert w.store.rows[PR].posted.mentioned == {"org/l4 alice", "org/l4 bob"}
    assert w.api.comments[1].body.startswith("quoting")


def test_a_deleted_comment_is_made_again_without_pinging_anyone_twice() -> None:
    w = World(job())
    w.sync(request())
    w.run_queue()
    w.api.comments.clear()  # deleted by a maintainer
    w.jobs.rows.append(job("org/l4", name="test"))
    w.sync(request())
    assert w.run_queue() == ["gone", "created"]
    assert "Owners: `@alice` `@bob`" in w.api.writes[-1][2]


def test_over_the_budget_the_render_waits_with_its_booked_slot_and_keeps_its_booking() -> None:
    w = World(job(), waits=[42.0])
    w.sync(request())
    [(message, _)] = w.queue.sent
    w.queue.sent.clear()
    w.clock.t = message.not_before or 0
    assert w.sync(message) == "paced"
    [(later, delay)] = w.queue.sent
    assert (delay, later.slot_at, later.ticket) == (42.0, w.clock.t + 42.0, "t1")
    assert w.api.writes == [] and w.store.rows[PR].pending == "t1" and w.count("PrCommentPaced") == 1
    assert w.sync(request()) == "coalesced"  # the paced render will show that change too
    assert w.run_queue() == ["created"]
    assert w.pacer.keys == [1]  # the booked slot was spent without asking the pacer again


def test_github_refusing_dead_letters_with_the_reason_and_5xx_back_off() -> None:
    w = World(job())
    w.api.errors = [GitHubUnavailable("POST: HTTP 502"), GitHubRejected(403, "issue is locked")]
    w.sync(request())
    assert w.run_queue() == ["unavailable", "GitHub rejected the PR comment: 403: issue is locked"]
    [(_, reason)] = w.queue.dead
    assert "issue is locked" in reason and w.count("PrCommentDeadLettered") == 1
    assert w.store.rows[PR].pending is None  # the next change books a new render
    assert w.sync(request()) == "booked"


def test_a_rate_limit_waits_as_github_says_and_spends_no_attempt() -> None:
    w = World(job())
    w.api.errors = [GitHubRateLimited(30.0, "POST: HTTP 403 secondary rate limit")]
    w.sync(request())
    [(message, _)] = w.queue.sent
    w.queue.sent.clear()
    w.clock.t = message.not_before or 0
    assert w.sync(message) == "rate_limited"
    [(later, delay)] = w.queue.sent
    assert (delay, later.attempt, later.ticket) == (30.0, 0, "t1")
    assert w.run_queue() == ["created"]


def test_a_redelivered_render_that_already_ran_is_dropped() -> None:
    w = World(job())
    w.sync(request())
    message, _ = w.queue.sent[0]
    w.run_queue()
    assert w.sync(message) == "superseded"
    assert len(w.api.writes) == 1


def test_the_setting_that_turns_the_comment_off() -> None:
    deps: Any = CheckDeps(
        api=None, store=None, results=None, ledger=None, prs=None, queue=FakeChecksQueue(), pacer=FakePacer(),  # type: ignore[arg-type]
        allowlist=StaticAllowlist(parse_allowlist(ALLOWLIST)), metrics=RecordingMetrics(), clock=FakeClock(),
        door=door(),
    )  # fmt: skip
    assert sync(request(), deps).detail == "comment off"
    assert deps.metrics.counts["PrCommentSkipped.reason=off"] == 1
