"""Every data-access class writes, against moto, exactly the items it wrote before the items went through boto3's codec
(tests/integration/stored_items.json, captured at 2026-12-07's f5b946e), and reads them back the same."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from crcr.adapters.branch import DynamoBranch
from crcr.adapters.check_runs import DynamoCheckRuns
from crcr.adapters.deliveries import DynamoDeliveries
from crcr.adapters.ledger import DynamoLedger, dispatched_row
from crcr.adapters.levels import DynamoLevels
from crcr.adapters.pacer import DynamoPacer
from crcr.adapters.pr_comment import DynamoPrComment
from crcr.adapters.pulls import DynamoPullRequests
from crcr.adapters.rate_limits import DynamoDailyBudget, DynamoRateLimiter
from crcr.adapters.redeliveries import DynamoRedeliveries
from crcr.adapters.refusals import DynamoRefusals
from crcr.adapters.regressions import DynamoRegressions
from crcr.adapters.reruns import DynamoReruns
from crcr.adapters.results import DynamoResults
from crcr.adapters.runs import DynamoRuns
from crcr.adapters.scheduled_export import DynamoExportMarks
from crcr.adapters.shadow import DynamoShadow
from crcr.adapters.stream import images
from crcr.adapters.torchci_keys import DynamoTorchciKeys
from crcr.app.ports.jobs import JobLimitReached, JobRecord
from crcr.app.ports.ledger import BuildRef, LedgerState
from crcr.app.ports.runs import BoundRun
from crcr.contracts.messages import DispatchMessage
from crcr.domain.checks import Known
from crcr.domain.comment import Posted
from crcr.domain.levels import Level
from crcr.domain.regressions import Blamed, BranchCommit, Tracked
from crcr.domain.shadow import ShadowDecision
from crcr.domain.ticket import TicketClaims
from tests.integration.aws import create_tables, moto_server

FIXTURE = Path(__file__).with_name("stored_items.json")
# CRCR_WRITE_STORED_ITEMS=1 writes the fixture from what the adapters write now, instead of comparing with it: only
# ever on purpose, when what is stored is meant to change.
WRITE = os.environ.get("CRCR_WRITE_STORED_ITEMS") == "1"

NOW = 1_796_000_000.123456  # a time with all six of the table's decimals
SHA = "a" * 40


def plain(value: Any) -> Any:
    """What an adapter returned, as JSON (sets sorted: their order is the hash seed's)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(plain(v) for v in value)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def message(delivery: str, repo: str = "Org/Backend", **fields: Any) -> DispatchMessage:
    base: dict[str, Any] = {
        "delivery_id": delivery,
        "event_type": "pull_request",
        "action": "synchronize",
        "target_repo": repo,
        "level": Level.L3,
        "upstream": "pytorch/pytorch",
        "pr_number": 5,
        "head_sha": SHA,
        "payload": {},
        "planned_at": 0.0,
    }
    return DispatchMessage(**(base | fields))


def claims(**fields: Any) -> TicketClaims:
    base: dict[str, Any] = {
        "sub": "Org/Backend",
        "repo_id": 77,
        "delivery_id": "dlv-1",
        "upstream": "pytorch/pytorch",
        "pr": 5,
        "head_sha": SHA,
        "level": 3,
        "iat": 1,
        "exp": 2,
        "jti": "dsp-1",
    }
    return TicketClaims(**(base | fields))


def job(**fields: Any) -> JobRecord:
    base: dict[str, Any] = {
        "dispatch_id": "dsp-1",
        "run_id": "9001",
        "run_attempt": 1,
        "job_name": "test (gpu, 1)",
        "workflow_name": "CI",
        "state": "in_progress",
        "conclusion": None,
        "fingerprint": "fp",
        "url": "https://github.com/Org/Backend/actions/runs/9001",
        "repo": "Org/Backend",
        "repo_id": 77,
        "level": 3,
        "delivery_id": "dlv-1",
        "upstream": "pytorch/pytorch",
        "head_sha": SHA,
        "pr": 5,
        "device": "gpu",
        "dispatched_at": NOW,
        "started_at": NOW + 10.5,
        "completed_at": None,
        "callback_payload": '{"status": "in_progress"}',
        "event_type": "pull_request",
        "check_run_id": "crcr-1",
    }
    return JobRecord(**(base | fields))


def write_deliveries(ddb: Any, state: str, results: str) -> list[Any]:
    store = DynamoDeliveries(ddb, state)
    body, other = "b" * 64, "c" * 64
    reads = [store.claim_delivery("dlv-1", "pull_request", NOW, body)]
    reads.append(store.claim_delivery("dlv-1", "pull_request", NOW + 1, body))
    store.mark_queued("dlv-1", NOW + 2.5)
    reads.append(store.claim_delivery("dlv-1", "pull_request", NOW + 3, body))
    reads.append(store.claim_delivery("dlv-2", "pull_request", NOW + 4, body))
    reads.append(store.claim_delivery("dlv-1", "pull_request", NOW + 5, other))
    return reads


def write_ledger(ddb: Any, state: str, results: str) -> list[Any]:
    ledger = DynamoLedger(ddb, state, start_timeout_s=600.0, run_create_timeout_s=120.0)
    first = message("dlv-1")
    reads: list[Any] = [ledger.claim(first, "dsp-1", NOW, 30.0, "owner-1", 77, "Org/Backend", row=True)]
    reads.append(ledger.claim(first, "dsp-1", NOW + 1, 30.0, "owner-2", 77, "Org/Backend"))
    ledger.mark_dispatched(first, claims(), NOW + 2.25)
    reads.append(ledger.get("dlv-1", "Org/Backend"))
    built = message("dlv-2", "Org/Kite", pr_number=None, ciflow="ciflow/npu/5", device="npu")
    ledger.claim(built, "dsp-2", NOW, 30.0, "owner-1", 78, "Org/Kite")
    build = BuildRef("0190-uuid", 42, "https://buildkite.com/org/kite/builds/42", "org/kite")
    ledger.mark_dispatched(built, claims(ci="buildkite", sub="Org/Kite"), NOW + 3, build=build)
    bound = message("dlv-3", "Org/Bound", level=Level.L4)
    ledger.claim(bound, "dsp-3", NOW, 30.0, "owner-1", 79, "Org/Bound")
    ledger.mark_dispatched(bound, claims(sub="Org/Bound"), NOW + 4, run_id="5005")
    failed = message("dlv-4", "Org/Failed", level=Level.L2)
    ledger.claim(failed, "dsp-4", NOW, 30.0, "owner-1", 80, "Org/Failed")
    ledger.mark(failed, LedgerState.RETRYING, "GitHub answered 502", NOW + 5, owner="owner-1", settled=True)
    ledger.mark(message("dlv-5", "Org/Never"), LedgerState.FAILED, "not installed", NOW + 6)
    ledger.note_run("dlv-1", "Org/Backend", "6006")
    ledger.rewatch_start("dlv-1", "Org/Backend", NOW + 900.5)
    reads.append(ledger.due_starts(NOW + 1000))
    ledger.clear_start_watch("dlv-2", "Org/Kite")
    reads.append(ledger.by_dispatch("dsp-3"))
    reads.append(ledger.by_dispatch("dsp-none"))
    # What ChecksFunction's stream trigger makes of the rows as their new images.
    for item in ddb.scan(TableName=state, ConsistentRead=True)["Items"]:
        reads.append(dispatched_row({"dynamodb": {"NewImage": item, "OldImage": {}}}))
    return reads


def write_levels(ddb: Any, state: str, results: str) -> list[Any]:
    levels = DynamoLevels(ddb, state, first_l2_job=lambda repo: NOW - 86_400.5 if repo == "Org/Old" else None)
    reads: list[Any] = [levels.l2_since([("Org/Old", 3), ("Org/New", 2), ("Org/Low", 1)], NOW)]
    reads.append(levels.l2_since([("Org/Old", 3)], NOW + 10))
    levels.set_dedupe("Org/Old", "shown", NOW + 1.5)
    reads.append(levels.dedupe_states())
    levels.set_demotion("Org/Old", 99, NOW + 2.75)
    levels.set_demotion("Org/New", 100, NOW + 3)
    reads.append(levels.open_demotions())
    levels.clear_demotion("Org/New", closed_at=NOW + 4.5)
    levels.clear_demotion("Org/Low")
    reads.append(levels.cooling(NOW + 5, 3600.0))
    return reads


def write_check_runs(ddb: Any, state: str, results: str) -> list[Any]:
    checks = DynamoCheckRuns(ddb, state)
    up = "pytorch/pytorch"
    reads: list[Any] = [checks.record_check(up, SHA, "npu / test", Known(101, "in_progress", None, 1), 0, NOW)]
    reads.append(checks.record_check(up, SHA, "npu / test", Known(101, "completed", "failure", 1), 1, NOW + 1))
    reads.append(checks.record_check(up, SHA, "npu / test", Known(101, "queued", None, 2), 2, NOW + 2))
    reads.append(checks.record_check(up, SHA, "gpu / build", Known(102, "completed", "success"), 0, NOW))
    reads.append(checks.record_check(up, SHA, "gpu / build", Known(102, "completed", "success"), 5, NOW))
    reads.append(checks.get_check(up, SHA, "npu / test"))
    reads.append(checks.get_check(up, SHA, "none"))
    reads.append(checks.checks_of_head(up, SHA))
    reads.append(checks.book_head(up, SHA, "t-1", NOW, NOW + 5.5, NOW - 60, {"dlv-1 Org/B", "dlv-0 Org/A"}))
    reads.append(checks.book_head(up, SHA, "t-2", NOW + 1, NOW + 6.5, NOW - 59, set()))
    reads.append(checks.lock_head(up, SHA, "t-1", NOW + 7, 30.0, NOW + 7, NOW - 60))
    reads.append(checks.lock_head(up, SHA, "t-1", NOW + 8, 30.0, NOW + 8, NOW - 60))
    reads.append(checks.finish_head(up, SHA, "t-1", 1, NOW + 9, {"dlv-0 Org/A"}, keep=False))
    reads.append(checks.book_head(up, "b" * 40, "t-3", NOW, NOW + 5, NOW - 60, {"dlv-2 Org/C"}))
    reads.append(checks.lock_head(up, "b" * 40, None, NOW + 1, 30.0, NOW + 1, NOW - 60))
    reads.append(checks.finish_head(up, "b" * 40, None, 1, NOW + 2, set(), keep=True))
    checks.drop_head(up, "b" * 40, "t-3")
    return reads


def write_pr_comment(ddb: Any, state: str, results: str) -> list[Any]:
    store = DynamoPrComment(ddb, state)
    up = "pytorch/pytorch"
    reads: list[Any] = [store.get_comment(up, 5)]
    reads.append(store.book_render(up, 5, "r-1", NOW, NOW + 2.5, NOW - 120))
    reads.append(store.get_comment(up, 5))
    reads.append(store.lock_comment(up, 5, "r-1", 0, NOW + 3, 30.0))
    posted = Posted(7001, "hash-1", frozenset({"org/b @ann", "org/a @bob"}), frozenset({"org/a @bob"}), ("ok abc 1",))
    reads.append(store.release_comment(up, 5, 1, NOW + 4, posted))
    reads.append(store.end_render(up, 5, "r-1", NOW + 5))
    reads.append(store.get_comment(up, 5))
    reads.append(store.book_render(up, 5, "r-2", NOW + 6, NOW + 8, NOW - 100))
    reads.append(store.lock_comment(up, 5, "r-2", 2, NOW + 9, 30.0))
    reads.append(store.release_comment(up, 5, 3, NOW + 10, Posted(None, "hash-2")))
    reads.append(store.get_comment(up, 5))
    reads.append(store.end_render(up, 5, "r-2", NOW + 11, keep=True))
    store.drop_render(up, 5, "r-2")
    reads.append(store.get_comment(up, 5))
    return reads


def write_pulls(ddb: Any, state: str, results: str) -> list[Any]:
    pulls = DynamoPullRequests(ddb, state)
    up = "pytorch/pytorch"
    reads: list[Any] = [pulls.record_pr_head(up, 5, SHA, "2026-12-01T00:00:00Z", ("ciflow/npu", "bug"), "c" * 40)]
    reads.append(pulls.record_pr_head(up, 5, "b" * 40, "2026-12-01T00:01:00Z", closed=True))
    reads.append(pulls.record_pr_head(up, 5, SHA, "2026-11-30T00:00:00Z"))
    reads.append(pulls.pr_info(up, 5))
    reads.append(pulls.pr_info(up, 6))
    pulls.mark_merged(up, 5, "d" * 40, NOW)
    reads.append(pulls.merged_commit(up, 5))
    reads.append(pulls.merged_commit(up, 6))
    reads.append(pulls.mark_released(up, 5, SHA, "Org/Backend", "dlv-1", NOW + 1.5))
    reads.append(pulls.mark_released(up, 5, SHA, "Org/Backend", "dlv-1", NOW + 2))
    reads.append(pulls.mark_released(up, 5, SHA, "Org/Backend", "dlv-2", NOW + 3))
    return reads


def write_branch(ddb: Any, state: str, results: str) -> list[Any]:
    branch = DynamoBranch(ddb, state)
    up = "pytorch/pytorch"
    commits = [
        BranchCommit(f"{i:040x}", NOW + i * 0.5, place=i % 2, parent=f"{i - 1:040x}" if i else None, pr=100 + i)
        for i in range(30)
    ]
    commits[3] = dataclasses.replace(commits[3], title="Fix (#103)", author="ann", files=("a.py", "b/c.py"))
    branch.record_commits(up, commits)
    reads: list[Any] = [branch.commit_times(up, [commits[0].sha, commits[3].sha, "f" * 40])]
    reads.append(branch.commits_between(up, NOW + 1, NOW + 3))
    branch.remember_commit(up, "e" * 40, True, NOW, "Org/Backend")
    branch.remember_commit(up, "f" * 40, False, NOW + 0.5, "Org/Backend")
    reads.append(branch.commit_seen(up, commits[1].sha, NOW, "Org/Backend"))
    reads.append(branch.commit_seen(up, "e" * 40, NOW, "Org/Other"))
    reads.append(branch.commit_seen(up, "f" * 40, NOW, "Org/Backend"))
    reads.append(branch.commit_seen(up, "f" * 40, NOW, "Org/Other"))
    return reads


def write_runs(ddb: Any, state: str, results: str) -> list[Any]:
    runs = DynamoRuns(ddb, state)
    run = BoundRun("Org/Backend", "6006", "dlv-1", "dsp-1", 1, "requested", workflow_name="CI", url="u", progress=1)
    reads: list[Any] = [runs.record(run, NOW, watch_until=NOW + 600.25)]
    done = dataclasses.replace(run, status="completed", conclusion="failure", progress=3)
    reads.append(runs.record(done, NOW + 1, watch_until=None))
    reads.append(runs.record(run, NOW + 2, watch_until=None))
    reads.append(runs.claim_reconcile("Org/Backend", "6006", 1, "owner-1", NOW + 3, 60.0))
    reads.append(runs.claim_reconcile("Org/Backend", "6006", 1, "owner-2", NOW + 4, 60.0))
    runs.reconciled("Org/Backend", "6006", 1, "owner-1")
    reads.append(runs.claim_reconcile("Org/Backend", "6006", 2, "owner-2", NOW + 5, 60.0))
    runs.release("Org/Backend", "6006", "owner-2")
    other = dataclasses.replace(run, run_id="7007")
    runs.record(other, NOW, watch_until=None)
    runs.watch("Org/Backend", "7007", NOW + 30.5)
    reads.append(runs.due_runs(NOW + 60))
    reads.append(runs.bound("Org/Backend", "6006"))
    reads.append(runs.bound("Org/Backend", "none"))
    return reads


def write_reruns(ddb: Any, state: str, results: str) -> list[Any]:
    reruns = DynamoReruns(ddb, state)
    reads: list[Any] = [reruns.claim_rerun("dsp-1", "6006", "owner-1", NOW, 30.5)]
    reads.append(reruns.claim_rerun("dsp-1", "6006", "owner-2", NOW + 1, 30.0))
    reads.append(reruns.mark_rerun("dsp-1", "6006", "requested", NOW + 2))
    reads.append(reruns.mark_rerun("dsp-1", "6006", "requested", NOW + 3))
    reruns.release_rerun("dsp-1", "6006", "owner-1")
    reads.append(reruns.claim_rerun("dsp-1", "6006", "owner-2", NOW + 4, 30.0))
    reads.append(reruns.rerun_state("dsp-1", "6006"))
    reads.append(reruns.rerun_state("dsp-1", "none"))
    reads.append(reruns.claim_rerun("dsp-2", "7007", "owner-1", NOW, 30.0))
    return reads


def write_redeliveries(ddb: Any, state: str, results: str) -> list[Any]:
    store = DynamoRedeliveries(ddb, state)
    DynamoDeliveries(ddb, state).claim_delivery("guid-1", "push", NOW, "b" * 64)
    reads: list[Any] = [store.delivery_state("guid-1"), store.delivery_state("guid-none")]
    reads.append(store.claim_redelivery("guid-1", 11, "owner-1", NOW, 30.5, 3))
    reads.append(store.claim_redelivery("guid-1", 11, "owner-2", NOW + 1, 30.0, 3))
    reads.append(store.claim_redelivery("guid-1", 11, "owner-2", NOW + 60, 30.0, 3))
    store.finish_redelivery("guid-1", 11, "owner-2", "requested", NOW + 61)
    reads.append(store.claim_redelivery("guid-1", 11, "owner-3", NOW + 62, 30.0, 3))
    reads.append(store.claim_redelivery("guid-1", 12, "owner-3", NOW + 63, 30.0, 2))
    store.release_redelivery("guid-1", 12, "owner-3")
    reads.append(store.claim_redelivery("guid-1", 13, "owner-4", NOW + 64, 30.0, 2))
    reads.append(store.claim_redelivery("guid-1", 14, "owner-4", NOW + 65, 30.0, 2))
    reads.append(store.reconcile_cursor())
    store.save_reconcile_cursor(NOW + 66.75)
    reads.append(store.reconcile_cursor())
    return reads


def write_pacer(ddb: Any, state: str, results: str) -> list[Any]:
    pacer = DynamoPacer(ddb, state, sleep=lambda _: None, rand=lambda: 0.5)
    reads: list[Any] = [pacer.acquire(1, NOW) for _ in range(3)]
    reads.append(pacer.acquire(1, NOW + 0.25, reserve=True))
    reads.append(pacer.acquire_many("org-x", NOW, 4))
    reads.append(pacer.level(1, NOW + 1))
    other = DynamoPacer(ddb, state, sleep=lambda _: None, rand=lambda: 0.5)
    reads.append(other.acquire(1, NOW + 2))
    reads.append(other.level(1, NOW + 100))
    return reads


def write_results(ddb: Any, state: str, results: str) -> list[Any]:
    store = DynamoResults(ddb, results, run_timeout_s=3600.0)
    started = job()
    reads: list[Any] = [store.put_job(started, None), store.put_job(started, None)]
    done = dataclasses.replace(
        started, state="completed", conclusion="failure", completed_at=NOW + 600.75, version=1, failure_kind="test",
        triage='{"kind": "test"}', failed_tests='[{"name": "t"}]', source="github+report",
        reported_conclusion="success", reported_started_at="2026-12-01T00:00:00Z", unanswered=2,
    )  # fmt: skip
    reads.append(store.put_job(done, 0))
    reads.append(store.set_verdict(done, "new", baseline_sha="e" * 40, known_issues=""))
    reads.append(store.set_verdict(done, "new", baseline_sha="e" * 40))
    branch = job(
        dispatch_id="dsp-2", run_id="0190-uuid", event_type="push", pr=None, device=None, ciflow=None,
        state="completed", conclusion="success", started_at=None, completed_at=NOW + 5, reason="",
    )  # fmt: skip
    store.put_job(branch, None)
    nightly = job(dispatch_id="dsp-3", event_type="nightly", pr=None, recheck_at=NOW + 7200.5, ciflow="ciflow/x/1")
    store.put_job(nightly, None)
    store.put_job(job(dispatch_id="dsp-4", state="not_started", reason="no run", started_at=None, level=2), None)
    reads.append(store.get_job("dsp-1", "9001", 1, "test (gpu, 1)"))
    reads.append(store.jobs_for_head("pytorch/pytorch", SHA))
    reads.append(store.jobs_of_repo("Org/Backend", NOW - 1))
    reads.append(store.baseline_jobs("Org/Backend", "CI", "test (gpu, 1)", NOW - 1))
    reads.append(store.branch_results("Org/Backend", "CI", "test (gpu, 1)", 5))
    reads.append(store.newest_of_repo("Org/Backend", 10))
    reads.append(store.first_l2_job("Org/Backend"))
    reads.append(store.jobs_of_dispatch("dsp-1"))
    reads.append([store.has_jobs("dsp-1"), store.has_jobs("dsp-none")])
    reads.append(store.attempts_of_job("dsp-1", "9001", "test (gpu, 1)"))
    reads.append(sorted(plain(list(store.all_jobs())), key=json.dumps))
    reads.append(store.due_runs(NOW + 100_000))
    # What the reporter's stream trigger makes of a row's images.
    [item] = ddb.query(
        TableName=results, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "DSP#dsp-1"}}
    )["Items"]
    reads.append(images({"dynamodb": {"NewImage": item, "OldImage": item}}))
    return reads


def write_regressions(ddb: Any, state: str, results: str) -> list[Any]:
    store = DynamoRegressions(ddb, state)
    up = "pytorch/pytorch"
    tracked = Tracked(
        "Org/Backend", "CI", "test", "a" * 40, "b" * 40, "c" * 40, (Blamed("b" * 40, 7, "Fix (#7)", "ann"),), NOW
    )
    reads: list[Any] = [store.job_regressions(up, "Org/Backend", "CI", "test")]
    reads.append(store.save_job_regressions(up, "Org/Backend", "CI", "test", [tracked], 0))
    reads.append(store.save_job_regressions(up, "Org/Backend", "CI", "test", [tracked], 0))
    fixed = dataclasses.replace(tracked, fixed_by="d" * 40, closed_at=NOW + 100.5)
    reads.append(store.save_job_regressions(up, "Org/Backend", "CI", "test", [fixed], 1))
    reads.append(store.save_job_regressions(up, "Org/Other", "CI", "build", [tracked], 0))
    reads.append(store.job_regressions(up, "Org/Backend", "CI", "test"))
    reads.append(store.regressions_of(up))
    reads.append(store.save_job_regressions(up, "Org/Other", "CI", "build", [], 1))
    return reads


def write_hud_keys(ddb: Any, state: str, results: str) -> list[Any]:
    keys = DynamoTorchciKeys(ddb, state)
    reads: list[Any] = [keys.claim("dsp-1", "key-a", "job-1", NOW, 3)]
    reads.append(keys.claim("dsp-1", "key-a", "job-1", NOW + 1, 3))
    reads.append(keys.claim("dsp-1", "key-a", "job-2", NOW + 2, 3))
    reads.append(keys.claim("dsp-1", None, "job-3", NOW + 3, 3))
    try:
        keys.claim("dsp-1", None, "job-4", NOW + 4, 2)
    except JobLimitReached as exc:
        reads.append(str(exc))
    return reads


def write_shadow(ddb: Any, state: str, results: str) -> list[Any]:
    shadow = DynamoShadow(ddb, state)
    decisions = [
        ShadowDecision(
            f"dlv-{i}", NOW + i * 1.5, "pull_request", "opened", "pytorch/pytorch", 5, SHA, f"Org/R{i}", 3, d
        )
        for i, d in enumerate(("dispatch", "hold", "skip"))
    ]
    decisions[0] = dataclasses.replace(decisions[0], payload={"pr": 5, "labels": ["a"]}, target={"pipeline": "p"})
    shadow.record(decisions)
    up = "pytorch/pytorch"
    return [shadow.recent(up, 2), shadow.recent(up, 5, before=NOW + 2), shadow.between(up, NOW, NOW + 1.5)]


def write_counters(ddb: Any, state: str, results: str) -> list[Any]:
    refusals, limiter = DynamoRefusals(ddb, state), DynamoRateLimiter(ddb, state, per_window=2)
    reads: list[Any] = [refusals.count("Org/Backend", "stale_ticket", NOW) for _ in range(2)]
    reads += [limiter.hit("Org/Backend", NOW + i) for i in range(3)]
    reads += [DynamoRateLimiter(ddb, state, 5, window_s=3600, budget="COMMITS").hit("Org/Backend", NOW)]
    reads += [DynamoDailyBudget(ddb, state).hit("Org/Backend", NOW, 1) for _ in range(2)]
    marks = DynamoExportMarks(ddb, state, results)
    reads += [marks.last(), marks.advance(NOW), marks.advance(NOW - 1), marks.advance(NOW + 3600.5), marks.last()]
    return reads


WRITERS: dict[str, Callable[[Any, str, str], list[Any]]] = {
    name.removeprefix("write_"): writer for name, writer in globals().items() if name.startswith("write_")
}


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    with moto_server() as reach:
        yield boto3.client("dynamodb", **reach)


@pytest.fixture(scope="module")
def recorded() -> Iterator[dict[str, Any]]:
    found: dict[str, Any] = json.loads(FIXTURE.read_text()) if FIXTURE.exists() and not WRITE else {}
    yield found
    if WRITE:
        FIXTURE.write_text(json.dumps(dict(sorted(found.items())), indent=1, sort_keys=True) + "\n")


def stored(ddb: Any, table: str) -> list[dict[str, Any]]:
    """Every item of a table as moto holds it (number strings as sent), in key order."""
    items = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
    return sorted(items, key=lambda i: (json.dumps(i["pk"]), json.dumps(i["sk"])))


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_an_adapter_stores_and_reads_what_it_did_before_the_codec(
    ddb: Any, recorded: dict[str, Any], writer: str
) -> None:
    state, results = f"state-{writer}", f"results-{writer}"
    create_tables(ddb, StateTable=state, ResultsTable=results)
    reads = plain(WRITERS[writer](ddb, state, results))
    now = {"state": stored(ddb, state), "results": stored(ddb, results), "reads": reads}
    now = json.loads(json.dumps(now))
    if WRITE:
        recorded[writer] = now
        return
    assert writer in recorded, f"no items recorded for {writer}: run once with CRCR_WRITE_STORED_ITEMS=1"
    before = recorded[writer]
    assert now["state"] == before["state"]
    assert now["results"] == before["results"]
    assert now["reads"] == before["reads"]
