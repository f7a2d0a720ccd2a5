"""The PR comment (docs/contracts.md): which downstream jobs it lists and what it says; downstream text is set by
`crcr.domain.markdown`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from crcr.domain import failed_tests
from crcr.domain.checks import wants_check_run
from crcr.domain.ids import repo_key, run_order
from crcr.domain.markdown import handle, known_links, link, text, triage_cell
from crcr.domain.runs import NOT_STARTED
from crcr.domain.verdicts import BROKEN_TRUNK, FLAKY, INFRA, KNOWN, NEW, NO_BASELINE, PRE_EXISTING, Attempt

# What the relay writes at most, counted in UTF-16 code units (GitHub's count or more), under GitHub's limit on an issue
# comment's body (65,536).
BODY_BUDGET = 65_000
HISTORY_KEPT = 5
EARLIER = "…"  # the history entry standing for older ones dropped
SCHEDULED = "scheduled"  # delivery id of scheduled runs: they report on a commit, not on a PR
RERUN_REQUESTED = "requested"  # the relay asked for the automatic re-run of an infrastructure failure
RECHECK_MIN_S, RECHECK_MAX_S = 30.0, 900.0  # how often an undecided re-run is looked at again
NO_JOB_NAME = "(no job started)"
FAILING_TESTS_SHOWN = 5


def marker(upstream: str, pr: int) -> str:
    """The hidden line that finds the comment again after the relay lost its id (a cold start, a lost row)."""
    return f"<!-- crcr:pr-comment upstream={repo_key(upstream)} pr={pr} -->"


_STATE = re.compile(r"<!-- crcr:state (\{.*?\}) -->")


def state_line(mentioned: frozenset[str], live: frozenset[str], history: tuple[str, ...]) -> str:
    """What the comment remembers, hidden in its body: who was mentioned (and whose mention is still live in
    it) and its history, so a relay that lost its row (a cold start, the row's TTL) carries on from the
    comment instead of mentioning owners again."""
    doc = json.dumps(
        {"mentioned": sorted(mentioned), "live": sorted(live), "history": list(history)},
        separators=(",", ":"),
        allow_nan=False,
    )
    inert = doc.replace("<", "\\u003c").replace(">", "\\u003e")  # nothing in it can end the HTML comment
    return f"<!-- crcr:state {inert} -->"


def recover(body: str) -> Posted:
    """The mentions and history hidden in a comment the relay wrote (an unreadable state: none)."""
    found = _STATE.search(body)
    try:
        doc = json.loads(found.group(1)) if found else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}

    def strings(key: str) -> list[str]:
        value = doc.get(key)
        return [v[:300] for v in value[:500] if isinstance(v, str)] if isinstance(value, list) else []

    mentioned = frozenset(strings("mentioned"))
    return Posted(
        mentioned=mentioned,
        live=frozenset(strings("live")) & mentioned,
        history=tuple(strings("history"))[-HISTORY_KEPT:],
    )


class Recorded(Protocol):
    """What the comment reads of a recorded job (crcr.app.ports.JobRecord)."""

    @property
    def dispatch_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def run_attempt(self) -> int: ...
    @property
    def job_name(self) -> str: ...
    @property
    def workflow_name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def conclusion(self) -> str | None: ...
    @property
    def url(self) -> str: ...
    @property
    def repo(self) -> str: ...
    @property
    def level(self) -> int: ...
    @property
    def delivery_id(self) -> str: ...
    @property
    def pr(self) -> int | None: ...
    @property
    def device(self) -> str | None: ...
    @property
    def dispatched_at(self) -> float: ...
    @property
    def completed_at(self) -> float | None: ...
    @property
    def failure_kind(self) -> str | None: ...
    @property
    def triage(self) -> str: ...
    @property
    def verdict(self) -> str | None: ...
    @property
    def ciflow(self) -> str | None: ...
    @property
    def failed_tests(self) -> str: ...
    @property
    def known_issues(self) -> str: ...


@dataclass(frozen=True)
class Row:
    """One job the comment lists: its newest attempt, failing or flaky."""

    repo: str
    level: int
    workflow: str
    job: str
    attempt: int
    url: str
    outcome: str  # failure, timed_out, success (flaky)
    verdict: str | None  # None: the reporter has not judged it (yet)
    triage: str  # the downstream's validated triage verdict (JSON text), advice only
    failed: bool  # False: passed on a retry after failing (flaky)
    ciflow: str | None = None  # the job ran for a ciflow/<name> tag push of the PR
    failed_tests: str = ""  # its failing tests as recorded (JSON, crcr.domain.failed_tests)
    known_issues: str = ""  # `known`: the upstream issues that explain its failing tests (known_refs)


@dataclass(frozen=True)
class View:
    """The PR's current head as the comment sees it."""

    head_sha: str
    rows: tuple[Row, ...] = ()
    jobs: int = 0  # L3/L4 jobs on the head the comment counts (newest attempts)
    running: int = 0  # not finished yet
    retrying: int = 0  # infrastructure failures hidden while the relay's automatic re-run is pending
    unresolved: int = 0  # finished without a verdict either way (cancelled, action_required): not "passing"
    recheck_at: float | None = None  # when a hidden infrastructure failure must be looked at again

    @property
    def failing(self) -> int:
        return sum(1 for r in self.rows if r.failed)

    @property
    def status(self) -> str:
        if self.failing:
            return "failing"
        if self.running or self.retrying or self.unresolved or not self.jobs:
            return "waiting"
        return "passing"


def _attempt(job: Recorded) -> Attempt:
    return Attempt(job.run_attempt, job.state, job.conclusion, job.failure_kind)


def _order(job: Recorded) -> tuple[float, tuple[int, int, str], int]:
    return (job.dispatched_at, run_order(job.run_id), job.run_attempt)


def select(
    jobs: Iterable[Recorded],
    pr: int,
    head_sha: str,
    labels: tuple[str, ...],
    rerun_state: Callable[[str, str], str | None],
    now: float = 0.0,
    hold_s: float = float("inf"),
) -> View:
    """The jobs the comment shows, from every job recorded on the PR's head: L4, and L3 while labelled; each
    job's newest attempt (a re-run, or a later dispatch of the same commit, replaces the older one).

    An infrastructure failure of a run's first attempt is re-run once by the relay before anyone is told: it is
    left out while that re-run is undecided or `requested` (and its next attempt has not reported, which would
    be the newest), for at most `hold_s` after it failed; `refused` or `not_retryable` show it at once."""
    mine = [
        j
        for j in jobs
        if j.pr == pr and j.delivery_id != SCHEDULED and j.level >= 3 and wants_check_run(j.level, j.device, labels)
    ]
    named_dispatches = {j.dispatch_id for j in mine if j.job_name}
    groups: dict[tuple[str, ...], list[Recorded]] = {}
    for job in mine:
        ciflow = job.ciflow or ""  # a ciflow tag push's CI is listed beside the PR's own, not instead of it
        if job.job_name:
            key: tuple[str, ...] = (repo_key(job.repo), ciflow, job.workflow_name, job.job_name)
        elif job.dispatch_id in named_dispatches:
            continue  # the sweeper's "nothing started" row, overtaken by a job that did start
        else:
            key = (repo_key(job.repo), ciflow, "", "", job.dispatch_id)
        groups.setdefault(key, []).append(job)
    rows: list[Row] = []
    running = retrying = unresolved = 0
    recheck: list[float] = []
    for attempts in groups.values():
        attempts.sort(key=_order)
        newest = attempts[-1]
        latest = _attempt(newest)
        earlier_failed = any(_attempt(j).failed for j in attempts[:-1])
        if newest.state == NOT_STARTED:  # GitHub started no run: the downstream's owners must act on its workflow
            rows.append(_row(newest, NOT_STARTED, None, failed=True))
        elif latest.failed:
            verdict = newest.verdict or (INFRA if latest.infra else None)
            held = _held(newest, verdict, rerun_state, now, hold_s)
            if held is not None:
                retrying += 1  # the relay re-runs it once: nobody is told until that re-run reports
                recheck.append(held)
                continue
            rows.append(_row(newest, newest.conclusion or "timed_out", verdict, failed=True))
        elif latest.passed and earlier_failed:
            rows.append(_row(newest, "success", FLAKY, failed=False))
        elif newest.state not in ("completed", "timed_out", "not_started"):
            running += 1
        elif newest.conclusion not in ("success", "skipped", "neutral"):
            unresolved += 1
    rows.sort(key=lambda r: (repo_key(r.repo), r.ciflow or "", r.workflow, r.job))
    return View(head_sha, tuple(rows), len(groups), running, retrying, unresolved, min(recheck, default=None))


def _held(
    job: Recorded, verdict: str | None, rerun_state: Callable[[str, str], str | None], now: float, hold_s: float
) -> float | None:
    """When to look again at a failure left out while its automatic re-run is pending; None: show it."""
    if verdict != INFRA or job.run_attempt != 1 or not job.job_name:
        return None  # only a run's first attempt is re-run automatically (the no-job record has no run)
    state = rerun_state(job.dispatch_id, job.run_id)
    failed_at = job.completed_at or job.dispatched_at
    until = failed_at + hold_s
    if state not in (None, RERUN_REQUESTED) or now >= until:
        return None
    if state == RERUN_REQUESTED:
        return until  # its next attempt reports before then (and the reporter asks for the comment)
    # Undecided: the re-run waits for the rest of its run; look again, less often as the wait grows.
    return min(until, now + min(RECHECK_MAX_S, max(RECHECK_MIN_S, (now - failed_at) / 2)))


def _row(job: Recorded, outcome: str, verdict: str | None, failed: bool) -> Row:
    return Row(
        repo=job.repo,
        level=job.level,
        workflow=job.workflow_name,
        job=job.job_name,
        attempt=job.run_attempt,
        url=job.url,
        outcome=outcome,
        verdict=verdict,
        triage=job.triage,
        failed=failed,
        ciflow=job.ciflow,
        failed_tests=job.failed_tests if failed else "",
        known_issues=job.known_issues if verdict == KNOWN else "",
    )


@dataclass(frozen=True)
class Posted:
    """What the relay last wrote to the PR's comment (kept in the state table's row for the PR)."""

    comment_id: int | None = None
    body_hash: str = ""
    mentioned: frozenset[str] = frozenset()  # "<repo key> <handle>": owners already mentioned for a repository
    live: frozenset[str] = frozenset()  # the mentions still written as mentions in the comment (kept as they are)
    history: tuple[str, ...] = ()  # "<status> <short sha> <minute>", oldest first, at most HISTORY_KEPT


@dataclass(frozen=True)
class Rendered:
    body: str
    mentioned: frozenset[str]  # the Posted set with this body's mentions added
    live: frozenset[str]  # the mentions this body writes as mentions
    history: tuple[str, ...]
    status: str  # failing, passing or waiting
    worth_creating: bool  # a failure to tell about (or a job that failed, then passed): never only green


_VERDICT_WORDS = {
    NEW: "**new**",
    PRE_EXISTING: "pre-existing",
    INFRA: "infra",
    FLAKY: "flaky (passed on retry)",
    NO_BASELINE: "no baseline",
    BROKEN_TRUNK: "broken trunk",
    KNOWN: "known upstream",
}
LEGEND = (
    "<sub>Verdicts: **new** passed on the baseline (the latest result at or before the PR's base), so this PR "
    "likely broke it · pre-existing failed there too · infra the downstream's infrastructure (re-run once "
    "automatically before it is shown) · flaky failed, then passed on a retry · no baseline nothing to compare "
    "with · known upstream every failing test is one PyTorch disabled (its issue linked) · broken trunk the "
    "job is broken on the default branch at the PR's base (its owners are told there) · "
    "no run GitHub started no run for the dispatch (the downstream's workflow does not listen to it, or is "
    "disabled): its owners are told. Triage is the downstream's own analysis: advice, never a merge gate.</sub>"
)
_TABLE_HEAD = (
    "| Job | Attempt | Run | Verdict | Downstream's triage (their opinion, advice only) |\n"
    "| --- | ---: | --- | --- | --- |"
)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _verdict_cell(row: Row) -> str:
    if row.outcome == NOT_STARTED:
        return "no run: GitHub started none (its workflow needs its owners)"
    word = _VERDICT_WORDS.get(row.verdict or "", text(row.verdict, 40) if row.verdict else "not judged yet")
    if row.known_issues:
        word += " " + known_links(row.known_issues)
    return f"{word} (timed out)" if row.outcome == "timed_out" else word


def _failing_tests(row: Row) -> str:
    """A new failure's failing tests, as text: which tests this PR likely broke."""
    shown, more = failed_tests.names(row.failed_tests, FAILING_TESTS_SHOWN)
    if row.verdict != NEW or not shown:
        return ""
    listed = ", ".join(text(name, 120) for name in shown)
    return f"<br>failing: {listed}" + (f" and {more} more" if more else "")


def _row_line(row: Row) -> str:
    job = text(f"{row.workflow} / {row.job}", 150) if row.job else NO_JOB_NAME
    if row.ciflow:
        job += f" ({text('ciflow/' + row.ciflow, 60)})"
    job += _failing_tests(row)
    attempt = str(row.attempt) if row.job else "—"
    return f"| {job} | {attempt} | {link(row.url)} | {_verdict_cell(row)} | {triage_cell(row.triage)} |"


def _units(s: str) -> int:
    """Length in UTF-16 code units: at least what GitHub counts, whichever way it counts."""
    return len(s.encode("utf-16-le")) // 2


def _minute(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M")


def _history(posted: tuple[str, ...], status: str, head_sha: str, now: float) -> tuple[str, ...]:
    """A short history of what the comment said: one entry per change between failing and passing (or to
    another commit), the newest kept, older ones folded into a leading "…"."""
    if status not in ("failing", "passing"):
        return posted
    short = head_sha[:7]
    if posted and posted[-1].split(" ")[:2] == [status, short]:
        return posted
    history = (*posted, f"{status} {short} {_minute(now)}")
    if len(history) > HISTORY_KEPT:
        history = (EARLIER, *history[-(HISTORY_KEPT - 1) :])
    return history


def _history_line(history: tuple[str, ...]) -> str:
    words = {"failing": "❌ failing", "passing": "✅ passing"}
    entries = []
    for entry in history:
        if entry == EARLIER:
            entries.append("…")
            continue
        status, sha, minute = ([*entry.split(" ", 2), "", ""])[:3]
        entries.append(f"{words.get(status, text(status, 20))} on `{text(sha, 12)}` ({text(minute, 20)} UTC)")
    return "<sub>History: " + " → ".join(entries) + "</sub>"


def _headline(view: View, status: str, had_comment: bool) -> str:
    failing = view.failing
    notes = []
    if view.retrying:
        notes.append(f"{_plural(view.retrying, 'infra failure', 'infra failures')} being re-run")
    if view.running:
        notes.append(f"{_plural(view.running, 'job', 'jobs')} still running")
    if view.unresolved:
        notes.append(f"{_plural(view.unresolved, 'job', 'jobs')} cancelled or waiting for approval")
    tail = (" · " + " · ".join(notes)) if notes else ""
    if status == "failing":
        repos = len({repo_key(r.repo) for r in view.rows if r.failed})
        return (
            f"❌ **{_plural(failing, 'downstream job', 'downstream jobs')} failing** in "
            f"{_plural(repos, 'repository', 'repositories')}{tail}"
        )
    if status == "passing":
        return "✅ **All passing again.**" if had_comment else "✅ **All passing.**"
    if not view.jobs:
        return "⏳ No L3/L4 downstream results on this commit yet."
    return f"⏳ No failures so far{tail}"


def render(
    view: View,
    *,
    upstream: str,
    pr: int,
    owners: Mapping[str, tuple[str, ...]],
    posted: Posted,
    now: float,
) -> Rendered:
    """The comment's body. Owners (allowlist oncalls, by repository key) of a repository with a `new` failure
    are mentioned the first time only. The mention stays as written while their repository's new failure is
    shown (an edit that keeps a mention does not make it new); once it has left the body, their names come
    back unlinked, so no later edit can ping them again."""
    status = view.status
    history = _history(posted.history, status, view.head_sha, now)
    head = [
        marker(upstream, pr),
        f"### Downstream CI (crcr) on `{view.head_sha[:12]}`",
        "",
        _headline(view, status, posted.comment_id is not None),
    ]
    tail = ["", LEGEND]
    if history:
        tail += ["", _history_line(history)]
    sections: dict[str, list[Row]] = {}
    for row in view.rows:
        sections.setdefault(repo_key(row.repo), []).append(row)
    could_mention = posted.mentioned | {
        f"{key} {name.lower()}"
        for key, rows in sections.items()
        if any(_tells_owners(r) for r in rows)
        for oncall in owners.get(key, ())
        if (name := handle(oncall)) is not None
    }
    reserved = _units("\n".join([*head, state_line(could_mention, could_mention, history), *tail])) + 200
    budget = BODY_BUDGET - reserved
    order = sorted(
        sections,
        key=lambda k: (not any(_tells_owners(r) for r in sections[k]), -sections[k][0].level, k),
    )
    mentioned = set(posted.mentioned)
    live: set[str] = set()
    body: list[str] = []
    omitted = 0
    for key in order:
        rows = sections[key]
        first = rows[0]
        section = ["", f"#### `{text(first.repo, 140)}` · L{first.level}"]
        pending: list[str] = []
        kept: list[str] = []
        if any(_tells_owners(r) for r in rows):
            names, pending, kept = _owners_line(key, owners.get(key, ()), mentioned, posted.live)
            if names:
                section.append(names)
        section += ["", _TABLE_HEAD]
        size = _units("\n".join(section))
        shown = 0
        for row in rows:
            line = _row_line(row)
            if size + _units(line) + 1 > budget:
                break
            section.append(line)
            size += _units(line) + 1
            shown += 1
        if shown == 0:
            omitted += len(rows)
            continue
        omitted += len(rows) - shown
        budget -= size + 1
        body += section
        mentioned.update(pending)  # only mentions that made it into the body count as made
        live.update(pending, kept)
    if omitted:
        body += ["", f"… and {_plural(omitted, 'more job', 'more jobs')} not shown (the comment's size limit)."]
    head.insert(1, state_line(frozenset(mentioned), frozenset(live), history))
    full = "\n".join(head + body + tail)
    worth = status == "failing" or any(not r.failed for r in view.rows)
    return Rendered(full, frozenset(mentioned), frozenset(live), history, status, worth)


def _tells_owners(row: Row) -> bool:
    """A new failure, or a dispatch GitHub started no run for: the repository's owners are mentioned (once)."""
    return (row.verdict == NEW and row.failed) or row.outcome == NOT_STARTED


def _owners_line(
    key: str, oncalls: tuple[str, ...], mentioned: set[str], live: frozenset[str]
) -> tuple[str, list[str], list[str]]:
    """`Owners: @a @b`: a mention for owners not mentioned yet on this PR for this repository (and for those
    whose mention is still in the comment, unchanged); the others named in code spans, which notify nobody;
    oncalls that are not GitHub handles as plain text. Returns the line, the new mentions and the kept ones."""
    names: list[str] = []
    pending: list[str] = []
    kept: list[str] = []
    for oncall in oncalls:
        name = handle(oncall)
        if name is None:
            names.append(text(oncall, 60))
            continue
        seen = f"{key} {name.lower()}"
        if seen in live:
            names.append(f"@{name}")
            kept.append(seen)
        elif seen in mentioned or seen in pending:
            names.append(f"`@{name}`")
        else:
            names.append(f"@{name}")
            pending.append(seen)
    return ("Owners: " + " ".join(names)) if names else "", pending, kept
