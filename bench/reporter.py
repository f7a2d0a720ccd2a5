"""The reporter's cost per recorded change, HUD summaries off against on (see bench/README.md, section 7).

One moto process and one local stack holding every resource of template.yaml, with no poller running. Each
setting has its own copy of the results table. The bench writes one fixed sequence of job changes to every copy,
as the callback function would, and reads each copy's stream as Lambda does (crcr.local.stack.StreamReader), so
the rows' verdicts the reporter writes back come to it again as the next images. It calls
functions/reporter/handler.py's lambda_handler itself and gives each batch to every setting in turn, each with
its own dependencies. So the settings handle the same records, in the same batches, side by side on the same
machine.

    .venv/bin/python bench/reporter.py [--commits 40] [--repos 4] [--redelivered 0.1] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (
    ROOT,
    UPSTREAM,
    AwsCalls,
    MotoProcess,
    OutputCapture,
    clean_env,
    cpu_seconds,
    log_summary,
    summary_ms,
)

from crcr.adapters.job_items import from_item, to_item
from crcr.adapters.observability import TOTALS
from crcr.adapters.s3 import S3HudDocs
from crcr.app.checks import SWEPT
from crcr.app.dispatch import dispatch_id
from crcr.app.ports.jobs import JobRecord
from crcr.app.report import ReportDeps
from crcr.app.summaries import job_key
from crcr.composition import build_report_deps, load_settings
from crcr.local.stack import Context, LocalStack, StreamReader, table_spec

FUNCTION = "ReporterFunction"
RESULTS_TABLE = "ResultsTable"
LEVELS = (4, 4, 3, 2)  # repository i is allowlisted at LEVELS[i % 4]; L2 and up record results
JOB_NAMES = ("build", "test")
FAILURE_RATE = 0.15
START_TIMEOUT_S = 3600  # template defaults (StartTimeoutS, RunTimeoutS): when the sweeper steps in
RUN_TIMEOUT_S = 43_200
COMMIT_SPACING_S = 90.0
# What a repository's cell shows when its jobs disagree, worst first. Written out here (not imported) so
# the check below is independent of the code it checks.
WORST_FIRST = ("failure", "timed_out", "cancelled", "action_required", "running", "success", "neutral", "skipped")
PASSED = ("success", "neutral", "skipped")
FAILED = ("failure", "timed_out", "cancelled", "action_required")
# Relay configuration each setting leaves out, so that only the HUD summaries differ between them.
OFF_IN_BOTH = ("CRCR_HUD_URL", "CRCR_CHECKS_QUEUE_URL", "CRCR_GITHUB_APP_ID")


@dataclass(frozen=True)
class Change:
    """One row change in the results table, as its stream record carries it."""

    new: JobRecord
    old: JobRecord | None
    at: float  # when the callback (or the sweeper) wrote it: the stream's order
    kind: str  # in_progress, completed, timed_out (a job the sweeper gave up on), no_job (never started)


def _item_key(job: JobRecord) -> tuple[str, int, int, str]:
    return (job.dispatch_id, job.run_id, job.run_attempt, job.job_name)


def _payload(status: str, conclusion: str | None, job: str, run_id: int, rng: random.Random) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema_version": 1, "status": status, "workflow_name": "CI", "job_name": job}
    doc["run_id"] = run_id
    if status == "completed":
        doc["conclusion"] = conclusion
        total = rng.randint(200, 4000)
        failed = rng.randint(1, 5) if conclusion == "failure" else 0
        skipped = total // 20
        doc["test_results"] = {"passed": total - failed - skipped, "failed": failed, "skipped": skipped}
        doc["test_results"]["total"] = total
    return doc


def job_changes(commits: int, repos: int, *, seed: int = 7, start: float | None = None) -> list[Change]:
    """`commits` upstream commits (three in four from pull requests, two commits per PR; the rest pushes)
    x `repos` downstream repositories x 1 or 2 jobs. Each job reports in_progress, then completed (about one in
    seven fails). A failed job on every third commit is re-run (attempt 2, which passes); on every eleventh
    commit the first repository's first job never finishes (the sweeper times it out); on every thirteenth
    the last repository never starts a job (the sweeper writes the dispatch's timed_out row). Ordered by
    the time each change would be written, so the commits' jobs interleave as they do in a busy hour."""
    rng = random.Random(seed)
    t0 = float(int(start if start is not None else time.time() - 2 * 86_400))
    changes: list[Change] = []
    pr_commits = 0
    for c in range(commits):
        sha = hashlib.sha1(f"bench-commit-{seed}-{c}".encode()).hexdigest()  # an id, not security
        delivery = str(uuid.UUID(hashlib.md5(f"bench-delivery-{seed}-{c}".encode()).hexdigest()))
        is_push = c % 4 == 3
        pr = None if is_push else 7000 + pr_commits // 2
        pr_commits += 0 if is_push else 1
        dispatched = t0 + c * COMMIT_SPACING_S
        for r in range(repos):
            repo = f"bench-org/repo-{r}"
            base = JobRecord(
                dispatch_id=dispatch_id(delivery, repo), run_id="0", run_attempt=0, job_name="", workflow_name="",
                state="timed_out", conclusion="timed_out", fingerprint=SWEPT, url="", repo=repo,
                repo_id=50_000 + r, level=LEVELS[r % len(LEVELS)], delivery_id=delivery, upstream=UPSTREAM,
                head_sha=sha, pr=pr, device=None, dispatched_at=dispatched, started_at=None,
                completed_at=None, callback_payload="{}", version=1,
                event_type="push" if is_push else "pull_request",
            )  # fmt: skip
            if c % 13 == 5 and r == repos - 1:
                at = dispatched + START_TIMEOUT_S
                changes.append(Change(replace(base, completed_at=at), None, at, "no_job"))
                continue
            run_id = 9_000_000 + c * 100 + r
            for j in range(1 + r % 2):
                changes.extend(_one_job(base, run_id, JOB_NAMES[j], rng, never_finishes=c % 11 == 7 and r == j == 0))
                failed = changes[-1].new.conclusion == "failure"
                if failed and c % 3 == 0:
                    rerun_at = changes[-1].at + 120
                    changes.extend(_one_job(base, run_id, JOB_NAMES[j], rng, attempt=2, after=rerun_at, passes=True))
    changes.sort(key=lambda ch: ch.at)
    return changes


def _one_job(
    base: JobRecord,
    run_id: int,
    name: str,
    rng: random.Random,
    *,
    attempt: int = 1,
    after: float | None = None,
    passes: bool = False,
    never_finishes: bool = False,
) -> list[Change]:
    started = (after if after is not None else base.dispatched_at) + rng.uniform(20, 180)
    url = f"https://github.com/{base.repo}/actions/runs/{run_id}"
    running_doc = _payload("in_progress", None, name, run_id, rng)
    running = replace(
        base, run_id=str(run_id), run_attempt=attempt, job_name=name, workflow_name="CI", state="in_progress",
        conclusion=None, fingerprint=_digest(running_doc), url=url, started_at=started,
        callback_payload=json.dumps(running_doc), version=1, check_run_id=f"crcr-{run_id}-{attempt}",
    )  # fmt: skip
    out = [Change(running, None, started, "in_progress")]
    if never_finishes:
        at = started + RUN_TIMEOUT_S
        swept = replace(
            running, state="timed_out", conclusion="timed_out", fingerprint=SWEPT, completed_at=at, version=2
        )
        return [*out, Change(swept, running, at, "timed_out")]
    conclusion = "success" if passes or rng.random() >= FAILURE_RATE else "failure"
    done_at = started + rng.uniform(300, 1800)
    done_doc = _payload("completed", conclusion, name, run_id, rng)
    done = replace(
        running, state="completed", conclusion=conclusion, fingerprint=_digest(done_doc), completed_at=done_at,
        callback_payload=json.dumps(done_doc), version=2,
    )  # fmt: skip
    return [*out, Change(done, running, done_at, "completed")]


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class Retries:
    """Lambda's stream retries, drawn. After a batch, the stream may deliver it again from one of its records
    on (the function reported a batch item failure, or timed out), at the head of the next batch: such retries
    are drawn so that about `redelivered` of the records arrive twice."""

    def __init__(self, redelivered: float, *, seed: int = 11) -> None:
        self._rng = random.Random(seed)
        # A retry repeats b/2 records on average (it starts at one of positions 1..b-1): retrying a share
        # 2r/(1+r) of the batches makes r of the records arrive twice.
        self._share = min(1.0, 2 * redelivered / (1 + redelivered))

    def next_start(self, start: int, end: int) -> int:
        """Where the stream's next batch starts after the batch [start, end)."""
        if end - start > 1 and self._rng.random() < self._share:
            return start + self._rng.randrange(1, end - start)
        return end


def _shown(job: JobRecord) -> str:
    if job.state == "in_progress":
        return "running"
    if job.state == "timed_out":
        return "timed_out"
    return job.conclusion or "failure"


def expected_cells(
    changes: list[Change], verdicts: dict[str, str | None] | None = None
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per commit, per repository: the cell the final fed states call for (newest attempt of each job;
    a dispatch's no-job row only while none of its jobs reported), with the verdicts (`expected_verdicts`) of its
    failed newest attempts."""
    verdicts = verdicts if verdicts is not None else expected_verdicts(changes)
    final: dict[tuple[str, int, int, str], JobRecord] = {}
    for ch in changes:
        final[_item_key(ch.new)] = ch.new
    newest: dict[tuple[str, str, str, str], JobRecord] = {}
    for job in final.values():
        group = (job.head_sha, job.repo, job.delivery_id, job.job_name)
        if group not in newest or job.run_attempt > newest[group].run_attempt:
            newest[group] = job
    started = {(j.head_sha, j.repo, j.delivery_id) for j in newest.values() if j.job_name}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for job in newest.values():
        if not job.job_name and (job.head_sha, job.repo, job.delivery_id) in started:
            continue
        cell = out.setdefault(job.head_sha, {}).setdefault(job.repo, {"states": [], "level": job.level, "v": set()})
        cell["states"].append(_shown(job))
        if _shown(job) in FAILED and verdicts.get(job_key(job)):
            cell["v"].add(verdicts[job_key(job)])
    for repos in out.values():
        for repo, cell in repos.items():
            states = cell.pop("states")
            repos[repo] = {
                "state": min(states, key=WORST_FIRST.index),
                "level": cell["level"],
                "jobs": len(states),
                "passed": sum(s in PASSED for s in states),
                "failed": sum(s in FAILED for s in states),
                "running": states.count("running"),
            } | ({"verdicts": sorted(cell["v"])} if cell["v"] else {})
    return out


def _failed(job: JobRecord) -> bool:
    return job.state == "timed_out" or (job.state == "completed" and job.conclusion in ("failure", "timed_out"))


def expected_verdicts(changes: list[Change]) -> dict[str, str | None]:
    """Per job attempt (keyed as the commit documents key it): the verdict its row ends with (docs/contracts.md),
    worked out here, independently of the reporter. Only L3/L4 jobs of pull requests get one. A run whose
    latest attempt passed after a failed one is `flaky` on the failed attempts and the passing one; a failed
    latest attempt is `infra` when timed out, else `no baseline` (the bench records no PR's base commit, so
    nothing has a baseline); no failed attempt, no verdict."""
    final: dict[tuple[str, int, int, str], JobRecord] = {}
    for ch in changes:
        final[_item_key(ch.new)] = ch.new
    runs: dict[tuple[str, str, str, str], list[JobRecord]] = {}
    for job in final.values():
        runs.setdefault((job.dispatch_id, job.run_id, job.workflow_name, job.job_name), []).append(job)
    out: dict[str, str | None] = {}
    for attempts in runs.values():
        attempts.sort(key=lambda j: j.run_attempt)
        latest = attempts[-1]
        flaky = latest.state == "completed" and latest.conclusion == "success" and any(map(_failed, attempts))
        for job in attempts:
            verdict: str | None = None
            if job.pr is not None and job.level >= 3:
                if flaky:
                    verdict = "flaky" if job is latest or _failed(job) else None
                elif _failed(job):
                    verdict = "infra" if job.state == "timed_out" else "no baseline"
            out[job_key(job)] = verdict
    return out


def verify_verdicts(ddb: Any, table: str, expected: dict[str, str | None]) -> dict[str, Any]:
    """The setting's results table ends with the verdicts the fed changes call for, on every row."""
    rows: dict[str, str | None] = {}
    for page in ddb.get_paginator("scan").paginate(TableName=table):
        for item in page.get("Items") or []:
            job = from_item(item)
            rows[job_key(job)] = job.verdict
    problems = [
        f"{key}: verdict {rows.get(key)!r} != {want!r}" for key, want in expected.items() if rows.get(key) != want
    ]
    if extra := set(rows) - set(expected):
        problems.append(f"{len(extra)} rows never fed")
    return {
        "ok": not problems,
        "rows": len(rows),
        "by_verdict": dict(sorted(Counter(v for v in rows.values() if v).items())),
        "problems": problems[:5],
    }


def verify_documents(docs: S3HudDocs, changes: list[Change]) -> dict[str, Any]:
    """The index lists every commit with the cells the fed states call for; each commit document holds every
    job attempt at its final version, with the verdict its row ends with; each PR document lists its commits."""
    verdicts = expected_verdicts(changes)
    expected = expected_cells(changes, verdicts)
    index, _ = docs.get("index.json")
    listed = {c.get("sha"): c for c in (index or {}).get("commits", [])}
    problems: list[str] = []
    for sha, cells in expected.items():
        got = listed.get(sha)
        if got is None:
            problems.append(f"index: commit {sha[:8]} missing")
        elif got.get("repos") != cells:
            problems.append(f"index: commit {sha[:8]} cells {got.get('repos')} != fed {cells}")
    if extra := set(listed) - set(expected):
        problems.append(f"index: {len(extra)} commits never fed")
    final: dict[tuple[str, int, int, str], JobRecord] = {}
    for ch in changes:
        final[_item_key(ch.new)] = ch.new
    versions: dict[str, dict[str, int]] = {}
    prs: dict[int, set[str]] = {}
    for job in final.values():
        versions.setdefault(job.head_sha, {})[job_key(job)] = job.version
        if job.pr is not None:
            prs.setdefault(job.pr, set()).add(job.head_sha)
    verdicts_matching = 0
    for sha, want in versions.items():
        doc, _ = docs.get(f"commit/{sha}.json")
        jobs = (doc or {}).get("jobs") or {}
        got_versions = {k: e.get("version") for k, e in jobs.items()}
        if got_versions != want:
            problems.append(f"commit/{sha[:8]}: job versions {got_versions} != fed {want}")
        got_verdicts = {k: e.get("verdict") for k, e in jobs.items()}
        want_verdicts = {k: verdicts[k] for k in want}
        if got_verdicts == want_verdicts:
            verdicts_matching += 1
        else:
            problems.append(f"commit/{sha[:8]}: verdicts {got_verdicts} != recorded {want_verdicts}")
    for pr, shas in prs.items():
        doc, _ = docs.get(f"pr/{pr}.json")
        got_shas = {c.get("sha") for c in (doc or {}).get("commits", [])}
        if got_shas != shas:
            problems.append(f"pr/{pr}: commits {sorted(got_shas)} != fed {sorted(shas)}")
    return {
        "ok": not problems,
        "commits_expected": len(expected),
        "commits_matching": sum(1 for sha, cells in expected.items() if (listed.get(sha) or {}).get("repos") == cells),
        "commit_documents": len(versions),
        "commit_documents_with_the_verdicts": verdicts_matching,
        "pr_documents": len(prs),
        "problems": problems[:5],
    }


def bucket_documents(s3: Any, bucket: str) -> dict[str, Any]:
    sizes: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents") or []:
            sizes[obj["Key"]] = int(obj["Size"])
    kinds: Counter[str] = Counter()
    kind_bytes: Counter[str] = Counter()
    largest: dict[str, int] = {}
    for key, size in sizes.items():
        kind = DocTraffic.kind(key) or "other"
        kinds[kind] += 1
        kind_bytes[kind] += size
        largest[kind] = max(largest.get(kind, 0), size)
    return {
        "count": len(sizes),
        "by_kind": dict(sorted(kinds.items())),
        "bytes_by_kind": dict(sorted(kind_bytes.items())),
        "largest_bytes_by_kind": dict(sorted(largest.items())),
        "total_bytes": sum(sizes.values()),
    }


class HandlerOnlyStack(LocalStack):
    """The local stack's resources and function environment from template.yaml, but no poller: even with
    pollers_per_queue=0, LocalStack still polls the results stream and runs the sweeper's schedule; here the
    bench alone invokes the reporter, so nothing else spends CPU or makes AWS calls meanwhile."""

    def _start_pollers(self) -> None:
        return None


# The repositories the bench reports for, listed at L4 as the stack's settings check requires an allowlist.
BENCH_ALLOWLIST = "L4:\n" + "".join(f"  - bench-org/repo-{r}\n" for r in range(100)) + "  - org/flood\n"


@contextmanager
def handler_stack() -> Iterator[tuple[LocalStack, MotoProcess]]:
    with tempfile.TemporaryDirectory(prefix="crcr-bench-reporter-") as tmp, MotoProcess() as moto:
        allowlist = Path(tmp) / "allowlist.yaml"
        allowlist.write_text(BENCH_ALLOWLIST)
        env = clean_env() | {
            "CRCR_UPSTREAM_REPO": UPSTREAM,
            "CRCR_ALLOWLIST": str(allowlist),
            # Any URL: it only keeps the stack from starting its sandbox GitHub and sandbox HUD. The
            # reporter never calls GitHub, and without an App id the check-run queue stays off.
            "CRCR_GITHUB_API_URL": "http://127.0.0.1:9",
            "AWS_ENDPOINT_URL": moto.url,
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
        stack = HandlerOnlyStack(port=0, env=env, pollers_per_queue=0)
        stack.start()
        try:
            yield stack, moto
        finally:
            stack.stop()


def _size(body: Any) -> int:
    if isinstance(body, bytes | bytearray):
        return len(body)
    return body.getbuffer().nbytes if hasattr(body, "getbuffer") else 0


class DocTraffic:
    """S3 traffic of the HUD documents by kind (commit, pr, index, repo): reads found or missing, writes done or
    refused (412/409), and bytes each way, from botocore hooks on boto3's default session (as AwsCalls)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def install(self) -> DocTraffic:
        import boto3  # noqa: PLC0415

        if boto3.DEFAULT_SESSION is None:
            boto3.setup_default_session()
        assert boto3.DEFAULT_SESSION is not None
        events = boto3.DEFAULT_SESSION.events
        for op in ("GetObject", "PutObject"):
            events.register(f"before-call.s3.{op}", self._before)
            events.register(f"after-call.s3.{op}", self._after)
        return self

    @staticmethod
    def kind(path: str) -> str | None:
        _, found, rest = path.partition("data/")
        if not found:
            return None
        return "index" if rest.startswith("index.json") else rest.split("/", 1)[0]

    def _before(self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        kind = self.kind(str(params.get("url_path", "")))
        context["bench_doc_kind"] = kind
        if kind is not None and model.name == "PutObject":
            size = _size(params.get("body"))
            with self._lock:
                self.counts["bytes_put"] += size
                self.counts[f"bytes_put.{kind}"] += size

    def _after(self, model: Any, http_response: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        kind = context.get("bench_doc_kind")
        if kind is None:
            return
        ok = http_response.status_code < 300
        if model.name == "GetObject":
            name = f"get.{kind}" if ok else f"get.{kind}.missing"
        else:
            name = f"put.{kind}" if ok else f"put.{kind}.refused"
        with self._lock:
            self.counts[name] += 1
            if ok and model.name == "GetObject":
                self.counts["bytes_got"] += int(parsed.get("ContentLength") or 0)
                self.counts[f"bytes_got.{kind}"] += int(parsed.get("ContentLength") or 0)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


class Setting:
    """One reporter configuration, its own results table and that table's stream, and what it cost, call by
    call. Every setting gets every batch."""

    def __init__(
        self, name: str, deps: ReportDeps, bucket: str | None, table: str, reader: StreamReader, *, health: bool
    ) -> None:
        self.name = name
        self.deps = deps
        self.bucket = bucket
        self.table = table
        self.reader = reader
        self.stream: list[dict[str, Any]] = []  # every record of its table's stream read so far, in order
        self.health = health
        self.health_ms: list[float] = []  # each health computation, when the refresh is on
        self.batch_ms: list[float] = []  # each handler call...
        self.batch_calls: list[int] = []  # ...the AWS calls it made...
        self.batch_records: list[int] = []  # ...and the records it was given
        self.wall = self.cpu = self.moto_cpu = 0.0
        self.failures = 0
        self.calls: Counter[str] = Counter()
        self.metrics: Counter[str] = Counter()
        self.traffic: Counter[str] = Counter()


def _delta(after: Counter[str], before: Counter[str]) -> Counter[str]:
    after.subtract(before)
    return Counter({k: v for k, v in after.items() if v})


def deliver(
    setting: Setting,
    handler: Callable[..., Any],
    batch: list[dict[str, Any]],
    aws: AwsCalls,
    traffic: DocTraffic,
    moto: MotoProcess,
) -> None:
    """One stream batch to the real handler with this setting's dependencies; everything but the call
    itself (snapshots of the tallies) stays outside the timed window."""
    event = {"Records": batch}
    context = Context(FUNCTION, 60)
    calls, docs, metrics = aws.snapshot(), traffic.snapshot(), Counter(TOTALS)
    moto_before = cpu_seconds(moto.pid)
    c0 = time.process_time()
    t0 = time.perf_counter()
    result = handler(event, context, deps=setting.deps)
    elapsed = time.perf_counter() - t0
    setting.cpu += time.process_time() - c0
    setting.moto_cpu += cpu_seconds(moto.pid) - moto_before
    setting.wall += elapsed
    made = _delta(aws.snapshot(), calls)
    setting.batch_ms.append(elapsed * 1000.0)
    setting.batch_calls.append(sum(made.values()))
    setting.batch_records.append(len(batch))
    setting.calls.update(made)
    setting.traffic.update(_delta(traffic.snapshot(), docs))
    setting.metrics.update(_delta(Counter(TOTALS), metrics))
    setting.failures += len((result or {}).get("batchItemFailures") or [])


def _counted(inner: Callable[[JobRecord], Any], sink: list[float]) -> Callable[[JobRecord], Any]:
    def health(job: JobRecord) -> Any:
        t = time.perf_counter()
        try:
            return inner(job)
        finally:
            sink.append((time.perf_counter() - t) * 1000.0)

    return health


def _per(counts: Counter[str] | dict[str, int], n: int) -> dict[str, float]:
    per = {k: round(v / n, 3) for k, v in sorted(counts.items()) if v}
    per["total"] = round(sum(counts.values()) / n, 3)
    return per


def _mean(values: list[int]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def results_table(stack: LocalStack, name: str) -> tuple[str, StreamReader]:
    """A copy of the template's results table (indexes and stream as in template.yaml), with a reader of its
    stream positioned at its start."""
    from crcr.local.template import resources_of  # noqa: PLC0415

    ddb = stack.client("dynamodb")
    table = f"{stack.function_env['CRCR_RESULTS_TABLE']}-{name}"
    ddb.create_table(**table_spec(table, resources_of(stack.template, "AWS::DynamoDB::Table")[RESULTS_TABLE]))
    arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    return table, StreamReader(stack.client("dynamodbstreams"), arn)


def build_setting(stack: LocalStack, name: str, bucket: str | None, *, health: bool) -> Setting:
    """The reporter's dependencies as its composition root builds them from the function's environment, with
    its own results table, and the HUD bucket given (summaries on) or left out (off). HUD push and check runs
    are off in every setting.

    `health`: keep the repository pages' health refresh (SummaryDeps.health, every CRCR_HEALTH_REFRESH_S) if
    build_report_deps wires one; otherwise the bench takes it out, so `on` measures the documents alone.
    """
    table, reader = results_table(stack, name)
    env = {k: v for k, v in stack.function_env.items() if k not in (*OFF_IN_BOTH, "CRCR_HUD_BUCKET")}
    env["CRCR_RESULTS_TABLE"] = table
    if bucket is not None:
        env["CRCR_HUD_BUCKET"] = bucket
    deps = build_report_deps(load_settings(env))
    if deps.hud is not None or deps.checks is not None or (deps.summaries is None) != (bucket is None):
        raise RuntimeError(f"{name}: the reporter is not configured as this setting needs")
    setting = Setting(name, deps, bucket, table, reader, health=False)
    if deps.summaries is not None and deps.summaries.health is not None:
        call = _counted(deps.summaries.health, setting.health_ms) if health else None
        setting.deps = replace(deps, summaries=replace(deps.summaries, health=call))
        setting.health = health
    elif health:
        raise RuntimeError(f"{name}: build_report_deps wires no health callable")
    return setting


def health_wired(stack: LocalStack) -> bool:
    """Whether the composition root gives the summaries a health callable (SummaryDeps.health)."""
    env = {k: v for k, v in stack.function_env.items() if k not in OFF_IN_BOTH}
    summaries = build_report_deps(load_settings(env)).summaries
    return summaries is not None and summaries.health is not None


def report(setting: Setting, changes: list[Change], warmup: list[Change], s3: Any, ddb: Any) -> dict[str, Any]:
    n = len(changes)
    written = setting.metrics.get("HudSummaryWritten", 0)
    conflicts = setting.metrics.get("HudSummaryConflict", 0)
    verdicts = verify_verdicts(ddb, setting.table, expected_verdicts([*warmup, *changes]))
    if setting.bucket is not None:
        documents = bucket_documents(s3, setting.bucket)
        verification = verify_documents(S3HudDocs(s3, setting.bucket), [*warmup, *changes])
        verification["problems"] = (verification["problems"] + verdicts["problems"])[:5]
    else:
        documents = None
        s3_calls = sum(v for k, v in setting.calls.items() if k.startswith("s3."))
        verification = {"ok": not s3_calls and not written, "s3_calls": s3_calls, "problems": verdicts["problems"]}
    verification["ok"] = verification["ok"] and verdicts["ok"]
    verification["verdicts"] = verdicts
    summaries = setting.deps.summaries
    per_record = [ms / k for ms, k in zip(setting.batch_ms, setting.batch_records, strict=True)]
    quarters = [per_record[len(per_record) * i // 4 : len(per_record) * (i + 1) // 4] for i in range(4)]
    return {
        "setting": setting.name,
        "summaries": summaries is not None,
        "hud_bucket": setting.bucket,
        "health_refresh": {
            "on": setting.health,
            "refresh_s": summaries.health_refresh_s if summaries is not None else None,
            "computations": len(setting.health_ms),
            "ms_total": round(sum(setting.health_ms), 2),
        },
        "changes": n,
        "results_table": setting.table,
        "records_delivered": sum(setting.batch_records),
        "batches": len(setting.batch_ms),
        "batch_item_failures": setting.failures,
        "aws_calls": dict(sorted(setting.calls.items())),
        "aws_calls_per_change": _per(setting.calls, n),
        "aws_calls_per_batch": {
            "mean": _mean(setting.batch_calls),
            "min": min(setting.batch_calls, default=None),
            "max": max(setting.batch_calls, default=None),
        },
        "ms_per_change": round(setting.wall * 1000.0 / n, 3),
        # Each handler call divided by its records: the summaries take a batch at once, so no record has
        # a cost of its own.
        "ms_per_record": summary_ms([ms / 1000.0 for ms in per_record]),
        "ms_per_batch": summary_ms([ms / 1000.0 for ms in setting.batch_ms]),
        # The documents grow as the sequence goes on (up to their caps): the cost grows with them.
        "ms_per_record_mean_by_quarter": [round(statistics.fmean(q), 2) if q else None for q in quarters],
        "handler_wall_s": round(setting.wall, 3),
        "cpu_ms_per_change": round(setting.cpu * 1000.0 / n, 3),
        "moto_cpu_ms_per_change": round(setting.moto_cpu * 1000.0 / n, 3),
        "writes_per_change": {
            "HudSummaryWritten": round(written / n, 3),
            "HudSummaryConflict": round(conflicts / n, 3),
        },
        "relay_metrics": dict(sorted(setting.metrics.items())),
        "document_traffic_per_change": {k: round(v / n, 3) for k, v in sorted(setting.traffic.items())},
        "documents": documents,
        "verification": verification,
    }


def stream_batch_size() -> int:
    """The reporter's BatchSize in template.yaml, so the bench batches as Lambda would."""
    from crcr.local.template import functions_of, load_template  # noqa: PLC0415

    fn = next(f for f in functions_of(load_template(ROOT / "template.yaml")) if f.logical_id == FUNCTION)
    return fn.stream_sources[0].batch_size


DIFFERENCE_KEYS = ("ms_per_change", "cpu_ms_per_change", "moto_cpu_ms_per_change")


def difference(on: dict[str, Any], off: dict[str, Any]) -> dict[str, Any]:
    ops = sorted(set(on["aws_calls_per_change"]) | set(off["aws_calls_per_change"]))
    diff: dict[str, Any] = {
        "aws_calls_per_change": {
            op: round(on["aws_calls_per_change"].get(op, 0) - off["aws_calls_per_change"].get(op, 0), 3) for op in ops
        }
    }
    for key in DIFFERENCE_KEYS:
        diff[key] = round(on[key] - off[key], 3)
    for q in ("p50_ms", "p99_ms", "mean_ms"):
        a, b = on["ms_per_record"].get(q), off["ms_per_record"].get(q)
        diff[f"record_{q}"] = round(a - b, 2) if a is not None and b is not None else None
    for name in ("HudSummaryWritten", "HudSummaryConflict"):
        diff[name + "_per_change"] = round(on["writes_per_change"][name] - off["writes_per_change"][name], 3)
    return diff


def computations_at_stream_pace(changes: list[Change], refresh_s: float) -> int:
    """How often the health refresh would run if the changes arrived at the times they were written: per
    repository, on its first change and then on the first change at least `refresh_s` after the last run.
    The bench feeds the whole sequence in seconds, so each repository's health is computed there only once."""
    last: dict[str, float] = {}
    runs = 0
    for ch in changes:
        repo = ch.new.repo.lower()
        if repo not in last or ch.at - last[repo] >= refresh_s:
            last[repo] = ch.at
            runs += 1
    return runs


def health_adds(with_health: dict[str, Any], without: dict[str, Any], changes: list[Change]) -> dict[str, Any]:
    adds = difference(with_health, without)
    refresh = with_health["health_refresh"]
    done = refresh["computations"]
    at_pace = computations_at_stream_pace(changes, refresh["refresh_s"])
    calls = adds["aws_calls_per_change"]["total"] * len(changes)
    adds["computations"] = done
    adds["ms_per_computation"] = round(refresh["ms_total"] / done, 2) if done else None
    adds["aws_calls_per_computation"] = round(calls / done, 2) if done else None
    adds["computations_at_stream_pace"] = at_pace
    adds["ms_per_change_at_stream_pace"] = (
        round(refresh["ms_total"] / done * at_pace / len(changes), 3) if done else None
    )
    adds["aws_calls_per_change_at_stream_pace"] = round(calls / done * at_pace / len(changes), 3) if done else None
    return adds


class Feed:
    """The settings' streams side by side. The bench writes each change to every setting's table (as the
    callback function would, unmeasured) just before the reporter reads it; what the reporter writes to its
    table (the verdicts) lands in its stream after the records it was handling, as in DynamoDB. The settings
    differ only in the HUD summaries, never in the verdicts, so their streams hold the same records in the same
    order, and `read` (where the next batch starts) is the same for all of them."""

    def __init__(self, ddb: Any, settings: list[Setting]) -> None:
        self._ddb = ddb
        self._settings = settings
        self.read = 0
        self.write_backs = 0
        self.write_backs_by_verdict: Counter[str] = Counter()

    @property
    def length(self) -> int:
        return len(self._settings[0].stream)

    def write(self, changes: list[Change]) -> None:
        before = self.length
        for ch in changes:
            for setting in self._settings:
                self._ddb.put_item(TableName=setting.table, Item=to_item(ch.new))
        self._take()
        if self.length - before != len(changes):
            raise RuntimeError(f"{len(changes)} changes written, {self.length - before} stream records")

    def collect(self) -> None:
        """The records the handler calls just made (the reporter's own writes)."""
        for record in self._take():
            self.write_backs += 1
            verdict = (record["dynamodb"].get("NewImage") or {}).get("verdict", {}).get("S")
            self.write_backs_by_verdict[verdict or "none"] += 1

    def _take(self) -> list[dict[str, Any]]:
        start = self.length
        for setting in self._settings:
            setting.stream.extend(setting.reader.read_all())
        first = self._settings[0].stream[start:]
        for setting in self._settings[1:]:
            if [_image(r) for r in setting.stream[start:]] != [_image(r) for r in first]:
                raise RuntimeError(f"{setting.name}'s stream differs from {self._settings[0].name}'s")
        return first


def _image(record: dict[str, Any]) -> tuple[str, Any, Any]:
    data = record["dynamodb"]
    return record["eventName"], data.get("OldImage"), data.get("NewImage")


_TRAFFIC: list[DocTraffic] = []


def _doc_traffic() -> DocTraffic:
    """One set of hooks per process, however many times the section runs."""
    if not _TRAFFIC:
        _TRAFFIC.append(DocTraffic().install())
    return _TRAFFIC[0]


def reporter_bench(
    aws: AwsCalls, out: OutputCapture, *, commits: int, repos: int, redelivered: float
) -> dict[str, Any]:
    started = time.perf_counter()
    changes = job_changes(commits, repos)
    # One change of another commit, before the sequence: opens connections and loads what botocore loads lazily.
    warmup = job_changes(1, 1, seed=99, start=changes[0].at - 600)[:1]
    batch_size = stream_batch_size()
    results: dict[str, Any] = {
        "sequence": {
            "commits": commits,
            "pull_request_commits": len({c.new.head_sha for c in changes if c.new.pr is not None}),
            "pull_requests": len({c.new.pr for c in changes if c.new.pr is not None}),
            "repositories": repos,
            "job_attempts": len({_item_key(c.new) for c in changes}),
            "reruns": len({_item_key(c.new) for c in changes if c.new.run_attempt > 1}),
            "changes": len(changes),
            "changes_by_kind": dict(sorted(Counter(c.kind for c in changes).items())),
            "batch_size": batch_size,
            "warmup_changes": len(warmup),
        }
    }
    traffic = _doc_traffic()
    start_off = out.offset()
    with handler_stack() as (stack, moto):
        s3, ddb = stack.client("s3"), stack.client("dynamodb")
        bucket = stack.function_env["CRCR_HUD_BUCKET"]
        settings = [build_setting(stack, "off", None, health=False), build_setting(stack, "on", bucket, health=False)]
        wired = health_wired(stack)
        if wired:  # its own empty bucket, so its documents start where `on`'s did
            s3.create_bucket(Bucket=f"{bucket}-health")
            settings.append(build_setting(stack, "on_health", f"{bucket}-health", health=True))
        out.say(
            f"   {len(changes)} changes ({redelivered:.0%} of the stream's records delivered twice) in batches of "
            f"{batch_size}, each batch to: {', '.join(s.name for s in settings)}"
        )
        handler = stack.handlers[FUNCTION]
        feed = Feed(ddb, settings)
        feed.write(warmup)
        while feed.read < feed.length:  # the warm-up change, and whatever the reporter writes back for it
            start, feed.read = feed.read, feed.length
            for setting in settings:
                handler({"Records": setting.stream[start : feed.read]}, Context(FUNCTION, 60), deps=setting.deps)
            feed.collect()
        for setting in settings:
            setting.health_ms.clear()  # the warm-up's repository has its health from here on
        measured_from, written = feed.read, 0
        retries = Retries(redelivered)
        for n in itertools.count():
            # The callback function has written the changes up to a full batch before Lambda reads one.
            if (short := feed.read + batch_size - feed.length) > 0 and written < len(changes):
                feed.write(changes[written : written + short])
                written = min(len(changes), written + short)
            if feed.read >= feed.length:
                break
            start, end = feed.read, min(feed.read + batch_size, feed.length)
            # Settings take turns going first, so a slow moment of the machine falls on each alike.
            for setting in settings if n % 2 == 0 else settings[::-1]:
                deliver(setting, handler, setting.stream[start:end], aws, traffic, moto)
            feed.collect()  # the verdicts the reporter wrote back: the stream's next records
            feed.read = retries.next_start(start, end)
        delivered = sum(settings[0].batch_records)
        results["sequence"] |= {
            "stream_records": feed.length - measured_from,
            "verdict_write_backs": feed.write_backs,
            "write_backs_by_verdict": dict(sorted(feed.write_backs_by_verdict.items())),
            "deliveries": delivered,
            "redelivered": delivered - (feed.length - measured_from),
            "batches": len(settings[0].batch_ms),
        }
        for setting in settings:
            results[setting.name] = report(setting, changes, warmup, s3, ddb)
        out.say("   a PR dispatch holding 1, 100 and 500 jobs: the reporter's reads per change")
        results["jobs_per_dispatch"] = dispatch_scaling(stack)
        end_off = out.offset()
    results["relay_log"] = log_summary(out.lines_between(start_off, end_off))
    if wired:
        results["health_adds"] = health_adds(results["on_health"], results["on"], changes)
    else:
        results["on_health"] = {
            "skipped": True,
            "reason": "build_report_deps wires no SummaryDeps.health yet; once it does, the setting "
            "on_health (build_setting(..., health=True)) measures it at the default CRCR_HEALTH_REFRESH_S",
        }
    results["difference_on_minus_off"] = difference(results["on"], results["off"])
    measured = [s.name for s in settings]
    results["all_verified"] = (
        all(results[k]["verification"]["ok"] and results[k]["batch_item_failures"] == 0 for k in measured)
        and results["jobs_per_dispatch"]["flat"]
    )
    results["elapsed_s"] = round(time.perf_counter() - started, 1)
    results["method"] = (
        "one moto_server process and local stack (template.yaml's resources, no pollers); "
        "functions/reporter/handler.py lambda_handler called directly with the records of each setting's own "
        "copy of the results table's stream (NEW_AND_OLD_IMAGES, read as crcr.local.stack.StreamReader reads "
        "it): the changes, written to every copy as the callback function would, and the verdicts the reporter "
        f"writes back, in batches of {batch_size}; each batch goes "
        "to every setting in turn (alternating which goes first), each with its own dependencies from "
        "build_report_deps: off = no CRCR_HUD_BUCKET, on = the template's HudBucket; HUD push (CRCR_HUD_URL) and "
        "check runs (CRCR_CHECKS_QUEUE_URL, App id) off in all; AWS calls from a botocore hook, CPU from "
        "time.process_time around each handler call"
    )
    return results


class ReadCounter:
    """The results table's client as the verdicts use it, counting the items and bytes each read brings back."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls = self.items = self.bytes = 0

    def _counted(self, got: dict[str, Any]) -> dict[str, Any]:
        items = got.get("Items") or [i for rows in (got.get("Responses") or {}).values() for i in rows]
        items = items or ([got["Item"]] if "Item" in got else [])
        self.calls += 1
        self.items += len(items)
        self.bytes += len(json.dumps(items, default=str))
        return got

    def query(self, **kwargs: Any) -> dict[str, Any]:
        return self._counted(self.client.query(**kwargs))

    def batch_get_item(self, **kwargs: Any) -> dict[str, Any]:
        return self._counted(self.client.batch_get_item(**kwargs))

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        return self._counted(self.client.get_item(**kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


SCALING_PAYLOAD_BYTES = 16 * 1024  # each job's stored report: a summary of a few pages


def _flood_job(dispatch: str, i: int, at: float, head: str) -> JobRecord:
    """One failed job of a flooding L4 downstream's PR dispatch, as the callback function records it."""
    return JobRecord(
        dispatch_id=dispatch, run_id="4242", run_attempt=1, job_name=f"shard-{i}", workflow_name="CI",
        state="completed", conclusion="failure", fingerprint=f"fp-{i}", url="https://github.com/org/flood/actions/runs/4242",
        repo="org/flood", repo_id=99, level=4, delivery_id=f"dlv-{dispatch}", upstream=UPSTREAM, head_sha=head, pr=4242,
        device=None, dispatched_at=at, started_at=at + 5, completed_at=at + 60 + i,
        callback_payload=json.dumps({"summary": "x" * SCALING_PAYLOAD_BYTES}), version=1, event_type="pull_request",
        check_run_id=f"crcr-{i}",
    )  # fmt: skip


def dispatch_scaling(stack: LocalStack, sizes: tuple[int, ...] = (1, 100, 500), measured: int = 10) -> dict[str, Any]:
    """The reporter's reads and time for the next failed jobs of a PR dispatch already holding n jobs, n from 1 to
    500: the verdict of each reads that job's own attempts and its baseline's history, whatever n is (before, every
    job of the dispatch, bodies included). Summaries, HUD push and check runs off: the verdicts alone."""
    from crcr.adapters.branch import DynamoBranch  # noqa: PLC0415
    from crcr.adapters.pulls import DynamoPullRequests  # noqa: PLC0415
    from crcr.adapters.results import DynamoResults  # noqa: PLC0415

    ddb = stack.client("dynamodb")
    table = stack.function_env["CRCR_STATE_TABLE"]
    base, head = "b" * 40, "d" * 40
    at = time.time() - 3600
    DynamoBranch(ddb, table).record_commits(UPSTREAM, [(base, at - 600)])
    DynamoPullRequests(ddb, table).record_pr_head(UPSTREAM, 4242, head, "2026-12-04T00:00:00Z", base_sha=base)
    handler = stack.handlers[FUNCTION]
    rows: dict[str, Any] = {}
    for n in sizes:
        setting = build_setting(stack, f"flood{n}", None, health=False)
        verdicts = setting.deps.verdicts
        assert verdicts is not None
        counter = ReadCounter(ddb)
        results = DynamoResults(counter, setting.table)
        setting.deps = replace(
            setting.deps, verdicts=replace(verdicts, results=results, store=results, by_repo=results)
        )
        dispatch = f"dsp-flood-{n}"
        # The dispatch as the flood left it (their own changes were reported before): n jobs, and the first attempts of
        # the jobs measured, each of which passed on the branch's base commit (its baseline).
        earlier = [_flood_job(dispatch, i, at, head) for i in range(n + measured)]
        branch = [
            replace(job, dispatch_id="dsp-branch", head_sha=base, pr=None, event_type="push", conclusion="success")
            for job in earlier[n:]
        ]
        for job in [*earlier, *branch]:
            ddb.put_item(TableName=setting.table, Item=to_item(job))
        setting.reader.read_all()
        new = [replace(job, run_attempt=2, fingerprint="fp-2") for job in earlier[n:]]
        for job in new:
            ddb.put_item(TableName=setting.table, Item=to_item(job))
        pending = setting.reader.read_all()
        wall = cpu = 0.0
        batches = 0
        while pending:  # the changes, then the verdicts written back, each in turn, as the stream brings them
            c0, t0 = time.process_time(), time.perf_counter()
            handler({"Records": pending}, Context(FUNCTION, 60), deps=setting.deps)
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
            batches += 1
            pending = setting.reader.read_all()
        verdicts_set = [
            from_item(ddb.get_item(TableName=setting.table, Key=_key(job), ConsistentRead=True)["Item"]).verdict
            for job in new
        ]
        rows[str(n)] = {
            "jobs_on_dispatch": n,
            "changes": measured,
            "reads_per_change": round(counter.calls / measured, 2),
            "items_read_per_change": round(counter.items / measured, 2),
            "kib_read_per_change": round(counter.bytes / 1024 / measured, 2),
            "ms_per_change": round(wall * 1000 / measured, 2),
            "cpu_ms_per_change": round(cpu * 1000 / measured, 2),
            "handler_calls": batches,
            "verdicts": dict(Counter(v or "none" for v in verdicts_set)),
        }
    first, last = rows[str(sizes[0])], rows[str(sizes[-1])]
    return {
        "sizes": rows,
        "flat": last["items_read_per_change"] <= first["items_read_per_change"] + 1
        and last["kib_read_per_change"] <= first["kib_read_per_change"] * 1.5 + 1,
        "method": (
            f"for each n, a PR dispatch of an L4 downstream holding n failed jobs ({SCALING_PAYLOAD_BYTES // 1024} KiB "
            f"stored report each), then the failed second attempts of {measured} more (each with a first attempt and a "
            "baseline that passed) fed to functions/reporter/handler.py with their verdict write-backs; reads "
            "counted on the results table's client the verdicts use (items and JSON bytes each read brought back); "
            "summaries, HUD push and check runs off"
        ),
    }


def _key(job: JobRecord) -> dict[str, Any]:
    from crcr.adapters.table import job_key  # noqa: PLC0415

    return job_key(job.dispatch_id, job.run_id, job.run_attempt, job.job_name)


def print_section(rep: dict[str, Any] | None) -> None:
    if not rep:
        return
    seq = rep["sequence"]
    print(
        f"\n7. reporter cost per recorded change, HUD summaries off against on: {seq['changes']} changes of "
        f"{seq['commits']} commits x {seq['repositories']} repositories, {seq['verdict_write_backs']} verdicts "
        f"written back {seq['write_backs_by_verdict']}: {seq['stream_records']} stream records, "
        f"{seq['redelivered']} delivered twice, {seq['batches']} batches of {seq['batch_size']}"
    )
    print(
        f"   {'setting':9} {'AWS calls':>9} {'S3 Get':>7} {'S3 Put':>7} {'ms/change':>9} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'CPU ms':>7} {'moto CPU':>8} {'writes':>7} {'conflicts':>9}"
    )
    rows = [(k, rep[k]) for k in ("off", "on", "on_health") if not rep[k].get("skipped")]
    for name, row in rows:
        calls, rec = row["aws_calls_per_change"], row["ms_per_record"]
        print(
            f"   {name:9} {calls['total']:>9.2f} {calls.get('s3.GetObject', 0):>7.2f} "
            f"{calls.get('s3.PutObject', 0):>7.2f} {row['ms_per_change']:>9.2f} {rec.get('p50_ms', 0):>7.2f} "
            f"{rec.get('p99_ms', 0):>7.2f} {row['cpu_ms_per_change']:>7.2f} {row['moto_cpu_ms_per_change']:>8.2f} "
            f"{row['writes_per_change']['HudSummaryWritten']:>7.2f} "
            f"{row['writes_per_change']['HudSummaryConflict']:>9.2f}"
        )
    d = rep["difference_on_minus_off"]
    dc = d["aws_calls_per_change"]
    print(
        f"   {'on - off':9} {dc['total']:>9.2f} {dc.get('s3.GetObject', 0):>7.2f} {dc.get('s3.PutObject', 0):>7.2f} "
        f"{d['ms_per_change']:>9.2f} {d['record_p50_ms'] or 0:>7.2f} {d['record_p99_ms'] or 0:>7.2f} "
        f"{d['cpu_ms_per_change']:>7.2f} {d['moto_cpu_ms_per_change']:>8.2f} {d['HudSummaryWritten_per_change']:>7.2f} "
        f"{d['HudSummaryConflict_per_change']:>9.2f}"
    )
    on = rep["on"]
    per = on["aws_calls_per_batch"]
    print(
        f"   on, AWS calls per batch: mean {per['mean']} (min {per['min']}, max {per['max']}); ms per record by "
        f"quarter of the sequence {on['ms_per_record_mean_by_quarter']}"
    )
    t = on["document_traffic_per_change"]
    kinds = ("commit", "pr", "index", "repo")
    print(
        "   on, per change: reads "
        + ", ".join(f"{k} {t.get('get.' + k, 0) + t.get('get.' + k + '.missing', 0):.2f}" for k in kinds)
        + "; writes "
        + ", ".join(f"{k} {t.get('put.' + k, 0):.2f}" for k in kinds)
        + f"; {t.get('bytes_got', 0) / 1024:.1f} KiB read, {t.get('bytes_put', 0) / 1024:.1f} KiB written"
    )
    docs, check = on["documents"], on["verification"]
    print(
        f"   on: {docs['count']} documents {docs['by_kind']}, largest bytes {docs['largest_bytes_by_kind']}; index "
        f"cells match the fed states for {check['commits_matching']}/{check['commits_expected']} commits, "
        f"commit documents hold the rows' verdicts for {check['commit_documents_with_the_verdicts']}/"
        f"{check['commit_documents']}"
        f"{'' if check['ok'] else ' -- NOT VERIFIED: ' + '; '.join(check['problems'])}"
    )
    for name, row in rows:
        if name != "on" and not row["verification"]["ok"]:
            print(f"   {name}: NOT VERIFIED: {'; '.join(row['verification']['problems']) or 'S3 calls or HUD writes'}")
    if rep["on_health"].get("skipped"):
        print(f"   health refresh: skipped ({rep['on_health']['reason'].split(';')[0]})")
    else:
        h = rep["on_health"]["health_refresh"]
        add = rep["health_adds"]
        print(
            f"   health refresh every {h['refresh_s']:g} s: {add['computations']} computations here, "
            f"{add['ms_per_computation']} ms and {add['aws_calls_per_computation']} AWS calls each; adds "
            f"{add['aws_calls_per_change']['total']} AWS calls, {add['ms_per_change']} ms, "
            f"{add['cpu_ms_per_change']} CPU ms per change (noise included); at the stream's own pace "
            f"{add['computations_at_stream_pace']} computations: {add['ms_per_change_at_stream_pace']} ms and "
            f"{add['aws_calls_per_change_at_stream_pace']} AWS calls per change"
        )
    scaling = rep.get("jobs_per_dispatch")
    if scaling:
        print(
            f"   {'jobs on the dispatch':>20} {'reads':>6} {'items':>6} {'KiB read':>9} {'ms/change':>9} {'CPU ms':>7}"
        )
        for row in scaling["sizes"].values():
            print(
                f"   {row['jobs_on_dispatch']:>20} {row['reads_per_change']:>6.2f} "
                f"{row['items_read_per_change']:>6.2f} {row['kib_read_per_change']:>9.2f} "
                f"{row['ms_per_change']:>9.2f} {row['cpu_ms_per_change']:>7.2f}"
            )
        print(f"   reads per change flat in the dispatch's jobs: {scaling['flat']}")
    print(f"   all verified: {rep['all_verified']}; {rep['elapsed_s']} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=40, help="upstream commits in the sequence")
    parser.add_argument("--repos", type=int, default=4, help="downstream repositories per commit")
    parser.add_argument("--redelivered", type=float, default=0.1, help="share of records the stream delivers twice")
    parser.add_argument("--out", type=Path, help="also write the section as JSON")
    args = parser.parse_args()
    aws = AwsCalls().install()
    with OutputCapture() as out:
        rep = reporter_bench(aws, out, commits=args.commits, repos=args.repos, redelivered=args.redelivered)
    out.path.unlink(missing_ok=True)
    print_section(rep)
    if args.out:
        args.out.write_text(json.dumps({"reporter": rep}, indent=2) + "\n")
    return 0 if rep["all_verified"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
