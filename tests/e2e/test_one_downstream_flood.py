"""One downstream cannot hurt another, on `crcr local`: a downstream floods its own PR dispatch with hundreds of
failed jobs and names random commits in scheduled reports, while a second downstream reports normally on the same
PR. The second's HUD pushes, check runs and PR comment arrive while the flood's own work is still paced; every
report the relay accepted is recorded; and the upstream installation's GitHub requests stay within its budget.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT, Relay, event_body, http
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import oidc, scheduled_body  # noqa: F401 - oidc is a fixture
from tests.e2e.test_pr_comment import COMMENT_PERMISSIONS

pytestmark = pytest.mark.e2e
UPSTREAM = "pytorch/pytorch"
PR = 170001
NORMAL, NORMAL_ID = "org-four/L4-Repo", 5003
FLOOD, FLOOD_ID = "org-five/flood", 6000
ALLOWLIST = (
    "L4:\n  - org-four/L4-Repo: [oncall-four]\n  - org-five/flood\n"
    "repos:\n  org-four/L4-Repo:\n    events: [pull_request]\n  org-five/flood:\n    events: [pull_request]\n"
)
FLOOD_JOBS = 200
RANDOM_SHAS = 60
LOOKUPS_PER_HOUR = 30
# GitHub.com's content-creating budget as the relay paces it (crcr.domain.pacing.CONTENT_RATES): in any minute at
# most 60 + 15; a downstream's share, half of it.
INSTALLATION_PER_MINUTE = 75
SHARE_PER_MINUTE = 38


def token(oidc: OidcIssuer, repo: str, repo_id: int, run_id: int, **claims: Any) -> str:  # noqa: F811
    return oidc.token(
        repository=repo,
        repository_id=repo_id,
        run_id=run_id,
        run_attempt=1,
        job_workflow_ref=f"{repo}/.github/workflows/ci.yml@refs/heads/main",
        lifetime=3600,
        **claims,
    )


def callback(relay: Relay, body: dict[str, Any], bearer: str) -> tuple[int, dict[str, Any]]:
    headers = {"content-type": "application/json", "authorization": f"Bearer {bearer}"}
    return http("POST", f"{relay.url}/callback", json.dumps(body).encode(), headers)


def load_harness() -> ModuleType:
    """bench/harness.py, whose downstream report body and windowed count this test shares with the bench."""
    if "harness" not in sys.modules:
        sys.path.append(str(ROOT / "bench"))  # its write_units
        spec = importlib.util.spec_from_file_location("harness", ROOT / "bench" / "harness.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["harness"] = module
        spec.loader.exec_module(module)
    return sys.modules["harness"]


report = load_harness().report_body


def writes_in_any_minute(times: list[float]) -> int:
    return int(load_harness().most_in_any(times, 60.0))


def test_a_flooding_downstream_slows_only_itself(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    hud: HudDouble,
) -> None:
    relay = relay_factory(
        allowlist=ALLOWLIST,
        env={
            "CRCR_OIDC_ISSUER": oidc.url,
            "CRCR_OIDC_AUDIENCE": "crcr",
            "CRCR_COMMENT_SETTLE_S": "1",
            "CRCR_COMMIT_LOOKUPS_PER_HOUR": str(LOOKUPS_PER_HOUR),
        },
    )
    github = relay.github
    github.install(FLOOD, installation_id=200, repo_id=FLOOD_ID)
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=COMMENT_PERMISSIONS)
    github.add_issue(UPSTREAM, PR)
    doc = json.loads(event_body("pull_request.opened.json"))
    head = doc["pull_request"]["head"]["sha"]
    github.add_commit(UPSTREAM, head)
    assert relay.post("pull_request", json.dumps(doc).encode(), str(uuid.uuid4()))[0] == 202
    relay.wait_dispatches({NORMAL: 1, FLOOD: 1}, settle_s=0)
    flood_ticket = github.dispatches(FLOOD)[0]["client_payload"]["ticket"]
    normal_ticket = github.dispatches(NORMAL)[0]["client_payload"]["ticket"]

    answers: list[tuple[str, int, str]] = []  # (kind, status, job) of every flood report
    lock = threading.Lock()

    def flood_job(i: int) -> None:
        run_id = 90_000 + i // 50  # four runs of 50 jobs
        body = report(flood_ticket, FLOOD, f"shard-{i}", run_id, "completed", "failure")
        status, reply = callback(relay, body, token(oidc, FLOOD, FLOOD_ID, run_id))
        with lock:
            answers.append(("job", status, reply.get("status", reply.get("error", ""))))

    def flood_nightly(i: int) -> None:
        sha = uuid.uuid4().hex + uuid.uuid4().hex[:8]  # a commit no one pushed
        body = scheduled_body(sha, job_name=f"nightly-{i}", run_id=80_000 + i)
        status, reply = callback(relay, body, token(oidc, FLOOD, FLOOD_ID, 80_000 + i, event_name="schedule"))
        with lock:
            answers.append(("nightly", status, str(reply.get("limit") or reply.get("error") or reply.get("status"))))

    started = time.time()
    pool = ThreadPoolExecutor(6)
    flood = [pool.submit(flood_job, i) for i in range(FLOOD_JOBS)]
    flood += [pool.submit(flood_nightly, i) for i in range(RANDOM_SHAS)]
    while sum(f.done() for f in flood) < 40:  # the flood is under way
        time.sleep(0.05)

    # The second downstream reports as it always does: two jobs start, one passes, one fails.
    for job, conclusion in (("build", "success"), ("test", "failure")):
        bearer = token(oidc, NORMAL, NORMAL_ID, 777)
        assert callback(relay, report(normal_ticket, NORMAL, job, 777, "in_progress", None), bearer)[0] == 200
        assert callback(relay, report(normal_ticket, NORMAL, job, 777, "completed", conclusion), bearer)[0] == 200

    def normal_done() -> bool:
        pushed = {
            r["job_name"] for r in hud.rows.values() if r["downstream_repo"] == NORMAL and r["status"] == "completed"
        }
        runs = {r["name"]: r for r in github.check_runs(UPSTREAM)}
        repo_run = runs.get(f"crcr/{NORMAL}", {})
        comment = [c for c in github.comments(UPSTREAM, PR) if c["performed_via_github_app"]]
        return (
            pushed == {"build", "test"}
            and repo_run.get("status") == "completed"
            and repo_run.get("conclusion") == "failure"
            and any(NORMAL in c["body"] for c in comment)
        )

    deadline = time.time() + 240
    while time.time() < deadline and not normal_done():
        time.sleep(0.25)
    assert normal_done(), "the second downstream's HUD pushes, check run and comment did not arrive"
    # ...while the flood's own check runs were still waiting on its share of the budget.
    flood_runs_then = [r for r in github.check_runs(UPSTREAM) if r["name"].startswith(f"crcr/{FLOOD}/")]
    assert len(flood_runs_then) < FLOOD_JOBS

    for future in flood:
        future.result(timeout=240)
    pool.shutdown()

    # Every report the relay accepted is recorded; what it refused, it said so, naming the limit.
    recorded = {job for kind, status, job in answers if kind == "job" and status == 200}
    assert len([a for a in answers if a[0] == "job"]) == FLOOD_JOBS
    assert all(status in (200, 429) for kind, status, _ in answers if kind == "job")  # 429: the callback rate
    items = relay.stack.client("dynamodb").scan(
        TableName="crcr-local-ResultsTable",
        FilterExpression="#r = :r",
        ExpressionAttributeNames={"#r": "repo"},
        ExpressionAttributeValues={":r": {"S": FLOOD}},
        ConsistentRead=True,
    )["Items"]
    assert len([i for i in items if i["event_type"]["S"] == "pull_request"]) == len(
        [a for a in answers if a[0] == "job" and a[1] == 200]
    )
    assert recorded  # the flood itself got through, within its limits
    nightlies = [reason for kind, status, reason in answers if kind == "nightly"]
    assert nightlies.count("commit_lookups_per_hour") == RANDOM_SHAS - LOOKUPS_PER_HOUR
    assert relay.metric("DownstreamThrottled") >= RANDOM_SHAS - LOOKUPS_PER_HOUR

    # The upstream installation's GitHub requests stay within its budget, and the flood within its share.
    upstream = [r for r in github.requests if r.time >= started and f"/repos/{UPSTREAM}/" in r.path]
    lookups = [r for r in upstream if r.method == "GET" and "/commits/" in r.path]
    assert len(lookups) == LOOKUPS_PER_HOUR  # one per unknown commit, never past the downstream's hourly budget
    content = [r for r in upstream if r.method in ("POST", "PATCH")]
    assert writes_in_any_minute([r.time for r in content]) <= INSTALLATION_PER_MINUTE
    flood_writes = [r.time for r in content if FLOOD in json.dumps(r.json or {})]
    assert writes_in_any_minute(flood_writes) <= SHARE_PER_MINUTE
    status, page = http("GET", f"{relay.url}/hud/data/repo/org-five/flood.json")
    assert status == 200 and "commit_lookups_per_hour" in page["refused"]["reasons"]
    assert page["refused"]["total"] >= 10  # counted on the page at 1, 10, 100, ... of the hour
