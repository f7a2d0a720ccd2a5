"""`make soak`'s flood phase: one downstream floods its PR dispatch beside a normal one, without and with the flood.

.venv/bin/python bench/flood.py [--jobs 300] [--shas 100]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness as h

from tests.doubles.hud import HudDouble

PR = 170001
NORMAL, NORMAL_ID = "org-normal/backend", 6100
FLOOD, FLOOD_ID = "org-flood/backend", 6200
HUD_TOKEN = "flood-hud-token"
LOOKUPS_PER_HOUR = 30
ALLOWLIST = (
    f"L4:\n  - {NORMAL}: [oncall-normal]\n  - {FLOOD}\n"
    f"repos:\n  {NORMAL}:\n    events: [pull_request]\n  {FLOOD}:\n    events: [pull_request]\n"
)
PERMISSIONS = {"actions": "write", "checks": "write", "contents": "write", "issues": "write"} | {
    "pull_requests": "write",
    "metadata": "read",
}
# The installation's content-creating budget as the relay paces it by default (60 a minute + a burst of 15), and a
# downstream's share of it (CRCR_DOWNSTREAM_WRITE_SHARE 0.5).
INSTALLATION_PER_MINUTE, SHARE_PER_MINUTE = 75, 38


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def in_any_minute(times: list[float]) -> int:
    return h.most_in_any(times, 60.0)


def scheduled_body(sha: str, job: str, run_id: int, repo: str) -> dict[str, Any]:
    """A scheduled run's report: no ticket, the commit it ran on named."""
    url = f"https://github.com/{repo}/actions/runs/{run_id}"
    return {"schema_version": 1, "scheduled": True, "head_sha": sha, "status": "completed", "conclusion": "success",
            "workflow_name": "nightly", "job_name": job, "run_id": run_id, "run_attempt": 1, "url": url}  # fmt: skip


def _callback(r: h.Relay, body: dict[str, Any], bearer: str) -> tuple[int, dict[str, Any]]:
    status, _, reply = r.callback(json.dumps(body).encode(), bearer)
    return status, json.loads(reply) if reply else {}


def run_once(key: h.AppKey, *, flood: bool, jobs: int, shas: int, bound_s: float) -> dict[str, Any]:
    """A PR dispatched to two L4 downstreams on a fresh `crcr local` in this process; with the flood, one reports
    `jobs` failed jobs on its dispatch and `shas` scheduled runs on random commits from 6 threads, and once 40 of those
    are answered the other reports two jobs: when its HUD pushes, check run and PR comment arrive."""
    rss_before = _rss_mb()
    hud = HudDouble(HUD_TOKEN)
    env = {
        "CRCR_HUD_URL": hud.url,
        "CRCR_HUD_TOKEN": HUD_TOKEN,
        "CRCR_CHECK_SETTLE_S": "1",
        "CRCR_COMMENT_SETTLE_S": "1",
        "CRCR_COMMIT_LOOKUPS_PER_HOUR": str(LOOKUPS_PER_HOUR),
    }
    try:
        with h.relay(key, allowlist=ALLOWLIST, oidc=True, own_moto=False, env=env) as s:
            github, issuer = s.github, s.issuer
            github.install(NORMAL, installation_id=301, repo_id=NORMAL_ID)
            github.install(FLOOD, installation_id=302, repo_id=FLOOD_ID)
            github.install(h.UPSTREAM, installation_id=1, repo_id=h.UPSTREAM_ID, permissions=PERMISSIONS)
            github.add_issue(h.UPSTREAM, PR)
            github.add_commit(h.UPSTREAM, json.loads(h.event_body())["pull_request"]["head"]["sha"])
            if s.post(h.event_body())[0] != 202:
                raise RuntimeError("the webhook was not accepted")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (github.dispatches(NORMAL) and github.dispatches(FLOOD)):
                time.sleep(0.1)
            normal_ticket, flood_ticket = (
                github.dispatches(repo)[0]["client_payload"]["ticket"] for repo in (NORMAL, FLOOD)
            )
            answers: list[tuple[str, int, str]] = []
            lock = threading.Lock()

            def flood_job(i: int) -> None:
                run_id = 90_000 + i // 50
                body = h.report_body(flood_ticket, FLOOD, f"shard-{i}", run_id, "completed", "failure")
                status, reply = _callback(s, body, h.job_token(issuer, FLOOD, FLOOD_ID, run_id))
                with lock:
                    answers.append(
                        ("job", status, str(reply.get("limit") or reply.get("status") or reply.get("error")))
                    )

            def flood_nightly(i: int) -> None:
                sha = uuid.uuid4().hex + uuid.uuid4().hex[:8]
                bearer = h.job_token(issuer, FLOOD, FLOOD_ID, 80_000 + i, event_name="schedule")
                status, reply = _callback(s, scheduled_body(sha, f"nightly-{i}", 80_000 + i, FLOOD), bearer)
                with lock:
                    answers.append(
                        ("nightly", status, str(reply.get("limit") or reply.get("error") or reply.get("status")))
                    )

            started = time.time()
            pool = ThreadPoolExecutor(6)
            futures = [pool.submit(flood_job, i) for i in range(jobs)] if flood else []
            futures += [pool.submit(flood_nightly, i) for i in range(shas)] if flood else []
            while flood and sum(f.done() for f in futures) < min(40, len(futures)):
                time.sleep(0.05)
            reported = time.time()
            for job, conclusion in (("build", "success"), ("test", "failure")):
                bearer = h.job_token(issuer, NORMAL, NORMAL_ID, 777)
                _callback(s, h.report_body(normal_ticket, NORMAL, job, 777, "in_progress", None), bearer)
                _callback(s, h.report_body(normal_ticket, NORMAL, job, 777, "completed", conclusion), bearer)
            arrived: dict[str, float] = {}
            while time.time() < reported + bound_s and len(arrived) < 3:
                rows = hud.rows.values()
                pushed = {r["job_name"] for r in rows if r["downstream_repo"] == NORMAL and r["status"] == "completed"}
                if pushed == {"build", "test"}:
                    arrived.setdefault("hud_push_s", round(time.time() - reported, 2))
                run = next((r for r in github.check_runs(h.UPSTREAM) if r["name"] == f"crcr/{NORMAL}"), {})
                if run.get("status") == "completed":
                    arrived.setdefault("check_run_s", round(time.time() - reported, 2))
                if any(NORMAL in c["body"] for c in github.comments(h.UPSTREAM, PR) if c["performed_via_github_app"]):
                    arrived.setdefault("comment_s", round(time.time() - reported, 2))
                time.sleep(0.1)
            flood_check_runs = len([r for r in github.check_runs(h.UPSTREAM) if r["name"].startswith(f"crcr/{FLOOD}/")])
            for future in futures:
                future.result(timeout=bound_s)
            pool.shutdown()
            upstream = [r for r in github.requests if r.time >= started and f"/repos/{h.UPSTREAM}/" in r.path]
            content = [r for r in upstream if r.method in ("POST", "PATCH")]
            items = s.stack.client("dynamodb").scan(
                TableName=s.stack.function_env["CRCR_RESULTS_TABLE"],
                FilterExpression="#r = :r AND event_type = :pr",
                ExpressionAttributeNames={"#r": "repo"},
                ExpressionAttributeValues={":r": {"S": FLOOD}, ":pr": {"S": "pull_request"}},
                ConsistentRead=True,
            )["Items"]
            quotas = ("DownstreamThrottled", "CallbackRejected", "CommitLook", "CheckRunPaced")
            metrics = {k: v for k, v in s.stack.status()["metrics"].items() if k.startswith(quotas)}
    finally:
        hud.stop()
    return {
        "flood": flood,
        "second_downstream": arrived | {"all_arrived": len(arrived) == 3},
        "flood_answers": {f"{kind} {status} {why}": n for (kind, status, why), n in Counter(answers).items()},
        "flood_jobs_accepted": len([a for a in answers if a[0] == "job" and a[1] == 200]),
        "flood_jobs_recorded": len(items),
        "flood_check_runs_when_the_second_was_done": flood_check_runs,
        "upstream_commit_lookups": len([r for r in upstream if r.method == "GET" and "/commits/" in r.path]),
        "upstream_writes": len(content),
        "upstream_writes_in_any_minute": in_any_minute([r.time for r in content]),
        "flood_writes_in_any_minute": in_any_minute([r.time for r in content if FLOOD in json.dumps(r.json or {})]),
        "relay_metrics": metrics,
        "rss_mb": {"before": rss_before, "after": _rss_mb()},
    }


def flood_phase(jobs: int = 300, shas: int = 100, bound_s: float = 300.0) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="crcr-flood-"))
    key = h.AppKey.generate()
    # The relay runs in this process: its log lines (hundreds of refused floods among them) go to a file, as the
    # soak's relay logs do, so the soak's summary stays on one screen.
    log_path = workdir / "relay.log"
    with log_path.open("a", encoding="utf-8") as log:
        previous = h.logger.registered_handler.setStream(log)
        try:
            quiet = run_once(key, flood=False, jobs=jobs, shas=shas, bound_s=bound_s)
            flooded = run_once(key, flood=True, jobs=jobs, shas=shas, bound_s=bound_s)
        finally:
            h.logger.registered_handler.setStream(previous)
    problems = []
    if not quiet["second_downstream"]["all_arrived"] or not flooded["second_downstream"]["all_arrived"]:
        problems.append("the second downstream's HUD push, check run or comment did not arrive")
    if flooded["flood_jobs_recorded"] != flooded["flood_jobs_accepted"]:
        problems.append(
            f"{flooded['flood_jobs_accepted']} flood jobs accepted, {flooded['flood_jobs_recorded']} recorded"
        )
    if flooded["upstream_commit_lookups"] > LOOKUPS_PER_HOUR:
        problems.append(f"{flooded['upstream_commit_lookups']} commit lookups, over {LOOKUPS_PER_HOUR}")
    if flooded["upstream_writes_in_any_minute"] > INSTALLATION_PER_MINUTE:
        problems.append(f"{flooded['upstream_writes_in_any_minute']} upstream writes in a minute")
    if flooded["flood_writes_in_any_minute"] > SHARE_PER_MINUTE:
        problems.append(f"{flooded['flood_writes_in_any_minute']} of the flood's writes in a minute, over its share")
    return {
        "jobs": jobs,
        "random_shas": shas,
        "without_flood": quiet,
        "with_flood": flooded,
        "ok": not problems,
        "problems": problems,
        "relay_log": str(log_path),
        "method": run_once.__doc__,
    }


def print_phase(rep: dict[str, Any]) -> None:
    quiet, flooded = rep["without_flood"], rep["with_flood"]
    print(f"\nflood phase: {rep['jobs']} failed jobs on one dispatch and {rep['random_shas']} random scheduled commits")
    print(f"   {'':16} HUD push s check run s comment s  lookups writes/min       RSS MB")
    for name, run in (("without flood", quiet), ("with flood", flooded)):
        second = run["second_downstream"]
        print(
            f"   {name:16} {second.get('hud_push_s', '-'):>10} {second.get('check_run_s', '-'):>11} "
            f"{second.get('comment_s', '-'):>9} {run['upstream_commit_lookups']:>8} "
            f"{run['upstream_writes_in_any_minute']:>10} {run['rss_mb']['before']:>5}->{run['rss_mb']['after']:<6}"
        )
    print(
        f"   flood: {flooded['flood_jobs_accepted']} jobs accepted, {flooded['flood_jobs_recorded']} recorded; answers "
        f"{flooded['flood_answers']}; its writes in any minute {flooded['flood_writes_in_any_minute']}"
    )
    print(f"   ok: {rep['ok']}{'' if rep['ok'] else ' -- ' + '; '.join(rep['problems'])}; relay log {rep['relay_log']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--shas", type=int, default=100)
    phase = flood_phase(**vars(parser.parse_args()))
    print_phase(phase)
    sys.exit(0 if phase["ok"] else 1)
