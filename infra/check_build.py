"""Checks `sam build`'s output for `make build`: the layer ships crcr precompiled and nothing local-only.

Asserts, for .aws-sam/build:
- CrcrLayer has python/crcr/__init__.py and no crcr/local or crcr/ops (the local stack and the operator commands);
- every .py in the layer has a CPython 3.12 unchecked-hash .pyc (Lambda cannot write bytecode), which
  covers crcr and pydantic;
- each function in the built template has its handler module;
- layer + largest function stay under Lambda's 250 MB unzipped limit;
- the layer is built for the functions' architecture (arm64): every native library in it is an AArch64 ELF
  object and every wheel it came from is tagged aarch64 or pure Python;
- with python3.12 and nothing but the stdlib, the layer and a function directory on sys.path (as in Lambda),
  every handler module imports. On a machine that is not arm64 the layer's native libraries cannot load, so
  the import runs against a twin: the layer's crcr package with the same pinned dependencies installed for
  this machine.

Run with the tools virtualenv after `sam build`: .tools-venv/bin/python infra/check_build.py [build dir]
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from samcli.yamlhelper import yaml_parse

LAMBDA_UNZIPPED_LIMIT = 250 * 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
ELF_MAGIC = b"\x7fELF"
# Lambda's architecture name -> the wheel tag's machine and the ELF e_machine number (the ELF specification's).
LAMBDA_MACHINES = {"arm64": ("aarch64", 183), "x86_64": ("x86_64", 62)}
PYC_TAG = "cpython-312"
UNCHECKED_HASH_FLAGS = 0b01  # PEP 552: hash-based, check_source off
LOCAL_ONLY = ("crcr/local", "crcr/ops")
MUST_BE_COMPILED = ("crcr", "pydantic")


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def pyc_for(source: Path) -> Path:
    return source.parent / "__pycache__" / f"{source.stem}.{PYC_TAG}.pyc"


class Checks:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def __call__(self, cond: bool, what: str) -> None:
        print(f"  {'ok  ' if cond else 'FAIL'}  {what}")
        if not cond:
            self.failures.append(what)


def check_layer(site: Path, check: Checks) -> None:
    print(f"Layer {site.parent}:")
    check((site / "crcr" / "__init__.py").is_file(), "python/crcr/__init__.py present")
    for rel in LOCAL_ONLY:
        check(not (site / rel).exists(), f"python/{rel} absent (local stack only)")
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    missing, wrong_mode = [], []
    for src in sources:
        pyc = pyc_for(src)
        if not pyc.is_file():
            missing.append(src.relative_to(site))
        elif int.from_bytes(pyc.read_bytes()[4:8], "little") != UNCHECKED_HASH_FLAGS:
            wrong_mode.append(src.relative_to(site))
    check(not missing, f"{len(sources) - len(missing)}/{len(sources)} modules have a {PYC_TAG} .pyc {missing[:5]}")
    check(not wrong_mode, f"all .pyc are unchecked-hash {wrong_mode[:5]}")
    for package in MUST_BE_COMPILED:
        compiled = list((site / package).rglob(f"*.{PYC_TAG}.pyc"))
        check(bool(compiled) and pyc_for(site / package / "__init__.py").is_file(), f"{package}: {len(compiled)} .pyc")


def check_functions(build: Path, site: Path, functions: dict[str, Any], check: Checks) -> None:
    print("Functions:")
    biggest = 0
    for name, props in sorted(functions.items()):
        code = build / props["CodeUri"]
        module = props["Handler"].rsplit(".", 1)[0]
        check((code / f"{module}.py").is_file(), f"{name}: {props['CodeUri']}/{module}.py")
        biggest = max(biggest, size_of(code))
    layer_bytes = size_of(site.parent)
    check(
        layer_bytes + biggest < LAMBDA_UNZIPPED_LIMIT,
        f"layer {layer_bytes / 2**20:.1f} MiB + largest function {biggest / 2**10:.0f} KiB < 250 MB unzipped",
    )


def check_architecture(site: Path, architecture: str, check: Checks) -> None:
    print(f"Native code for {architecture}:")
    tag, machine = LAMBDA_MACHINES[architecture]
    foreign, native = [], 0
    for path in site.rglob("*.so*"):
        head = path.read_bytes()[:20]
        if head[:4] != ELF_MAGIC:
            continue
        native += 1
        endian = "little" if head[5] == 1 else "big"
        if int.from_bytes(head[18:20], endian) != machine:
            foreign.append(str(path.relative_to(site)))
    check(native > 0 and not foreign, f"{native} native libraries, all {tag} {foreign[:5]}")
    wheels = {}
    for wheel in site.glob("*.dist-info/WHEEL"):
        tags = [line.split(":", 1)[1].strip() for line in wheel.read_text().splitlines() if line.startswith("Tag:")]
        wheels[wheel.parent.name] = tags
    wrong = [name for name, tags in wheels.items() if not all(t.endswith("-any") or tag in t for t in tags)]
    check(bool(wheels) and not wrong, f"{len(wheels)} wheels, each {tag} or pure Python {wrong[:5]}")


def import_site(site: Path, architecture: str, python312: str, scratch: Path) -> Path:
    """The layer itself when this machine runs its native code; else a twin with the same crcr and the same pinned
    dependencies built for this machine."""
    tag, _ = LAMBDA_MACHINES[architecture]
    if platform.machine().lower() in (tag, architecture):
        return site
    twin = scratch / "python"
    subprocess.run(  # noqa: S603 - fixed argv, no shell
        [python312, "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check",
         "--root-user-action=ignore", "--only-binary=:all:", "--target", str(twin),
         "-r", str(ROOT / "shared" / "requirements.txt")],
        check=True,
    )  # fmt: skip
    shutil.copytree(site / "crcr", twin / "crcr")
    print(f"  (this machine is {platform.machine()}: importing against a twin of the layer built for it)")
    return twin


PROBE = """
import importlib, json, sys, time
site, code, module = sys.argv[1:4]
sys.path[:0] = [code, site]
t = time.perf_counter()
m = importlib.import_module(module)
ms = (time.perf_counter() - t) * 1000
assert callable(getattr(m, "lambda_handler", None)), "no lambda_handler"
roots = (site, code, sys.base_prefix)
foreign = [n for n, v in sys.modules.items() if getattr(v, "__file__", None) and not v.__file__.startswith(roots)]
print(json.dumps({"ms": round(ms), "modules": len(sys.modules), "foreign": foreign}))
"""


def check_imports(build: Path, site: Path, functions: dict[str, Any], architecture: str, check: Checks) -> None:
    print("Imports as Lambda does them (python3.12, stdlib + layer + function dir only):")
    env = {k: v for k, v in os.environ.items() if k.startswith(("PYENV", "PATH", "HOME", "LANG"))} | {
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": "crcr",
        "POWERTOOLS_METRICS_NAMESPACE": "crcr",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    python312 = shutil.which("python3.12", path=env.get("PATH"))
    check(python312 is not None, f"python3.12 found ({python312})")
    if python312 is None:
        return
    with tempfile.TemporaryDirectory(prefix="crcr-check-build-") as scratch:
        imports_from = import_site(site, architecture, python312, Path(scratch))
        for name, props in sorted(functions.items()):
            import_one(imports_from, build, name, props, python312, env, check)


def import_one(
    site: Path, build: Path, name: str, props: dict[str, Any], python312: str, env: dict[str, str], check: Checks
) -> None:
    code = (build / props["CodeUri"]).resolve()
    module = props["Handler"].rsplit(".", 1)[0]
    # -I -S: no user/site packages or PYTHON* variables; -B: leave the build output untouched.
    run = subprocess.run(  # noqa: S603 - fixed argv, no shell
        [python312, "-I", "-S", "-B", "-c", PROBE, str(site.resolve()), str(code), module],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if run.returncode != 0:
        check(False, f"{name}: import {module} failed:\n{run.stderr.strip()[-2000:]}")
        return
    result = json.loads(run.stdout.strip().splitlines()[-1])
    stats = f"{result['ms']} ms, {result['modules']} modules"
    check(not result["foreign"], f"{name}: imports in {stats}, none from outside {result['foreign'][:3]}")


def main() -> int:
    build = Path(sys.argv[1] if len(sys.argv) > 1 else ".aws-sam/build")
    check = Checks()
    template = yaml_parse((build / "template.yaml").read_text())
    resources = template["Resources"]
    [architecture] = template.get("Globals", {}).get("Function", {}).get("Architectures", ["x86_64"])
    layers = [n for n, r in resources.items() if r["Type"] == "AWS::Serverless::LayerVersion"]
    check(layers == ["CrcrLayer"], f"built template has the one layer CrcrLayer ({layers})")
    functions = {n: r["Properties"] for n, r in resources.items() if r["Type"] == "AWS::Serverless::Function"}
    site = build / "CrcrLayer" / "python"
    check_layer(site, check)
    check_functions(build, site, functions, check)
    check_architecture(site, architecture, check)
    check_imports(build, site, functions, architecture, check)
    if check.failures:
        print(f"build check: {len(check.failures)} problem(s)")
        return 1
    print("build check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
