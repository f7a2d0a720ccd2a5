"""Every state a maintainer must tell apart, as the HUD pages render it in headless Chromium at desktop and phone
width: documents written by the relay's own code (planner notes, the reporter's summaries, refusals, health and
the level check's document), served by HudFunction's handler. Screenshots go to test-output/hud-states/."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from crcr.app.health import page_health, sample
from crcr.app.page_notes import PlanNote, note_plan, note_refusals
from crcr.app.ports.jobs import JobRecord
from crcr.app.summaries import SummaryDeps, update_summaries
from crcr.domain.health import parse_policy
from crcr.domain.level_status import document, status_of
from crcr.domain.levels import Level
from tests.conftest import ROOT
from tests.e2e.browser import headless
from tests.e2e.browser import open_page as browser_page
from tests.e2e.hud_server import MemoryDocs, Served, serve_docs
from tests.unit.fakes import FakeResultsRows, RecordingMetrics

pytestmark = pytest.mark.e2e
SHOTS = ROOT / "test-output" / "hud-states"
UPSTREAM = "pytorch/pytorch"
PR = 170001
HEAD = "a1b2c3d4e5" + "0" * 30
OLD_HEAD = "0ld0000000".replace("l", "1") + "1" * 30
BASE = "bb" * 20
TRUNK = "7" * 40
NOW = time.time()
FAIL, PRE, RUN, TIMEOUT, CANCEL, OK, FLAKY = (
    "org/fails", "org/preexisting", "org/running", "org/timeout", "org/cancel", "org/green", "org/flaky",
)  # fmt: skip
PENDING, HELD, PATHS, NIGHTLY, REFUSED = "org/pending", "org/held", "org/paths", "org/nightly", "org/refused"
TESTS = [
    {"name": "test_linear_backward", "classname": "TestNN", "message": "AssertionError: tensors differ\nmax diff 0.5"},
    {"name": "test_conv2d", "classname": "TestNN", "message": "RuntimeError: device-side assert", "duration": 0.25},
]
TESTS[0]["duration"] = 2.5


class Clock:
    def __init__(self) -> None:
        self.t = NOW

    def now(self) -> float:
        return self.t


def job(repo: str, state: str, conclusion: str | None = None, **kw: Any) -> JobRecord:
    fields: dict[str, Any] = {
        "dispatch_id": f"dsp-{repo}-{kw.get('delivery_id', 'd1')}", "run_id": "900", "run_attempt": 1,
        "job_name": "build-and-test", "workflow_name": "CI", "state": state,
        "conclusion": conclusion if state == "completed" else ("timed_out" if state == "timed_out" else None),
        "fingerprint": f"{state}{conclusion}", "url": f"https://github.com/{repo}/actions/runs/900", "repo": repo,
        "repo_id": 1, "level": 4, "delivery_id": "d1", "upstream": UPSTREAM, "head_sha": HEAD, "pr": PR, "device": None,
        "dispatched_at": NOW - 1800, "started_at": NOW - 1700,
        "completed_at": NOW - 600 if state != "in_progress" else None,
        "callback_payload": json.dumps({"test_results": {"passed": 120, "failed": 2 if conclusion == "failure" else 0,
                                                         "skipped": 4}}),
        "version": 2, "event_type": "pull_request",
    }  # fmt: skip
    return JobRecord(**fields | kw)


class Results:
    """The results table's by_repo index as page_health reads it."""

    def __init__(self, jobs: list[JobRecord]) -> None:
        self.jobs = jobs

    def jobs_of_repo(self, repo: str, since: float) -> list[JobRecord]:
        return [j for j in self.jobs if j.repo.lower() == repo.lower() and j.dispatched_at >= since]


@dataclass
class Seeded:
    served: Served
    docs: MemoryDocs


def seed(docs: MemoryDocs, rows: FakeResultsRows) -> None:
    global NOW  # noqa: PLW0603 - every helper reads the seeding moment
    NOW = time.time()  # at seeding, not at collection: "12 min ago" is measured from here
    clock = Clock()
    metrics = RecordingMetrics()
    history = [
        # Three days of PR jobs for the trend: two passes then a failure each day.
        job(FAIL, "completed", c, dispatched_at=NOW - d * 86_400 - i * 60, started_at=NOW - d * 86_400 - i * 60 + 300,
            completed_at=NOW - d * 86_400 - i * 60 + 1500, dispatch_id=f"h{d}{i}", delivery_id=f"h{d}{i}")
        for d in (1, 2, 3) for i, c in enumerate(("success", "success", "failure"))
    ]  # fmt: skip
    results = Results(history)
    policy = parse_policy('{"min_jobs": 1}')

    def health(j: JobRecord) -> dict[str, Any] | None:
        return page_health(results, policy, clock, j.repo, Level(j.level))

    deps = SummaryDeps(docs=docs, metrics=metrics, clock=clock, health=health, health_refresh_s=0)
    # The PR's first head: dispatched, then replaced before anything started on it.
    clock.t = NOW - 7200
    note_plan(PlanNote(UPSTREAM, OLD_HEAD, "pull_request", PR, meta={"title": "Speed up linear", "author": "octocat",
                       "at": NOW - 7200, "pr_state": "open", "base_sha": BASE},
                       planned={PENDING: {"state": "pending", "level": 4}}), deps)  # fmt: skip
    clock.t = NOW - 720  # the new head was planned 12 minutes ago
    planned = {
        PENDING: {"state": "pending", "level": 4},
        REFUSED: {"state": "pending", "level": 2},
        HELD: {"state": "held", "reason": "untrusted_author", "level": 3},
        PATHS: {"state": "skipped", "reason": "no_matching_files", "level": 2},
        NIGHTLY: {"state": "not_targeted", "reason": "nightly_only", "level": 2},
    } | {r: {"state": "pending", "level": 4} for r in (FAIL, PRE, RUN, TIMEOUT, CANCEL, OK, FLAKY)}
    note_plan(PlanNote(UPSTREAM, HEAD, "pull_request", PR, planned=planned, replaced=OLD_HEAD, nightly_only=(NIGHTLY,),
                       meta={"title": "Speed up linear (v2)", "author": "octocat", "at": NOW - 720, "pr_state": "open",
                             "base_sha": BASE}), deps)  # fmt: skip
    clock.t = NOW
    triage = json.dumps({"category": "upstream", "confidence": "high", "summary": "linear's backward changed"})
    update_summaries(
        rows.record([
            job(FAIL, "completed", "failure", verdict="new", verdict_baseline=TRUNK, failure_kind="test",
                failed_tests=json.dumps(TESTS), triage=triage),
            job(PRE, "completed", "failure", verdict="pre-existing", level=3),
            job(RUN, "in_progress"),
            replace(job(TIMEOUT, "timed_out", run_id="0", run_attempt=0, job_name="", workflow_name="", url="",
                        started_at=None), verdict="infra"),
            job(CANCEL, "completed", "cancelled"),
            job(OK, "completed", "success"),
            job(FLAKY, "completed", "failure", verdict="flaky"),
            job(FLAKY, "completed", "success", run_attempt=2),
            job(FAIL, "completed", "failure", ciflow="trunk", event_type="push", delivery_id="d-ciflow",
                dispatch_id="dsp-ciflow", job_name="trunk-tests", verdict="new"),
        ]),
        deps,
    )  # fmt: skip
    # Trunk: a push with its title, and a nightly run of the nightly-only downstream on it.
    clock.t = NOW - 3600
    note_plan(PlanNote(UPSTREAM, TRUNK, "push", meta={"title": "Merge the linear speed-up", "author": "maintainer",
                       "at": NOW - 3600}, planned={OK: {"state": "pending", "level": 4}}), deps)  # fmt: skip
    update_summaries(rows.record([job(OK, "completed", "success", head_sha=TRUNK, pr=None, event_type="push",
                                      delivery_id="d-push", dispatch_id="dsp-push")]), deps)  # fmt: skip
    update_summaries(rows.record([job(NIGHTLY, "completed", "failure", head_sha=TRUNK, pr=None, event_type="nightly",
                                      level=2, delivery_id="scheduled", dispatch_id="dsp-nightly",
                                      job_name="nightly")]), deps)  # fmt: skip
    # The refused downstream: its reports over its quota, and one its HUD push was refused.
    clock.t = NOW
    lookups = "org/refused has used its budget of GitHub lookups of unknown upstream commits this hour"
    note_refusals(REFUSED, {"commit_lookups_per_hour": 7}, deps, message=lookups)
    note_refusals(REFUSED, {"HUD push refused (HTTP 400)": 1}, deps, key="hud:x:1")
    # The level check's document: FAIL's workflow does not carry the dispatch id in its run-name.
    status = status_of(FAIL, Level.L4, [sample(j) for j in history], NOW)
    docs.put("level-status.json", document([replace(status, dispatch_dedupe="none")], NOW), None)


@pytest.fixture(scope="module")
def seeded() -> Iterator[Seeded]:
    docs, rows = MemoryDocs(), FakeResultsRows()
    seed(docs, rows)
    with serve_docs(docs, rows) as served:
        yield Seeded(served, docs)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with headless() as b:
        yield b


def open_page(browser: Browser, url: str, shot: str, width: int = 1400) -> Page:
    return browser_page(browser, url, SHOTS / f"{shot}-{width}.png", width)


def cell(page: Page, sha: str, repo: str) -> str:
    return " ".join(page.locator(f'tr[data-sha="{sha}"] td[data-repo="{repo}"]').inner_text().split())


def test_the_overview_tells_every_state_apart_in_words(seeded: Seeded, browser: Browser) -> None:
    page = open_page(browser, f"{seeded.served.url}/hud/", "overview")
    assert page.locator("h1").inner_text() == "Pull requests"
    assert cell(page, HEAD, FAIL) == "✗ failure 2/2 NEW"  # its PR job and its ciflow/trunk job
    assert cell(page, HEAD, PRE) == "✗ failure PRE-EXISTING"
    assert cell(page, HEAD, RUN) == "● running"
    assert cell(page, HEAD, TIMEOUT) == "◔ timed out INFRA"
    assert cell(page, HEAD, CANCEL) == "⊘ cancelled"
    assert cell(page, HEAD, OK) == "✓ success"
    assert cell(page, HEAD, FLAKY) == "✓ success"  # passed on its re-run; the commit page keeps the flaky attempt
    # Dispatched 12 minutes before seeding; a loaded host may take a while to get here.
    assert re.fullmatch(r"◷ not started 1[2-9] min", cell(page, HEAD, PENDING))
    assert cell(page, HEAD, HELD) == "‖ held author not trusted yet"
    assert cell(page, HEAD, PATHS) == "↷ skipped no matching files"
    assert cell(page, HEAD, NIGHTLY) == "· not targeted nightly only"
    assert cell(page, OLD_HEAD, PENDING) == "↦ superseded"
    # Not targeted and pending look different (colour and border), not only in words.
    styles = [
        page.locator(f'tr[data-sha="{HEAD}"] td[data-repo="{r}"] .state').evaluate(
            "e => [getComputedStyle(e).color, getComputedStyle(e).borderStyle]"
        )
        for r in (PENDING, NIGHTLY)
    ]
    assert styles[0] != styles[1]
    # A downstream whose reports are refused stays on the grid, its header saying so.
    header = page.locator(f'th.repo[data-repo="{REFUSED}"]')
    assert "⚠ 8 reports refused" in header.inner_text()
    assert "nightly only" in page.locator(f'th.repo[data-repo="{NIGHTLY}"]').inner_text()
    # Commits as people know them: title, author, PR number and state.
    row = page.locator(f'tr[data-sha="{HEAD}"]')
    assert "Speed up linear (v2)" in row.inner_text() and "octocat" in row.inner_text()
    assert row.locator("td.prcol").inner_text().split() == [f"#{PR}", "open"]
    # Screen readers hear each cell's state in words.
    label = row.locator(f'td[data-repo="{PENDING}"] .state').get_attribute("aria-label")
    assert re.fullmatch(f"{PENDING}: dispatched, no job started yet, 1[2-9] min", label or "")
    # Keyboard: every cell is a link.
    assert row.locator("td.cellwrap a.state").count() == row.locator("td.cellwrap").count()


def test_trunk_and_nightly_are_views_of_their_own(seeded: Seeded, browser: Browser) -> None:
    page = open_page(browser, f"{seeded.served.url}/hud/trunk", "trunk")
    assert page.locator("h1").inner_text() == "Trunk: pushes and nightly runs"
    assert page.locator("tbody tr").count() == 1
    assert "Merge the linear speed-up" in page.locator(f'tr[data-sha="{TRUNK}"]').inner_text()
    assert cell(page, TRUNK, NIGHTLY) == "✗ failure"
    assert page.locator(f'tr[data-sha="{HEAD}"]').count() == 0
    page = open_page(browser, f"{seeded.served.url}/hud/nightly", "nightly")
    day = time.strftime("%Y-%m-%d", time.gmtime(NOW - 1800))  # the nightly job's dispatch
    assert " ".join(page.locator(f'tr[data-day="{day}"] td[data-repo="{NIGHTLY}"]').inner_text().split()) == "✗ failure"


def test_the_commit_page_explains_each_failure_and_each_state(seeded: Seeded, browser: Browser) -> None:
    page = open_page(browser, f"{seeded.served.url}/hud/commit/{HEAD}", "commit")
    assert page.locator("h1").inner_text() == f"Upstream commit {HEAD[:10]} Speed up linear (v2)"
    meta = page.locator("p.meta").first.inner_text()
    assert "by octocat" in meta and f"PR #{PR}" in meta and f"base {BASE[:10]}" in meta
    failed = page.locator(f'section[data-repo="{FAIL}"]')
    details = failed.locator("tr.details").first.inner_text()
    assert "Verdict: NEW it passed on the base commit: this change broke it" in " ".join(details.split())
    # The commit the verdict compared, linked: a push before the PR's base, named beside it.
    assert f"judged against this job's result on {TRUNK[:10]} (the latest at or before the PR's base {BASE[:10]})" in (
        " ".join(details.split())
    )
    assert failed.locator("tr.details").first.locator(f'a[href="/hud/commit/{TRUNK}"]').count() == 1
    # A verdict recorded before its baseline was stored points at the PR's base, as it says.
    pre = page.locator(f'section[data-repo="{PRE}"] tr.details').first
    assert "at or before the PR's base" in pre.inner_text()
    assert pre.locator(f'a[href="/hud/commit/{BASE}"]').count() == 1
    assert "TestNN.test_linear_backward" in details and "AssertionError: tensors differ" in details
    assert "Failing tests (2)" in details and "(2.5 s)" in details and "(0.25 s)" in details
    assert (
        "Downstream's triage (advice, not a verdict): upstream, high confidence — linear's backward changed" in details
    )
    assert "The downstream says: test failure" in details
    log = failed.locator("tr.details").first.locator("a", has_text="Open the log")
    assert log.get_attribute("href") == f"https://github.com/{FAIL}/actions/runs/900"
    assert "ciflow/trunk" in failed.inner_text()  # the ciflow/trunk run, filed under its PR's head
    assert "pre-existing" in page.locator(f'section[data-repo="{PRE}"] td.result').first.inner_text().lower()
    flaky = page.locator(f'section[data-repo="{FLAKY}"] tbody tr[data-state="failure"] td.result').inner_text()
    assert "FLAKY" in flaky.upper()
    planned = {
        r: page.locator(f'section[data-repo="{r}"] .planned').inner_text() for r in (PENDING, HELD, PATHS, NIGHTLY)
    }
    assert re.search(r"dispatched 1[2-9] min ago; no job has started yet", planned[PENDING])
    assert "held: the PR's author is not trusted yet" in planned[HELD]
    assert "skipped: no matching files" in planned[PATHS]
    assert "not targeted: nightly only" in planned[NIGHTLY]
    timed_out = page.locator(f'section[data-repo="{TIMEOUT}"] tbody tr').first.locator("td").all_inner_texts()
    assert timed_out[1] == "(no job started)" and "timed out" in timed_out[3]
    page = open_page(browser, f"{seeded.served.url}/hud/commit/{OLD_HEAD}", "commit-superseded")
    assert "superseded by" in page.locator("p.notice").inner_text()
    assert "superseded" in page.locator(f'section[data-repo="{PENDING}"] .planned').inner_text()


def test_the_pr_page_shows_the_pr_its_commits_and_its_ciflow_runs(seeded: Seeded, browser: Browser) -> None:
    page = open_page(browser, f"{seeded.served.url}/hud/pr/{PR}", "pr")
    assert page.locator("h1").inner_text() == f"#{PR} Speed up linear (v2)"
    assert page.locator("[data-pr-state]").first.inner_text() == "open"
    assert page.locator("table.grid tbody tr").count() == 2  # both heads, newest first
    assert page.locator("table.grid tbody tr").first.get_attribute("data-sha") == HEAD
    first = page.locator("table.jobs").first.locator("tbody tr:not(.details)").first
    assert first.get_attribute("data-state") == "failure" and "NEW" in first.inner_text().upper()
    assert page.locator("h2#ciflow").inner_text() == "ciflow/trunk runs of this PR"
    ciflow = page.locator("h2#ciflow + div table.jobs tbody tr:not(.details)")
    assert ciflow.count() == 1 and "trunk-tests" in ciflow.inner_text()
    waiting = page.locator(f'.waiting [data-repo="{PENDING}"]').inner_text()
    assert "no job has started yet" in waiting


def test_the_repository_page_agrees_with_itself(seeded: Seeded, browser: Browser) -> None:
    page = open_page(browser, f"{seeded.served.url}/hud/repo/{FAIL}", "repo")
    assert page.locator("[data-dedupe]").get_attribute("data-dedupe") == "none"
    assert page.locator("[data-dedupe]").inner_text().startswith("Runs can be started twice")
    assert "end the workflow's run-name with" in page.locator("[data-dedupe]").inner_text()  # and how to fix it
    verdict = page.locator("div.verdict")
    assert verdict.get_attribute("data-verdict") == "demote"  # 6 of 9 passed: below 90 %
    figures = {
        r.split("\t")[0]: r.split("\t")[1:]
        for r in page.locator("table.figures").first.locator("tbody tr").all_inner_texts()
    }
    assert figures["Finished PR jobs counted"][0] == "9" and figures["Pass rate"][0] == "66.7%"
    criteria = page.locator(".level-status table tbody tr").all_inner_texts()
    assert any(row.startswith("Job Pass Rate\t66.7%") for row in criteria)
    assert page.locator(".trend svg").count() == 2
    assert "66.7% of 9 finished PR jobs" in (page.locator(".trend svg").first.get_attribute("aria-label") or "")
    page = open_page(browser, f"{seeded.served.url}/hud/repo/{REFUSED}", "repo-refused")
    assert page.locator("[data-dedupe]").count() == 0  # no run looked at yet: no bookkeeping in a maintainer's face
    refused = page.locator("section#refused")
    assert refused.locator("h2").inner_text() == "⚠ 8 reports refused"
    reasons = refused.locator("tbody tr td:first-child")
    counts = refused.locator("tbody tr td.num")
    assert reasons.first.inner_text().splitlines() == [
        "commit_lookups_per_hour",
        "org/refused has used its budget of GitHub lookups of unknown upstream commits this hour",
    ]
    assert reasons.nth(1).inner_text() == "HUD push refused (HTTP 400)"
    assert counts.all_inner_texts() == ["7", "1"]


@pytest.mark.parametrize(
    ("path", "heading"),
    [
        ("/hud/no/such/page", "No such page"),
        ("/hud/commit/" + "f" * 40, "No results for this commit"),
        ("/hud/commit/ffffff0", "No results for this commit"),
        ("/hud/pr/99", "No results for this pull request"),
        ("/hud/repo/nobody/nothing", "No results for this repository"),
    ],
)
def test_unknown_pages_answer_in_words(seeded: Seeded, browser: Browser, path: str, heading: str) -> None:
    page = open_page(browser, seeded.served.url + path, "notfound-" + path.strip("/").replace("/", "-")[:40])
    assert page.locator("h1").inner_text() == heading
    assert page.locator("body").inner_text().count("{") == 0  # never raw JSON


def test_search_and_short_or_upper_case_shas_find_the_commit(seeded: Seeded, browser: Browser) -> None:
    url = seeded.served.url
    for given in (HEAD[:10], HEAD.upper(), HEAD[:7].upper()):
        page = open_page(browser, f"{url}/hud/commit/{given}", "commit-by-short-sha")
        assert page.locator("h1").inner_text().startswith(f"Upstream commit {HEAD[:10]}")
        assert page.url.endswith(f"/hud/commit/{HEAD}")
    page = open_page(browser, f"{url}/hud/", "search")
    for query, lands in (
        (f"#{PR}", f"/hud/pr/{PR}"),
        (HEAD[:8].upper(), f"/hud/commit/{HEAD}"),
        (FAIL, f"/hud/repo/{FAIL}"),
    ):
        page.goto(f"{url}/hud/")
        page.wait_for_selector("body[data-ready=true]")
        page.fill("#q", query)
        page.press("#q", "Enter")
        page.wait_for_url(f"**{lands}")
        page.wait_for_selector("body[data-ready=true]")
    page.fill("#q", "not a thing")
    page.press("#q", "Enter")
    assert "Type a SHA" in page.locator(".search-hint").inner_text()


def test_a_malformed_hash_still_renders_the_page(seeded: Seeded, browser: Browser) -> None:
    page = open_page(browser, f"{seeded.served.url}/hud/commit/{HEAD}#%E0%A4%A", "malformed-hash")
    assert page.locator(f'section[data-repo="{FAIL}"]').count() == 1
    page = open_page(browser, f"{seeded.served.url}/hud/#%E0%A4%A", "malformed-hash-overview")
    assert page.locator("h1").inner_text() == "Pull requests"


@pytest.mark.parametrize(
    "path", ["/hud/", "/hud/trunk", "/hud/nightly", f"/hud/commit/{HEAD}", f"/hud/pr/{PR}", f"/hud/repo/{FAIL}"]
)
def test_at_phone_width_every_status_is_visible_without_scrolling_sideways(
    seeded: Seeded, browser: Browser, path: str
) -> None:
    page = open_page(
        browser, seeded.served.url + path, "phone-" + (path.strip("/").replace("/", "-") or "hud"), width=400
    )
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 400
    states = page.locator("main .state:not(.s-none)")  # "no record" cells are left out of the phone's list
    assert states.count() > 0
    for i in range(states.count()):
        box = states.nth(i).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 400, states.nth(i).inner_text()
