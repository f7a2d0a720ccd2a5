"""Section 5: each function's cold start, its handler's import and first build in fresh interpreters, and peak RSS."""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness as h

PYCACHE = h.ROOT / "bench" / ".pycache"
FIRST = ("webhook", "planner", "dispatch", "jwks")  # then every other functions/<role>/handler.py, by name
ROLES = [
    role
    for role in [*FIRST, *sorted(d.name for d in (h.ROOT / "functions").iterdir() if d.name not in FIRST)]
    if (h.ROOT / "functions" / role / "handler.py").is_file()
]

SOURCE_PROBE = """
import importlib.util, json, sys, time
path, shared, builder = sys.argv[1:4]
def peak_rss_mb():  # VmHWM: this process's own peak (ru_maxrss would carry the parent's across fork and exec)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
sys.path.insert(0, shared)
t = time.perf_counter()
spec = importlib.util.spec_from_file_location("handler", path)
module = importlib.util.module_from_spec(spec)
sys.modules["handler"] = module
spec.loader.exec_module(module)
ms = (time.perf_counter() - t) * 1000
assert callable(getattr(module, "lambda_handler", None)), "no lambda_handler"
rss_import = peak_rss_mb()
init = {}
if builder:
    import crcr.composition as composition
    t, cpu = time.perf_counter(), time.process_time()
    getattr(composition, builder)(composition.load_settings())
    init = {"init_ms": (time.perf_counter() - t) * 1000, "init_cpu_ms": (time.process_time() - cpu) * 1000}
rss = peak_rss_mb()
print(json.dumps({"ms": ms, "modules": len(sys.modules), "version": sys.version.split()[0],
                  "rss_import_mb": rss_import, "rss_init_mb": rss} | init))
"""
# What a handler builds on its first invocation: `kept(build_x(load_settings()))` (HudFunction: Settings.from_env,
# which load_settings extends with nothing when no secret ARN is set).
BUILDER = re.compile(r"kept\(\(?(build_\w+)\(")

LAMBDA_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "POWERTOOLS_SERVICE_NAME": "crcr",
    "POWERTOOLS_METRICS_NAMESPACE": "crcr",
    "POWERTOOLS_TRACE_DISABLED": "true",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coldstart-runs", type=int, default=5, help="timed interpreters per function (median)")


def coldstart_section(bench: h.Bench, args: argparse.Namespace) -> dict[str, Any]:
    """This checkout's functions, and (with a baseline) the same at that ref."""
    cold: dict[str, Any] = {"source": measure_source(bench.out.say, args.coldstart_runs)}
    if ref := args.dispatch_baseline:

        def then(commit: str, code: Path) -> dict[str, Any]:
            measured = measure_source(bench.out.say, args.coldstart_runs, code, f"baseline {ref}")
            return measured | {"code": f"git archive {commit[:12]}"}

        cold["baseline"] = h.at_baseline(ref, then)
    return {"cold_start": cold}


def _run(argv: list[str], env: dict[str, str]) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=120)
    wall = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed: {proc.stderr.strip()[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def init_env(folder: Path) -> dict[str, str]:
    """Every setting any function's builder asks for, with keys made here; AWS on a port nothing listens on."""
    allowlist = folder / "allowlist.yaml"
    allowlist.write_text("L1:\n  - org/repo\n")
    keys = h.generate_keys()
    queue = "http://127.0.0.1:9/000000000000/crcr-"
    return {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "cold",
        "AWS_SECRET_ACCESS_KEY": "cold",
        "CRCR_UPSTREAM_REPO": "pytorch/pytorch",
        "CRCR_GITHUB_APP_ID": "1",
        "CRCR_GITHUB_APP_PRIVATE_KEY": keys["github_app_private_key"],
        "CRCR_TICKET_SIGNING_KEY": keys["ticket_signing_key"],
        "CRCR_WEBHOOK_SECRET": "cold-start",
        "CRCR_ALLOWLIST": str(allowlist),
        "CRCR_OIDC_AUDIENCE": "crcr",
        "CRCR_CALLBACK_URL": "https://crcr.example.com/callback",
        "CRCR_STATE_TABLE": "state",
        "CRCR_RESULTS_TABLE": "results",
        "CRCR_BODIES_BUCKET": "bodies",
        "CRCR_HUD_BUCKET": "hud",
        "CRCR_EXPORTS_BUCKET": "exports",
        "CRCR_EVENTS_QUEUE_URL": queue + "events",
        "CRCR_DISPATCH_QUEUE_URL": queue + "dispatch",
        "CRCR_DISPATCH_DLQ_URL": queue + "dispatch-dlq",
        "CRCR_CHECKS_QUEUE_URL": queue + "checks",
        "CRCR_CHECKS_DLQ_URL": queue + "checks-dlq",
        "CRCR_REPORTER_DLQ_URL": queue + "reporter-dlq",
    }


def measure_source(say: Any, runs: int, code_root: Path = h.ROOT, label: str = "source") -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("CRCR_")}
    env |= LAMBDA_ENV
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    python = sys.executable
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "interpreter": python,
        "code": str(code_root) if code_root != h.ROOT else "this checkout",
        "bytecode": f"written and reused (PYTHONPYCACHEPREFIX={PYCACHE.relative_to(h.ROOT)}) after a warm-up run",
        "functions": {},
    }
    with tempfile.TemporaryDirectory(prefix="crcr-bench-cold-") as tmp:
        env |= init_env(Path(tmp))
        for role in ROLES:
            path = code_root / "functions" / role / "handler.py"
            if not path.is_file():
                continue
            found = BUILDER.search(path.read_text())
            argv = [python, "-c", SOURCE_PROBE, str(path), str(code_root / "shared"), found.group(1) if found else ""]
            try:
                row = out["functions"][role] = _measure(argv, env, runs)
            except RuntimeError as exc:  # a handler that does not import is a result, not a reason to stop
                out["functions"][role] = {"error": str(exc)[-600:]}
                say(f"  cold start ({label}) {role:10} FAILED")
                continue
            init = f", init {row['init_median_ms']:6.1f} ms" if "init_median_ms" in row else ""
            say(f"  cold start ({label}, py{out['python']}) {role:10} import {row['median_ms']:6.1f} ms{init}")
    return out


def _measure(argv: list[str], env: dict[str, str], runs: int) -> dict[str, Any]:
    """One warm-up run, then `runs` timed runs: their medians."""
    _run(argv, env)
    rows, walls = zip(*(_run(argv, env) for _ in range(runs)), strict=True)
    samples = [row["ms"] for row in rows]
    out: dict[str, Any] = {
        "median_ms": round(statistics.median(samples), 1),
        "min_ms": round(min(samples), 1),
        "max_ms": round(max(samples), 1),
        "runs": runs,
        "samples_ms": [round(s, 1) for s in samples],
        "process_wall_median_ms": round(statistics.median(walls), 1),
        "modules": rows[-1]["modules"],
    }
    for key in ("init_ms", "init_cpu_ms", "rss_import_mb", "rss_init_mb"):
        if values := [row[key] for row in rows if key in row]:
            name, unit = key.rsplit("_", 1)
            out[f"{name}_median_{unit}"] = round(statistics.median(values), 1)
    return out
