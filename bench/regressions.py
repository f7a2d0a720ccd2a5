"""Section 13: regression tracking's cost per branch job result, the branch log per push, compares per regression."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import harness as h
import reporter as rep

SEED = 31
BREAK, FIX = 0.12, 0.35  # per tested commit: a passing job starts failing, a failing one is mended
NIGHTLY_EVERY = 4  # a nightly-only downstream tests the head of every fourth push the relay saw


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--regression-pushes", type=int, default=60, help="pushes to the upstream's default branch")
    parser.add_argument("--regression-repos", type=int, default=4, help="downstreams: even push jobs, odd nightly")
    parser.add_argument("--regression-missed", type=int, default=5, help="every n-th push never reaches the relay")


def _sha(*parts: object) -> str:
    return hashlib.sha1("-".join(map(str, parts)).encode()).hexdigest()  # an id, not security


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def history(pushes: int, rng: random.Random, t0: float) -> list[list[Any]]:
    """The branch: `pushes` pushes of one to three commits, each commit's parent the one before it, each with a PR."""
    out, parent, n = [], None, 0
    for p in range(pushes):
        commits = []
        for i in range(rng.randint(1, 3)):
            sha, n = _sha("regressions", SEED, n), n + 1
            title = f"Change {n} (#{180_000 + n})"
            commits.append(h.BranchCommit(sha, t0 + p * 1800.0, i, parent, 180_000 + n, title, "dev", ("torch/x.py",)))
            parent = sha
        out.append(commits)
    return out


def results(pushes: list[list[Any]], seen: list[bool], repos: int, rng: random.Random) -> dict[int, list[tuple]]:
    """Per push the relay saw, its branch results (repo, job, event type, head SHA, passed); nightly jobs test every
    NIGHTLY_EVERY-th head seen."""
    broken = [False] * repos
    out: dict[int, list[tuple]] = {}
    tested = 0
    for p, commits in enumerate(pushes):
        if not seen[p]:
            continue
        out[p], tested = [], tested + 1
        for r in range(repos):
            nightly = r % 2 == 1
            if nightly and tested % NIGHTLY_EVERY:
                continue
            broken[r] = rng.random() >= FIX if broken[r] else rng.random() < BREAK
            job, kind = ("nightly-test", "nightly") if nightly else ("test", "push")
            out[p].append((f"bench-org/repo-{r}", job, kind, commits[-1].sha, not broken[r]))
    return out


def expected(pushes: list[list[Any]], tested: dict[int, list[tuple]]) -> dict[tuple[str, str], list[tuple]]:
    """Per job, the regressions its results call for, worked out apart from the relay: (last pass, first failure,
    fixed by, commits in the range), the range over every commit of the branch (GitHub's comparison fills the gaps)."""
    order = [c.sha for commits in pushes for c in commits]
    place = {sha: i for i, sha in enumerate(order)}
    per_job: dict[tuple[str, str], list[tuple[str, bool]]] = {}
    for p in sorted(tested):
        for repo, job, _, sha, passed in tested[p]:
            per_job.setdefault((repo, job), []).append((sha, passed))
    out: dict[tuple[str, str], list[tuple]] = {}
    for key, runs in per_job.items():
        found, last_pass, current = [], None, None
        for sha, passed in runs:
            if passed:
                if current is not None:
                    found.append((*current, sha, place[current[1]] - place[current[0]]))
                current, last_pass = None, sha
            elif current is None and last_pass is not None:
                current = (last_pass, sha)
        if current is not None:
            found.append((*current, None, place[current[1]] - place[current[0]]))
        out[key] = found
    return out


def _changes(p: int, tested: list[tuple], t: float) -> list[Any]:
    """The push's job rows as the callbacks write them: each in progress, then finished."""
    delivery = _sha("delivery", SEED, p)
    out = []
    for k, (repo, job, event_type, sha, passed) in enumerate(tested):
        run_id = 7_000_000 + p * 100 + k
        running = h.JobRecord(
            dispatch_id=h.dispatch_id(delivery, repo), run_id=str(run_id), run_attempt=1, job_name=job,
            workflow_name="CI", state="in_progress", conclusion=None, fingerprint=_sha("run", run_id), repo=repo,
            url=f"https://github.com/{repo}/actions/runs/{run_id}", repo_id=50_000 + k, level=2, delivery_id=delivery,
            upstream=h.UPSTREAM, head_sha=sha, pr=None, device=None, dispatched_at=t, started_at=t + 60,
            completed_at=None, callback_payload="{}", version=1, event_type=event_type,
        )  # fmt: skip
        done = replace(
            running, state="completed", conclusion="success" if passed else "failure", completed_at=t + 900,
            fingerprint=_sha("done", run_id), version=2,
        )  # fmt: skip
        out += [rep.Change(running, None, t + 60, "in_progress"), rep.Change(done, running, t + 900, "completed")]
    return out


def _setting(r: h.Relay, name: str, bucket: str, tracking: bool) -> rep.Setting:
    """The reporter as section 7 builds it, the App kept for GitHub's comparisons; `tracking` off takes the regressions
    out and changes nothing else."""
    setting = rep.build_setting(r, name, bucket, off=("CRCR_HUD_URL", "CRCR_CHECKS_QUEUE_URL"))
    if setting.deps.regressions is None or setting.deps.regressions.history is None:
        raise RuntimeError(f"{name}: the reporter is not configured as this section needs")
    setting.deps = setting.deps if tracking else replace(setting.deps, regressions=None)
    return setting


def write_units(ddb: Any, table: str, prefix: str) -> float:
    """The mean write units of the state table's items whose key starts with `prefix` (a unit per KB of their JSON)."""
    items = [i for i in h.scan(ddb, TableName=table) if i["pk"]["S"].startswith(prefix)]
    return sum(math.ceil(len(json.dumps(i)) / 1024) for i in items) / max(1, len(items))


def verify(store: Any, want: dict[tuple[str, str], list[tuple]]) -> dict[str, Any]:
    problems = []
    for (repo, job), ranges in sorted(want.items()):
        kept, _ = store.job_regressions(h.UPSTREAM, repo, "CI", job)
        got = [(t.last_pass, t.first_fail, t.fixed_by, len(t.blamelist)) for t in kept]
        if got != ranges:
            problems.append(f"{repo} {job}: kept {got}, the results call for {ranges}")
    return {"ok": not problems, "jobs": len(want), "problems": problems[:5]}


def regressions_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """One stack (template.yaml's resources, no poller) with the GitHub double holding the branch's history;
    ReporterFunction's handler called directly with each setting's own copy of the results table's stream, batch by
    batch, the two settings taking turns going first: on = the reporter as build_report_deps makes it (HUD documents
    on; HUD push, check runs and the health refresh off), off = the same with regression tracking taken out. Each
    push's commits go to the branch log first, as the planner writes them (counted apart); a share of the pushes never
    reach the relay, so their commits come from GitHub's comparison; the kept regressions are checked against the
    ranges the results call for, worked out apart from the relay."""
    started, rng = time.perf_counter(), random.Random(SEED)
    t0 = float(int(time.time() - 3 * 86_400))
    pushes = history(args.regression_pushes, rng, t0)
    seen = [args.regression_missed <= 0 or (p + 1) % args.regression_missed != 0 for p in range(len(pushes))]
    seen[0] = True
    tested = results(pushes, seen, args.regression_repos, rng)
    want = expected(pushes, tested)
    allowlist = "L2:\n" + "".join(f"  - bench-org/repo-{r}\n" for r in range(args.regression_repos))
    # The comparisons are counted here, not budgeted: the hourly budget has its own tests.
    with h.relay(bench.key, 0, allowlist=allowlist, pollers=None, env={"CRCR_COMPARE_CALLS_PER_HOUR": "100000"}) as r:
        r.github.install(h.UPSTREAM, installation_id=7100, repo_id=h.UPSTREAM_ID)
        r.github.add_history(h.UPSTREAM, [
            {"sha": c.sha, "parent": c.parent, "message": f"{c.title}\n\nbody", "author": c.author,
             "date": _iso(c.committed_at)}
            for commits in pushes for c in commits
        ])  # fmt: skip
        s3, ddb = r.stack.client("s3"), r.stack.client("dynamodb")
        bucket = r.stack.function_env["CRCR_HUD_BUCKET"]
        s3.create_bucket(Bucket=f"{bucket}-off")
        settings = [_setting(r, "off", f"{bucket}-off", False), _setting(r, "on", bucket, True)]
        branch = h.DynamoBranch(ddb, r.stack.function_env["CRCR_STATE_TABLE"])
        batch_size = next(f for f in r.stack.functions if f.logical_id == rep.FUNCTION).stream_sources[0].batch_size
        feed, log_calls, compares_before = rep.Feed(ddb, settings), Counter[str](), len(r.github.requests)
        for n, p in enumerate(sorted(tested)):
            before = bench.aws.snapshot()
            branch.record_commits(h.UPSTREAM, pushes[p])  # what the planner writes for the push
            log_calls.update(bench.aws.snapshot() - before)
            feed.write(_changes(p, tested[p], pushes[p][-1].committed_at))
            while feed.read < feed.length:
                start, end = feed.read, min(feed.read + batch_size, feed.length)
                for setting in settings if n % 2 == 0 else settings[::-1]:
                    rep.deliver(setting, r, setting.stream[start:end], bench)
                feed.collect()
                feed.read = end
        compares = [q for q in r.github.requests[compares_before:] if "/compare/" in q.path]
        others = len(r.github.requests) - compares_before - len(compares)
        state = r.stack.function_env["CRCR_STATE_TABLE"]
        verification = verify(h.DynamoRegressions(ddb, state), want)
        branch_wu, regs_wu = write_units(ddb, state, "BRANCH#"), write_units(ddb, state, "REGS#")
    jobs = sum(len(t) for t in tested.values())
    off, on = (_figures(s, jobs) for s in settings)
    opened = settings[1].metrics.get("RegressionOpened", 0)
    ranges = sum(len(v) for v in want.values())
    unseen = {c.sha for p, commits in enumerate(pushes) if not seen[p] for c in commits}
    order = [c.sha for commits in pushes for c in commits]
    gaps = {
        (lp, ff)
        for v in want.values()
        for lp, ff, _, _ in v
        if unseen & set(order[order.index(lp) + 1 : order.index(ff)])
    }
    out = {
        "sequence": {
            "seed": SEED,
            "pushes": len(pushes),
            "pushes_missed": seen.count(False),
            "repositories": args.regression_repos,
            "commits": sum(map(len, pushes)),
            "branch_results": jobs,
            "changes": 2 * jobs,  # each job's in-progress and finished rows
            "batch_size": batch_size,
        },
        "off": off,
        "on": on,
        "aws_calls_per_branch_result_added": round(on["aws_calls"]["total"] - off["aws_calls"]["total"], 3),
        "cpu_ms_per_branch_result_added": round(on["cpu_ms"] - off["cpu_ms"], 3),
        # A kept job's regressions at its items' size, a budget cell 1, a batch of compared commits 25 (at most).
        "write_units_per_branch_result_added": round(
            on["aws_calls"].get("dynamodb.PutItem", 0) * math.ceil(regs_wu)
            + on["aws_calls"].get("dynamodb.UpdateItem", 0)
            + on["aws_calls"].get("dynamodb.BatchWriteItem", 0) * 25 * branch_wu,
            3,
        ),
        "branch_log_aws_calls_per_push": {k: round(v / len(tested), 3) for k, v in sorted(log_calls.items())},
        "branch_log_write_units_per_push": round(2 * sum(map(len, pushes)) / len(pushes) * branch_wu, 3),
        "regressions_opened": opened,
        "regressions_expected": ranges,
        "ranges_over_missed_pushes": len(gaps),
        "compare_calls": len(compares),
        "compare_calls_per_regression": round(len(compares) / opened, 3) if opened else None,
        "other_github_requests": others,
        "tracking_metrics": {k: v for k, v in settings[1].metrics.items() if k.startswith(("Regression", "Bisect"))},
        "verification": verification
        | {"ok": verification["ok"] and opened == ranges and len(compares) == len(gaps) and not on["failures"]},
        "elapsed_s": round(time.perf_counter() - started, 1),
        "method": " ".join(str(regressions_section.__doc__).split()),
    }
    bench.out.say(
        f"  {jobs} branch results: +{out['aws_calls_per_branch_result_added']} AWS calls each with tracking on; "
        f"{opened} regressions, {len(compares)} compare calls ({out['compare_calls_per_regression']} per regression)"
    )
    return {"regressions": out}


def _figures(s: rep.Setting, jobs: int) -> dict[str, Any]:
    """Per branch job result (its in-progress and its finished row): the AWS calls and CPU of the handler calls."""
    return {"aws_calls": h.per_unit(s.calls, jobs), "cpu_ms": round(s.cpu * 1000.0 / jobs, 3), "failures": s.failures}
