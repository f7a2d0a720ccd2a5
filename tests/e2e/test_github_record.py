"""GitHub's own record of every dispatched run, on `crcr local` against the GitHub double: the double runs each
dispatched workflow and tells the App (`workflow_run`), as GitHub does. A job whose completed report is lost, a
downstream with no report step, a dispatch GitHub started no run for, a run that is not the relay's."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import DEFAULT_ALLOWLIST, LISTED, ROOT, WEBHOOK_SECRET, Relay, event_body
from tests.doubles.github_double import GitHubDouble, Reply
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.browser import headless
from tests.e2e.test_callback import REPO_IDS, Scenario, oidc  # noqa: F401 - oidc is a fixture

pytestmark = pytest.mark.e2e

L2, L3, L4 = "org-two/l2-repo", "org-three/l3-repo", "org-four/L4-Repo"
SHOTS = ROOT / "test-output" / "hud"
UPSTREAM = "pytorch/pytorch"


def titled(body: dict[str, Any]) -> str:
    """examples/workflows/downstream.yml's run-name, on repository_dispatch (client_payload) or workflow_dispatch
    (the same fields as inputs)."""
    fields = body.get("client_payload") or body.get("inputs") or {}
    return f"crcr {body.get('event_type') or fields.get('event_type')} {fields['dispatch_id']}"


def start(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    workflows: dict[str, tuple[str, ...]],
    allowlist: str = DEFAULT_ALLOWLIST,
    env: dict[str, str] | None = None,
    run_name: Callable[[dict[str, Any]], str] = titled,
) -> Scenario:
    relay = relay_factory(
        allowlist=allowlist,
        env={
            "CRCR_OIDC_ISSUER": oidc.url,
            "CRCR_OIDC_AUDIENCE": "crcr",
            "CRCR_RUN_REPORT_SETTLE_S": "1",
            "CRCR_RUN_CREATE_TIMEOUT_S": "2",
            "CRCR_SWEEP_INTERVAL_S": "1",
        }
        | (env or {}),
    )
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975)
    relay.github.set_webhook(f"{relay.url}/webhook", WEBHOOK_SECRET)
    for repo, jobs in workflows.items():
        relay.github.set_dispatch_workflow(repo, run_name, jobs=jobs, on_workflow_dispatch=True)
    delivery = str(uuid.uuid4())
    doc = json.loads(event_body("pull_request.opened.json"))
    relay.github.add_commit(UPSTREAM, doc["pull_request"]["head"]["sha"])
    assert relay.post("pull_request", json.dumps(doc).encode(), delivery)[0] == 202
    dispatched = [r for r in LISTED if "workflow:" not in allowlist or r != L4]  # L4 by workflow_dispatch there
    relay.wait_dispatches(dict.fromkeys(dispatched, 1), settle_s=0)
    return Scenario(relay, oidc, delivery, doc["pull_request"]["head"]["sha"])


def wait_for(predicate: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if found := predicate():
            return found
        time.sleep(0.2)
    return predicate()


def the_run(github: GitHubDouble, repo: str) -> int:
    [run] = wait_for(lambda: github.runs_of(repo))
    return int(run["id"])


def rows(s: Scenario, repo: str) -> dict[str, dict[str, Any]]:
    """The results table's rows of one downstream, by job name."""
    return {j["job_name"]: j for j in s.jobs() if j.get("repo") == repo}


def hud_pushes(hud: HudDouble, repo: str) -> list[tuple[str, str, str | None]]:
    out = []
    for push in hud.pushes:
        if push["trusted"]["verified_repo"] != repo:
            continue
        wf = push["untrusted"]["callback_payload"]["workflow"]
        out.append((wf["job_name"], wf["status"], wf.get("conclusion")))
    return out


def test_a_job_whose_completed_report_is_lost_shows_githubs_conclusion_and_a_late_report_adds_its_detail(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    hud: HudDouble,
) -> None:
    # Its report steps are jobs of the run too (named "crcr report …" as in the example workflow): never recorded.
    s = start(relay_factory, oidc, {L4: ("crcr report start", "build", "test")})
    github = s.relay.github
    run_id = the_run(github, L4)
    github.start_run(L4, run_id)
    [_, build, test] = github.jobs_of(L4, run_id)
    token = s.token(L4, run_id=run_id)
    for job in (build, test):  # both start and say so; neither `completed` report ever arrives
        started = s.body(L4, job_name=job["name"], run_id=run_id, check_run_id=str(job["id"]))
        assert s.post(started, token)[0] == 200
    github.finish_run(L4, run_id, {"build": "success", "test": "failure"})

    def finished() -> dict[str, dict[str, Any]] | None:
        found = rows(s, L4)
        return found if all(found.get(n, {}).get("state") == "completed" for n in ("build", "test")) else None

    found = wait_for(finished)
    assert found, rows(s, L4)
    assert (found["build"]["conclusion"], found["test"]["conclusion"]) == ("success", "failure")
    assert sorted(found) == ["build", "test"]  # not the report step
    assert (
        found["build"]["source"] == found["test"]["source"] == "github+report"
    )  # started by a report, ended by GitHub
    assert wait_for(
        lambda: {("build", "completed", "success"), ("test", "completed", "failure")} <= set(hud_pushes(hud, L4))
    )

    # The L4 check run of each job ends as GitHub says.
    def check(name: str) -> dict[str, Any] | None:
        done = [r for r in github.check_runs(UPSTREAM) if r["name"] == name and r["status"] == "completed"]
        return done[0] if done else None

    assert (wait_for(lambda: check(f"crcr/{L4}/CI/test")) or {}).get("conclusion") == "failure", [
        (r["name"], r["status"], r["conclusion"]) for r in github.check_runs(UPSTREAM)
    ]
    # One jobs listing for the one completed attempt, with the downstream's own installation's token.
    listings = [r for r in github.requests if r.path.endswith(f"/runs/{run_id}/attempts/1/jobs")]
    assert len(listings) == 1

    # The report that was late arrives: its test counts are kept, GitHub's conclusion stands, the HUD row is not
    # written twice, and the disagreement is counted.
    late = s.body(
        L4,
        job_name="test",
        run_id=run_id,
        check_run_id=str(test["id"]),
        status="completed",
        conclusion="success",
        test_results={"passed": 10, "failed": 0, "skipped": 1, "total": 11},
    )
    assert s.post(late, token)[0] == 200
    row = wait_for(lambda: (r := rows(s, L4)["test"]).get("reported_conclusion") and r)
    assert (row["conclusion"], row["reported_conclusion"]) == ("failure", "success")
    assert "test_results" in row["callback_payload"]
    assert s.relay.metric("ResultDisagreed") == 1
    time.sleep(1.5)
    assert [p for p in hud_pushes(hud, L4) if p[0] == "test" and p[1] == "completed"] == [
        ("test", "completed", "failure")
    ]
    assert not [r for r in s.jobs() if r.get("state") == "timed_out"]


def test_github_unavailable_at_a_jobs_deadline_is_asked_again_before_anything_is_timed_out(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    # A 2 s run time-out (a compressed 12 h) and GitHub asked again 1 s after a failed read, but a sweeper that comes
    # round only every 4 s (a loaded one: the full soak's timed a job out so): the test runs it then, until each next
    # read has happened. The run's title has no dispatch id, so only the job's own deadline reads it. Three failed
    # reads in a row, all past twice the time-out, are no time-out: the job is asked at least five times, and the
    # fourth read is answered.
    env = {"CRCR_RUN_TIMEOUT_S": "2", "CRCR_RUN_CREATE_TIMEOUT_S": "1", "CRCR_SWEEP_INTERVAL_S": "86400"}
    s = start(relay_factory, oidc, {L4: ("build",)}, env=env, run_name=lambda body: "CI")
    github = s.relay.github
    run_id = the_run(github, L4)
    github.start_run(L4, run_id)
    [build] = github.jobs_of(L4, run_id)
    started = s.body(L4, job_name="build", run_id=run_id, check_run_id=str(build["id"]))
    assert s.post(started, s.token(L4, run_id=run_id))[0] == 200
    reported = time.time()
    github.script("GET", rf"/repos/{L4}/actions/runs/{run_id}", [Reply(502)] * 3)
    github.finish_run(L4, run_id, "success", deliver=False)  # GitHub's `completed` event is lost too

    def reads() -> list[int | None]:
        path = f"/repos/{L4}/actions/runs/{run_id}"
        return [r.status for r in github.requests if r.method == "GET" and r.path == path]

    for n in range(1, 5):
        time.sleep(max(0.0, reported + 2.1 + 4 * (n - 1) - time.time()))
        deadline = time.time() + 20
        while len(reads()) < n and time.time() < deadline and rows(s, L4)["build"]["state"] == "in_progress":
            s.relay.stack.invoke("SweeperFunction", {"source": "aws.events", "detail-type": "Scheduled Event"})
            time.sleep(0.25)
    row = rows(s, L4).get("build") or {}
    assert (row.get("state"), row.get("conclusion")) == ("completed", "success"), rows(s, L4)
    assert reads() == [502, 502, 502, 200]
    assert s.relay.metric("JobTimedOut") == 0


def test_a_downstream_with_no_report_step_gets_its_jobs_from_github(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    hud: HudDouble,
) -> None:
    s = start(relay_factory, oidc, {L2: ("lint", "unit")})
    github = s.relay.github
    run_id = the_run(github, L2)
    github.start_run(L2, run_id)
    github.finish_run(L2, run_id, "success")
    found = wait_for(
        lambda: (r := rows(s, L2)) and all(j["state"] == "completed" for j in r.values()) and len(r) == 2 and r
    )
    assert {n: (j["conclusion"], j["source"]) for n, j in found.items()} == {
        "lint": ("success", "github"),
        "unit": ("success", "github"),
    }
    pushed = wait_for(
        lambda: (done := sorted(p for p in hud_pushes(hud, L2) if p[1] == "completed")) and len(done) == 2 and done
    )
    assert pushed == [("lint", "completed", "success"), ("unit", "completed", "success")]
    # PyTorch's fields: the row is the dispatch's (delivery, PR, commit, level), the run and job GitHub's.
    [push] = [
        p
        for p in hud.pushes
        if p["trusted"]["verified_repo"] == L2 and p["untrusted"]["callback_payload"]["workflow"]["job_name"] == "lint"
    ]
    assert push["trusted"]["delivery_id"] == s.delivery
    assert push["trusted"]["head_sha"] == s.head_sha
    assert push["trusted"]["downstream_repo_level"] == "L2"
    wf = push["untrusted"]["callback_payload"]["workflow"]
    lint = next(j for j in github.jobs_of(L2, run_id) if j["name"] == "lint")
    assert (wf["run_id"], wf["check_run_id"]) == (str(run_id), str(lint["id"]))
    assert wf["started_at"] and wf["completed_at"]


def test_a_dispatch_github_started_no_run_for_is_not_started_with_the_reason(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    hud: HudDouble,
) -> None:
    s = start(relay_factory, oidc, {L4: ("build",)})  # org-three/l3-repo has no workflow listening
    row = wait_for(lambda: rows(s, L3).get(""))
    assert row and row["state"] == "not_started", rows(s, L3)
    assert "repository_dispatch" in row["reason"] and "`pull_request`" in row["reason"]
    assert s.relay.metric("DispatchNotStarted") >= 1
    assert wait_for(
        lambda: [
            p for p in hud.pushes if p["trusted"]["verified_repo"] == L3 and p["trusted"]["state"] == "not_started"
        ]
    )
    # The repository's page says so, with the reason a maintainer acts on.
    with headless() as browser:
        page = browser.new_page()
        page.goto(f"{s.relay.url}/hud/repo/{L3}")
        page.wait_for_selector("body[data-ready=true]", timeout=15_000)
        page.locator("table.jobs tbody tr").first.click()  # opens the row's details, as a maintainer would
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "repo-not-started.png"), full_page=True)
        assert "no run" in page.locator("table.jobs").inner_text()
        why = page.locator("table.jobs tr.details").first.text_content() or ""  # the row a click opens
        assert "listens to `repository_dispatch` type `pull_request`" in why, why
    # The L4 repository's run exists: it is never not_started or timed_out while it runs.
    time.sleep(3)
    assert not [j for j in s.jobs() if j.get("repo") == L4 and j.get("state") in ("not_started", "timed_out")]


def test_runs_that_are_not_the_relays_are_dropped_at_the_door_and_bind_nothing(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    s = start(relay_factory, oidc, {L4: ("build",)})
    github = s.relay.github
    l4_run = the_run(github, L4)
    l4_dispatch = s.dispatch_payload(L4)["dispatch_id"]
    github.wait_webhooks()
    time.sleep(1)
    before = len(github.requests)
    base = github.runs_of(L4)[0]

    def event(repo: str, **run: Any) -> dict[str, Any]:
        repository = {"full_name": repo, "id": REPO_IDS[repo]}
        return {
            "action": "completed",
            "workflow_run": base
            | {"id": 990001, "status": "completed", "conclusion": "success", "head_repository": repository}
            | run,
            "repository": repository,
            "installation": {"id": 101},
        }

    # A push run of the downstream (the bulk of a busy CI): answered at once, nothing written, nothing asked.
    for i in range(20):
        answer = github.deliver("workflow_run", event(L4, id=990100 + i, event="push", display_title="a commit"))
        assert answer.status_code == 200
    # A dispatch run of another repository whose title names L4's dispatch: taken, then bound to nothing.
    github.deliver(
        "workflow_run", event(L2, event="repository_dispatch", display_title=f"crcr pull_request {l4_dispatch}")
    )
    assert wait_for(lambda: s.relay.metric("RunUnbound") >= 1)
    assert s.relay.metric("RunEventDropped") >= 20
    # No GitHub call for any of them (the relay's other work goes on beside: the sweeper, the check runs).
    theirs = [r.path for r in github.requests[before:] if "/actions/runs/99" in r.path or "/attempts/" in r.path]
    assert theirs == []
    assert not [j for j in s.jobs() if j.get("repo") == L2 and j.get("run_id") == "990001"]
    assert l4_run != 990001


WORKFLOW_ALLOWLIST = DEFAULT_ALLOWLIST + "repos:\n  org-four/L4-Repo:\n    workflow: ci.yml\n"


def ledger_row(s: Scenario, repo: str) -> dict[str, Any]:
    items = s.relay.stack.client("dynamodb").scan(TableName="crcr-local-StateTable", ConsistentRead=True)["Items"]
    [row] = [i for i in items if i["sk"]["S"] == f"DSP#{repo.lower()}" and i["pk"]["S"] == f"DLV#{s.delivery}"]
    return {k: next(iter(v.values())) for k, v in row.items()}


def test_a_workflow_dispatch_downstream_has_its_run_id_before_the_run_starts(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    # Its workflow's run-name carries no dispatch id: the run is bound by the id GitHub gave back.
    s = start(relay_factory, oidc, {L4: ("build",)}, allowlist=WORKFLOW_ALLOWLIST, run_name=lambda body: "CI")
    github = s.relay.github
    [(path, body)] = wait_for(lambda: github.workflow_dispatches(L4))
    assert path == ".github/workflows/ci.yml" and body["ref"] == "main" and body["return_run_details"] is True
    inputs = body["inputs"]
    assert all(isinstance(v, str) for v in inputs.values()) and len(inputs) <= 25
    assert json.loads(inputs["payload"])["pull_request"]["head"]["sha"] == s.head_sha
    assert github.dispatches(L4) == []  # no repository_dispatch to it
    [run] = github.runs_of(L4)
    assert run["status"] == "queued" and run["event"] == "workflow_dispatch"
    assert wait_for(lambda: ledger_row(s, L4).get("run_id")) == str(run["id"])  # before the run started
    github.start_run(L4, run["id"])
    github.finish_run(L4, run["id"], "failure")
    row = wait_for(lambda: (j := rows(s, L4).get("build")) and j.get("state") == "completed" and j)
    assert row and (row["conclusion"], row["source"]) == ("failure", "github")


def test_a_workflow_dispatch_that_timed_out_is_not_sent_again_and_no_runs_list_is_read(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    # GitHub carries the dispatch out but answers after the relay's 2 s timeout; the run's `requested` event (its
    # title carries the dispatch id) binds it before the next attempt, which then sends nothing.
    def hang_first(github: GitHubDouble) -> None:
        github.script(
            "POST", r"/repos/org-four/L4-Repo/actions/workflows/ci\.yml/dispatches", [Reply.accept_then_hang(6)]
        )

    s = start(
        lambda **kw: _scripted(relay_factory, hang_first, **kw),
        oidc,
        {L4: ("build",)},
        allowlist=WORKFLOW_ALLOWLIST,
        env={"CRCR_RUN_SETTLE_S": "8"},
    )
    relay_github = s.relay.github
    row = wait_for(lambda: (r := ledger_row(s, L4)).get("state") == "dispatched" and r, timeout_s=60)
    assert row, ledger_row(s, L4)
    [run] = relay_github.runs_of(L4)
    assert row["run_id"] == str(run["id"])
    time.sleep(2)
    assert len(relay_github.workflow_dispatches(L4)) == 1  # one run, however many attempts
    listed = [r for r in relay_github.requests if r.method == "GET" and r.path == f"/repos/{L4}/actions/runs"]
    assert listed == []
    assert s.relay.metric("DispatchRunFound") == 1


def _scripted(relay_factory: Callable[..., Relay], script: Callable[[GitHubDouble], None], **kw: Any) -> Relay:
    relay = relay_factory(**kw)
    script(relay.github)
    return relay
