"""Section 9: upstream check-run writes an hour under PyTorch's load on a simulated day, `per_job` against `auto`."""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import harness as h
from moto import mock_aws

from tests.unit import fakes

PYTORCH_PR_EVENTS_PER_DAY = 1000
REPOS = ("l4-org-a/ci", "l4-org-b/ci", "l4-org-c/ci")
JOBS = ("build", "test")
HOURLY_BUDGET = 500  # GitHub: content-creating requests an hour
MINUTE_BUDGET = 80
DAY = 86_400.0
SQS_MAX_DELAY_S = 900.0
START_UTC_HOUR = 12
START = 1_800_000_000.0 - 1_800_000_000.0 % DAY + START_UTC_HOUR * 3600  # noon UTC
PEAK_HOUR = 18  # UTC


def hourly_shape() -> list[float]:
    """Each hour's share of the day's events from noon UTC, busiest first: 1 + 0.6 cos(2 pi (utc - 18) / 24)."""
    weights = [
        1 + 0.6 * math.cos(2 * math.pi * ((hour + START_UTC_HOUR) % 24 + 0.5 - PEAK_HOUR) / 24) for hour in range(24)
    ]
    return [w / sum(weights) for w in weights]


def arrivals(events_per_day: int, seed: int = 12) -> list[float]:
    """Event times over one day: each hour's share of the events, at uniform random moments within it."""
    rng = random.Random(seed)
    exact = [events_per_day * s for s in hourly_shape()]
    counts = [int(x) for x in exact]
    for hour in sorted(range(24), key=lambda i: exact[i] - counts[i], reverse=True)[: events_per_day - sum(counts)]:
        counts[hour] += 1
    return sorted(START + 3600 * hour + rng.uniform(0, 3600) for hour, n in enumerate(counts) for _ in range(n))


@dataclass
class Job:
    """One downstream job's life: queued for a while after the dispatch, then running for a while."""

    queue_s: float
    run_s: float
    conclusion: str


def plan_jobs(n_events: int, seed: int = 34) -> list[list[list[Job]]]:
    """[event][repository][job]: queue time 1 to 15 minutes, run time 20 to 90 minutes, 1 in 10 fails."""
    rng = random.Random(seed)

    def job() -> Job:
        return Job(rng.uniform(60, 900), rng.uniform(1200, 5400), "failure" if rng.random() < 0.1 else "success")

    return [[[job() for _ in JOBS] for _ in REPOS] for _ in range(n_events)]


@dataclass
class Sim:
    """One clock, one agenda: arrivals, job changes and ChecksQueue's messages, each run at its moment."""

    clock: fakes.FakeClock
    agenda: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)  # (at, order, act)
    seq: itertools.count[int] = field(default_factory=itertools.count)
    deps: Any = None
    handled: int = 0
    waiting: int = 0  # messages on ChecksQueue (delayed or due)
    dead: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)

    def at(self, t: float, act: Callable[[], None]) -> None:
        heapq.heappush(self.agenda, (t, next(self.seq), act))

    # -- the ChecksQueue port, as SQS delays messages
    def send_checks(self, messages: list[Any], delay_s: float = 0.0) -> None:
        delay = max(0.0, min(SQS_MAX_DELAY_S, math.ceil(delay_s)))
        for message in messages:
            self.waiting += 1
            self.at(self.clock.t + delay, lambda m=message: self._deliver(m))  # type: ignore[misc]

    def dead_letter(self, message: Any, reason: str) -> None:
        self.dead.append(reason)

    def _deliver(self, message: Any) -> None:
        self.waiting -= 1
        self.handled += 1
        assert self.deps is not None
        self.outcomes[h.sync(message, self.deps).detail.split(":")[0]] += 1

    def run(self, until: float, budget_s: float) -> str:
        """Run the agenda up to `until` (simulated) or until `budget_s` of wall time has gone."""
        deadline = time.monotonic() + budget_s
        while self.agenda and self.agenda[0][0] <= until:
            at, _, act = heapq.heappop(self.agenda)
            self.clock.t = max(self.clock.t, at)
            act()
            if self.handled % 200 == 0 and time.monotonic() > deadline:
                return "wall-time budget"
        return "drained" if not self.agenda else "horizon"


def _setting(key: h.AppKey, mode: str, load: int, *, drain_hours: float, budget_s: float, seed: int) -> dict[str, Any]:
    clock = fakes.FakeClock(START)
    events = arrivals(PYTORCH_PR_EVENTS_PER_DAY * load, seed)
    plans = plan_jobs(len(events), seed + 1)
    started = time.perf_counter()
    double = h.github_double(
        key.public_pem,
        [(h.UPSTREAM, 1, h.UPSTREAM_ID)],
        clock=clock.now,
        content_writes_per_minute=MINUTE_BUDGET,
        content_writes_per_hour=HOURLY_BUDGET,
        primary_rate_limit=1_000_000,  # the primary limit counts reads too; only writes are measured here
    )
    with mock_aws(), double:
        ddb = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
        ddb.create_table(
            TableName="state",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"} for key in ("pk", "sk")],
            BillingMode="PAY_PER_REQUEST",
        )
        calls: Counter[str] = Counter()  # the pacer's DynamoDB calls
        ddb.meta.events.register("before-call.dynamodb", lambda model, **_: calls.update([model.name]))
        pacer = h.DynamoPacer(ddb, "state", rates=h.CONTENT_RATES)
        sim = Sim(clock)
        ledger, jobs, metrics = fakes.FakeState(), fakes.FakeJobs(), fakes.RecordingMetrics()
        allowlist = "L4:\n" + "".join(f"  - {r}\n" for r in REPOS)
        allowlist += "repos:\n" + "".join(f"  {r}:\n    check_runs: {mode}\n" for r in REPOS)
        sim.deps = h.CheckDeps(
            api=h.GitHubCheckRuns(h.GitHubApp(double.url, h.APP_ID, key.private_pem, clock.now)),
            store=fakes.FakeCheckStore(), results=jobs, ledger=ledger, prs=ledger, queue=sim, pacer=pacer,
            allowlist=fakes.StaticAllowlist(h.parse_allowlist(allowlist)), metrics=metrics, clock=clock, settle_s=60.0,
            gauge=pacer, door=fakes.door()
        )  # fmt: skip
        finished: dict[tuple[str, str], float] = {}  # (head, repo) -> when its last job finished

        def dispatch(n: int) -> None:
            head, pr = f"{n + 1:040x}", 100_000 + n
            double.add_commit(h.UPSTREAM, head)
            ledger.heads[(h.UPSTREAM, pr)] = head
            for r, repo in enumerate(REPOS):
                delivery, dispatch_id = f"dlv-{n}", f"dsp-{n}-{r}"
                ledger.ledger[(delivery, repo)] = h.LedgerRow(
                    delivery, repo, h.LedgerState.DISPATCHED, dispatch_id, dispatched_at=clock.t, upstream=h.UPSTREAM,
                    head_sha=head, pr=pr, level=4, event_type="pull_request",
                )  # fmt: skip
                sim.send_checks(
                    [h.DispatchChanged(upstream=h.UPSTREAM, head_sha=head, delivery_id=delivery, repo=repo)]
                )
                for j, name in enumerate(JOBS):
                    job = plans[n][r][j]
                    row = h.JobRecord(
                        dispatch_id=dispatch_id, run_id=str(1000 + n), run_attempt=1, job_name=name,
                        workflow_name="CI", state="in_progress", conclusion=None, fingerprint="started",
                        url=f"https://github.com/{repo}/actions/runs/{1000 + n}", repo=repo, repo_id=50_000 + r,
                        level=4, delivery_id=delivery, upstream=h.UPSTREAM, head_sha=head, pr=pr, device=None,
                        dispatched_at=clock.t, started_at=clock.t + job.queue_s, completed_at=None,
                        callback_payload="{}", version=1, event_type="pull_request",
                    )  # fmt: skip
                    begin, end = clock.t + job.queue_s, clock.t + job.queue_s + job.run_s
                    sim.at(begin, lambda row=row: report(row, None))  # type: ignore[misc]
                    done = h.JobRecord(**{**row.__dict__, "state": "completed", "conclusion": job.conclusion,
                                        "fingerprint": "done", "completed_at": end, "version": 2})  # fmt: skip
                    sim.at(end, lambda done=done: report(done, 1))  # type: ignore[misc]
                    finished[(head, repo)] = max(finished.get((head, repo), 0.0), end)

        def report(row: h.JobRecord, expected: int | None) -> None:
            """The reporter: the callback's row is recorded, then the writer is asked to look (about 1 s later)."""
            assert jobs.put_job(row, expected)
            message = h.job_message(row)
            assert message is not None
            sim.at(clock.t + 1.0, lambda: sim.send_checks([message]))

        for n, t in enumerate(events):
            sim.at(t + 5.0, lambda n=n: dispatch(n))  # type: ignore[misc]
        stopped = sim.run(START + DAY, budget_s)
        at_day_end = None  # a setting stopped by its wall-time budget never saw the day's end
        if stopped != "wall-time budget":
            runs = double.check_runs(h.UPSTREAM)  # a repository run's name is crcr/<owner>/<name>
            completed = sum(1 for r in runs if r["name"].count("/") == 2 and r["status"] == "completed")
            at_day_end = {"waiting_messages": sim.waiting, "repository_runs_open": len(finished) - completed}
            stopped = sim.run(START + DAY + drain_hours * 3600, budget_s - (time.perf_counter() - started))
        result = _measure(double, finished)
        # repository_runs_dispatched: fewer than expected when a wall-time budget stopped the day early
        result.update(
            setting=mode, load=f"{load}x", events=len(events), repository_runs_expected=len(events) * len(REPOS),
            repository_runs_dispatched=len(finished), stopped=stopped, at_end_of_day=at_day_end,
            simulated_hours=round((clock.t - START) / 3600, 1), waiting_messages_at_stop=sim.waiting,
            dead_lettered=len(sim.dead), messages_handled=sim.handled, outcomes=dict(sim.outcomes),
            relay_metrics={k: v for k, v in metrics.counts.items() if k.startswith("CheckRun")},
            pacer_aws_calls=dict(calls), wall_s=round(time.perf_counter() - started, 1),
        )  # fmt: skip
        writes = result["writes"]["total"]
        result["pacer_aws_calls_per_write"] = round(sum(calls.values()) / writes, 2) if writes else None
        assert double.internal_errors == [], double.internal_errors
    return result


def _measure(double: h.GitHubDouble, finished: dict[tuple[str, str], float]) -> dict[str, Any]:
    runs = double.check_runs(h.UPSTREAM)
    ids = {r["id"]: (r["head_sha"], r["name"]) for r in runs}
    writes = h.upstream_writes(double, "check-runs")
    ok = sorted(q.time for q in writes if (q.status or 0) < 400)
    completed_at: dict[tuple[str, str], float] = {}
    for q in writes:
        body = q.json or {}
        if (q.status or 0) >= 400 or body.get("status") != "completed":
            continue
        run = (body.get("head_sha"), body.get("name")) if q.method == "POST" else ids.get(int(q.path.rsplit("/", 1)[1]))
        if run is not None:
            completed_at.setdefault((str(run[0]), str(run[1])), q.time)
    lags = [
        (completed_at[(head, f"crcr/{repo}")] - end) / 60
        for (head, repo), end in finished.items()
        if (head, f"crcr/{repo}") in completed_at
    ]
    repo_runs = [r for r in runs if r["name"].count("/") == 2]
    job_runs = [r for r in runs if r["name"].count("/") > 2]
    done = sum(1 for r in runs if r["status"] == "completed")
    return {
        "writes": {"total": len(ok), "refused": len(writes) - len(ok),
                   "create": sum(q.method == "POST" for q in writes)},
        "max_writes_in_any_3600_s": h.most_in_any(ok, 3600.0), "max_writes_in_any_60_s": h.most_in_any(ok, 60.0),
        "check_runs": {"repository": len(repo_runs), "per_job": len(job_runs), "completed": done,
                       "not_completed": len(runs) - done},
        "repository_runs_completed": sum(1 for r in repo_runs if r["status"] == "completed"),
        "minutes_from_last_job_to_repository_result": {
            "p50": round(h.percentile(lags, 50), 1) if lags else None,
            "p95": round(h.percentile(lags, 95), 1) if lags else None, "max": round(max(lags), 1) if lags else None,
        },
        "all_completed": bool(runs) and done == len(runs) and len(lags) == len(finished),
    }  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkbudget-loads", default="1,3,10", help="multiples of 1,000 PR events a day (--full)")
    parser.add_argument("--checkbudget-modes", default="per_job,auto", help="check_runs settings, side by side")
    parser.add_argument("--checkbudget-budget-s", type=float, default=300.0, help="auto's wall s at 1x (per_job: 1/6)")
    parser.add_argument("--checkbudget-drain-hours", type=float, default=72.0, help="simulated hours after the day")


def checkbudget_section(bench: h.Bench, args: argparse.Namespace, seed: int = 12) -> dict[str, Any]:
    results: dict[str, Any] = {"seed": seed, "settings": []}
    budget_s = args.checkbudget_budget_s
    for load in (int(x) for x in args.checkbudget_loads.split(",")):
        for mode in args.checkbudget_modes.split(","):
            bench.out.say(f"   {mode:8} {load:>2}x: {PYTORCH_PR_EVENTS_PER_DAY * load} PR events over a simulated day")
            # per_job falls behind at every load: a sixth of the budget shows it. auto gets time in proportion to the
            # load, enough to write every run of the day (1x: 100 to 170 s here); it stops once drained.
            allowed = budget_s * load if mode != "per_job" else budget_s / 6
            row = _setting(bench.key, mode, load, drain_hours=args.checkbudget_drain_hours, budget_s=allowed, seed=seed)
            results["settings"].append(row)
    results["method"] = (
        f"{PYTORCH_PR_EVENTS_PER_DAY} x load pull_request events over one simulated UTC day (hourly shape "
        f"1 + 0.6 cos(2 pi (h - {PEAK_HOUR}) / 24)), each dispatched to {len(REPOS)} L4 repositories with "
        f"{len(JOBS)} jobs (queued 1-15 min, running 20-90 min, 10 % failing); the reporter's messages 1 s after "
        "each job change; crcr.app.checks.sync with DynamoPacer on moto in process (CONTENT_RATES) and GitHubCheckRuns "
        f"on the GitHub double ({MINUTE_BUDGET}/min and {HOURLY_BUDGET}/h enforced), one simulated clock; "
        f"after the day, up to {args.checkbudget_drain_hours:g} more simulated hours to drain; an auto setting stops "
        f"after {budget_s:g} s of wall time per 1x of load, per_job after {budget_s / 6:g} s."
    )
    return {"check_run_budget": results}
