"""Cold-start import time of each function's handler module, each run in a fresh interpreter, and the first
invocation's initialisation (the dependencies the handler builds once: settings, boto3 clients, the GitHub App's
key, ...), with the process's peak RSS after each.

(a) source: the venv's python3.11 loads functions/<role>/handler.py by path with shared/ on sys.path, with
    bytecode writing on (into bench/.pycache via PYTHONPYCACHEPREFIX, so the source tree stays untouched)
    after one warm-up run, so every module comes from a .pyc, as on a developer machine. Then it calls the
    builder the handler calls on its first invocation (`build_*_deps(load_settings())`, read from the handler's
    source) with a complete environment (keys made for the run, AWS_ENDPOINT_URL on a port nothing listens on:
    building makes no call). `--baseline REF` measures the same on the code at REF.
(b) built: python3.12 (the Lambda runtime) imports `handler` from .aws-sam/build with sys.path holding the
    function directory, the layer's python/ directory and the stdlib only (-I -S), writing no bytecode
    (-B; Lambda's file system is read-only), so only bytecode shipped in the build is used.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
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
RUNS = 5

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


def init_env(folder: Path) -> dict[str, str]:
    """Every setting any function's builder asks for, with keys made here; AWS on a port nothing listens on."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa  # noqa: PLC0415

    app_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    ticket_key = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    allowlist = folder / "allowlist.yaml"
    allowlist.write_text("L1:\n  - org/repo\n")
    queue = "http://127.0.0.1:9/000000000000/crcr-"
    return {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "cold",
        "AWS_SECRET_ACCESS_KEY": "cold",
        "CRCR_UPSTREAM_REPO": "pytorch/pytorch",
        "CRCR_GITHUB_APP_ID": "1",
        "CRCR_GITHUB_APP_PRIVATE_KEY": app_key.decode(),
        "CRCR_TICKET_SIGNING_KEY": ticket_key.decode(),
        "CRCR_WEBHOOK_SECRET": "cold-start",
        "CRCR_ALLOWLIST": str(allowlist),
        "CRCR_OIDC_AUDIENCE": "crcr",
        "CRCR_CALLBACK_URL": "https://crcr.example.com/callback",
        "CRCR_STATE_TABLE": "state",
        "CRCR_RESULTS_TABLE": "results",
        "CRCR_BODIES_BUCKET": "bodies",
        "CRCR_HUD_BUCKET": "hud",
        "CRCR_EVENTS_QUEUE_URL": queue + "events",
        "CRCR_DISPATCH_QUEUE_URL": queue + "dispatch",
        "CRCR_DISPATCH_DLQ_URL": queue + "dispatch-dlq",
        "CRCR_CHECKS_QUEUE_URL": queue + "checks",
        "CRCR_CHECKS_DLQ_URL": queue + "checks-dlq",
        "CRCR_REPORTER_DLQ_URL": queue + "reporter-dlq",
    }


def measure_source(say: Any, code_root: Path = ROOT, label: str = "source", importtime: bool = True) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("CRCR_")}
    env |= LAMBDA_ENV
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    python = sys.executable
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "interpreter": python,
        "code": str(code_root) if code_root != ROOT else "this checkout",
        "bytecode": f"written and reused (PYTHONPYCACHEPREFIX={PYCACHE.relative_to(ROOT)}) after a warm-up run",
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
                row = out["functions"][role] = _measure(argv, env, importtime=importtime)
                row.pop("python", None)
            except RuntimeError as exc:  # a handler that does not import is a result, not a reason to stop
                out["functions"][role] = {"error": str(exc)[-600:]}
                say(f"  cold start ({label}) {role:10} FAILED")
                continue
            init = f", init {row['init_median_ms']:6.1f} ms" if "init_median_ms" in row else ""
            say(f"  cold start ({label}, py{out['python']}) {role:10} import {row['median_ms']:6.1f} ms{init}")
    return out


def _measure(argv: list[str], env: dict[str, str], importtime: bool = True) -> dict[str, Any]:
    """One warm-up run, RUNS timed runs, one -X importtime run."""
    result, _, _ = _run(argv, env)
    samples, walls, rows = [], [], []
    for _ in range(RUNS):
        result, wall, _ = _run(argv, env)
        samples.append(result["ms"])
        walls.append(wall)
        rows.append(result)
    extra: dict[str, Any] = {"modules": result["modules"], "python": result["version"]}
    if "foreign" in result:
        extra["foreign_modules"] = result["foreign"]
    for key in ("init_ms", "init_cpu_ms", "rss_import_mb", "rss_init_mb"):
        values = [row[key] for row in rows if key in row]
        if values:
            name = key.removesuffix("_ms").removesuffix("_mb")
            extra[f"{name}_median_{key.rsplit('_', 1)[1]}"] = round(statistics.median(values), 1)
    if importtime:
        _, _, trace = _run([argv[0], "-X", "importtime", *argv[1:]], env)
        extra["top_imports"] = _top_imports(trace)
    return _stats(samples, walls) | extra


def _python312() -> str | None:
    env = dict(os.environ) | {"PYENV_VERSION": PYENV_VERSION}
    exe = shutil.which("python3.12", path=env.get("PATH"))
    if exe is None:
        return None
    proc = subprocess.run(
        [exe, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, env=env, check=False
    )
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def _build_machine(site: Path) -> str | None:
    """The machine the layer's native libraries were built for (from an ELF header's e_machine), or None."""
    machines = {183: "aarch64", 62: "x86_64"}
    for path in site.rglob("*.so"):
        head = path.read_bytes()[:20]
        if head[:4] == b"\x7fELF":
            return machines.get(int.from_bytes(head[18:20], "little"), "unknown")
    return None


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
    built_for = _build_machine(site)
    if built_for is not None and built_for != platform.machine():
        # The layer's native libraries (cryptography, pydantic-core, PyYAML) load on the functions' machine only.
        return {"skipped": True, "reason": f"the build is for {built_for}, this machine is {platform.machine()}"}
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


def measure_at(ref: str, say: Any) -> dict[str, Any]:
    """(a) on the code at git `ref` (exported to a temporary directory), for a before and after in one run."""
    from gitref import exported  # noqa: PLC0415

    with exported(ref, "crcr-bench-cold-baseline-") as code:
        if code is None:
            return {"skipped": True, "reason": f"{ref} is not a commit here"}
        commit, tree = code
        result = measure_source(say, code_root=tree, label=f"baseline {ref}", importtime=False)
    return {"ref": ref, "commit": commit} | result | {"code": f"git archive {commit[:12]}"}
