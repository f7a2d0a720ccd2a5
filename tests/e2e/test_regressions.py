"""Which upstream commit broke a downstream job, end to end on `crcr local`: ten pushes to main, a job passing on
the first five and failing from the sixth, a nightly-only downstream testing every fourth commit, a retry that
passes and an infrastructure failure; the HUD's route, `crcr regressions` and the trunk and repository pages say the
same."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from tests.conftest import ROOT, Relay, event_body, http
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.browser import headless, open_page
from tests.e2e.test_callback import oidc  # noqa: F401 - a fixture
from tests.e2e.test_pr_comment import COMMENT_PERMISSIONS
from tests.e2e.test_verdicts_comment import row

pytestmark = pytest.mark.e2e
UPSTREAM, PUSHED, NIGHTLY = "pytorch/pytorch", "org-four/L4-Repo", "org-six/nightly"
OTHER = "org-two/l2-repo"  # its flaky and infra jobs: L2, so no upstream check runs spend the budget
IDS = {PUSHED: 5003, NIGHTLY: 5060, OTHER: 5001}
ALLOWLIST = f"""\
L2:
  - {OTHER}
  - {NIGHTLY}:
      oncalls: oncall-six
      events: [nightly]
L4:
  - {PUSHED}: [oncall-four]
repos:
  {NIGHTLY}:
    bisect: {{runs_per_day: 6}}
"""
CULPRIT_PR, LATER_PR = 170106, 170200
DISABLED = 170300
DISABLED_URL = f"https://github.com/{UPSTREAM}/issues/{DISABLED}"
BEFORE = "f" * 40
SHOTS = ROOT / "test-output" / "regressions"
WIDTHS = (1400, 390)  # desktop, phone


def sha(n: int) -> str:
    return hashlib.sha1(f"commit {n}".encode()).hexdigest()


def short(n: int) -> str:
    return sha(n)[:10]  # as the pages show a SHA


def push_body(n: int) -> bytes:
    """The n-th push to main: one commit, landed by its PR #170100+n."""
    doc = json.loads(event_body("push.main.json"))
    commit = doc["commits"][0] | {
        "id": sha(n),
        "message": f"Change number {n} (#{170100 + n})",
        "timestamp": f"2026-12-01T10:{n:02d}:00Z",
        "author": {"name": f"Dev {n}", "username": f"dev{n}"},
    }
    doc |= {"before": sha(n - 1) if n > 1 else BEFORE, "after": sha(n), "commits": [commit], "head_commit": commit}
    return json.dumps(doc).encode()


class Reports:
    def __init__(self, relay: Relay, oidc: OidcIssuer) -> None:  # noqa: F811
        self.relay, self.oidc, self.runs = relay, oidc, 3000

    def post(self, repo: str, body: dict[str, Any], event_name: str, attempt: int) -> None:
        token = self.oidc.token(
            repository=repo, repository_id=IDS[repo], run_id=body["run_id"], run_attempt=attempt,
            job_workflow_ref=f"{repo}/.github/workflows/ci.yml@refs/heads/main", event_name=event_name,
        )  # fmt: skip
        headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
        status, reply = http("POST", f"{self.relay.url}/callback", json.dumps(body).encode(), headers)
        assert (status, reply) == (200, {"status": "recorded"}), (repo, body)

    def pushed(
        self, push: int, job: str, conclusion: str, attempt: int = 1, run_id: int | None = None, **extra: Any
    ) -> int:
        """A job of a downstream's run for its push-th dispatch (0-based) reports (the L4 one unless `repo`)."""
        repo = extra.pop("repo", PUSHED)
        dispatch = self.relay.github.dispatches(repo)[push]
        run_id = run_id or self.next_run()
        body = {
            "schema_version": 1, "ticket": dispatch["client_payload"]["ticket"], "status": "completed",
            "conclusion": conclusion, "workflow_name": "CI", "job_name": job, "run_id": run_id, "run_attempt": attempt,
            "url": f"https://github.com/{repo}/actions/runs/{run_id}",
        } | extra  # fmt: skip
        self.post(repo, body, "repository_dispatch", attempt)
        return run_id

    def nightly(self, head: str, conclusion: str) -> None:
        run_id = self.next_run()
        body = {
            "schema_version": 1, "scheduled": True, "head_sha": head, "status": "completed", "conclusion": conclusion,
            "workflow_name": "nightly", "job_name": "full-suite", "run_id": run_id, "run_attempt": 1,
            "url": f"https://github.com/{NIGHTLY}/actions/runs/{run_id}",
        }  # fmt: skip
        self.post(NIGHTLY, body, "schedule", 1)

    def next_run(self) -> int:
        self.runs += 1
        return self.runs


def shown(browser: Browser, url: str, shot: str, width: int) -> Page:
    page = open_page(browser, url, SHOTS / f"{shot}-{width}.png", width)
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing to scroll sideways for
    return page


def words(page: Page, selector: str) -> list[str]:
    return [" ".join(t.split()) for t in page.locator(selector).all_inner_texts()]


def wait(predicate: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if found := predicate():
            return found
        time.sleep(0.2)
    assert predicate()


def test_ten_pushes_a_nightly_a_retry_and_an_infra_failure_name_exactly_the_commits_that_broke_a_job(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    tmp_path: Path,
) -> None:
    # The tests PyTorch disables, as test-infra publishes them (disabled-tests-condensed.json).
    disabled = tmp_path / "disabled-tests-condensed.json"
    disabled.write_text(json.dumps({"test_matmul (__main__.TestLinalg)": [str(DISABLED), DISABLED_URL, []]}))
    # Eleven pushes' check runs in a few seconds would spend the L4 downstream's share of GitHub.com's write budget
    # (half of 60 a minute) and pace the PR's check run past the test's waits: pacing is test_check_runs' subject.
    env = {"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_GITHUB_WRITE_RATES": "600/60+100"}
    env["CRCR_DISABLED_TESTS"] = str(disabled)
    relay = relay_factory(allowlist=ALLOWLIST, env=env)
    relay.github.install(NIGHTLY, installation_id=160, repo_id=IDS[NIGHTLY])
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=COMMENT_PERMISSIONS)
    for number in (CULPRIT_PR, LATER_PR):
        relay.github.add_issue(UPSTREAM, number)
    reports = Reports(relay, oidc)
    for n in range(1, 11):
        assert relay.post("push", push_body(n), str(uuid.uuid4()))[0] == 202
        relay.wait_dispatches({PUSHED: n, OTHER: n}, settle_s=0)
    for push in range(10):
        reports.pushed(push, "test", "success" if push < 5 else "failure", failure_kind=None if push < 5 else "test")
    # A flaky job: it fails on the seventh push, then passes on a retry of the same run.
    for push in range(10):
        if push != 6:
            reports.pushed(push, "flaky", "success", repo=OTHER)
    run = reports.pushed(6, "flaky", "failure", failure_kind="test", repo=OTHER)
    reports.pushed(6, "flaky", "success", attempt=2, run_id=run, repo=OTHER)
    # The downstream's infrastructure fails on the eighth push: that says nothing of the code.
    for push in range(10):
        reports.pushed(
            push, "infra", "failure" if push == 7 else "success", failure_kind="infra" if push == 7 else None
        )
    # The nightly-only downstream tests every fourth commit: the 2nd passes, the 6th and the 10th fail.
    reports.nightly(sha(2), "success")
    reports.nightly(sha(6), "failure")
    reports.nightly(sha(10), "failure")

    def listed() -> list[dict[str, Any]]:
        status, doc = http("GET", f"{relay.url}/hud/api/crcr/regressions")
        assert status == 200
        found = doc["regressions"]
        return found if len(found) == 2 and all(r["last_fail"] == sha(10) for r in found) else []

    regressions = {(r["repo"], r["job_name"]): r for r in wait(listed)}
    assert set(regressions) == {(PUSHED, "test"), (NIGHTLY, "full-suite")}  # the flaky and infra jobs opened nothing
    pushed = regressions[(PUSHED, "test")]
    assert (pushed["state"], pushed["last_pass"], pushed["first_fail"]) == ("open", sha(5), sha(6))
    assert pushed["blamelist"] == [
        {"sha": sha(6), "pr": 170106, "title": "Change number 6 (#170106)", "author": "dev6", "suspect": True}
    ]
    nightly = regressions[(NIGHTLY, "full-suite")]
    assert (nightly["last_pass"], nightly["first_fail"]) == (sha(2), sha(6))
    assert [b["sha"] for b in nightly["blamelist"]] == [sha(n) for n in (3, 4, 5, 6)]
    assert [b["pr"] for b in nightly["blamelist"]] == [170103, 170104, 170105, 170106]

    # The operator's command reads the table and says the same.
    run = subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "regressions", "--json"],
        capture_output=True, text=True, timeout=60, env=relay.stack.operator_env(), check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert sorted(json.loads(run.stdout), key=lambda r: r["repo"]) == sorted(
        regressions.values(), key=lambda r: r["repo"]
    )
    table = subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "regressions", "--repo", NIGHTLY],
        capture_output=True, text=True, timeout=60, env=relay.stack.operator_env(), check=False,
    ).stdout  # fmt: skip
    [header, line] = table.splitlines()
    assert header.split()[:3] == ["repository", "job", "state"]
    assert line.startswith(NIGHTLY) and f"{sha(2)[:7]}..{sha(6)[:7]}" in line and "#170103" in line

    # The pages mark the first failing cells "broken since", with the range, at desktop and phone widths.
    with headless() as browser:
        for width in WIDTHS:
            trunk = shown(browser, f"{relay.url}/hud/trunk", "trunk", width)
            marked = trunk.locator(f'tr[data-sha="{sha(6)}"] td[data-repo="{PUSHED}"] .broken')
            said = f"broken since {short(5)}..{short(6)}, 1 commit (CI / test)"  # the job's name for screen readers
            assert " ".join(marked.inner_text().split()) == said and marked.is_visible()
            nightly_said = f"broken since {short(2)}..{short(6)}, 4 commits (nightly / full-suite)"
            assert sorted(words(trunk, "td .broken")) == sorted([nightly_said, said])  # those cells only
            night = shown(browser, f"{relay.url}/hud/nightly", "nightly", width)
            assert words(night, f'td[data-repo="{NIGHTLY}"] .broken') == [nightly_said]
            page = shown(browser, f"{relay.url}/hud/repo/{NIGHTLY}", "repo", width)
            [entry] = words(page, "li.regression")
            assert "full-suite" in entry and "OPEN — broken since" in entry and "Blamelist: 4 commits" in entry
            assert words(page, "li.regression .blamelist li")[0].startswith(f"{short(3)} #170103 Change number 3")
            assert page.locator("#regressions").inner_text() == "Regressions on the default branch (1 open)"

    # The nightly-only downstream allows bisection: its range of four commits is bisected, one run at a time, and two
    # runs name the culprit (the fifth commit: it passes on the fourth, fails on the fifth).
    def bisect_runs() -> list[dict[str, Any]]:
        return [d for d in relay.github.dispatches(NIGHTLY) if d["event_type"] == "bisect"]

    for n, tested in enumerate((4, 5)):
        run = wait(lambda n=n: bisect_runs()[n] if len(bisect_runs()) > n else None)
        marker = run["client_payload"]["bisect"]
        assert marker == {"workflow": "nightly", "job": "full-suite", "last_pass": sha(2 if n == 0 else 4),
                          "first_fail": sha(6), "testing": sha(tested)}  # fmt: skip
        reports.pushed(n, "full-suite", "success" if tested < 5 else "failure", repo=NIGHTLY, workflow_name="nightly")

    def culprit() -> dict[str, Any] | None:
        found = {r["repo"]: r for r in http("GET", f"{relay.url}/hud/api/crcr/regressions")[1]["regressions"]}
        return found[NIGHTLY] if found[NIGHTLY].get("culprit") else None

    named = wait(culprit)
    assert (named["culprit"], named["last_pass"], named["first_fail"]) == (sha(5), sha(4), sha(5))
    assert named["bisect"] == {"runs": 2, "pending": None, "stopped": None} and len(bisect_runs()) == 2
    assert [b["pr"] for b in named["blamelist"]] == [170105]
    # Bisection runs are the relay's own: no upstream check run on the commits they tested, no row in PyTorch's HUD.
    assert not [r for r in relay.github.check_runs(UPSTREAM) if NIGHTLY in r["name"]]

    # Each downstream's owners are told once, on the PR that landed the first failing commit.
    def notices() -> list[str]:
        return [c["body"] for c in relay.github.comments(UPSTREAM, CULPRIT_PR) if c["performed_via_github_app"]]

    wait(lambda: len(notices()) == 2)
    [four] = [b for b in notices() if PUSHED in b]
    [six] = [b for b in notices() if NIGHTLY in b]
    assert "@oncall-six" in six and "@oncall-four" not in six and "4 commits" in six
    assert "@oncall-four" in four and f"{PUSHED}`, CI / test" in four and f"- {short(6)} #{CULPRIT_PR}" in four

    # A PR based on the eighth commit fails the broken job: "broken trunk", not "new", and nobody is mentioned.
    pr = json.loads(event_body("pull_request.opened.json"))
    pr["number"] = pr["pull_request"]["number"] = LATER_PR
    pr["pull_request"]["base"]["sha"] = sha(8)
    relay.github.add_commit(UPSTREAM, pr["pull_request"]["head"]["sha"])
    assert relay.post("pull_request", json.dumps(pr).encode(), str(uuid.uuid4()))[0] == 202
    relay.wait_dispatches({PUSHED: 11}, settle_s=0)
    reports.pushed(10, "test", "failure", failure_kind="test")
    # Another job fails only a test PyTorch disabled: known upstream, with the issue's link.
    matmul = [{"name": "test_matmul", "classname": "test_linalg.TestLinalg", "message": "mismatch"}]
    reports.pushed(10, "unit", "failure", failure_kind="test", failed_tests_detail=matmul)

    def commented() -> str | None:
        bodies = [c["body"] for c in relay.github.comments(UPSTREAM, LATER_PR) if c["performed_via_github_app"]]
        test, unit = (row(bodies[-1], PUSHED, name) or "" for name in ("test", "unit")) if bodies else ("", "")
        return bodies[-1] if "broken trunk" in test and "known upstream" in unit else None

    body = wait(commented, timeout_s=60)
    assert re.findall(r"(?<![`\w])@oncall-\w+", body) == []  # nobody mentioned: neither failure is the author's
    assert "**new**" not in (row(body, PUSHED, "test") or "") + (row(body, PUSHED, "unit") or "")
    assert f"]({DISABLED_URL})" in (row(body, PUSHED, "unit") or "")

    def summaries() -> dict[str, str] | None:
        runs = [r for r in relay.github.check_runs(UPSTREAM) if r["head_sha"] == pr["pull_request"]["head"]["sha"]]
        said = {r["name"].rsplit("/", 1)[-1]: str((r.get("output") or {}).get("summary")) for r in runs}
        done = "Verdict: **broken trunk**" in said.get("test", "") and "Verdict: **known**" in said.get("unit", "")
        return said if done else None

    said = wait(summaries, timeout_s=60)
    assert f"Known upstream: ([#\u200b{DISABLED}]({DISABLED_URL}))" in said["unit"]
    with headless() as browser:
        for width in WIDTHS:
            page = shown(browser, f"{relay.url}/hud/pr/{LATER_PR}", "pr", width)
            tags = words(page, ".verdict-tag")
            assert "BROKEN TRUNK" in tags and "KNOWN UPSTREAM" in tags
            page = shown(browser, f"{relay.url}/hud/commit/{pr['pull_request']['head']['sha']}", "commit", width)
            link = page.locator(f'a[href="{DISABLED_URL}"]')
            assert link.count() >= 1 and link.first.inner_text() == f"#{DISABLED}"

    # A pass closes the push job's regression: fixed between the tenth commit and the eleventh.
    assert relay.post("push", push_body(11), str(uuid.uuid4()))[0] == 202
    relay.wait_dispatches({PUSHED: 12}, settle_s=0)
    reports.pushed(11, "test", "success")

    def closed() -> dict[str, Any] | None:
        found = {
            (r["repo"], r["job_name"]): r
            for r in http("GET", f"{relay.url}/hud/api/crcr/regressions")[1]["regressions"]
        }
        r = found.get((PUSHED, "test"))
        return r if r and r["state"] == "closed" else None

    fixed = wait(closed)
    assert (fixed["last_fail"], fixed["fixed_by"]) == (sha(10), sha(11))
    assert relay.metric("RegressionOpened") == 2 and relay.metric("RegressionClosed") == 1
    assert relay.metric("RegressionTrackingFailed") == 0
    assert len(notices()) == 2 and relay.metric("RegressionTold") == 2  # told once each, however many red results
