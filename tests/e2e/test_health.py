"""`crcr health` against `crcr local`: jobs recorded through real callbacks, then the operator command run
with the environment of the stack's ready line, as a working group would before demoting a downstream."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest

from tests.conftest import LISTED, ROOT, Relay, event_body
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import Scenario, oidc  # noqa: F401 - oidc is a fixture

pytestmark = pytest.mark.e2e
L4 = "org-four/L4-Repo"


def test_an_l4_repository_failing_its_jobs_is_demoted_with_the_numbers(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    relay = relay_factory(env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr"})
    relay.github.install("pytorch/pytorch", installation_id=1, repo_id=65600975)  # its check runs, as in production
    body = event_body("pull_request.opened.json")
    delivery = str(uuid.uuid4())
    assert relay.post("pull_request", body, delivery)[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    s = Scenario(relay, oidc, delivery, json.loads(body)["pull_request"]["head"]["sha"])

    token = s.token(L4)
    results = {"build": "success", "test-cpu": "failure", "test-gpu": "failure", "test-dist": "timed_out"}
    for job, conclusion in results.items():
        assert s.post(s.body(L4, job_name=job), token) == (200, {"status": "recorded"})
        done = s.body(L4, job_name=job, status="completed", conclusion=conclusion)
        assert s.post(done, token) == (200, {"status": "recorded"})

    env = relay.stack.operator_env()
    assert {"AWS_ENDPOINT_URL", "CRCR_RESULTS_TABLE", "CRCR_ALLOWLIST"} <= set(env)
    run = subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "health", "--json", "--min-jobs", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    report = {row["repo"]: row for row in json.loads(run.stdout)}
    assert list(report) == ["org-one/l1-repo", "org-two/l2-repo", "org-three/l3-repo", L4]
    l4 = report[L4]
    assert (l4["level"], l4["jobs"], l4["verdict"]) == ("L4", 4, "demote")
    assert (l4["pass_rate"], l4["timeout_rate"]) == (0.25, 0.25)
    assert l4["reasons"][:2] == ["pass rate 25.0% < 90% required", "timeout rate 25.0% ≥ 1% limit"]
    assert l4["avg_queue_s"] is not None and l4["p50_end_to_end_s"] is not None
    # Nothing reported for the others: too few jobs to judge, and L1 never records any.
    assert report["org-three/l3-repo"]["verdict"] == "insufficient_data"
    assert report["org-three/l3-repo"]["reasons"] == ["0 finished jobs in 14 days < 1 required"]
    assert report["org-one/l1-repo"]["reasons"] == ["L1 records no results: nothing to judge"]


def test_a_job_that_failed_then_passed_on_its_rerun_is_counted_flaky_per_job(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    relay = relay_factory(env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr"})
    relay.github.install("pytorch/pytorch", installation_id=1, repo_id=65600975)
    body = event_body("pull_request.opened.json")
    delivery = str(uuid.uuid4())
    assert relay.post("pull_request", body, delivery)[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    s = Scenario(relay, oidc, delivery, json.loads(body)["pull_request"]["head"]["sha"])

    # Attempt 1: build passes, test fails; the re-run (attempt 2 of the same run) passes test.
    first, second = s.token(L4), s.token(L4, run_attempt=2)
    for job, conclusion in (("build", "success"), ("test", "failure")):
        assert s.post(s.body(L4, job_name=job, status="completed", conclusion=conclusion), first)[0] == 200
    rerun = s.body(L4, job_name="test", run_attempt=2, status="completed", conclusion="success")
    assert s.post(rerun, second) == (200, {"status": "recorded"})

    def health(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "crcr.ops.cli", "health", *flags, "--min-jobs", "1"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=relay.stack.operator_env(),
            check=False,
            timeout=60,
        )

    as_json = health("--json")
    assert as_json.returncode == 0, as_json.stderr
    l4 = next(row for row in json.loads(as_json.stdout) if row["repo"] == L4)
    # Each job counts once, as its latest attempt: both passed. The flip shows as flaky, per workflow/job.
    assert (l4["jobs"], l4["pass_rate"], l4["flaky"], l4["flaky_jobs"]) == (2, 1.0, 1, {"CI/test": 1})
    table = health()
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    column = header.split().index("flaky")
    assert next(line.split() for line in lines if line.startswith(L4))[column] == "1"
