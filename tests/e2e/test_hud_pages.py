"""The HUD pages as a maintainer sees them: headless Chromium on `crcr local` after a scripted scenario with
failures, a retry, a timeout and several repositories. Screenshots go to test-output/hud/."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from tests.conftest import ROOT, Relay, event_body, http
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.browser import headless
from tests.e2e.test_callback import oidc  # noqa: F401 - a fixture
from tests.e2e.test_check_runs import L2, L3, L4, start

L1 = "org-one/l1-repo"

pytestmark = pytest.mark.e2e
SHOTS = ROOT / "test-output" / "hud"
RED = "rgb(207, 34, 46)"  # --failure in hud.css


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with headless() as b:
        yield b


def run_url(repo: str, run_id: int) -> str:
    return f"https://github.com/{repo}/actions/runs/{run_id}"


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not predicate():
        time.sleep(0.3)
    assert predicate()


def data(relay: Relay, key: str) -> dict[str, Any]:
    status, doc = http("GET", f"{relay.url}/hud/data/{key}")
    return doc if status == 200 else {}


@pytest.fixture
def scenario(relay_factory: Callable[..., Relay], oidc: OidcIssuer) -> tuple[Relay, str, str]:  # noqa: F811
    """A PR and a push. On the PR: the L4 job fails, and fails again when re-run; the L2 job fails and passes
    on its re-run; no L3 job ever starts, so the sweeper times the dispatch out. On the push, L4 passes."""
    # The sweeper runs once, when the test says (after every report is in), never on a clock of its own: however
    # slow the machine, only the dispatch no job reported on is timed out (a tick between the push's dispatch and
    # its report timed that one out too, once, on a loaded machine).
    env = {
        "CRCR_START_TIMEOUT_S": "1",
        "CRCR_RUN_TIMEOUT_S": "120",
        "CRCR_SWEEP_INTERVAL_S": "86400",
        "CRCR_HEALTH_REFRESH_S": "0",
        "CRCR_HEALTH_THRESHOLDS": '{"min_jobs": 1}',
    }
    s = start(lambda **kw: relay_factory(**kw | {"env": kw["env"] | env}), oidc)
    for repo, conclusions in ((L4, ["failure", "failure"]), (L2, ["failure", "success"])):
        for attempt, conclusion in enumerate(conclusions, start=1):
            run = {"run_id": 900, "run_attempt": attempt}  # a re-run (rerun-failed-jobs) is the run's next attempt
            token = s.token(repo, **run)
            url = run_url(repo, 900)
            tests = {"passed": 120, "failed": 3 if conclusion == "failure" else 0, "skipped": 4}
            tests["total"] = sum(tests.values())
            assert s.post(s.body(repo, url=url, **run), token)[0] == 200
            done = s.body(repo, url=url, status="completed", conclusion=conclusion, test_results=tests, **run)
            assert s.post(done, token)[0] == 200
    # A push to main: L4 passes.
    push = json.loads(event_body("push.main.json"))
    assert s.relay.post("push", json.dumps(push).encode(), str(uuid.uuid4()))[0] == 202
    wait_for(lambda: len(s.relay.github.dispatches(L4)) == 2)
    body = {
        "schema_version": 1,
        "ticket": s.relay.github.dispatches(L4)[1]["client_payload"]["ticket"],
        "status": "completed",
        "conclusion": "success",
        "workflow_name": "CI",
        "job_name": "build-and-test",
        "run_id": 950,
        "run_attempt": 1,
        "url": run_url(L4, 950),
    }
    assert s.post(body, s.token(L4, run_id=950))[0] == 200
    time.sleep(1.1)  # past every dispatch's start time-out

    def sweep() -> None:
        s.relay.stack.invoke(
            "SweeperFunction", {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
        )

    def settled() -> bool:
        commits = {c["sha"]: c["repos"] for c in data(s.relay, "index.json").get("commits", [])}
        cells = commits.get(s.head_sha, {})
        return {repo: cell["state"] for repo, cell in cells.items()} == {
            L4: "failure",
            L2: "success",
            L3: "timed_out",
            L1: "dispatched",  # the planner's note: L1 records no results
        } and commits.get(push["after"], {}).get(L4, {}).get("state") == "success"

    # Swept when the test asks, until the L3 dispatch (which no job reports on) was marked sent and is timed out.
    wait_for(lambda: sweep() or settled())
    return s.relay, s.head_sha, push["after"]


def open_page(browser: Browser, url: str, shot: str) -> Page:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]", timeout=15_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)
    return page


def test_a_maintainer_sees_each_downstream_result_on_every_page(
    scenario: tuple[Relay, str, str], browser: Browser
) -> None:
    relay, pr_sha, push_sha = scenario
    hud = f"{relay.url}/hud"
    pr_event = json.loads(event_body("pull_request.opened.json"))

    # The overview: PR commits, one cell per downstream repository, colour and text, the PR's title and author
    # as the planner noted them.
    page = open_page(browser, f"{hud}/", "overview")
    assert page.locator("h1").inner_text() == "Pull requests"
    row = page.locator(f'tr[data-sha="{pr_sha}"]')
    assert row.locator("td.prcol").inner_text().split() == ["#170001", "open"]
    assert pr_event["pull_request"]["title"].split("\n")[0][:200] in row.locator("td.commit").inner_text()
    assert pr_event["pull_request"]["user"]["login"] in row.locator("td.commit").inner_text()
    l4 = row.locator(f'td[data-repo="{L4}"] .state')
    assert l4.inner_text().split()[:2] == ["✗", "failure"]
    assert l4.evaluate("e => getComputedStyle(e).color") == RED
    assert row.locator(f'td[data-repo="{L3}"] .state').inner_text().split()[:3] == ["◔", "timed", "out"]
    assert row.locator(f'td[data-repo="{L2}"] .state').inner_text().split() == ["✓", "success"]  # passed on re-run
    assert row.locator(f'td[data-repo="{L1}"] .state').inner_text().split()[:2] == ["↗", "dispatched"]
    headers = page.locator("thead th.repo").all_inner_texts()
    assert [h.split()[2] for h in headers] == ["L4", "L1", "L3", "L2"]  # by name: org-four, -one, -three, -two

    # Trunk: the push to main, apart from the PRs.
    page = open_page(browser, f"{hud}/trunk", "trunk")
    assert page.locator(f'tr[data-sha="{push_sha}"] td[data-repo="{L4}"]').inner_text().split() == ["✓", "success"]
    assert page.locator(f'tr[data-sha="{pr_sha}"]').count() == 0

    # The commit page: every job attempt, the failed L4 job first in its repository, linked to its run.
    page = open_page(browser, f"{hud}/commit/{pr_sha}", "commit")
    section = page.locator(f'section[data-repo="{L4}"]')
    rows = section.locator("tbody tr:not(.details)")
    assert rows.count() == 2
    first = rows.nth(0).locator("td").all_inner_texts()
    assert first[:3] == ["CI", "build-and-test", "2"] and first[3].split()[:2] == ["✗", "failure"]
    assert first[4] == "120 passed, 3 failed, 4 skipped"
    assert rows.nth(0).locator("a", has_text="log").get_attribute("href") == run_url(L4, 900)
    timed_out = page.locator(f'section[data-repo="{L3}"] tbody tr').first.locator("td").all_inner_texts()
    assert timed_out[1:3] == ["(no job started)", "\u2013"] and timed_out[3].split()[:3] == ["◔", "timed", "out"]
    summary = page.locator("p.summary").inner_text()
    assert "5 job attempts in 4 repositories; 2 of the newest attempts failed or timed out" in summary
    assert "L1 records no results" in page.locator(f'section[data-repo="{L1}"] .planned').inner_text()

    # The PR page: its title, its commits, then the jobs of the newest one with the failed L4 job at the top.
    page = open_page(browser, f"{hud}/pr/170001", "pr")
    assert page.locator("h1").inner_text().startswith("#170001 ")
    top = page.locator("table.jobs tbody tr:not(.details)").first.locator("td").all_inner_texts()
    assert top[0].startswith(L4) and top[4].split()[:2] == ["✗", "failure"]

    # The repository page: its level, its history with both attempts, and the health verdict with numbers.
    page = open_page(browser, f"{hud}/repo/{L4}", "repo")
    assert page.locator("h1").inner_text().split() == [L4, "L4"]
    history = page.locator("table.jobs tbody tr:not(.details)")
    assert history.count() == 3  # the PR's two attempts and the push
    verdict = page.locator("div.verdict[data-verdict]")
    assert verdict.get_attribute("data-verdict") == "demote"
    assert verdict.inner_text().startswith("DEMOTE — below its level's thresholds")
    reasons = page.locator("ul.reasons li").all_inner_texts()
    assert reasons[0] == "pass rate 0.0% < 90% required"  # one PR job, latest attempt failed
    figures = {
        r[0]: r[1:]
        for r in (row.split("\t") for row in page.locator("table.figures").first.locator("tbody tr").all_inner_texts())
    }
    assert figures["Pass rate"] == ["0.0%", "≥ 90.0%", "✗ not met"]
    assert figures["Finished PR jobs counted"][0] == "1"
    # The recent jobs say the same: one finished PR job counted (the push is shown, not counted).
    assert (
        "1 finished PR job (newest attempt, in the window) are what health counts: 0 of 1 passed"
        in page.locator("h2 + p.meta").last.inner_text()
    )
