"""Cold-start import time of each function's handler module, each run in a fresh interpreter.

(a) source: the venv's python3.11 loads functions/<role>/handler.py by path with shared/ on sys.path, with
    bytecode writing on (into bench/.pycache via PYTHONPYCACHEPREFIX, so the source tree stays untouched)
    after one warm-up run, so every module comes from a .pyc, as on a developer machine.
(b) built: python3.12 (the Lambda runtime) imports `handler` from .aws-sam/build with sys.path holding the
    function directory, the layer's python/ directory and the stdlib only (-I -S), writing no bytecode
    (-B; Lambda's file system is read-only), so only bytecode shipped in the build is used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / ".aws-sam" / "build"
PYCACHE = ROOT / "bench" / ".pycache"
BRIEF_ROLES = {
    "webhook": "WebhookFunction",
    "planner": "PlannerFunction",
    "dispatch": "DispatchFunction",
    "jwks": "JwksFunction",
}
# Functions added since (functions/<role>/handler.py) are measured too; their built directory is guessed
# as <Role>Function, as for the four above, and reported as missing when the build has none.
ROLES = BRIEF_ROLES | {
    d.name: f"{d.name.capitalize()}Function"
    for d in sorted((ROOT / "functions").iterdir())
    if (d / "handler.py").is_file() and d.name not in BRIEF_ROLES
}
PYENV_VERSION = "3.11.7:3.12.1:3.13.0"
RUNS = 7

SOURCE_PROBE = """
import importlib.util, json, sys, time
path, shared = sys.argv[1:3]
sys.path.insert(0, shared)
t = time.perf_counter()
spec = importlib.util.spec_from_file_location("handler", path)
module = importlib.util.module_from_spec(spec)
sys.modules["handler"] = module
spec.loader.exec_module(module)
ms = (time.perf_counter() - t) * 1000
assert callable(getattr(module, "lambda_handler", None)), "no lambda_handler"
print(json.dumps({"ms": ms, "modules": len(sys.modules), "version": sys.version.split()[0]}))
"""

BUILT_PROBE = """
import importlib, json, sys, time
site, code = sys.argv[1:3]
sys.path[:0] = [code, site]
t = time.perf_counter()
module = importlib.import_module("handler")
ms = (time.perf_counter() - t) * 1000
assert callable(getattr(module, "lambda_handler", None)), "no lambda_handler"
roots = (site, code, sys.base_prefix)
foreign = sorted(n for n, m in sys.modules.items() if getattr(m, "__file__", None) and not m.__file__.startswith(roots))
print(json.dumps({"ms": ms, "modules": len(sys.modules), "version": sys.version.split()[0], "foreign": foreign[:5]}))
"""

LAMBDA_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "POWERTOOLS_SERVICE_NAME": "crcr",
    "POWERTOOLS_METRICS_NAMESPACE": "crcr",
    "POWERTOOLS_TRACE_DISABLED": "true",
}


def _run(argv: list[str], env: dict[str, str]) -> tuple[dict[str, Any], float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=120)
    wall = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed: {proc.stderr.strip()[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall, proc.stderr


def _top_imports(importtime_stderr: str, top: int = 8) -> list[dict[str, Any]]:
    """Import time by top-level package (sum of each module's own time in -X importtime), largest first."""
    self_us: dict[str, int] = {}
    for line in importtime_stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)", line)
        if m:
            package = m.group(3).split(".")[0]
            self_us[package] = self_us.get(package, 0) + int(m.group(1))
    rows = sorted(self_us.items(), key=lambda kv: -kv[1])[:top]
    return [{"package": name, "self_ms": round(us / 1000, 1)} for name, us in rows]


def _stats(samples: list[float], walls: list[float]) -> dict[str, Any]:
    return {
        "median_ms": round(statistics.median(samples), 1),
        "min_ms": round(min(samples), 1),
        "max_ms": round(max(samples), 1),
        "runs": len(samples),
        "samples_ms": [round(s, 1) for s in samples],
        "process_wall_median_ms": round(statistics.median(walls), 1),
    }


def measure_source(say: Any) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | LAMBDA_ENV
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    python = sys.executable
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "interpreter": python,
        "bytecode": f"written and reused (PYTHONPYCACHEPREFIX={PYCACHE.relative_to(ROOT)}) after a warm-up run",
        "functions": {},
    }
    for role in ROLES:
        path = ROOT / "functions" / role / "handler.py"
        argv = [python, "-c", SOURCE_PROBE, str(path), str(ROOT / "shared")]
        try:
            out["functions"][role] = _measure(argv, env)
            out["functions"][role].pop("python", None)
        except RuntimeError as exc:  # a handler that does not import is a result, not a reason to stop
            out["functions"][role] = {"error": str(exc)[-600:]}
            say(f"  cold start (source) {role:9} FAILED to import")
            continue
        say(f"  cold start (source, py{out['python']}) {role:9} median {out['functions'][role]['median_ms']:7.1f} ms")
    return out


def _measure(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One warm-up run, RUNS timed runs, one -X importtime run."""
    result, _, _ = _run(argv, env)
    samples, walls = [], []
    for _ in range(RUNS):
        result, wall, _ = _run(argv, env)
        samples.append(result["ms"])
        walls.append(wall)
    _, _, trace = _run([argv[0], "-X", "importtime", *argv[1:]], env)
    extra = {"modules": result["modules"], "python": result["version"]}
    if "foreign" in result:
        extra["foreign_modules"] = result["foreign"]
    return _stats(samples, walls) | extra | {"top_imports": _top_imports(trace)}


def _python312() -> str | None:
    env = dict(os.environ) | {"PYENV_VERSION": PYENV_VERSION}
    exe = shutil.which("python3.12", path=env.get("PATH"))
    if exe is None:
        return None
    proc = subprocess.run(
        [exe, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, env=env, check=False
    )
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def _shipped_bytecode(site: Path, code_dirs: list[Path]) -> dict[str, Any]:
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    compiled = sum(1 for p in sources if (p.parent / "__pycache__" / f"{p.stem}.cpython-312.pyc").is_file())
    crcr = [p for p in (site / "crcr").rglob("*.py") if "__pycache__" not in p.parts]
    crcr_compiled = sum(1 for p in crcr if (p.parent / "__pycache__" / f"{p.stem}.cpython-312.pyc").is_file())
    handler_pyc = all((d / "__pycache__" / "handler.cpython-312.pyc").is_file() for d in code_dirs)
    return {
        "layer_py_files": len(sources),
        "layer_py_with_cpython312_pyc": compiled,
        "crcr_py_files": len(crcr),
        "crcr_py_with_pyc": crcr_compiled,
        "function_handler_pyc_shipped": handler_pyc,
        "shipped": compiled > 0,
    }


def measure_built(say: Any) -> dict[str, Any]:
    site = BUILD / "CrcrLayer" / "python"
    if not site.is_dir():
        return {"skipped": True, "reason": f"no {BUILD.relative_to(ROOT)}/CrcrLayer: run `make build` (or --build)"}
    python = _python312()
    if python is None:
        return {"skipped": True, "reason": f"python3.12 not found (PYENV_VERSION={PYENV_VERSION})"}
    env = {k: v for k, v in os.environ.items() if k.startswith(("PATH", "HOME", "LANG"))} | LAMBDA_ENV
    code_dirs = [BUILD / fn for fn in ROLES.values() if (BUILD / fn).is_dir()]
    out: dict[str, Any] = {
        "interpreter": python,
        "build_dir": str(BUILD.relative_to(ROOT)),
        "build_mtime": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(site.stat().st_mtime)),
        "bytecode": _shipped_bytecode(site, code_dirs),
        "sys_path": "function dir, layer python/, stdlib (-I -S -B: no site-packages, no bytecode written)",
        "functions": {},
    }
    for role, fn in ROLES.items():
        code = BUILD / fn
        if not (code / "handler.py").is_file():
            out["functions"][role] = {"skipped": True, "reason": f"no {fn}/handler.py in the build (stale build?)"}
            say(f"  cold start (built) {role:9} not in the build")
            continue
        argv = [python, "-I", "-S", "-B", "-c", BUILT_PROBE, str(site), str(code)]
        try:
            row = _measure(argv, env)  # the warm-up run only warms the page cache: -B writes nothing
        except RuntimeError as exc:
            out["functions"][role] = {"error": str(exc)[-600:]}
            say(f"  cold start (built) {role:9} FAILED to import")
            continue
        out["python"] = row.pop("python")
        out["functions"][role] = row
        say(f"  cold start (built,  py{out['python']}) {role:9} median {row['median_ms']:7.1f} ms")
    return out


def build(say: Any) -> dict[str, Any]:
    say("make build ...")
    start = time.perf_counter()
    proc = subprocess.run(["make", "build"], cwd=ROOT, capture_output=True, text=True, check=False)
    return {"returncode": proc.returncode, "seconds": round(time.perf_counter() - start, 1), "tail": proc.stdout[-800:]}
