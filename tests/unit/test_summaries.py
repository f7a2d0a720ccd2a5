"""The HUD pages' documents: merged per change, never regressed by a retried or overtaken record, and
written only when they change, with optimistic concurrency."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest

from crcr.app.page_compose import composer, pr_page, repo_page
from crcr.app.page_notes import PlanNote, note_plan, note_refusals
from crcr.app.pages import serve
from crcr.app.ports.jobs import JobRecord
from crcr.app.summaries import INDEX_COMMITS, PR_LIVE_COMMITS, SummaryConflict, SummaryDeps, update_summaries
from crcr.app.torchci import NO_JOB_NAME, envelope, row
from tests.unit.fakes import FakeClock, FakeResultsRows, RecordingMetrics


class FakeDocs:
    """Documents with a version tag; `interfere` plays another reporter writing between our read and write."""

    def __init__(self) -> None:
        self.docs: dict[str, tuple[dict[str, Any], int]] = {}
        self.gets: list[str] = []
        self.puts: list[str] = []
        self.interfere: dict[str, Any] = {}

    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        self.gets.append(key)
        if key not in self.docs:
            return None, None
        doc, version = self.docs[key]
        return copy.deepcopy(doc), str(version)

    def put(self, key: str, doc: dict[str, Any], tag: str | None) -> bool:
        if key in self.interfere:
            self.interfere.pop(key)(self)
        current = self.docs.get(key)
        if (current is None and tag is not None) or (current is not None and tag != str(current[1])):
            return False
        self.puts.append(key)
        self.docs[key] = (json.loads(json.dumps(doc)), (current[1] + 1) if current else 1)
        return True

    def read(self, key: str) -> bytes | None:
        return json.dumps(self.docs[key][0]).encode() if key in self.docs else None

    def doc(self, key: str) -> dict[str, Any]:
        return self.docs[key][0]


SHA = "a" * 40


def job(
    state: str = "completed",
    conclusion: str | None = "success",
    *,
    repo: str = "org/backend",
    name: str = "build",
    attempt: int = 1,
    version: int = 2,
    sha: str = SHA,
    pr: int | None = 5,
    dispatched_at: float = 100.0,
    delivery: str = "d1",
    level: int = 4,
) -> JobRecord:
    tests = {"passed": 9, "failed": 1, "skipped": 0, "total": 10}
    return JobRecord(
        dispatch_id=f"dsp-{delivery}-{repo}", run_id="7", run_attempt=attempt, job_name=name, workflow_name="CI",
        state=state, conclusion=conclusion if state == "completed" else None, fingerprint=f"{state}{version}",
        url="https://github.com/org/backend/actions/runs/7", repo=repo, repo_id=1, level=level, delivery_id=delivery,
        upstream="pytorch/pytorch", head_sha=sha, pr=pr, device=None, dispatched_at=dispatched_at,
        started_at=dispatched_at + 10, completed_at=dispatched_at + 50 if state != "in_progress" else None,
        callback_payload=json.dumps({"status": state, "test_results": tests}), version=version,
        event_type="pull_request" if pr else "push",
    )  # fmt: skip


@pytest.fixture
def docs() -> FakeDocs:
    return FakeDocs()


@pytest.fixture
def deps(docs: FakeDocs) -> SummaryDeps:
    return SummaryDeps(docs=docs, metrics=RecordingMetrics(), clock=FakeClock(1000.0))


def test_a_job_appears_on_its_commit_pr_overview_and_repository_pages(docs: FakeDocs, deps: SummaryDeps) -> None:
    table = FakeResultsRows()
    update_summaries(table.record([job("in_progress", version=1)]), deps)
    update_summaries(table.record([job("completed", "failure")]), deps)

    [entry] = docs.doc(f"commit/{SHA}.json")["jobs"].values()
    assert (entry["state"], entry["attempt"], entry["queue_s"], entry["run_s"]) == ("failure", 1, 10.0, 40.0)
    assert entry["tests"] == {"passed": 9, "failed": 1, "skipped": 0, "total": 10}
    [commit] = docs.doc("index.json")["commits"]
    assert (commit["sha"], commit["pr"]) == (SHA, 5)
    assert commit["repos"]["org/backend"] == {
        "state": "failure", "level": 4, "jobs": 1, "passed": 0, "failed": 1, "running": 0,
    }  # fmt: skip
    assert docs.doc("index.json")["repos"] == [{"repo": "org/backend", "level": 4}]
    page = pr_page(docs, 5)
    assert page is not None and page["commits"][0]["repos"] == commit["repos"]
    repo = repo_page(docs, table, "org/backend")
    assert repo is not None and repo["level"] == 4
    [history] = repo["history"]
    assert history["state"] == "failure" and history["head_sha"] == SHA and history["tests"]["failed"] == 1


def test_after_a_commits_first_change_a_change_writes_its_commit_and_the_overview_only(
    docs: FakeDocs, deps: SummaryDeps
) -> None:
    """The PR and repository pages are composed when read: a job's later changes rewrite neither document, and
    both pages still show them."""
    table = FakeResultsRows()
    update_summaries(table.record([job("in_progress", version=1, name="a")]), deps)
    first = set(docs.puts)
    assert first == {f"commit/{SHA}.json", "index.json", "pr/5.json", "repo/org/backend.json"}
    docs.puts.clear()
    update_summaries(table.record([job("in_progress", version=1, name="b")]), deps)
    update_summaries(table.record([job("completed", "failure", version=2, name="a")]), deps)
    update_summaries(table.record([job("completed", "success", version=2, name="b")]), deps)
    assert docs.puts == [f"commit/{SHA}.json", "index.json"] * 3
    page = pr_page(docs, 5)
    assert page is not None
    assert page["commits"][0]["repos"]["org/backend"] | {"level": 0} == {
        "state": "failure", "level": 0, "jobs": 2, "passed": 1, "failed": 1, "running": 0,
    }  # fmt: skip
    repo = repo_page(docs, table, "org/backend")
    assert repo is not None and sorted((e["job"], e["state"]) for e in repo["history"]) == [
        ("a", "failure"),
        ("b", "success"),
    ]
    stamp = repo["stamp"]
    update_summaries(table.record([replace(job("completed", "failure", version=3, name="a"), verdict="new")]), deps)
    again = repo_page(docs, table, "org/backend")
    assert again is not None and again["stamp"] != stamp  # a verdict alone changes no time: the page redraws


def test_a_pr_page_reads_its_newest_commits_cells_and_lists_older_ones_as_stored(
    docs: FakeDocs, deps: SummaryDeps
) -> None:
    shas = [f"{i:040x}" for i in range(PR_LIVE_COMMITS + 2)]
    for i, sha in enumerate(shas):  # one push a second, each dispatched half a second after
        note_plan(note(sha=sha), deps)
        update_summaries([job("in_progress", version=1, sha=sha, dispatched_at=1000.0 + i + 0.5)], deps)
        deps.clock.t += 1  # type: ignore[attr-defined]
    for i, sha in enumerate(shas):
        update_summaries([job("completed", "failure", sha=sha, dispatched_at=1000.0 + i + 0.5)], deps)
    page = pr_page(docs, 5)
    assert page is not None and [c["sha"] for c in page["commits"]] == shas[::-1]
    states = [c["repos"]["org/backend"]["state"] for c in page["commits"]]
    # The newest PR_LIVE_COMMITS from their own documents; the two oldest as the PR's document listed them.
    assert states == ["failure"] * PR_LIVE_COMMITS + ["pending"] * 2
    assert (page["title"], page["author"]) == ("Fix the thing", "octocat")
    assert pr_page(docs, 6) is None


def test_the_composed_pages_are_served_where_the_stored_ones_were(docs: FakeDocs, deps: SummaryDeps) -> None:
    table = FakeResultsRows()
    update_summaries(table.record([job("completed", "failure")]), deps)
    compose = composer(docs, table)
    assets = {"index.html": b"<html>"}
    pr = serve("/hud/data/pr/5.json", docs, assets, compose)
    assert pr.status == 200 and json.loads(pr.body) == pr_page(docs, 5)
    repo = serve("/hud/data/repo/org/backend.json", docs, assets, compose)
    assert repo.status == 200 and json.loads(repo.body)["history"][0]["state"] == "failure"
    assert serve("/hud/data/repo/org/nobody.json", docs, assets, compose).status == 404
    assert serve("/hud/data/pr/6.json", docs, assets, compose).status == 404
    index = serve("/hud/data/index.json", docs, assets, compose)
    assert index.status == 200 and index.body == docs.read("index.json")


def test_a_retried_or_overtaken_record_rewrites_nothing(docs: FakeDocs, deps: SummaryDeps) -> None:
    update_summaries([job("completed", "failure", version=2)], deps)
    writes = list(docs.puts)
    update_summaries([job("completed", "failure", version=2)], deps)  # the stream retried the record
    update_summaries([job("in_progress", version=1)], deps)  # an older change arriving late (another shard)
    assert docs.puts == writes
    [entry] = docs.doc(f"commit/{SHA}.json")["jobs"].values()
    assert entry["state"] == "failure"


def test_push_events_have_no_pr_page(docs: FakeDocs, deps: SummaryDeps) -> None:
    update_summaries([job(pr=None)], deps)
    assert not any(key.startswith("pr/") for key in docs.docs)
    assert docs.doc("index.json")["commits"][0]["event_type"] == "push"


def test_a_concurrent_writer_is_merged_not_overwritten(docs: FakeDocs, deps: SummaryDeps) -> None:
    other = job(repo="org/other", delivery="d1")
    # Between our read of the commit and our write, another reporter records another repository's job.
    docs.interfere[f"commit/{SHA}.json"] = lambda d: update_summaries([other], replace(deps, docs=d))
    update_summaries([job()], deps)
    assert {e["repo"] for e in docs.doc(f"commit/{SHA}.json")["jobs"].values()} == {"org/backend", "org/other"}
    assert set(docs.doc("index.json")["commits"][0]["repos"]) == {"org/backend", "org/other"}
    assert deps.metrics.counts["HudSummaryConflict"] >= 1  # type: ignore[attr-defined]


def test_a_document_that_keeps_changing_is_left_to_the_stream_to_retry(docs: FakeDocs, deps: SummaryDeps) -> None:
    class Busy(FakeDocs):
        def put(self, key: str, doc: dict[str, Any], tag: str | None) -> bool:
            return False

    with pytest.raises(SummaryConflict):
        update_summaries([job()], replace(deps, docs=Busy()))


def test_cells_show_the_newest_attempt_and_the_worst_job(docs: FakeDocs, deps: SummaryDeps) -> None:
    update_summaries([job("completed", "failure", name="build", attempt=1)], deps)
    update_summaries([job("completed", "success", name="test")], deps)
    cell = docs.doc("index.json")["commits"][0]["repos"]["org/backend"]
    assert (cell["state"], cell["jobs"], cell["failed"]) == ("failure", 2, 1)
    # A re-run attempt of the failed job passes: the repository is green again; the commit page keeps both.
    update_summaries([job("completed", "success", name="build", attempt=2)], deps)
    cell = docs.doc("index.json")["commits"][0]["repos"]["org/backend"]
    assert (cell["state"], cell["jobs"], cell["passed"]) == ("success", 2, 2)
    assert len(docs.doc(f"commit/{SHA}.json")["jobs"]) == 3


def test_a_dispatch_timeout_row_yields_to_a_job_that_started_later(docs: FakeDocs, deps: SummaryDeps) -> None:
    swept = replace(job("timed_out", "timed_out", name="", version=1), run_id="0", run_attempt=0)
    update_summaries([swept], deps)
    cell = docs.doc("index.json")["commits"][0]["repos"]["org/backend"]
    assert cell["state"] == "timed_out"
    assert next(iter(docs.doc(f"commit/{SHA}.json")["jobs"].values()))["job"] == NO_JOB_NAME
    update_summaries([job("in_progress", version=1)], deps)
    assert docs.doc("index.json")["commits"][0]["repos"]["org/backend"]["state"] == "running"


def test_the_overview_keeps_the_newest_commits(docs: FakeDocs, deps: SummaryDeps) -> None:
    for i in range(INDEX_COMMITS + 5):
        update_summaries([job(sha=f"{i:040x}", dispatched_at=float(i), delivery=f"d{i}")], deps)
    commits = docs.doc("index.json")["commits"]
    assert len(commits) == INDEX_COMMITS
    assert commits[0]["sha"] == f"{INDEX_COMMITS + 4:040x}" and commits[-1]["sha"] == f"{5:040x}"


def test_health_is_refreshed_at_most_once_per_interval(docs: FakeDocs, deps: SummaryDeps) -> None:
    computed: list[str] = []

    def health(j: JobRecord) -> dict[str, Any]:
        computed.append(j.repo)
        return {"verdict": "keep", "jobs": len(computed)}

    clock = FakeClock(1000.0)
    with_health = replace(deps, health=health, health_refresh_s=300.0, clock=clock)
    update_summaries([job(name="a")], with_health)
    clock.t += 100
    update_summaries([job(name="b")], with_health)
    assert computed == ["org/backend"]
    clock.t += 300
    update_summaries([job(name="c")], with_health)
    assert computed == ["org/backend", "org/backend"]
    assert docs.doc("repo/org/backend.json")["health"] == {"verdict": "keep", "jobs": 2, "computed_at": 1400.0}


def test_a_failed_health_read_keeps_the_shown_health_and_writes_the_batch(docs: FakeDocs, deps: SummaryDeps) -> None:
    """The results table timing out under the health query must not hold the pages (nor, after them, the batch's HUD
    pushes): the repository page keeps the health it shows, gets the new job, and the next change asks again."""
    answers: list[Any] = [{"verdict": "keep"}, TimeoutError("read timed out"), {"verdict": "demote"}]

    def health(_: JobRecord) -> dict[str, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    clock = FakeClock(1000.0)
    metrics = RecordingMetrics()
    with_health = replace(deps, health=health, health_refresh_s=300.0, clock=clock, metrics=metrics)
    update_summaries([job(name="a")], with_health)
    clock.t += 400
    update_summaries([job(name="b", delivery="d2")], with_health)
    page = docs.doc("repo/org/backend.json")
    assert page["health"] == {"verdict": "keep", "computed_at": 1000.0}
    assert docs.doc(f"commit/{SHA}.json")["jobs"].keys() == {"dsp-d1-org/backend/7/1/a", "dsp-d2-org/backend/7/1/b"}
    assert metrics.counts["HudHealthNotRefreshed"] == 1
    update_summaries([job(name="c", delivery="d3")], with_health)
    assert docs.doc("repo/org/backend.json")["health"] == {"verdict": "demote", "computed_at": 1400.0}


def test_the_export_row_and_the_push_agree_on_the_key() -> None:
    j = job()
    wf = envelope(j)["untrusted"]["callback_payload"]["workflow"]
    assert row(j)["dynamoKey"] == f"org/backend/d1/{wf['name']}/{wf['job_name']}/{wf['check_run_id']}"


@pytest.mark.parametrize(
    ("path", "status", "kind"),
    [
        ("/hud/", 200, "text/html"),
        (f"/hud/commit/{SHA}", 200, "text/html"),
        ("/hud/pr/170001", 200, "text/html"),
        ("/hud/repo/Org-Four/L4-Repo", 200, "text/html"),
        ("/hud/static/hud.js", 200, "text/javascript"),
        ("/hud/data/index.json", 200, "application/json"),
        ("/hud/data/pr/5.json", 404, "application/json"),
        ("/hud/data/../../secrets.json", 404, "application/json"),
        ("/hud/data/repo/Org/Backend.json", 404, "application/json"),  # documents are keyed lower-case
        ("/hud/commit/xyz", 404, "text/html"),  # the shell, which says there is no such page in words
        ("/hud/no/such/page", 404, "text/html"),
        (f"/hud/commit/{SHA.upper()}", 200, "text/html"),  # any case; the script finds the document
        ("/hud/commit/AAAAAAA", 200, "text/html"),  # a short SHA
        ("/hud/trunk", 200, "text/html"),
        ("/hud/nightly", 200, "text/html"),
        ("/hud/data/nightly.json", 404, "application/json"),
        ("/hud/data/commit/AAAA.json", 404, "application/json"),
        ("/hud/static/../handler.py", 404, "application/json"),
    ],
)
def test_pages_documents_and_assets_are_served_and_nothing_else(
    docs: FakeDocs, path: str, status: int, kind: str
) -> None:
    docs.docs["index.json"] = ({"commits": []}, 1)
    answer = serve(path, docs, {"index.html": b"<html>", "hud.js": b"//"})
    assert (answer.status, answer.headers["content-type"].split(";")[0]) == (status, kind)
    assert "script-src 'self'" in answer.headers["content-security-policy"]


def test_hud_without_a_slash_redirects_to_the_overview() -> None:
    answer = serve("/hud", None, {})
    assert (answer.status, answer.headers["location"]) == (308, "/hud/")


def test_a_batch_costs_one_write_per_document_it_touches(docs: FakeDocs, deps: SummaryDeps) -> None:
    batch = [job("in_progress", version=1, name=n) for n in ("a", "b", "c")]
    batch += [job("completed", "success", version=2, name=n) for n in ("a", "b", "c")]
    update_summaries(batch, deps)
    assert sorted(docs.puts) == sorted([f"commit/{SHA}.json", "index.json", "pr/5.json", "repo/org/backend.json"])
    jobs = docs.doc(f"commit/{SHA}.json")["jobs"].values()
    assert sorted((e["job"], e["state"]) for e in jobs) == [("a", "success"), ("b", "success"), ("c", "success")]


def note(sha: str = SHA, **kw: Any) -> PlanNote:
    planned = {
        "org/backend": {"state": "pending", "level": 4},
        "org/held": {"state": "held", "reason": "untrusted_author", "level": 3},
        "org/paths": {"state": "skipped", "reason": "no_matching_files", "level": 2},
        "org/nightly": {"state": "not_targeted", "reason": "nightly_only", "level": 2},
    }
    args: dict[str, Any] = {
        "upstream": "pytorch/pytorch", "sha": sha, "event_type": "pull_request", "pr": 5, "planned": planned,
        "meta": {"title": "Fix the thing", "author": "octocat", "at": 900.0, "pr_state": "open", "base_sha": "b" * 40},
        "nightly_only": ("org/nightly",),
    }  # fmt: skip
    return PlanNote(**args | kw)


def test_what_the_planner_decided_shows_until_a_job_reports(docs: FakeDocs, deps: SummaryDeps) -> None:
    note_plan(note(), deps)
    cells = docs.doc("index.json")["commits"][0]["repos"]
    assert {repo: (c["state"], c.get("reason")) for repo, c in cells.items()} == {
        "org/backend": ("pending", None),
        "org/held": ("held", "untrusted_author"),
        "org/paths": ("skipped", "no_matching_files"),
        "org/nightly": ("not_targeted", "nightly_only"),
    }
    assert cells["org/backend"]["since"] == 1000.0  # the clock: how long it has waited is the page's to show
    commit = docs.doc("index.json")["commits"][0]
    assert (commit["title"], commit["author"], commit["pr_state"]) == ("Fix the thing", "octocat", "open")
    assert {r["repo"]: r.get("nightly_only") for r in docs.doc("index.json")["repos"]}["org/nightly"] is True
    assert docs.doc("pr/5.json")["title"] == "Fix the thing"
    # The first job's report replaces the pending cell; the others keep what was decided.
    update_summaries([job("in_progress", version=1)], deps)
    cells = docs.doc("index.json")["commits"][0]["repos"]
    assert (cells["org/backend"]["state"], cells["org/held"]["state"]) == ("running", "held")
    assert docs.doc(f"commit/{SHA}.json")["meta"]["base_sha"] == "b" * 40


def test_a_release_replaces_a_hold_and_nothing_weaker_replaces_a_dispatch(docs: FakeDocs, deps: SummaryDeps) -> None:
    note_plan(note(), deps)
    released = {"org/held": {"state": "pending", "level": 3}, "org/backend": {"state": "not_targeted", "level": 4}}
    note_plan(note(planned=released), deps)
    cells = docs.doc("index.json")["commits"][0]["repos"]
    assert (cells["org/held"]["state"], cells["org/backend"]["state"]) == ("pending", "pending")


def test_a_new_head_supersedes_the_old_ones_pending_dispatches(docs: FakeDocs, deps: SummaryDeps) -> None:
    note_plan(note(), deps)
    update_summaries([job(repo="org/paths")], deps)  # a result on the old head stays a result
    new = "c" * 40
    note_plan(note(sha=new, replaced=SHA), deps)
    by_sha = {c["sha"]: c for c in docs.doc("index.json")["commits"]}
    assert by_sha[SHA]["superseded_by"] == new
    assert by_sha[SHA]["repos"]["org/backend"]["state"] == "superseded"
    assert by_sha[SHA]["repos"]["org/paths"]["state"] == "success"
    assert by_sha[new]["repos"]["org/backend"]["state"] == "pending"
    assert {c["sha"] for c in docs.doc("pr/5.json")["commits"]} == {new, SHA}
    # Force-pushed back (A -> B -> A): the old commit is the head again, waiting on its dispatch again.
    note_plan(note(replaced=new), deps)
    by_sha = {c["sha"]: c for c in docs.doc("index.json")["commits"]}
    assert "superseded_by" not in by_sha[SHA] and by_sha[SHA]["repos"]["org/backend"]["state"] == "pending"
    assert by_sha[new]["superseded_by"] == SHA


def test_refused_reports_are_counted_by_reason_and_keep_the_repository_on_the_grid(
    docs: FakeDocs, deps: SummaryDeps
) -> None:
    note_refusals("org/quiet", {"over its report quota": 3}, deps)
    note_refusals("org/quiet", {"HUD push refused (HTTP 400)": 1}, deps, key="hud:k:2")
    note_refusals("org/quiet", {"HUD push refused (HTTP 400)": 1}, deps, key="hud:k:2")  # a retried record
    refused = docs.doc("repo/org/quiet.json")["refused"]
    assert refused["total"] == 4
    assert {r: v["count"] for r, v in refused["reasons"].items()} == {
        "over its report quota": 3,
        "HUD push refused (HTTP 400)": 1,
    }
    assert docs.doc("index.json")["repos"] == [{"repo": "org/quiet", "level": 0, "refused": 4}]
    update_summaries([job()], deps)  # other repositories' results do not drop it
    assert [r["repo"] for r in docs.doc("index.json")["repos"]] == ["org/backend", "org/quiet"]


def test_trunk_commits_are_kept_apart_from_a_flood_of_pr_commits(docs: FakeDocs, deps: SummaryDeps) -> None:
    update_summaries([job(pr=None, sha="d" * 40, dispatched_at=1.0)], deps)
    for i in range(INDEX_COMMITS + 5):
        update_summaries([job(sha=f"{i + 1:040x}", dispatched_at=10.0 + i, delivery=f"d{i}")], deps)
    index = docs.doc("index.json")
    assert "d" * 40 not in {c["sha"] for c in index["commits"]}
    assert [c["sha"] for c in index["trunk"]] == ["d" * 40]


def test_nightly_runs_fill_the_nightly_matrix(docs: FakeDocs, deps: SummaryDeps) -> None:
    day = 20 * 86_400.0
    nightly = replace(job(pr=None, dispatched_at=day + 3600), event_type="nightly")
    update_summaries([nightly, replace(nightly, job_name="test", state="completed", conclusion="failure")], deps)
    days = docs.doc("nightly.json")["days"]
    assert list(days) == ["1970-01-21"]
    assert {name: j["state"] for name, j in days["1970-01-21"]["org/backend"].items()} == {
        "CI/build": "success",
        "CI/test": "failure",
    }


def test_a_failed_job_carries_what_explains_it(docs: FakeDocs, deps: SummaryDeps) -> None:
    tests = [{"name": f"test_{i}", "message": "x" * 600, "duration": 1.5} for i in range(12)]
    failed = replace(
        job("completed", "failure"),
        verdict="new",
        failure_kind="test",
        failed_tests=json.dumps(tests),
        triage=json.dumps({"category": "upstream", "confidence": "high", "summary": "the PR broke it"}),
        ciflow="trunk",
    )
    update_summaries([failed], deps)
    [e] = docs.doc(f"commit/{SHA}.json")["jobs"].values()
    assert (e["verdict"], e["failure_kind"], e["ciflow"], e["failed_tests_total"]) == ("new", "test", "trunk", 12)
    assert len(e["failed_tests"]) == 10 and len(e["failed_tests"][0]["message"]) == 300
    assert e["triage"] == {"category": "upstream", "confidence": "high", "summary": "the PR broke it"}
    assert docs.doc("index.json")["commits"][0]["repos"]["org/backend"]["verdicts"] == ["new"]


def test_a_flood_of_failing_jobs_keeps_the_commit_document_bounded_newest_attempts_detailed_first(
    docs: FakeDocs, deps: SummaryDeps
) -> None:
    """Red team: a 400-job flood made one commit's document 4.8 MB, rewritten whole on every change."""
    from crcr.app.summaries import MAX_COMMIT_DOC_BYTES  # noqa: PLC0415

    tests = json.dumps([{"name": f"test_{i}", "message": "x" * 600, "duration": 1.5} for i in range(12)])
    failing = [
        replace(job("completed", "failure", name=f"shard-{n}", attempt=attempt), failed_tests=tests)
        for attempt in (1, 2)
        for n in range(150)
    ]
    update_summaries(failing[:150], deps)  # every first attempt, with its tests: under the bound
    assert all("failed_tests" in e for e in docs.doc(f"commit/{SHA}.json")["jobs"].values())
    update_summaries(failing[150:], deps)  # the re-runs double it: the first attempts' details go
    doc = docs.doc(f"commit/{SHA}.json")
    assert len(json.dumps(doc, separators=(",", ":")).encode()) <= MAX_COMMIT_DOC_BYTES
    by_attempt = {(e["job"], e["attempt"]): e for e in doc["jobs"].values()}
    assert len(by_attempt) == 300  # every attempt is still listed, with its state and counts
    assert all("failed_tests" in by_attempt[(f"shard-{n}", 2)] for n in range(150))
    assert all(by_attempt[(f"shard-{n}", 1)].get("trimmed") for n in range(150))
    assert {e["failed_tests_total"] for e in by_attempt.values()} == {12}
    # Three times as many newest attempts: every attempt's details go, and the document stays bounded.
    more = [replace(j, job_name=f"more-{n}", run_attempt=1) for n, j in enumerate(failing[:300])]
    update_summaries(more, deps)
    doc = docs.doc(f"commit/{SHA}.json")
    assert len(json.dumps(doc, separators=(",", ":")).encode()) <= MAX_COMMIT_DOC_BYTES
    assert all(e.get("trimmed") for e in doc["jobs"].values())
