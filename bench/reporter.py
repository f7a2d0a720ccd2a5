"""Section 7: the reporter's cost per recorded change, HUD summaries off, on, and on with their health refresh."""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import harness as h
from write_units import read_all

FUNCTION = "ReporterFunction"
SEED, RETRY_SEED = 7, 11
LEVELS = (4, 4, 3, 2)  # repository i is allowlisted at LEVELS[i % 4]; L2 and up record results
JOB_NAMES = ("build", "test")
FAILURE_RATE = 0.15
START_TIMEOUT_S, RUN_TIMEOUT_S = 3600, 43_200  # template defaults: when the sweeper steps in
COMMIT_SPACING_S = 90.0
# Relay configuration each setting leaves out, so that only the HUD summaries differ between them.
OFF = ("CRCR_HUD_URL", "CRCR_CHECKS_QUEUE_URL", "CRCR_GITHUB_APP_ID")
# The repositories the bench reports for, listed as the stack's settings check requires an allowlist.
ALLOWLIST = "L4:\n" + "".join(f"  - bench-org/repo-{r}\n" for r in range(100))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reporter-commits", type=int, default=40, help="upstream commits in the reporter run")
    parser.add_argument("--reporter-repos", type=int, default=4, help="downstream repositories per commit there")
    parser.add_argument("--reporter-redelivered", type=float, default=0.1, help="share of records delivered twice")


@dataclass(frozen=True)
class Change:
    """One row change in the results table, as its stream record carries it."""

    new: Any  # JobRecord
    old: Any
    at: float  # when the callback (or the sweeper) wrote it: the stream's order
    kind: str  # in_progress, completed, timed_out (a job the sweeper gave up on), no_job (never started)


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _payload(status: str, conclusion: str | None, job: str, run_id: int, rng: random.Random) -> dict[str, Any]:
    doc = {"schema_version": 1, "status": status, "workflow_name": "CI", "job_name": job, "run_id": run_id}
    if status == "completed":
        total, failed = rng.randint(200, 4000), rng.randint(1, 5) if conclusion == "failure" else 0
        results = {"passed": total - failed - total // 20, "failed": failed, "skipped": total // 20, "total": total}
        doc |= {"conclusion": conclusion, "test_results": results}
    return doc


def job_changes(commits: int, repos: int, *, seed: int = SEED, start: float | None = None) -> list[Change]:
    """`commits` commits x `repos` repositories x 1 or 2 jobs, each `in_progress` then `completed`, with re-runs,
    sweeps and dispatches with no job, ordered by when each would be written, so the commits interleave."""
    rng = random.Random(seed)
    t0 = float(int(start if start is not None else time.time() - 2 * 86_400))
    changes: list[Change] = []
    for c in range(commits):
        sha = hashlib.sha1(f"bench-commit-{seed}-{c}".encode()).hexdigest()  # an id, not security
        delivery = str(uuid.UUID(hashlib.md5(f"bench-delivery-{seed}-{c}".encode()).hexdigest()))
        is_push = c % 4 == 3
        pr = None if is_push else 7000 + (c - c // 4) // 2  # PR commits so far, two per PR
        dispatched = t0 + c * COMMIT_SPACING_S
        for r in range(repos):
            repo = f"bench-org/repo-{r}"
            base = h.JobRecord(
                dispatch_id=h.dispatch_id(delivery, repo), run_id="0", run_attempt=0, job_name="", workflow_name="",
                state="timed_out", conclusion="timed_out", fingerprint=h.SWEPT, url="", repo=repo,
                repo_id=50_000 + r, level=LEVELS[r % len(LEVELS)], delivery_id=delivery, upstream=h.UPSTREAM,
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
                changes.extend(_one_job(base, run_id, JOB_NAMES[j], rng, swept=c % 11 == 7 and r == j == 0))
                if changes[-1].new.conclusion == "failure" and c % 3 == 0:
                    changes.extend(_one_job(base, run_id, JOB_NAMES[j], rng, rerun_at=changes[-1].at + 120))
    changes.sort(key=lambda ch: ch.at)
    return changes


def _one_job(base: Any, run_id: int, name: str, rng: random.Random, rerun_at: float = 0, swept: bool = False) -> list:
    """A job's changes: a first attempt (`swept`: never finished), or one re-run at `rerun_at` that passes."""
    attempt = 2 if rerun_at else 1
    started = (rerun_at or base.dispatched_at) + rng.uniform(20, 180)
    url = f"https://github.com/{base.repo}/actions/runs/{run_id}"
    running_doc = _payload("in_progress", None, name, run_id, rng)
    running = replace(
        base, run_id=str(run_id), run_attempt=attempt, job_name=name, workflow_name="CI", state="in_progress",
        conclusion=None, fingerprint=_digest(running_doc), url=url, started_at=started,
        callback_payload=json.dumps(running_doc), version=1, check_run_id=f"crcr-{run_id}-{attempt}",
    )  # fmt: skip
    out = [Change(running, None, started, "in_progress")]
    if swept:
        at = started + RUN_TIMEOUT_S
        swept = replace(
            running, state="timed_out", conclusion="timed_out", fingerprint=h.SWEPT, completed_at=at, version=2
        )
        return [*out, Change(swept, running, at, "timed_out")]
    conclusion = "success" if rerun_at or rng.random() >= FAILURE_RATE else "failure"
    done_at = started + rng.uniform(300, 1800)
    done_doc = _payload("completed", conclusion, name, run_id, rng)
    done = replace(
        running, state="completed", conclusion=conclusion, fingerprint=_digest(done_doc), completed_at=done_at,
        callback_payload=json.dumps(done_doc), version=2,
    )  # fmt: skip
    return [*out, Change(done, running, done_at, "completed")]


class Retries:
    """Lambda's stream retries, drawn: a batch delivered again from one of its records on, `redelivered` of them."""

    def __init__(self, redelivered: float, *, seed: int = RETRY_SEED) -> None:
        self._rng = random.Random(seed)
        # A retry repeats b/2 records on average (it starts at one of positions 1..b-1): retrying a share 2r/(1+r)
        # of the batches makes r of the records arrive twice.
        self._share = min(1.0, 2 * redelivered / (1 + redelivered))

    def next_start(self, start: int, end: int) -> int:
        if end - start > 1 and self._rng.random() < self._share:
            return start + self._rng.randrange(1, end - start)
        return end


def _final(changes: list[Change]) -> dict[tuple[str, int, int, str], Any]:
    return {(ch.new.dispatch_id, ch.new.run_id, ch.new.run_attempt, ch.new.job_name): ch.new for ch in changes}


def _failed(job: Any) -> bool:
    return job.state == "timed_out" or (job.state == "completed" and job.conclusion in ("failure", "timed_out"))


def expected_verdicts(changes: list[Change]) -> dict[str, str | None]:
    """Per job attempt, the verdict its row ends with (docs/contracts.md), worked out apart from the reporter; a failed
    latest attempt is `no baseline` unless timed out (the bench records no PR's base commit)."""
    runs: dict[tuple[str, str, str, str], list[Any]] = {}
    for job in _final(changes).values():
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
            out[h.job_key(job)] = verdict
    return out


def verify_verdicts(ddb: Any, table: str, expected: dict[str, str | None]) -> dict[str, Any]:
    """The setting's results table ends with the verdicts the fed changes call for, on every row."""
    rows = {h.job_key(job): job.verdict for job in map(h.from_item, h.scan(ddb, TableName=table))}
    problems = [f"{k}: verdict {rows.get(k)!r} != {want!r}" for k, want in expected.items() if rows.get(k) != want]
    if extra := set(rows) - set(expected):
        problems.append(f"{len(extra)} rows never fed")
    by_verdict = dict(sorted(Counter(v for v in rows.values() if v).items()))
    return {"ok": not problems, "rows": len(rows), "by_verdict": by_verdict, "problems": problems[:5]}


def verify_documents(docs: Any, changes: list[Change]) -> dict[str, Any]:
    """The index lists every commit fed and no other; each commit document every job attempt at its final version
    and verdict."""
    verdicts = expected_verdicts(changes)
    versions: dict[str, dict[str, int]] = {}
    for job in _final(changes).values():
        versions.setdefault(job.head_sha, {})[h.job_key(job)] = job.version
    index, _ = docs.get("index.json")
    listed = {c.get("sha") for c in (index or {}).get("commits", [])}
    problems = [f"index lists {len(listed)} commits, {len(versions)} fed"] if listed != set(versions) else []
    matching = 0
    for sha, want in versions.items():
        jobs = (docs.get(f"commit/{sha}.json")[0] or {}).get("jobs") or {}
        got = {k: (e.get("version"), e.get("verdict")) for k, e in jobs.items()}
        if got == {k: (version, verdicts[k]) for k, version in want.items()}:
            matching += 1
        else:
            problems.append(f"commit/{sha[:8]}: jobs (version, verdict) {got}, fed {want}")
    return {"ok": not problems, "commit_documents": len(versions), "matching": matching, "problems": problems[:5]}


@dataclass
class Setting:
    """One reporter configuration, its own results table and that table's stream, and what it cost call by call."""

    name: str
    deps: Any
    bucket: str | None
    table: str
    reader: h.StreamReader
    stream: list[dict[str, Any]] = field(default_factory=list)  # its table's stream read so far, in order
    health: bool = False
    health_ms: list[float] = field(default_factory=list)  # each health computation, when the refresh is on
    batch_records: list[int] = field(default_factory=list)  # each handler call's records
    wall: float = 0.0
    cpu: float = 0.0
    moto_cpu: float = 0.0
    failures: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    metrics: Counter[str] = field(default_factory=Counter)


def deliver(setting: Setting, r: h.Relay, batch: list[dict[str, Any]], bench: h.Bench) -> None:
    """One stream batch to the real handler with this setting's dependencies; the tallies stay outside the window."""
    handler, event, context = r.stack.handlers[FUNCTION], {"Records": batch}, h.Context(FUNCTION, 60)
    calls, metrics = bench.aws.snapshot(), Counter(h.TOTALS)
    moto_before = h.cpu_seconds(r.moto.pid)
    c0, t0 = time.process_time(), time.perf_counter()
    result = handler(event, context, deps=setting.deps)
    setting.wall += time.perf_counter() - t0
    setting.cpu += time.process_time() - c0
    setting.moto_cpu += h.cpu_seconds(r.moto.pid) - moto_before
    setting.calls.update(bench.aws.snapshot() - calls)
    setting.batch_records.append(len(batch))
    setting.metrics.update(Counter(h.TOTALS) - metrics)
    setting.failures += len((result or {}).get("batchItemFailures") or [])


def build_setting(r: h.Relay, name: str, bucket: str | None, *, health: bool = False, off: Any = OFF) -> Setting:
    """The reporter's dependencies as its composition root builds them, with its own results table, the HUD bucket
    or none, the settings `off` left out; the health refresh timed with `health`, else taken out."""
    table, reader = r.results_copy(name)
    env = {k: v for k, v in r.stack.function_env.items() if k not in (*off, "CRCR_HUD_BUCKET")}
    env["CRCR_RESULTS_TABLE"] = table
    if bucket is not None:
        env["CRCR_HUD_BUCKET"] = bucket
    deps = h.build_report_deps(h.load_settings(env))
    if deps.torchci is not None or deps.checks is not None or (deps.summaries is None) != (bucket is None):
        raise RuntimeError(f"{name}: the reporter is not configured as this setting needs")
    setting = Setting(name, deps, bucket, table, reader)
    if deps.summaries is not None:
        inner, sink = deps.summaries.health, setting.health_ms

        def timed(job: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(job)
            finally:
                sink.append((time.perf_counter() - t) * 1000.0)

        setting.deps = replace(deps, summaries=replace(deps.summaries, health=timed if health else None))
        setting.health = health
    return setting


def _report(setting: Setting, changes: list[Change], fed: list[Change], s3: Any, ddb: Any) -> dict[str, Any]:
    n, deps_summaries = len(changes), setting.deps.summaries
    writes = {name: round(setting.metrics.get(name, 0) / n, 3) for name in ("HudSummaryWritten", "HudSummaryConflict")}
    verdicts = verify_verdicts(ddb, setting.table, expected_verdicts(fed))
    if setting.bucket is not None:
        verification = verify_documents(h.S3PageDocs(s3, setting.bucket), fed)
        verification["problems"] = (verification["problems"] + verdicts["problems"])[:5]
    else:
        s3_calls = sum(v for k, v in setting.calls.items() if k.startswith("s3."))
        ok = not s3_calls and not setting.metrics.get("HudSummaryWritten")
        verification = {"ok": ok, "s3_calls": s3_calls, "problems": verdicts["problems"]}
    verification |= {"ok": verification["ok"] and verdicts["ok"], "verdicts": verdicts}
    return {
        "setting": setting.name,
        "summaries": deps_summaries is not None,
        "health_refresh": {
            "on": setting.health,
            "refresh_s": deps_summaries.health_refresh_s if deps_summaries is not None else None,
            "computations": len(setting.health_ms),
            "ms_total": round(sum(setting.health_ms), 2),
        },
        "changes": n,
        "records_delivered": sum(setting.batch_records),
        "batches": len(setting.batch_records),
        "batch_item_failures": setting.failures,
        "aws_calls": dict(sorted(setting.calls.items())),
        "aws_calls_per_change": h.per_unit(setting.calls, n),
        "ms_per_change": round(setting.wall * 1000.0 / n, 3),
        "cpu_ms_per_change": round(setting.cpu * 1000.0 / n, 3),
        "moto_cpu_ms_per_change": round(setting.moto_cpu * 1000.0 / n, 3),
        "writes_per_change": writes,
        "relay_metrics": dict(sorted(setting.metrics.items())),
        "verification": verification,
    }


def difference(on: dict[str, Any], off: dict[str, Any]) -> dict[str, Any]:
    on_calls, off_calls = on["aws_calls_per_change"], off["aws_calls_per_change"]
    calls = {op: round(on_calls.get(op, 0) - off_calls.get(op, 0), 3) for op in sorted(on_calls | off_calls)}
    diff: dict[str, Any] = {"aws_calls_per_change": calls}
    for key in ("ms_per_change", "cpu_ms_per_change", "moto_cpu_ms_per_change"):
        diff[key] = round(on[key] - off[key], 3)
    for name in ("HudSummaryWritten", "HudSummaryConflict"):
        diff[name + "_per_change"] = round(on["writes_per_change"][name] - off["writes_per_change"][name], 3)
    return diff


def health_adds(with_health: dict[str, Any], without: dict[str, Any], changes: list[Change]) -> dict[str, Any]:
    """What the health refresh adds, and what it would add at the stream's own pace (the bench feeds it in seconds:
    each repository's health is computed once here, at the changes' own times every `refresh_s`)."""
    adds, refresh = difference(with_health, without), with_health["health_refresh"]
    done, ms = refresh["computations"], refresh["ms_total"]
    last: dict[str, float] = {}
    at_pace = 0
    for ch in changes:
        repo = ch.new.repo.lower()
        if repo not in last or ch.at - last[repo] >= refresh["refresh_s"]:
            last[repo] = ch.at
            at_pace += 1
    calls, share = adds["aws_calls_per_change"]["total"] * len(changes), at_pace / len(changes)
    adds["computations"] = done
    adds["ms_per_computation"] = round(ms / done, 2) if done else None
    adds["aws_calls_per_computation"] = round(calls / done, 2) if done else None
    adds["computations_at_stream_pace"] = at_pace
    adds["ms_per_change_at_stream_pace"] = round(ms / done * share, 3) if done else None
    adds["aws_calls_per_change_at_stream_pace"] = round(calls / done * share, 3) if done else None
    return adds


class Feed:
    """The settings' streams side by side, each change written to every setting's table (unmeasured): they differ only
    in the summaries, never in the verdicts, so their streams hold the same records and one `read` serves them all."""

    def __init__(self, ddb: Any, settings: list[Setting]) -> None:
        self._ddb = ddb
        self._settings = settings
        self.read = 0
        self.write_backs = 0

    @property
    def length(self) -> int:
        return len(self._settings[0].stream)

    def write(self, changes: list[Change]) -> None:
        before = self.length
        for ch in changes:
            for setting in self._settings:
                self._ddb.put_item(TableName=setting.table, Item=h.to_item(ch.new))
        self._take()
        if self.length - before != len(changes):
            raise RuntimeError(f"{len(changes)} changes written, {self.length - before} stream records")

    def collect(self) -> None:
        """The records the handler calls just made (the reporter's own writes)."""
        self.write_backs += len(self._take())

    def _take(self) -> list[dict[str, Any]]:
        start = self.length
        for setting in self._settings:
            setting.stream.extend(read_all(setting.reader))

        def images(s: Setting) -> list[tuple[str, Any, Any]]:
            return [
                (r["eventName"], r["dynamodb"].get("OldImage"), r["dynamodb"].get("NewImage")) for r in s.stream[start:]
            ]

        for setting in self._settings[1:]:
            if images(setting) != images(self._settings[0]):
                raise RuntimeError(f"{setting.name}'s stream differs from {self._settings[0].name}'s")
        return self._settings[0].stream[start:]


def reporter_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """One stack (template.yaml's resources, no poller): ReporterFunction's handler called directly with the records of
    each setting's own copy of the results table's stream, read as crcr local's StreamReader reads it: the changes,
    written to every copy as the callback function would, and the verdicts the reporter writes back. Each batch goes
    to every setting in turn (alternating which goes first), each with its own dependencies from build_report_deps:
    off = no HUD bucket, on = the template's, on_health = on with the health refresh; HUD push and check runs off in
    all. AWS calls from a botocore hook, CPU from time.process_time around each handler call."""
    started = time.perf_counter()
    changes = job_changes(args.reporter_commits, args.reporter_repos)
    # One change of another commit, before the sequence: opens connections and loads what botocore loads lazily.
    warmup = job_changes(1, 1, seed=99, start=changes[0].at - 600)[:1]
    start_off = bench.out.offset()
    with h.relay(None, allowlist=ALLOWLIST, pollers=None, github=None) as r:
        s3, ddb = r.stack.client("s3"), r.stack.client("dynamodb")
        batch_size = next(f for f in r.stack.functions if f.logical_id == FUNCTION).stream_sources[0].batch_size
        bucket = r.stack.function_env["CRCR_HUD_BUCKET"]
        s3.create_bucket(Bucket=f"{bucket}-health")  # its own empty bucket, so its documents start where `on`'s did
        settings = [
            build_setting(r, "off", None),
            build_setting(r, "on", bucket),
            build_setting(r, "on_health", f"{bucket}-health", health=True),
        ]
        bench.out.say(
            f"   {len(changes)} changes in batches of {batch_size}, {args.reporter_redelivered:.0%} redelivered"
        )
        handler = r.stack.handlers[FUNCTION]
        feed = Feed(ddb, settings)
        feed.write(warmup)
        while feed.read < feed.length:  # the warm-up change, and whatever the reporter writes back for it
            start, feed.read = feed.read, feed.length
            for setting in settings:
                handler({"Records": setting.stream[start : feed.read]}, h.Context(FUNCTION, 60), deps=setting.deps)
            feed.collect()
        for setting in settings:
            setting.health_ms.clear()  # the warm-up's repository has its health from here on
        measured_from, written = feed.read, 0
        retries = Retries(args.reporter_redelivered)
        for n in itertools.count():
            # The callback function has written the changes up to a full batch before Lambda reads one.
            if (short := feed.read + batch_size - feed.length) > 0 and written < len(changes):
                feed.write(changes[written : written + short])
                written = min(len(changes), written + short)
            if feed.read >= feed.length:
                break
            start, end = feed.read, min(feed.read + batch_size, feed.length)
            for setting in settings if n % 2 == 0 else settings[::-1]:
                deliver(setting, r, setting.stream[start:end], bench)
            feed.collect()  # the verdicts the reporter wrote back: the stream's next records
            feed.read = retries.next_start(start, end)
        results: dict[str, Any] = {
            "sequence": {
                "seed": SEED,
                "retry_seed": RETRY_SEED,
                "commits": args.reporter_commits,
                "repositories": args.reporter_repos,
                "changes": len(changes),
                "changes_by_kind": dict(sorted(Counter(c.kind for c in changes).items())),
                "batch_size": batch_size,
                "stream_records": feed.length - measured_from,
                "verdict_write_backs": feed.write_backs,
                "redelivered": sum(settings[0].batch_records) - (feed.length - measured_from),
                "batches": len(settings[0].batch_records),
            }
        }
        for setting in settings:
            results[setting.name] = _report(setting, changes, [*warmup, *changes], s3, ddb)
        end_off = bench.out.offset()
    results["relay_log"] = h.log_summary(bench.out.lines_between(start_off, end_off))
    results["health_adds"] = health_adds(results["on_health"], results["on"], changes)
    results["difference_on_minus_off"] = difference(results["on"], results["off"])
    results["all_verified"] = all(
        results[s.name]["verification"]["ok"] and not results[s.name]["batch_item_failures"] for s in settings
    )
    results["elapsed_s"] = round(time.perf_counter() - started, 1)
    results["method"] = " ".join(str(reporter_section.__doc__).split()) + f" Batches of {batch_size}."
    return {"reporter": results}
