"""Callback benchmarks (see bench/README.md, section 4).

(a) `callback_latency`: POST /callback round trips on a warm local stack, for reports that are recorded (each a
    new job) and for identical repeats (answered `duplicate`), plus the cold first callback.
(b) `oidc_verify`: OidcVerifier.verify alone, in process, warm, against an issuer double on loopback.
(c) `oidc_issuer_requests`: requests to the issuer's key set per 1,000 warm callbacks, the cold count (with
    discovery), and the fetches caused by tokens signed with unknown key ids, interleaved with genuine ones.

Tokens come from tests/doubles/oidc_issuer.OidcIssuer, an independent double of GitHub Actions' issuer; the relay
is pointed at it with CRCR_OIDC_ISSUER, as tests/e2e/test_callback.py does.
"""

from __future__ import annotations

import gc
import json
import time
import uuid
from collections import Counter
from typing import Any

import jwt
from harness import (
    REPO_ID_BASE,
    ROOT,
    AwsCalls,
    OutputCapture,
    Relay,
    cpu_seconds,
    event_body,
    log_summary,
    metrics_delta,
    percentile,
    relay,
    summary_ms,
)
from write_units import StreamUnits, table_shapes

from crcr.adapters.observability import TOTALS
from crcr.adapters.oidc import OidcVerifier
from tests.doubles.oidc_issuer import DISCOVERY_PATH, JWKS_PATH, OidcIssuer

AUDIENCE = "crcr"
RUN_ID = 424242
RATE_PER_MIN = 100_000  # CRCR_CALLBACK_RATE_PER_MIN: far above what the bench sends, so the limiter never answers
TOKEN_LIFETIME_S = 3600  # long enough for every pre-minted token to outlive its phase
REFETCH_INTERVAL_S = 2.0  # OidcVerifier's default: at most one unknown-kid refetch per interval per instance
CACHE_S = 300.0  # OidcVerifier's default key-set cache lifetime
CALLBACK_FUNCTION = "CallbackFunction"
REPORTER_FUNCTION = "ReporterFunction"


def summary_us(values_ns: list[int]) -> dict[str, Any]:
    us = [v / 1000.0 for v in values_ns]
    if not us:
        return {"samples": 0}
    return {
        "samples": len(us),
        "p50_us": round(percentile(us, 50), 1),
        "p99_us": round(percentile(us, 99), 1),
        "mean_us": round(sum(us) / len(us), 1),
        "min_us": round(min(us), 1),
        "max_us": round(max(us), 1),
    }


def _claims(repo: str, repo_id: int) -> dict[str, Any]:
    return {
        "repository": repo,
        "repository_id": repo_id,
        "run_id": RUN_ID,
        "run_attempt": 1,
        "job_workflow_ref": f"{repo}/.github/workflows/ci.yml@refs/heads/main",
    }


def _issuer_paths(issuer: OidcIssuer, since: int) -> dict[str, int]:
    counts = Counter(r.path.split("?", 1)[0] for r in issuer.requests[since:])
    return {
        "jwks": counts.pop(JWKS_PATH, 0),
        "discovery": counts.pop(DISCOVERY_PATH, 0),
        "other": sum(counts.values()),
    }


CALLBACK_FUNCTION = "CallbackFunction"


def _aws_delta(before: Counter[str], after: Counter[str], calls: int) -> dict[str, Any]:
    """AWS calls per callback, leaving out what the pollers make whether or not there is work."""
    diff = Counter(after)
    diff.subtract(before)
    ops = {k: v for k, v in sorted(diff.items()) if v and not _is_polling(k)}
    return {
        "per_callback": {k: round(v / max(1, calls), 2) for k, v in ops.items()},
        "total_per_callback": round(sum(ops.values()) / max(1, calls), 2),
    }


def _is_polling(operation: str) -> bool:
    return operation.endswith("ReceiveMessage") or operation.startswith("dynamodbstreams.")


# ---------------------------------------------------------------------------------------------------
# (b) OidcVerifier.verify in process
# ---------------------------------------------------------------------------------------------------
def verify_cost(tokens: int, warmup: int = 50) -> dict[str, Any]:
    """Time OidcVerifier.verify over `tokens` distinct genuine tokens, after a cold first call and a warm-up.

    PyJWT's own jwt.decode of the same tokens with the same key gives the floor: the RSA check plus claim
    validation, without the verifier's header parsing and key lookup.
    """
    repo = "bench-org-0/repo-0"
    with OidcIssuer() as issuer:
        minted = [
            issuer.token(lifetime=TOKEN_LIFETIME_S, **_claims(repo, REPO_ID_BASE)) for _ in range(tokens + warmup)
        ]
        verifier = OidcVerifier(issuer.url, AUDIENCE, time.time)
        start = time.perf_counter()
        verifier.verify(minted[0])
        cold_ms = (time.perf_counter() - start) * 1000
        cold_requests = _issuer_paths(issuer, 0)
        for token in minted[1:warmup]:
            verifier.verify(token)
        mark = len(issuer.requests)
        timed = minted[warmup:]
        key = jwt.PyJWK(issuer.jwks()["keys"][0]).key
        options: Any = {"require": ["exp", "iat", "iss", "aud"]}
        gc.collect()
        verify_ns, decode_ns = [], []
        for token in timed:  # interleaved, so drift (CPU clock, other threads) hits both alike
            t = time.perf_counter_ns()
            verifier.verify(token)
            verify_ns.append(time.perf_counter_ns() - t)
            t = time.perf_counter_ns()
            jwt.decode(
                token, key, algorithms=["RS256"], audience=AUDIENCE, issuer=issuer.url, leeway=60, options=options
            )
            decode_ns.append(time.perf_counter_ns() - t)
        warm_requests = _issuer_paths(issuer, mark)
        fetches = verifier.fetches
    verify = summary_us(verify_ns)
    decode = summary_us(decode_ns)
    return {
        "tokens": len(timed),
        "alg": "RS256 (2048-bit key, as GitHub's)",
        "warm": verify,
        "pyjwt_decode_only": decode,
        "verifier_overhead_p50_us": round(verify["p50_us"] - decode["p50_us"], 1),
        "cold_first_verify_ms": round(cold_ms, 2),
        "cold_issuer_requests": cold_requests,
        "warm_issuer_requests": warm_requests,
        "verifier_fetches": fetches,
    }


# ---------------------------------------------------------------------------------------------------
# (a) + (c) POST /callback on the local stack
# ---------------------------------------------------------------------------------------------------
class _Downstream:
    """The dispatched L2 repository's jobs: bodies bound to the dispatch's ticket, tokens from the issuer."""

    def __init__(self, r: Relay, issuer: OidcIssuer, ticket: str) -> None:
        self.relay = r
        self.issuer = issuer
        self.repo = r.repos[0]
        self.repo_id = REPO_ID_BASE
        self.ticket = ticket

    def body(self, job: str, status: str = "in_progress") -> bytes:
        doc = {
            "schema_version": 1,
            "ticket": self.ticket,
            "status": status,
            "workflow_name": "CI",
            "job_name": job,
            "run_id": RUN_ID,
            "run_attempt": 1,
            "url": f"https://github.com/{self.repo}/actions/runs/{RUN_ID}",
        }
        return json.dumps(doc).encode()

    def token(self) -> str:
        return self.issuer.token(lifetime=TOKEN_LIFETIME_S, **_claims(self.repo, self.repo_id))

    def forged(self) -> str:
        """A token signed by a key the issuer never served, under a key id never seen before."""
        return self.issuer.forge(
            "unknown_kid",
            headers={"kid": uuid.uuid4().hex},
            lifetime=TOKEN_LIFETIME_S,
            **_claims(self.repo, self.repo_id),
        )


class _Tally:
    def __init__(self) -> None:
        self.timings: list[float] = []
        self.by_status: dict[int, list[float]] = {}
        self.outcomes: Counter[str] = Counter()

    def add(self, status: int, elapsed: float, reply: bytes) -> None:
        self.timings.append(elapsed)
        self.by_status.setdefault(status, []).append(elapsed)
        try:
            doc = json.loads(reply)
            word = str(doc.get("status") or doc.get("error") or "?")
        except ValueError:
            word = "not json"
        self.outcomes[f"{status} {word}"] += 1

    def summary(self) -> dict[str, Any]:
        return {**summary_ms(self.timings), "outcomes": dict(self.outcomes)}


def _post(d: _Downstream, tally: _Tally, body: bytes, token: str) -> None:
    status, elapsed, reply = d.relay.callback(body, token)
    tally.add(status, elapsed, reply)


def _results_rows(r: Relay) -> int | None:
    table = r.stack.function_env.get("CRCR_RESULTS_TABLE")
    if not table:
        return None
    ddb = r.stack.client("dynamodb")
    count, kwargs = 0, {"TableName": table, "Select": "COUNT", "ConsistentRead": True}
    while True:
        page = ddb.scan(**kwargs)
        count += int(page["Count"])
        if "LastEvaluatedKey" not in page:
            return count
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _units(r: Relay) -> dict[str, StreamUnits]:
    shapes = table_shapes(ROOT / "template.yaml")
    ddb, streams = r.stack.client("dynamodb"), r.stack.client("dynamodbstreams")
    tables = {"StateTable": "CRCR_STATE_TABLE", "ResultsTable": "CRCR_RESULTS_TABLE"}
    return {name: StreamUnits(ddb, streams, r.stack.function_env[env], shapes[name]) for name, env in tables.items()}


def _write_units(
    recorded: dict[str, dict[str, Any]], n_recorded: int, completed: dict[str, dict[str, Any]], n_completed: int
) -> dict[str, Any]:
    def per(taken: dict[str, dict[str, Any]], n: int) -> dict[str, Any]:
        n = max(1, n)
        return {
            "total": round(sum(t["write_units"] for t in taken.values()) / n, 3),
            "by_table": {name: round(t["write_units"] / n, 3) for name, t in taken.items()},
            "by_destination": {
                f"{name}.{where}": round(v / n, 3)
                for name, t in taken.items()
                for where, v in t["by_destination"].items()
            },
            "writes": {f"{name}.{row}": round(v / n, 3) for name, t in taken.items() for row, v in t["writes"].items()},
            "largest_item_bytes": {
                f"{name}.{row}": v for name, t in taken.items() for row, v in t["largest_item_bytes_by_row"].items()
            },
        }

    first, last = per(recorded, n_recorded), per(completed, n_completed)
    return {"in_progress": first, "completed": last, "both": round(first["total"] + last["total"], 3)}


def callback_bench(
    key: Any,
    aws: AwsCalls,
    out: OutputCapture,
    *,
    recorded: int,
    duplicates: int,
    window: int,
    hostile: int,
    timeout_s: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(callback_latency, oidc_issuer_requests) from one stack with one L2 target and an issuer double."""
    extra = max(0, window - recorded - duplicates)
    start_off = out.offset()
    before_metrics = Counter(TOTALS)
    with OidcIssuer() as issuer:
        env = {
            "CRCR_OIDC_ISSUER": issuer.url,
            "CRCR_OIDC_AUDIENCE": AUDIENCE,
            "CRCR_CALLBACK_RATE_PER_MIN": str(RATE_PER_MIN),
        }
        with relay(key, 1, installations=1, level="L2", extra_env=env) as r:
            status, _, _ = r.post(event_body())
            dispatched = r.wait_for_dispatches(1, timeout_s, settle_s=0.0)
            sent = r.double.dispatches(r.repos[0])
            if status != 202 or not dispatched or not sent:
                raise RuntimeError(f"no dispatch to call back for (webhook HTTP {status}, dispatched {dispatched})")
            d = _Downstream(r, issuer, sent[0]["client_payload"]["ticket"])
            aws.attribute(r.stack)  # the callback function's calls apart from the reporter's, which the stream runs
            github_mark = len(r.double.requests)

            # -- cold: the first callback builds the function's dependencies and meets the issuer
            issuer_mark = len(issuer.requests)
            cold = _Tally()
            _post(d, cold, d.body("cold-start"), d.token())
            cold_requests = _issuer_paths(issuer, issuer_mark)

            # The tables' write units, from their streams (bench/write_units.py): the callbacks' own writes and the
            # reporter's (none here: no HUD, no verdicts at L2), measured around the recorded and completing phases.
            units = _units(r)
            for table in units.values():
                table.take()

            # -- warm window: `recorded` new jobs, `duplicates` identical repeats, `extra` new jobs
            tokens = [d.token() for _ in range(recorded + extra)]
            repeat_body, repeat_token = d.body("job-0"), tokens[0]
            rec, dup, more = _Tally(), _Tally(), _Tally()
            invocations_before = dict(r.stack.invocations)
            issuer_mark = len(issuer.requests)
            aws_0, all_0 = aws.snapshot(CALLBACK_FUNCTION), aws.snapshot()
            cpu_0 = (cpu_seconds(), cpu_seconds(r.moto.pid))
            t0 = time.perf_counter()
            for i in range(recorded):
                _post(d, rec, d.body(f"job-{i}"), tokens[i])
            aws_1, all_1 = aws.snapshot(CALLBACK_FUNCTION), aws.snapshot()
            units_recorded = {name: table.take() for name, table in units.items()}
            for _ in range(duplicates):
                _post(d, dup, repeat_body, repeat_token)
            aws_2, all_2 = aws.snapshot(CALLBACK_FUNCTION), aws.snapshot()
            for i in range(recorded, recorded + extra):
                _post(d, more, d.body(f"job-{i}"), tokens[i])
            window_s = time.perf_counter() - t0
            cpu_1 = (cpu_seconds(), cpu_seconds(r.moto.pid))
            warm_requests = _issuer_paths(issuer, issuer_mark)
            invocations_window = {
                k: v - invocations_before.get(k, 0)
                for k, v in r.stack.invocations.items()
                if v - invocations_before.get(k, 0)
            }
            sent_warm = recorded + duplicates + extra

            # -- hostile: unknown key ids, each after a genuine callback
            forged = [d.forged() for _ in range(hostile)]
            genuine_tokens = [d.token() for _ in range(hostile)]
            bad, good = _Tally(), _Tally()
            issuer_mark = len(issuer.requests)
            t1 = time.perf_counter()
            for i in range(hostile):
                _post(d, good, d.body(f"hostile-window-{i}"), genuine_tokens[i])
                _post(d, bad, d.body(f"hostile-window-{i}"), forged[i])
            hostile_s = time.perf_counter() - t1
            hostile_requests = _issuer_paths(issuer, issuer_mark)

            # -- completing: jobs that reported in_progress above now report completed (not timed)
            completing = min(recorded, 100)
            done_tokens = [d.token() for _ in range(completing)]
            for table in units.values():
                table.take()
            aws_3 = aws.snapshot(CALLBACK_FUNCTION)
            fin = _Tally()
            for i in range(completing):
                body = json.loads(d.body(f"job-{i}", status="completed"))
                _post(d, fin, json.dumps(body | {"conclusion": "success"}).encode(), done_tokens[i])
            aws_4 = aws.snapshot(CALLBACK_FUNCTION)
            units_completed = {name: table.take() for name, table in units.items()}

            github_during = len(r.double.requests) - github_mark
            rows = _results_rows(r)
            rows_expected = 1 + recorded + extra + hostile
            end_off = out.offset()

    relay_log = log_summary(out.lines_between(start_off, end_off))
    latency = {
        "targets": 1,
        "level": "L2",
        "rate_limit_per_min": RATE_PER_MIN,
        "connection": "a new TCP connection per POST",
        "cold_first_callback": cold.summary(),
        "recorded": {
            **rec.summary(),
            "aws_calls": _aws_delta(aws_0, aws_1, recorded),
            "aws_calls_all_functions": _aws_delta(all_0, all_1, recorded),
        },
        "duplicate": {
            **dup.summary(),
            "aws_calls": _aws_delta(aws_1, aws_2, duplicates),
            "aws_calls_all_functions": _aws_delta(all_1, all_2, duplicates),
        },
        "recorded_after_duplicates": more.summary(),
        "completed": {
            "callbacks": completing,
            "outcomes": dict(fin.outcomes),
            "aws_calls": _aws_delta(aws_3, aws_4, completing),
        },
        # DynamoDB write request units per callback, by table, of a job's first report (`in_progress`, a new job)
        # and of its `completed` (bench/write_units.py); `both` is their sum, a job's two callbacks.
        "write_units": _write_units(units_recorded, recorded, units_completed, completing),
        "warm_window": {
            "callbacks": sent_warm,
            "seconds": round(window_s, 2),
            "callbacks_per_s": round(sent_warm / window_s, 1) if window_s > 0 else None,
            "invocations": invocations_window,
            "cpu_s": {
                "relay_process": round(cpu_1[0] - cpu_0[0], 2),
                "moto_process": round(cpu_1[1] - cpu_0[1], 2),
                "note": "relay process = callback handler, local HTTP server, pollers (the reporter's stream "
                "poller invokes ReporterFunction for each recorded job; no HUD is set, so it pushes nothing)",
            },
        },
        "results_table_rows": rows,
        "results_table_rows_expected": rows_expected,
        "github_requests_during_callbacks": github_during,
        "relay_metrics": metrics_delta(before_metrics),
        "relay_log": relay_log,
    }
    hostile_statuses = Counter(bad.outcomes)
    requests = {
        "cold_first_callback": cold_requests,
        "warm": {
            "callbacks": sent_warm,
            "requests": warm_requests,
            "jwks_fetches_per_1000_callbacks": round(warm_requests["jwks"] * 1000 / max(1, sent_warm), 2),
            "cache_s": CACHE_S,
        },
        "unknown_kid": {
            "forged_callbacks": hostile,
            "genuine_callbacks_interleaved": hostile,
            "distinct_kids": hostile,
            "seconds": round(hostile_s, 2),
            "requests": hostile_requests,
            "jwks_fetches": hostile_requests["jwks"],
            "bound_one_per_interval": int(hostile_s // REFETCH_INTERVAL_S) + 1,
            "refetch_interval_s": REFETCH_INTERVAL_S,
            "forged_outcomes": dict(hostile_statuses),
            "forged_latency_by_status": {str(s): summary_ms(v) for s, v in sorted(bad.by_status.items())},
            "genuine_outcomes": dict(good.outcomes),
            "genuine_latency": summary_ms(good.timings),
        },
    }
    return latency, requests
