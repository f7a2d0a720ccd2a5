"""The PR comment's cost on the upstream installation's budget (see bench/README.md, section 8).

Two figures, each on a fresh stack with the upstream installed with the comment's permissions:

- `per_event`: upstream content writes (check runs and comments) per PR event with `CRCR_PR_COMMENT=on` against
  `off`. `events` pull requests (one commit each) x `targets` L4 repositories x `jobs` jobs; every job reports
  `in_progress`, then (once ChecksQueue is empty) `completed`, job 0 of every repository `failure`, the rest
  `success`: every PR gets a comment.
  Each run also measures ChecksFunction itself (`checks_function`): its invocations and the records (ChecksQueue
  messages and state-table stream records) they handled, and the AWS calls and CPU of the threads that ran them
  (the invoking thread and its batch workers: botocore's hook and each thread's CPU clock), and the write units
  of the rows of the flow (check runs, the PR comment's row, the upstream installation's pacing cell, whoever
  wrote them: ChecksFunction, or the reporter asking for a render), from the state table's stream
  (bench/write_units.py). docs/cost_model.py reads `on`'s as the check-run flow's cost.
- `bursts`: one PR, one L4 repository; `callbacks` failing jobs report `completed` spread evenly over `spread_s`
  seconds (the comment's default settle time is 5 s), then, once the comment is written, the same again with
  other jobs. Counts the comment's writes per burst and the time from the burst's last callback to its write.

The reporter asks for the comment after each recorded change of an L3/L4 job on a PR, as in production; there is
no baseline here, so failing jobs read `no baseline` (verdicts do not change the writes).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from checkruns import _wait_idle
from harness import (
    REPO_ID_BASE,
    ROOT,
    UPSTREAM,
    AwsCalls,
    FunctionWork,
    OutputCapture,
    Relay,
    event_body,
    metrics_delta,
    relay,
)
from write_units import StreamUnits, table_shapes

from crcr.adapters.observability import TOTALS
from tests.doubles.oidc_issuer import OidcIssuer

AUDIENCE = "crcr"
CHECKS = "ChecksFunction"
UPSTREAM_INSTALLATION = 1
PERMISSIONS = {
    "actions": "write", "checks": "write", "contents": "write", "issues": "write", "pull_requests": "write",
    "metadata": "read",
}  # fmt: skip


def _env(issuer: OidcIssuer, comment: str) -> dict[str, str]:
    return {
        "CRCR_OIDC_ISSUER": issuer.url,
        "CRCR_OIDC_AUDIENCE": AUDIENCE,
        "CRCR_CALLBACK_RATE_PER_MIN": "100000",
        "CRCR_CHECK_SETTLE_S": "2",
        "CRCR_PR_COMMENT": comment,
    }


def _checks_row(image: dict[str, Any]) -> str:
    """Whose row a state-table write was: ChecksFunction's (a check run, the PR comment, the upstream's pacing
    cell) or another function's."""
    pk, sk = str((image.get("pk") or {}).get("S", "")), str((image.get("sk") or {}).get("S", ""))
    if pk.startswith("CHECK#"):
        return "check_run"
    if pk.startswith("PR#") and sk == "COMMENT":
        return "comment"
    if pk == f"PACE#{UPSTREAM_INSTALLATION}":
        return "upstream_pacing"
    return "other." + pk.split("#", 1)[0]


class ChecksFlow:
    """ChecksFunction's own work on one stack, from the moment it is made."""

    def __init__(self, r: Relay, aws: AwsCalls) -> None:
        self._work = FunctionWork(r.stack, CHECKS, aws)
        shape = table_shapes(ROOT / "template.yaml")["StateTable"]
        ddb, streams = r.stack.client("dynamodb"), r.stack.client("dynamodbstreams")
        self._units = StreamUnits(ddb, streams, r.stack.function_env["CRCR_STATE_TABLE"], shape, row_of=_checks_row)
        self._units.take()

    def report(self, dispatches: int) -> dict[str, Any]:
        calls = self._work.calls
        taken = self._units.take()
        mine = {row: n for row, n in taken["by_row"].items() if not row.startswith("other.")}
        written = sum(v for row, v in taken["writes"].items() if not row.startswith("other."))
        work, records, n = self._work, max(1, self._work.records), max(1, dispatches)
        # Every write ChecksFunction asks for bills its units, those its condition refuses too (a lock another
        # writer holds, a booking that lost its race), which leave no stream record: the flow's units are at least
        # its write calls at the units a write of these rows costs.
        write_calls = sum(v for op, v in calls.items() if op.split(".")[-1] in ("PutItem", "UpdateItem", "DeleteItem"))
        per_write = sum(mine.values()) / max(1, written)
        units = max(sum(mine.values()), write_calls * per_write)
        return {
            "invocations": work.invocations,
            "records": work.records,
            "records_per_dispatch": round(work.records / n, 3),
            "records_by_source_per_dispatch": {k: round(v / n, 3) for k, v in sorted(work.records_by_source.items())},
            "invocations_per_dispatch": round(work.invocations / n, 3),
            "aws_calls": dict(sorted((k, v) for k, v in calls.items() if v)),
            "aws_calls_per_record": {k: round(v / records, 3) for k, v in sorted(calls.items()) if v},
            "cpu_ms_per_record": round(work.cpu_s * 1000 / records, 2),
            "wall_ms_per_invocation": round(work.wall_s * 1000 / max(1, work.invocations), 1),
            "write_units_in_stream": mine,
            "write_calls_per_dispatch": round(write_calls / n, 3),
            "write_units_per_dispatch": round(units / n, 3),
            "largest_item_bytes": {
                row: size for row, size in taken["largest_item_bytes_by_row"].items() if not row.startswith("other.")
            },
        }


def _open_prs(r: Relay, events: int, timeout_s: float) -> list[tuple[int, str]]:
    r.double.install(UPSTREAM, installation_id=UPSTREAM_INSTALLATION, repo_id=65600975, permissions=PERMISSIONS)
    prs = []
    for n in range(events):
        doc = json.loads(event_body())
        pr, head = 9000 + n, f"{n + 1:040x}"
        doc["number"] = doc["pull_request"]["number"] = pr
        doc["pull_request"]["head"]["sha"] = head
        r.double.add_commit(UPSTREAM, head)
        r.double.add_issue(UPSTREAM, pr)
        status, _, _ = r.post(json.dumps(doc).encode())
        if status != 202:
            raise RuntimeError(f"webhook answered {status}")
        prs.append((pr, head))
    if not r.wait_for_dispatches(events * len(r.repos), timeout_s, settle_s=0.0):
        raise RuntimeError("dispatches did not all land")
    return prs


def _report(r: Relay, issuer: OidcIssuer, ticket: str, repo: str, i: int, job: str, run_id: int, status: str,
            conclusion: str | None = None) -> None:  # fmt: skip
    claims = {
        "repository": repo, "repository_id": REPO_ID_BASE + i, "run_id": run_id, "run_attempt": 1,
        "job_workflow_ref": f"{repo}/.github/workflows/ci.yml@refs/heads/main",
    }  # fmt: skip
    doc: dict[str, Any] = {
        "schema_version": 1, "ticket": ticket, "status": status, "workflow_name": "CI", "job_name": job,
        "run_id": run_id, "run_attempt": 1, "url": f"https://github.com/{repo}/actions/runs/{run_id}",
    }  # fmt: skip
    if conclusion:
        doc["conclusion"] = conclusion
    code, _, reply = r.callback(json.dumps(doc).encode(), issuer.token(**claims))
    if code != 200:
        raise RuntimeError(f"callback answered {code}: {reply[:200]!r}")


def _writes(r: Relay) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for q in r.double.requests:
        if q.method not in ("POST", "PATCH") or not q.path.startswith(f"/repos/{UPSTREAM}/"):
            continue
        if "/check-runs" in q.path:
            kinds[f"check_run_{q.method}"] += 1
        elif "/comments" in q.path:
            kinds[f"comment_{q.method}"] += 1
    return kinds


def _per_event(
    key: Any, aws: AwsCalls, comment: str, *, events: int, targets: int, jobs: int, timeout_s: float
) -> dict[str, Any]:
    before = Counter(TOTALS)
    with (
        OidcIssuer() as issuer,
        relay(key, targets, installations=targets, level="L4", extra_env=_env(issuer, comment)) as r,
    ):
        flow = ChecksFlow(r, aws)
        t0 = time.perf_counter()
        prs = _open_prs(r, events, timeout_s)
        reports = []
        for i, repo in enumerate(r.repos):
            for k, sent in enumerate(r.double.dispatches(repo)):
                reports += [(sent["client_payload"]["ticket"], repo, i, f"job-{j}", 100 + k) for j in range(jobs)]
        time.sleep(1.0)
        for ticket, repo, i, job, run_id in reports:
            _report(r, issuer, ticket, repo, i, job, run_id, "in_progress")
        time.sleep(1.0)
        _wait_idle(r, timeout_s=timeout_s)
        for ticket, repo, i, job, run_id in reports:
            _report(r, issuer, ticket, repo, i, job, run_id, "completed", "failure" if job == "job-0" else "success")
        time.sleep(1.0)
        _wait_idle(r, timeout_s=timeout_s)
        kinds = _writes(r)
        comments = {
            pr: len([c for c in r.double.comments(UPSTREAM, pr) if c["performed_via_github_app"]]) for pr, _ in prs
        }
        elapsed = time.perf_counter() - t0
        checks_function = flow.report(events * targets)
    total = sum(kinds.values())
    comment_writes = kinds["comment_POST"] + kinds["comment_PATCH"]
    return {
        "setting": comment,
        "events": events,
        "repositories_per_event": targets,
        "jobs_per_repository": jobs,
        "callbacks": len(reports) * 2,
        "writes": dict(sorted(kinds.items())),
        "writes_per_event": round(total / events, 2),
        "comment_writes_per_event": round(comment_writes / events, 2),
        "comments_per_pr": sorted(set(comments.values())),
        "relay_metrics": {
            k: v for k, v in metrics_delta(before).items() if k.startswith(("PrComment", "CheckRunPaced"))
        },
        "elapsed_s": round(elapsed, 1),
        "checks_function": checks_function,
    }


def _bursts(key: Any, *, callbacks: int, spread_s: float, bursts: int, timeout_s: float) -> dict[str, Any]:
    before = Counter(TOTALS)
    rows = []
    with OidcIssuer() as issuer, relay(key, 1, installations=1, level="L4", extra_env=_env(issuer, "on")) as r:
        _open_prs(r, 1, timeout_s)
        repo = r.repos[0]
        ticket = r.double.dispatches(repo)[0]["client_payload"]["ticket"]
        for b in range(bursts):
            seen = len(r.double.comment_writes(UPSTREAM))
            t0 = time.perf_counter()
            for n in range(callbacks):
                _report(r, issuer, ticket, repo, 0, f"burst-{b}-job-{n:02d}", 100, "completed", "failure")
                time.sleep(max(0.0, t0 + (n + 1) * spread_s / callbacks - time.perf_counter()))
            last = time.perf_counter()
            deadline = last + timeout_s
            while len(r.double.comment_writes(UPSTREAM)) == seen and time.perf_counter() < deadline:
                time.sleep(0.05)
            wrote = time.perf_counter()
            _wait_idle(r, timeout_s=timeout_s)
            made = r.double.comment_writes(UPSTREAM)[seen:]
            names = [f"burst-{b}-job-{n:02d}" for n in range(callbacks)]
            rows.append({
                "burst": b + 1,
                "callbacks": callbacks,
                "spread_s": round(last - t0, 2),
                "comment_writes": len(made),
                "kinds": [m for m, _, _ in made],
                "s_from_last_callback_to_write": round(wrote - last, 2),
                "shows_every_job": bool(made) and all(name in made[-1][2] for name in names),
            })  # fmt: skip
    return {
        "bursts": rows,
        "relay_metrics": {k: v for k, v in metrics_delta(before).items() if k.startswith("PrComment")},
    }


def comment_bench(
    key: Any,
    aws: AwsCalls,
    out: OutputCapture,
    *,
    events: int,
    targets: int,
    jobs: int,
    callbacks: int,
    timeout_s: float,
    bursts: bool = True,
) -> dict[str, Any]:
    results: dict[str, Any] = {"per_event": {}}
    for setting in ("off", "on"):
        out.say(
            f"   comment {setting}: {events} events x {targets} L4 repositories x {jobs} jobs, one failing per repo"
        )
        results["per_event"][setting] = _per_event(
            key, aws, setting, events=events, targets=targets, jobs=jobs, timeout_s=timeout_s
        )
    results["bursts"] = {}
    for spread in (2.0, 10.0) if bursts else ():
        out.say(f"   bursts: {callbacks} failing callbacks in {spread:.0f} s, twice")
        results["bursts"][f"{callbacks}_in_{spread:.0f}s"] = _bursts(
            key, callbacks=callbacks, spread_s=spread, bursts=2, timeout_s=timeout_s
        )
    results["method"] = (
        f"per_event: {events} pull_request events x {targets} L4 repositories x {jobs} jobs, each job in_progress "
        "then completed (job-0 failure, the rest success) once ChecksQueue is empty; writes = POST/PATCH on the "
        f"upstream's check-runs and issue comments at the GitHub double; comment setting off against on. bursts: "
        f"one PR, {callbacks} failing jobs completed evenly over 2 s and 10 s (default settle 5 s, cap 60 s), twice; "
        "the reporter asks for the comment after each recorded change."
    )
    return results
