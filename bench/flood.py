"""`make soak`'s flood phase: one downstream floods its PR dispatch with hundreds of failed jobs and names random
commits in scheduled reports while a second downstream reports normally on the same PR. The same scenario runs twice
on a fresh `crcr local` each, without the flood and then with it, side by side in one run: how long the second's
HUD pushes, check run and PR comment take from its report, what the relay accepted and refused of the flood, the
upstream installation's GitHub requests (commit lookups, content-creating writes in any minute) and the process's
memory. See bench/README.md ("Soak", flood phase).

    .venv/bin/python bench/flood.py [--jobs 300] [--shas 100] [--out FILE]
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

from harness import ROOT, AppKey

from crcr.local.stack import LocalStack
from tests.doubles.github_double import GitHubDouble
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer

APP_ID = "424243"
UPSTREAM, UPSTREAM_ID, PR = "pytorch/pytorch", 65600975, 170001
NORMAL, NORMAL_ID = "org-normal/backend", 6100
FLOOD, FLOOD_ID = "org-flood/backend", 6200
HUD_TOKEN = "flood-hud-token"
WEBHOOK_SECRET = "flood-webhook-secret"
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


def _http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:  # loopback only
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else {}


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def in_any_minute(times: list[float]) -> int:
    """The most of `times` (seconds) that fall in any 60 s."""
    times = sorted(times)
    return max((sum(1 for u in times[i:] if u < t + 60) for i, t in enumerate(times)), default=0)


class Scenario:
    """One `crcr local` with the GitHub double, the OIDC issuer double and PyTorch's HUD (its port)."""

    def __init__(self, workdir: Path) -> None:
        from crcr.domain.signature import sign  # noqa: PLC0415

        self.sign = sign
        key = AppKey.generate()
        self.github = GitHubDouble(app_id=APP_ID, app_public_key_pem=key.public_pem).__enter__()
        self.issuer = OidcIssuer().__enter__()
        self.hud = HudDouble(HUD_TOKEN)
        for repo, installation, repo_id in ((NORMAL, 301, NORMAL_ID), (FLOOD, 302, FLOOD_ID)):
            self.github.install(repo, installation_id=installation, repo_id=repo_id)
        self.github.install(UPSTREAM, installation_id=1, repo_id=UPSTREAM_ID, permissions=PERMISSIONS)
        self.github.add_issue(UPSTREAM, PR)
        allowlist = workdir / f"allowlist-{uuid.uuid4().hex[:8]}.yaml"
        allowlist.write_text(ALLOWLIST)
        env = {
            "CRCR_UPSTREAM_REPO": UPSTREAM,
            "CRCR_GITHUB_API_URL": self.github.url,
            "CRCR_GITHUB_APP_ID": APP_ID,
            "CRCR_GITHUB_APP_PRIVATE_KEY": key.private_pem,
            "CRCR_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "CRCR_ALLOWLIST": str(allowlist),
            "CRCR_OIDC_ISSUER": self.issuer.url,
            "CRCR_OIDC_AUDIENCE": "crcr",
            "CRCR_HUD_URL": self.hud.url,
            "CRCR_HUD_TOKEN": HUD_TOKEN,
            "CRCR_CHECK_SETTLE_S": "1",
            "CRCR_COMMENT_SETTLE_S": "1",
            "CRCR_COMMIT_LOOKUPS_PER_HOUR": str(LOOKUPS_PER_HOUR),
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            "PATH": "/usr/bin:/bin",
        }
        self.stack = LocalStack(port=0, env=env, root=ROOT).start()

    def stop(self) -> None:
        self.stack.stop()
        self.hud.stop()
        self.issuer.__exit__(None, None, None)
        self.github.__exit__(None, None, None)

    def token(self, repo: str, repo_id: int, run_id: int, **claims: Any) -> str:
        return self.issuer.token(
            repository=repo,
            repository_id=repo_id,
            run_id=run_id,
            run_attempt=1,
            job_workflow_ref=f"{repo}/.github/workflows/ci.yml@refs/heads/main",
            lifetime=3600,
            **claims,
        )

    def callback(self, body: dict[str, Any], bearer: str) -> tuple[int, dict[str, Any]]:
        headers = {"content-type": "application/json", "authorization": f"Bearer {bearer}"}
        return _http("POST", f"{self.stack.url}/callback", json.dumps(body).encode(), headers)

    def open_pr(self) -> tuple[str, str]:
        doc = json.loads((ROOT / "examples" / "events" / "pull_request.opened.json").read_text())
        self.github.add_commit(UPSTREAM, doc["pull_request"]["head"]["sha"])
        body = json.dumps(doc).encode()
        headers = {
            "content-type": "application/json",
            "x-github-event": "pull_request",
            "x-github-delivery": str(uuid.uuid4()),
            "x-hub-signature-256": self.sign(WEBHOOK_SECRET.encode(), body),
        }
        status, _ = _http("POST", f"{self.stack.url}/webhook", body, headers)
        if status != 202:
            raise RuntimeError(f"the webhook was answered {status}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (self.github.dispatches(NORMAL) and self.github.dispatches(FLOOD)):
            time.sleep(0.1)
        return (
            self.github.dispatches(NORMAL)[0]["client_payload"]["ticket"],
            self.github.dispatches(FLOOD)[0]["client_payload"]["ticket"],
        )


def report_body(ticket: str, repo: str, job: str, run_id: int, status: str, conclusion: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schema_version": 1,
        "ticket": ticket,
        "status": status,
        "workflow_name": "CI",
        "job_name": job,
        "run_id": run_id,
        "run_attempt": 1,
        "url": f"https://github.com/{repo}/actions/runs/{run_id}",
    }
    return body | ({"conclusion": conclusion} if conclusion else {})


def scheduled_body(sha: str, job: str, run_id: int, repo: str) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "scheduled": True,
        "head_sha": sha,
        "status": "completed",
        "conclusion": "success",
        "workflow_name": "nightly",
        "job_name": job,
        "run_id": run_id,
        "run_attempt": 1,
        "url": f"https://github.com/{repo}/actions/runs/{run_id}",
    }


def run_once(workdir: Path, *, flood: bool, jobs: int, shas: int, bound_s: float) -> dict[str, Any]:
    rss_before = _rss_mb()
    s = Scenario(workdir)
    try:
        normal_ticket, flood_ticket = s.open_pr()
        answers: list[tuple[str, int, str]] = []
        lock = threading.Lock()

        def flood_job(i: int) -> None:
            run_id = 90_000 + i // 50
            body = report_body(flood_ticket, FLOOD, f"shard-{i}", run_id, "completed", "failure")
            status, reply = s.callback(body, s.token(FLOOD, FLOOD_ID, run_id))
            with lock:
                answers.append(("job", status, str(reply.get("limit") or reply.get("status") or reply.get("error"))))

        def flood_nightly(i: int) -> None:
            sha = uuid.uuid4().hex + uuid.uuid4().hex[:8]
            body = scheduled_body(sha, f"nightly-{i}", 80_000 + i, FLOOD)
            status, reply = s.callback(body, s.token(FLOOD, FLOOD_ID, 80_000 + i, event_name="schedule"))
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
            bearer = s.token(NORMAL, NORMAL_ID, 777)
            s.callback(report_body(normal_ticket, NORMAL, job, 777, "in_progress", None), bearer)
            s.callback(report_body(normal_ticket, NORMAL, job, 777, "completed", conclusion), bearer)
        arrived: dict[str, float] = {}
        deadline = reported + bound_s
        while time.time() < deadline and len(arrived) < 3:
            rows = s.hud.rows.values()
            pushed = {r["job_name"] for r in rows if r["downstream_repo"] == NORMAL and r["status"] == "completed"}
            if pushed == {"build", "test"}:
                arrived.setdefault("hud_push_s", round(time.time() - reported, 2))
            run = next((r for r in s.github.check_runs(UPSTREAM) if r["name"] == f"crcr/{NORMAL}"), {})
            if run.get("status") == "completed":
                arrived.setdefault("check_run_s", round(time.time() - reported, 2))
            if any(NORMAL in c["body"] for c in s.github.comments(UPSTREAM, PR) if c["performed_via_github_app"]):
                arrived.setdefault("comment_s", round(time.time() - reported, 2))
            time.sleep(0.1)
        flood_check_runs = len([r for r in s.github.check_runs(UPSTREAM) if r["name"].startswith(f"crcr/{FLOOD}/")])
        for future in futures:
            future.result(timeout=bound_s)
        pool.shutdown()
        upstream = [r for r in s.github.requests if r.time >= started and f"/repos/{UPSTREAM}/" in r.path]
        content = [r for r in upstream if r.method in ("POST", "PATCH")]
        flood_writes = [r.time for r in content if FLOOD in json.dumps(r.json or {})]
        items = s.stack.client("dynamodb").scan(
            TableName="crcr-local-ResultsTable",
            FilterExpression="#r = :r AND event_type = :pr",
            ExpressionAttributeNames={"#r": "repo"},
            ExpressionAttributeValues={":r": {"S": FLOOD}, ":pr": {"S": "pull_request"}},
            ConsistentRead=True,
        )["Items"]
        accepted = len([a for a in answers if a[0] == "job" and a[1] == 200])
        return {
            "flood": flood,
            "second_downstream": arrived | {"all_arrived": len(arrived) == 3},
            "flood_answers": {f"{kind} {status} {why}": n for (kind, status, why), n in Counter(answers).items()},
            "flood_jobs_accepted": accepted,
            "flood_jobs_recorded": len(items),
            "flood_check_runs_when_the_second_was_done": flood_check_runs,
            "upstream_commit_lookups": len([r for r in upstream if r.method == "GET" and "/commits/" in r.path]),
            "upstream_writes": len(content),
            "upstream_writes_in_any_minute": in_any_minute([r.time for r in content]),
            "flood_writes_in_any_minute": in_any_minute(flood_writes),
            "relay_metrics": {
                k: v
                for k, v in s.stack.status()["metrics"].items()
                if k.startswith(("DownstreamThrottled", "CallbackRejected", "CommitLook", "CheckRunPaced"))
            },
            "rss_mb": {"before": rss_before, "after": _rss_mb()},
        }
    finally:
        s.stop()


def flood_phase(jobs: int = 300, shas: int = 100, bound_s: float = 300.0) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="crcr-flood-"))
    # The relay runs in this process: its log lines (hundreds of refused floods among them) go to a file, as the
    # soak's relay logs do, so the soak's summary stays on one screen.
    from crcr.adapters.observability import logger  # noqa: PLC0415 - the functions' logger, loaded with them

    log_path = workdir / "relay.log"
    with log_path.open("a", encoding="utf-8") as log:
        previous = logger.registered_handler.setStream(log)
        try:
            quiet = run_once(workdir, flood=False, jobs=jobs, shas=shas, bound_s=bound_s)
            flooded = run_once(workdir, flood=True, jobs=jobs, shas=shas, bound_s=bound_s)
        finally:
            logger.registered_handler.setStream(previous)
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
        "method": (
            "two runs of one scenario, each on its own crcr local (in this process) with the GitHub, OIDC issuer and "
            "HUD doubles: a PR dispatched to two L4 downstreams; with the flood, one of them reports "
            f"{jobs} failed jobs on its dispatch and {shas} scheduled runs on random commits from 6 threads, and once "
            "40 of those are answered the other reports two jobs (in_progress, completed); seconds from its last "
            "report to its HUD pushes (both completed), its repository's check run completed, and the PR comment "
            "naming it"
        ),
    }


def print_phase(rep: dict[str, Any]) -> None:
    quiet, flooded = rep["without_flood"], rep["with_flood"]
    print(f"\nflood phase: {rep['jobs']} failed jobs on one dispatch and {rep['random_shas']} random scheduled commits")
    print(
        f"   {'':16} {'HUD push s':>10} {'check run s':>11} {'comment s':>9} {'lookups':>8} {'writes/min':>10} "
        f"{'RSS MB':>12}"
    )
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
    print(
        f"   ok: {rep['ok']}{'' if rep['ok'] else ' -- ' + '; '.join(rep['problems'])}; "
        f"relay log {rep.get('relay_log')}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--shas", type=int, default=100)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rep = flood_phase(args.jobs, args.shas)
    print_phase(rep)
    if args.out:
        args.out.write_text(json.dumps({"flood": rep}, indent=2) + "\n")
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
