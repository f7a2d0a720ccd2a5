"""Section 4: callback latency, AWS calls, write units and CPU on the local stack, and the OIDC key-set fetches."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from typing import Any

import harness as h

from tests.doubles.oidc_issuer import DISCOVERY_PATH, JWKS_PATH, OidcIssuer

RUN_ID = 424242
RATE_PER_MIN = 100_000  # CRCR_CALLBACK_RATE_PER_MIN: far above what the bench sends, so the limiter never answers
CACHE_S = 300.0  # OidcVerifier's default key-set cache lifetime
CALLBACK_FUNCTION = "CallbackFunction"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--callbacks", type=int, default=300, help="timed callbacks that record a new job")
    parser.add_argument("--callback-duplicates", type=int, default=300, help="timed identical repeats (duplicate)")
    parser.add_argument("--callback-window", type=int, default=1000, help="warm callbacks to count issuer requests")


def _issuer_paths(issuer: OidcIssuer, since: int) -> dict[str, int]:
    counts = Counter(r.path.split("?", 1)[0] for r in issuer.requests[since:])
    return {"jwks": counts.pop(JWKS_PATH, 0), "discovery": counts.pop(DISCOVERY_PATH, 0), "other": sum(counts.values())}


class _Tally:
    def __init__(self) -> None:
        self.timings: list[float] = []
        self.outcomes: Counter[str] = Counter()

    def add(self, status: int, elapsed: float, reply: bytes) -> None:
        self.timings.append(elapsed)
        try:
            doc = json.loads(reply)
            word = str(doc.get("status") or doc.get("error") or "?")
        except ValueError:
            word = "not json"
        self.outcomes[f"{status} {word}"] += 1

    def summary(self) -> dict[str, Any]:
        return {**h.summary_ms(self.timings), "outcomes": dict(self.outcomes)}


def _write_units(taken: dict[str, dict[str, Any]], n: int) -> dict[str, Any]:
    n = max(1, n)
    return {
        "total": round(sum(t["write_units"] for t in taken.values()) / n, 3),
        "by_table": {name: round(t["write_units"] / n, 3) for name, t in taken.items()},
        "by_destination": {
            f"{name}.{where}": round(v / n, 3) for name, t in taken.items() for where, v in t["by_destination"].items()
        },
        "writes": {f"{name}.{row}": round(v / n, 3) for name, t in taken.items() for row, v in t["writes"].items()},
    }


def callbacks_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """One stack with one L2 target dispatched once; its job reports with fresh tokens, one connection each."""
    recorded, duplicates = args.callbacks, args.callback_duplicates
    extra = max(0, args.callback_window - recorded - duplicates)
    aws, out = bench.aws, bench.out
    start_off = out.offset()
    before_metrics = Counter(h.TOTALS)
    env = {"CRCR_CALLBACK_RATE_PER_MIN": str(RATE_PER_MIN)}
    with h.relay(bench.key, 1, installations=1, level="L2", oidc=True, env=env) as r:
        issuer, repo = r.issuer, r.repos[0]
        assert issuer is not None
        status, _, _ = r.post(h.event_body())
        dispatched = r.wait_for_dispatches(1, args.timeout, settle_s=0.0)
        sent = r.github.dispatches(repo)
        if status != 202 or not dispatched or not sent:
            raise RuntimeError(f"no dispatch to call back for (webhook HTTP {status}, dispatched {dispatched})")
        ticket = sent[0]["client_payload"]["ticket"]

        def body(job: str, status: str = "in_progress", conclusion: str | None = None) -> bytes:
            return json.dumps(h.report_body(ticket, repo, job, RUN_ID, status, conclusion)).encode()

        def token() -> str:
            return h.job_token(issuer, repo, h.REPO_ID_BASE, RUN_ID)

        # The callback function's calls apart from the reporter's, which the results stream runs meanwhile.
        work = h.FunctionWork(r.stack, CALLBACK_FUNCTION, aws)
        github_mark = len(r.github.requests)
        issuer_mark = len(issuer.requests)
        cold = _Tally()
        cold.add(*r.callback(body("cold-start"), token()))  # builds the function's dependencies, meets the issuer
        cold_requests = _issuer_paths(issuer, issuer_mark)
        # The tables' write units from their streams (the reporter writes none here: no HUD, no verdicts at L2).
        units = r.units("StateTable", "ResultsTable")
        for table in units.values():
            table.take()

        # -- warm window: `recorded` new jobs, `duplicates` identical repeats, `extra` new jobs
        tokens = [token() for _ in range(recorded + extra)]
        repeat = body("job-0")
        rec, dup, more = _Tally(), _Tally(), _Tally()
        invocations_before = Counter(r.stack.invocations)
        issuer_mark = len(issuer.requests)
        aws_0 = Counter(work.calls)
        cpu_0 = (h.cpu_seconds(), h.cpu_seconds(r.moto.pid))
        t0 = time.perf_counter()
        for i in range(recorded):
            rec.add(*r.callback(body(f"job-{i}"), tokens[i]))
        aws_1 = Counter(work.calls)
        units_recorded = {name: table.take() for name, table in units.items()}
        for _ in range(duplicates):
            dup.add(*r.callback(repeat, tokens[0]))
        aws_2 = Counter(work.calls)
        for i in range(recorded, recorded + extra):
            more.add(*r.callback(body(f"job-{i}"), tokens[i]))
        window_s = time.perf_counter() - t0
        cpu_1 = (h.cpu_seconds(), h.cpu_seconds(r.moto.pid))
        warm_requests = _issuer_paths(issuer, issuer_mark)
        invocations_window = dict(Counter(r.stack.invocations) - invocations_before)
        sent_warm = recorded + duplicates + extra

        # -- completing: jobs that reported in_progress above now report completed (not timed)
        completing = min(recorded, 100)
        done_tokens = [token() for _ in range(completing)]
        for table in units.values():
            table.take()
        aws_3 = Counter(work.calls)
        fin = _Tally()
        for i in range(completing):
            fin.add(*r.callback(body(f"job-{i}", "completed", "success"), done_tokens[i]))
        aws_4 = Counter(work.calls)
        units_completed = {name: table.take() for name, table in units.items()}
        github_during = len(r.github.requests) - github_mark
        results_table = r.stack.function_env["CRCR_RESULTS_TABLE"]
        rows = len(h.scan(r.stack.client("dynamodb"), TableName=results_table, ConsistentRead=True))
        end_off = out.offset()

    first, last = _write_units(units_recorded, recorded), _write_units(units_completed, completing)
    latency = {
        "cold_first_callback": cold.summary(),
        "recorded": rec.summary() | {"aws_calls": h.calls_per(aws_0, aws_1, recorded, "callback")},
        "duplicate": dup.summary() | {"aws_calls": h.calls_per(aws_1, aws_2, duplicates, "callback")},
        "recorded_after_duplicates": more.summary(),
        "completed": {
            "callbacks": completing,
            "outcomes": dict(fin.outcomes),
            "aws_calls": h.calls_per(aws_3, aws_4, completing, "callback"),
        },
        # Per callback: a job's first report (`in_progress`, a new job), its `completed`, and `both`, the two.
        "write_units": {"in_progress": first, "completed": last, "both": round(first["total"] + last["total"], 3)},
        "warm_window": {
            "callbacks": sent_warm,
            "seconds": round(window_s, 2),
            "callbacks_per_s": round(sent_warm / window_s, 1) if window_s > 0 else None,
            "invocations": invocations_window,
            "cpu_s": {
                "relay_process": round(cpu_1[0] - cpu_0[0], 2),
                "moto_process": round(cpu_1[1] - cpu_0[1], 2),
            },
        },
        "results_table_rows": rows,
        "results_table_rows_expected": 1 + recorded + extra,
        "github_requests_during_callbacks": github_during,
        "relay_metrics": h.metrics_delta(before_metrics),
        "relay_log": h.log_summary(out.lines_between(start_off, end_off)),
    }
    requests = {
        "cold_first_callback": cold_requests,
        "warm": {
            "callbacks": sent_warm,
            "requests": warm_requests,
            "jwks_fetches_per_1000_callbacks": round(warm_requests["jwks"] * 1000 / max(1, sent_warm), 2),
            "cache_s": CACHE_S,
        },
    }
    return {"callback_latency": latency, "oidc_issuer_requests": requests}
