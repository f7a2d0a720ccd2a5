"""Section 11: the HUD pages at PyTorch's scale in headless Chromium, bytes fetched and time to render by days held."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import harness as h

from tests.e2e.browser import headless
from tests.e2e.hud_server import MemoryDocs, serve_docs
from tests.unit.fakes import FakeClock, RecordingMetrics

PR_EVENTS_PER_DAY = 1000
PUSHES_PER_DAY = 60  # trunk commits a day
COMMITS_PER_PR = 3
REPOS = [f"backend-{i}/ci" for i in range(10)]
JOBS = [f"test-shard-{i}" for i in range(5)]
DAY_S = 86_400.0
BATCH = 50  # commits merged into the overview per write, as a reporter batch would touch it


def jobs_of(sha: str, pr: int | None, at: float, rng: random.Random) -> list[h.JobRecord]:
    """One commit's 10 x 5 jobs: mostly green, some failures with tests and verdicts, a few running."""
    test = {"name": "test_{}", "classname": "TestOps", "message": "AssertionError: " + "x" * 200, "duration": 1.5}
    out = []
    for r, repo in enumerate(REPOS):
        for name in JOBS:
            roll = rng.random()
            state, conclusion = ("completed", "failure") if roll < 0.06 else ("completed", "success")
            state, conclusion = ("in_progress", None) if 0.06 <= roll < 0.08 else (state, conclusion)
            failed = json.dumps([test | {"name": f"test_{i}"} for i in range(8)]) if conclusion == "failure" else ""
            counts = {"passed": 2000, "failed": 8 if failed else 0, "skipped": 40}
            verdict = ("new" if rng.random() < 0.5 else "pre-existing") if failed and pr else None
            run = 10_000 + r
            out.append(h.JobRecord(
                dispatch_id=f"{sha[:12]}-{r}", run_id=str(run), run_attempt=1, job_name=name, workflow_name="CI",
                state=state, conclusion=conclusion, fingerprint=state, url=f"https://github.com/{repo}/actions/runs/{run}",
                repo=repo, repo_id=r + 1, level=4 if r < 3 else 2, delivery_id=f"d-{sha[:12]}", upstream=h.UPSTREAM,
                head_sha=sha, pr=pr, device=None, dispatched_at=at, started_at=at + 120,
                completed_at=at + 3000 if conclusion else None, callback_payload=json.dumps({"test_results": counts}),
                version=2, event_type="pull_request" if pr else "push", failed_tests=failed, verdict=verdict,
            ))  # fmt: skip
    return out


def commit_summary(sha: str, pr: int | None, at: float, rng: random.Random, keep: MemoryDocs | None) -> dict[str, Any]:
    """A commit's overview summary from the relay's code: its planner note and its jobs merged into its document."""
    docs = keep or MemoryDocs()
    clock = FakeClock(at)
    deps = h.SummaryDeps(docs=docs, metrics=RecordingMetrics(), clock=clock)
    meta = {"title": f"[inductor] Fix a thing in change {sha[:8]}", "author": f"dev{rng.randrange(500)}", "at": at}
    if pr:
        meta |= {"pr_state": "open", "base_sha": "0" * 40}
    h.note_plan(
        h.PlanNote(h.UPSTREAM, sha, "pull_request" if pr else "push", pr, meta=meta,
                 planned={repo: {"state": "pending", "level": 4} for repo in REPOS}), deps)  # fmt: skip
    clock.t = at + 3000
    h.update_summaries(jobs_of(sha, pr, at, rng), deps)
    doc, _ = docs.get(f"commit/{sha}.json")
    assert doc is not None
    return h.summary_of(doc)


def seed(days: int, load: int, say: Callable[[str], None]) -> tuple[MemoryDocs, int, float]:
    """`days` of commits at `load` x 1,000 PR events a day: the documents, the measured PR and the seconds it took.
    A few commits are summarised by the relay's code and re-keyed (sha, PR, time) for every other."""
    started = time.perf_counter()
    rng = random.Random(21)  # the same commits' cells at every size: what differs is only how much is held
    end = time.time()
    start = end - days * DAY_S
    per_day = PR_EVENTS_PER_DAY * load + PUSHES_PER_DAY
    templates = [commit_summary(f"{i:040x}", 1 if i % 4 else None, start, rng, None) for i in range(16)]
    docs = MemoryDocs()
    index: dict[str, Any] | None = None
    prs: dict[int, dict[str, Any] | None] = {}
    total = days * per_day
    batch: list[dict[str, Any]] = []
    for n in range(total):
        at = start + n * (days * DAY_S / total)
        back = total - 1 - n  # counted from the newest, so the newest commits are alike at every size
        trunk = back % per_day % (per_day // PUSHES_PER_DAY) == 0
        pr = None if trunk else 100_000 + total // COMMITS_PER_PR - back // COMMITS_PER_PR
        template = templates[back % len(templates)]
        summary = template | {"sha": f"{n + 1:040x}", "pr": pr, "first_seen": at, "at": at,
                              "event_type": "push" if trunk else "pull_request"}  # fmt: skip
        if trunk:
            summary.pop("pr_state", None)
        batch.append(summary)
        if pr is not None:
            # A PR page holds its own few commits; only recent PRs are kept here (older ones are never fetched).
            prs[pr] = h._with_commits(prs.get(pr), [summary], keep=h.PR_COMMITS, now=at, pr=pr) or prs.get(pr)
            if len(prs) > 2000:
                prs.pop(next(iter(prs)))
        if len(batch) == BATCH:
            index = h.with_index(index, batch, now=at) or index
            batch = []
    if batch:
        index = h.with_index(index, batch, now=end) or index
    # The measured PR: the newest one, whose head gets a full commit document through the reporter's code.
    pr = max(p for p in prs)
    head = f"{total + 1:040x}"
    own = MemoryDocs()
    real = commit_summary(head, pr, end, random.Random(22), own)
    docs.put(f"commit/{head}.json", own.docs[f"commit/{head}.json"], None)
    prs[pr] = h._with_commits(prs[pr], [real], keep=h.PR_COMMITS, now=end, pr=pr)
    index = h.with_index(index, [real], now=end) or index
    assert index is not None and prs[pr] is not None
    docs.put("index.json", index, None)
    docs.put(f"pr/{pr}.json", prs[pr], None)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    say(f"   seeded {days} day(s) at {load}x: {total:,} commits in {seconds:.1f} s")
    return docs, pr, seconds


def measure(browser: Any, served: Any, path: str, runs: int) -> dict[str, Any]:
    """Bytes fetched (first visit, then warm) and the time to a rendered page (`body[data-ready]`), median of `runs`."""
    times: list[float] = []
    cold_bytes = warm_bytes = docs_bytes = 0
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    for i in range(runs + 1):
        served.reset()
        page = context.new_page()
        page.goto(served.url + path)
        page.wait_for_selector("body[data-ready=true]", timeout=60_000)
        ready_ms = page.evaluate("() => performance.now()")
        fetched = list(served.fetched)
        page.close()
        if i == 0:
            cold_bytes = sum(size for _, size in fetched)
            continue  # the first load fills the cache: its time includes the static files' first fetch
        warm_bytes = sum(size for _, size in fetched)
        docs_bytes = sum(size for p, size in fetched if p.startswith("/hud/data/"))
        times.append(ready_ms)
    context.close()
    return {
        "bytes_first_visit": cold_bytes,
        "bytes_cached_static": warm_bytes,
        "bytes_documents": docs_bytes,
        "ready_ms_p50": round(statistics.median(times), 1),
        "ready_ms_max": round(max(times), 1),
        "runs": runs,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pages-days", default="1,30", help="days held, comma-separated")
    parser.add_argument("--pages-loads", default="1,10", help="multiples of 1,000 PR events a day, comma-separated")
    parser.add_argument("--pages-runs", type=int, default=5, help="timed page loads per page")


def pages_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """Documents seeded for N days of 1,000 PR events a day (x the load) x 10 downstreams x 5 jobs by the relay's own
    code, served by HudFunction's handler; the overview and a PR page loaded in headless Chromium."""
    days, loads = [int(d) for d in args.pages_days.split(",")], [int(x) for x in args.pages_loads.split(",")]
    runs, say = args.pages_runs, bench.out.say
    out: dict[str, Any] = {"days_held": days, "loads": loads, "method": pages_section.__doc__}
    with headless() as browser:
        for load in loads:
            for held in days:
                docs, pr, seeded_s = seed(held, load, say)
                with serve_docs(docs) as served:
                    overview = measure(browser, served, "/hud/", runs)
                    pr_page = measure(browser, served, f"/hud/pr/{pr}", runs)
                out[f"{load}x_{held}d"] = {"seed_s": round(seeded_s, 1), "overview": overview, "pr": pr_page}
                shown = [f"{p['bytes_documents']:,} B in {p['ready_ms_p50']} ms" for p in (overview, pr_page)]
                say(f"   {load:>2}x, {held:>2} day(s) held: overview {shown[0]}, PR page {shown[1]}")
    return {"hud_pages": out}
