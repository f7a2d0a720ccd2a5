"""Recorded jobs as the relay writes them: PR and push events, every state, both callback bodies, the
sweeper's rows and a scheduled run — with names that test a CSV writer."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from crcr.app.ports.jobs import JobRecord
from crcr.domain.failed_tests import cap, to_json

UPSTREAM = "pytorch/pytorch"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC).timestamp()
PR_SHA = "4f1c2b0e9a7d3c5b8e6f0a1d2c3b4a5f6e7d8c9b"
PUSH_SHA = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d"


def _ours(**fields: Any) -> str:
    """Our callback body as stored: as sent, without its ticket."""
    return json.dumps({"schema_version": 1} | fields, separators=(",", ":"), ensure_ascii=False)


def _pytorch(delivery_id: str, event_type: str, **workflow: Any) -> str:
    """PyTorch's callback action body."""
    return json.dumps({"delivery_id": delivery_id, "event_type": event_type, "workflow": workflow})


def _job(**fields: Any) -> JobRecord:
    base: dict[str, Any] = {
        "repo_id": 1000,
        "upstream": UPSTREAM,
        "device": None,
        "fingerprint": "f" * 64,
        "event_type": "pull_request",
        "version": 2,
    }
    return JobRecord(**(base | fields))


def recorded_jobs() -> list[JobRecord]:
    pr_delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    push_delivery = "0b7c9d2a-8f6e-11f0-9a3c-2f1e4d5c6b7a"
    url = "https://github.com/{}/actions/runs/{}"
    return [
        # A PR job that ran and passed, reported with our body: downstream clock, test counts, artifact.
        _job(
            dispatch_id="dsp-pr-l4", repo="org-four/L4-Repo", level=4, delivery_id=pr_delivery, head_sha=PR_SHA,
            pr=171234, run_id="12_345_678_901", run_attempt=1, job_name='build (cuda, "12.4") ü 🎉',
            workflow_name="CI, on PRs", state="completed", conclusion="success",
            url=url.format("org-four/L4-Repo", 12_345_678_901), dispatched_at=T0, started_at=T0 + 95.5,
            completed_at=T0 + 1895.25, check_run_id="31415926535", reported_started_at="2026-11-30T09:01:34.123Z",
            callback_payload=_ours(
                status="completed", conclusion="success", workflow_name="CI, on PRs",
                job_name='build (cuda, "12.4") ü 🎉', run_id=12_345_678_901, run_attempt=1,
                url=url.format("org-four/L4-Repo", 12_345_678_901), started_at="2026-11-30T09:01:34.123Z",
                completed_at="2026-11-30T14:31:35.123456789+05:00", check_run_id=31415926535,
                test_results={"passed": 1200, "failed": 0, "skipped": 34, "total": 1234},
                artifact_url="https://artifacts.example.com/l4/12345678901/1/",
            ),
        ),
        # The second attempt of a failing PR job, reported by PyTorch's action: no check_run_id sent.
        _job(
            dispatch_id="dsp-pr-l2", repo="org-two/l2-repo", level=2, delivery_id=pr_delivery, head_sha=PR_SHA,
            pr=171234, run_id="9_876_543_210", run_attempt=2, job_name='lint\\check "quoted", comma\nsecond line',
            workflow_name="lint", state="completed", conclusion="failure",
            url=url.format("org-two/l2-repo", 9_876_543_210), dispatched_at=T0, started_at=T0 + 600.0,
            completed_at=T0 + 720.125, reported_started_at="2026-11-30T09:10:00Z", failed_tests=FAILED_TESTS,
            callback_payload=_pytorch(
                pr_delivery, "pull_request", status="completed", conclusion="failure", name="lint",
                job_name='lint\\check "quoted", comma\nsecond line', run_id="9876543210", run_attempt=2,
                url=url.format("org-two/l2-repo", 9_876_543_210), started_at="2026-11-30T09:10:00Z",
                completed_at="2026-11-30T09:12:00.125Z",
                test_results={"passed": 10, "failed": 2, "skipped": 1, "total": 13},
            ),
        ),
        # A push still running: no conclusion, no completion, queue time only.
        _job(
            dispatch_id="dsp-push-l2", repo="org-two/l2-repo", level=2, delivery_id=push_delivery,
            head_sha=PUSH_SHA, pr=None, event_type="push", run_id="222_333_444", run_attempt=1,
            job_name="test (default, 1, 2)", workflow_name="trunk", state="in_progress", conclusion=None,
            url=url.format("org-two/l2-repo", 222_333_444), dispatched_at=T0 + 30, started_at=T0 + 70.0,
            completed_at=None, check_run_id="55501", reported_started_at="2026-11-30T09:01:10Z",
            version=1,
            callback_payload=_ours(
                status="in_progress", workflow_name="trunk", job_name="test (default, 1, 2)",
                run_id=222_333_444, run_attempt=1, url=url.format("org-two/l2-repo", 222_333_444),
                started_at="2026-11-30T09:01:10Z", check_run_id=55501,
            ),
        ),
        # The sweeper's row for a dispatch no job ever reported on: no name, attempt 0, never started.
        _job(
            dispatch_id="dsp-pr-l3", repo="org-three/l3-repo", level=3, device="rocm", delivery_id=pr_delivery,
            head_sha=PR_SHA, pr=171234, run_id="0", run_attempt=0, job_name="", workflow_name="",
            state="timed_out", conclusion="timed_out", fingerprint="swept", url="", dispatched_at=T0,
            started_at=None, completed_at=T0 + 3600.0, callback_payload="{}", version=1,
        ),
        # A job the sweeper timed out while it ran: it started, never finished.
        _job(
            dispatch_id="dsp-push-l4", repo="org-four/L4-Repo", level=4, delivery_id=push_delivery,
            head_sha=PUSH_SHA, pr=None, event_type="push", run_id="77_000_001", run_attempt=1, job_name="gpu-tests",
            workflow_name="CI", state="timed_out", conclusion="timed_out", fingerprint="swept",
            url=url.format("org-four/L4-Repo", 77_000_001), dispatched_at=T0 + 30, started_at=T0 + 45.0,
            completed_at=T0 + 43_245.0, check_run_id="88001", reported_started_at="2026-11-30T09:00:45Z",
            callback_payload=_ours(
                status="in_progress", workflow_name="CI", job_name="gpu-tests", run_id=77_000_001, run_attempt=1,
                url=url.format("org-four/L4-Repo", 77_000_001), check_run_id=88001,
            ),
        ),
        # First heard of completed (no in_progress): no start, no queue or execution time.
        _job(
            dispatch_id="dsp-push-l2", repo="org-two/l2-repo", level=2, delivery_id=push_delivery,
            head_sha=PUSH_SHA, pr=None, event_type="push", run_id="222_333_444", run_attempt=1, job_name="docs",
            workflow_name="trunk", state="completed", conclusion="cancelled",
            url=url.format("org-two/l2-repo", 222_333_444), dispatched_at=T0 + 30, started_at=None,
            completed_at=T0 + 400.5, check_run_id="55502", version=1,
            callback_payload=_ours(
                status="completed", conclusion="cancelled", workflow_name="trunk", job_name="docs",
                run_id=222_333_444, run_attempt=1, url=url.format("org-two/l2-repo", 222_333_444),
                check_run_id=55502,
            ),
        ),
        # A scheduled nightly run on an upstream commit: no PR, no ticket, completed only.
        _job(
            dispatch_id="sched-org-two-l2-repo-31337", repo="org-two/l2-repo", level=2, delivery_id="scheduled",
            head_sha=PUSH_SHA, pr=None, event_type="nightly", run_id="31_337", run_attempt=1,
            job_name="nightly-perf", workflow_name="nightly", state="completed", conclusion="success",
            url=url.format("org-two/l2-repo", 31_337), dispatched_at=T0 + 7200, started_at=None,
            completed_at=T0 + 7200, check_run_id="99001", reported_started_at="2026-11-30T09:00:00Z", version=1,
            callback_payload=_ours(
                scheduled=True, head_sha=PUSH_SHA, status="completed", conclusion="success",
                workflow_name="nightly", job_name="nightly-perf", run_id=31_337, run_attempt=1,
                url=url.format("org-two/l2-repo", 31_337), started_at="2026-11-30T09:00:00Z",
                completed_at="2026-11-30T11:00:00Z", check_run_id=99001,
                test_results={"passed": 50, "failed": 0, "skipped": 0, "total": 50},
            ),
        ),
        # A ciflow/trunk tag push of the PR: a push, filed under its PR, with its failing tests.
        _job(
            dispatch_id="dsp-ciflow-l4", repo="org-four/L4-Repo", level=4,
            delivery_id="5d1e2f3a-0000-11f1-8000-abcdefabcdef",
            head_sha=PR_SHA, pr=171234, event_type="push", ciflow="trunk", run_id="12_345_999_000", run_attempt=1,
            job_name="trunk-tests", workflow_name="trunk", state="completed", conclusion="failure",
            url=url.format("org-four/L4-Repo", 12_345_999_000), dispatched_at=T0 + 900, started_at=T0 + 960.0,
            completed_at=T0 + 2960.0, check_run_id="31415999999", failed_tests=to_json(cap([{"name": "test_matmul"}])),
            callback_payload=_ours(
                status="completed", conclusion="failure", workflow_name="trunk", job_name="trunk-tests",
                run_id=12_345_999_000, run_attempt=1, url=url.format("org-four/L4-Repo", 12_345_999_000),
                check_run_id=31415999999, test_results={"passed": 99, "failed": 1, "skipped": 0, "total": 100},
            ),
        ),
    ]  # fmt: skip


# Failing tests as a downstream reports them: more than the 50 kept, a message over 500 characters whose cut
# falls inside a character that takes two UTF-16 units, names a CSV writer must quote, a zero duration.
FAILED_TESTS = to_json(
    cap(
        [
            {
                "name": 'test_add[cuda, "fp16"]',
                "classname": "test.TestOps",
                "message": "x" * 499 + "🎉 and more",
                "duration": 1.25,
            },
            {"name": "test_zero", "duration": 0},
            {"name": "test_nomsg", "message": "", "classname": ""},
        ]
        + [{"name": f"test_{i}", "message": "AssertionError: ü", "duration": 2.0} for i in range(60)]
    )
)
