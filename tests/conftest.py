"""Shared fixtures: real keys, an independent GitHub double, and `crcr local` stacks on moto server.

Also how a run stays repeatable and runs side by side (docs/testing.md, "Repeatable and side by side"):

* Every test starts with Python's `random` seeded from the run's seed (CRCR_TEST_SEED, default 0) and its own id, so
  the relay's jitter and anything else drawn from `random` is drawn the same way each run; the seed is in the
  report's header, and a failing test's report says how to repeat it with that seed.
* hypothesis runs derandomized with its example database off (profile "crcr"): the same examples every run,
  whatever a previous run left in `.hypothesis/`.
* Under pytest-xdist (`--dist loadfile`), a module's tests run in one worker, so a module-scoped fixture (one stack,
  one moto, one soak run) is built once. Each worker is its own process: its own moto backends, free ports, tables,
  temporary folders and process environment.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
import uuid
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import settings

from crcr.domain.signature import sign
from crcr.local.stack import LocalStack
from tests.doubles.github_double import GitHubDouble
from tests.doubles.hud import HudDouble

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "examples" / "events"
APP_ID = "31337"
WEBHOOK_SECRET = "it's-a-secret-to-everybody"

# The same examples every run, and nothing carried over from an earlier run's database; a test's own settings
# (tests/fuzz/settings.py: CRCR_FUZZ_SEED for an exploratory run) say otherwise where they must.
settings.register_profile("crcr", derandomize=True, database=None, print_blob=True)
settings.load_profile("crcr")

SEED = int(os.environ.get("CRCR_TEST_SEED") or 0)


def seed_of(nodeid: str) -> int:
    """The seed a test's `random` starts from: the run's seed and the test's id (stable across runs and workers)."""
    return SEED ^ zlib.crc32(nodeid.encode())


def pytest_report_header(config: pytest.Config) -> list[str]:
    hashseed = os.environ.get("PYTHONHASHSEED", "random")
    return [
        f"random: CRCR_TEST_SEED={SEED} (each test seeds `random` with it and its id), PYTHONHASHSEED={hashseed}",
        "hypothesis: derandomized, no example database (profile crcr)",
    ]


@pytest.fixture(autouse=True)
def _seeded_random(request: pytest.FixtureRequest) -> None:
    random.seed(seed_of(request.node.nodeid))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        hashseed = os.environ.get("PYTHONHASHSEED")
        again = f"PYTHONHASHSEED={hashseed} " if hashseed else ""
        report.sections.append(
            (
                "seed",
                f"random seeded with {seed_of(item.nodeid)}; repeat with "
                f"{again}CRCR_TEST_SEED={SEED} .venv/bin/python -m pytest '{item.nodeid}'",
            )
        )
    return report


# The modules that take longest (a minute or more on 2 busy cores: a stack per test, or one long run), longest first.
# Side by side, each worker takes the next module when it is free: these go first so that none is left running alone
# at the end. Only the order changes; a module missing here runs in its place.
LONGEST_FIRST = (
    "tests/e2e/test_bench_sections.py",
    "tests/e2e/test_callback.py",
    "tests/e2e/test_pr_comment.py",
    "tests/e2e/test_relay.py",
    "tests/e2e/test_replay.py",
    "tests/e2e/test_soak_small.py",
    "tests/e2e/test_check_runs.py",
    "tests/e2e/test_buildkite_dispatch.py",
    "tests/fuzz/test_http.py",
    "tests/e2e/test_one_downstream_flood.py",
    "tests/e2e/test_golden_writes.py",
    "tests/e2e/test_hud_injection.py",
    "tests/e2e/test_demo.py",
    "tests/e2e/test_webhook_edge.py",
    "tests/e2e/test_send_follow.py",
    "tests/e2e/test_shadow.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="session")
def app_key_pem(app_key: rsa.RSAPrivateKey) -> str:
    """The App key exactly as GitHub issues it: PKCS#1 'BEGIN RSA PRIVATE KEY'."""
    return app_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ).decode()


@pytest.fixture
def github(app_key: rsa.RSAPrivateKey) -> Iterator[GitHubDouble]:
    public = app_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with GitHubDouble(app_id=APP_ID, app_public_key_pem=public) as double:
        yield double
        assert double.internal_errors == []


@dataclass
class Relay:
    stack: LocalStack
    github: GitHubDouble
    allowlist: Path
    baseline: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Metrics are tallied per process; a test sees only what happened since its relay started.
        self.baseline = dict(self.stack.status()["metrics"])

    @property
    def url(self) -> str:
        return self.stack.url

    def post(
        self, event: str, body: bytes, delivery: str | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        base = {
            "content-type": "application/json",
            "x-github-event": event,
            "x-github-delivery": delivery or str(uuid.uuid4()),
            "x-hub-signature-256": sign(WEBHOOK_SECRET.encode(), body),
        }
        return http("POST", f"{self.url}/webhook", body, base | (headers or {}))

    def metric(self, name: str) -> int:
        return int(self.stack.status()["metrics"].get(name, 0)) - self.baseline.get(name, 0)

    def wait_dispatches(self, expected: dict[str, int], timeout_s: float = 30.0, settle_s: float = 1.0) -> None:
        """Wait until each repo has `expected` dispatches, then a moment more so a duplicate would show."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if all(len(self.github.dispatches(r)) >= n for r, n in expected.items()):
                break
            time.sleep(0.1)
        time.sleep(settle_s)


def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=15) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else {}


DEFAULT_ALLOWLIST = """\
L1:
  - org-one/l1-repo
L2:
  - org-two/l2-repo: oncall-two
L3:
  gpu:
    org-three/l3-repo: [oncall-three]
L4:
  - org-four/L4-Repo
"""
LISTED = ["org-one/l1-repo", "org-two/l2-repo", "org-three/l3-repo", "org-four/L4-Repo"]


@pytest.fixture
def relay_factory(
    github: GitHubDouble, hud: HudDouble, app_key_pem: str, tmp_path: Path
) -> Iterator[Callable[..., Relay]]:
    stacks: list[LocalStack] = []

    def make(
        allowlist: str = DEFAULT_ALLOWLIST,
        env: dict[str, str] | None = None,
        double: GitHubDouble | None = None,
        **kwargs: Any,
    ) -> Relay:
        """A stack on the test's GitHub double, or on `double` (a second relay that must not share what it sees)."""
        gh = double or github
        path = tmp_path / f"allowlist-{len(stacks)}.yaml"
        path.write_text(allowlist)
        for i, repo in enumerate(LISTED):
            gh.install(repo, installation_id=100 + i, repo_id=5000 + i)
        gh.install("org-one/installed-not-listed", installation_id=100, repo_id=5999)
        config = {
            "CRCR_UPSTREAM_REPO": "pytorch/pytorch",
            "CRCR_GITHUB_API_URL": gh.url,
            "CRCR_GITHUB_APP_ID": APP_ID,
            "CRCR_GITHUB_APP_PRIVATE_KEY": app_key_pem,
            "CRCR_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "CRCR_ALLOWLIST": str(path),
            "CRCR_RETRY_BASE_S": "0.5",
            "CRCR_RUN_SETTLE_S": "1",  # GitHub creates a dispatch's run at once here
            "CRCR_GITHUB_TIMEOUT_S": "2",
            "CRCR_CHECK_SETTLE_S": "1",
            # Every job change of every e2e test is judged by the port of PyTorch's HUD endpoint.
            "CRCR_HUD_URL": hud.url,
            "CRCR_HUD_TOKEN": HUD_TOKEN,
            "PATH": "/usr/bin:/bin",
        } | (env or {})
        stack = LocalStack(port=0, env=config, root=ROOT, **kwargs).start()
        stacks.append(stack)
        return Relay(stack, gh, path)

    yield make
    try:
        for stack in stacks:
            assert_hud_rows_match_the_ledger(stack, hud)
    finally:
        for stack in stacks:
            stack.stop()


HUD_TOKEN = "hud-bot-token"
# Fields of a row that never change for its key: what PyTorch's HUD holds must be the ledger's identity.
IDENTITY = (
    "downstream_repo",
    "upstream_repo",
    "pr_number",
    "pytorch_head_sha",
    "delivery_id",
    "downstream_repo_level",
    "event_type",
    "workflow_name",
    "job_name",
    "check_run_id",
    "run_id",
    "run_attempt",
)


def assert_hud_rows_match_the_ledger(stack: LocalStack, hud: HudDouble) -> None:
    """Every row PyTorch's HUD would hold is one the relay recorded, with the ledger's identity, and the
    relay's own `crcr_workflow_job` row (the export's) has the same key and identity."""
    from crcr.adapters.job_items import from_item  # noqa: PLC0415
    from crcr.app.torchci import row  # noqa: PLC0415

    if not hud.rows:
        return
    items = stack.client("dynamodb").scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
    ours = {r["dynamoKey"]: r for r in (row(from_item(item)) for item in items)}
    for key, theirs in hud.rows.items():
        assert key in ours, f"PyTorch's HUD holds a row the relay never recorded: {key}"
        assert {f: theirs.get(f) for f in IDENTITY} == {f: ours[key][f] for f in IDENTITY}


@pytest.fixture
def hud() -> Iterator[HudDouble]:
    double = HudDouble(HUD_TOKEN)
    yield double
    double.stop()
    assert double.refused == [], "PyTorch's HUD would refuse these pushes"


@pytest.fixture
def relay(relay_factory: Callable[..., Relay]) -> Relay:
    return relay_factory()


def event_body(name: str, **changes: Any) -> bytes:
    """A realistic event from examples/events with top-level or pull_request fields changed."""
    doc = json.loads((EVENTS / name).read_text())
    for key, value in changes.items():
        if key.startswith("pr_"):
            doc["pull_request"][key.removeprefix("pr_")] = value
        else:
            doc[key] = value
    return json.dumps(doc).encode()
