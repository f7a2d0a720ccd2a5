"""Each function's cold start builds the data access it uses and nothing else: its handler imported and its
dependencies built in a fresh interpreter, as Lambda would, then the state and results table modules it loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from tests.conftest import ROOT

# One class per aggregate of the two tables (shared/crcr/adapters), each in its module.
DATA_ACCESS = {
    "deliveries", "redeliveries", "ledger", "pulls", "branch", "check_runs", "pr_comment", "reruns", "pacer",
    "results", "torchci_keys", "rate_limits", "refusals", "levels", "runs", "regressions", "shadow", "scheduled_export",
}  # fmt: skip

# function -> (its builder in crcr.composition, the data access it needs)
EXPECTED = {
    # A downstream's run event is dropped with at most one read of a bound run (crcr.app.ingest), past the inbound
    # door (the allowlist, loaded on the first run event).
    "webhook": ("build_ingest_deps", {"deliveries", "runs"}),
    # A `rerun` comment's budgets per author and per PR are fixed windows in the state table (crcr.app.commands).
    # A shadow downstream's decisions are kept (crcr.domain.shadow).
    "planner": ("build_planner_deps", {"pulls", "branch", "check_runs", "results", "rate_limits", "shadow"}),
    # A workflow_dispatch downstream's run is recorded when GitHub names it (crcr.app.dispatch). Every function that
    # writes outside the relay keeps the writes its outbound door withholds for shadow downstreams (shadow).
    "dispatch": ("build_dispatch_deps", {"ledger", "pulls", "pacer", "runs", "shadow"}),
    "callback": ("build_callback_deps", {"ledger", "branch", "results", "torchci_keys", "rate_limits", "refusals"}),
    # A regression's one notice is claimed on the regression (crcr.app.regression_notices).
    "checks": (
        "build_checks_deps",
        {"check_runs", "pr_comment", "reruns", "pulls", "ledger", "pacer", "results", "levels", "regressions",
         "shadow"},
    ),
    # The state table's stream: the pass alone, which may book the PR comment's render (its row sits beside the re-run
    # markers the render reads); no re-run, reaction or regression notice.
    "dispatched": (
        "build_dispatched_deps",
        {"check_runs", "pr_comment", "reruns", "pulls", "ledger", "pacer", "results", "levels", "shadow"},
    ),
    # The check runs' aggregate: the reporter books each changed commit's check-run pass in it. It keeps the
    # branch jobs' regressions, and GitHub's comparisons for their ranges are budgeted per hour (rate_limits).
    "reporter": (
        "build_report_deps",
        {"results", "pulls", "branch", "check_runs", "regressions", "rate_limits", "shadow"},
    ),
    # The sweeper asks GitHub's record first, and reconciles a run it finds completed as the runs worker does.
    "sweeper": ("build_sweep_deps", {"ledger", "results", "runs", "torchci_keys"}),
    "runs": ("build_runs_deps", {"ledger", "runs", "results", "torchci_keys"}),
    "reconciler": ("build_reconcile_deps", {"redeliveries", "pacer"}),
    "levels": ("build_level_deps", {"results", "levels", "shadow"}),
    "jwks": ("build_jwks", set()),
    # The results table's scheduled export: DynamoDB's exports, and where the last one ended.
    "export": ("build_export_deps", {"scheduled_export"}),
    # The PR and repository pages are composed when read: the repository's newest rows come from the results table.
    # A shadow relay's decisions are read for GET /hud/api/crcr/shadow.
    "hud": ("build_pages", {"results", "shadow"}),
}  # fmt: skip

PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("handler", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from crcr import composition
getattr(composition, sys.argv[2])(composition.load_settings())
print(json.dumps(sorted(m.removeprefix("crcr.adapters.") for m in sys.modules if m.startswith("crcr.adapters."))))
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    app_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    ticket_key = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    allowlist = Path(tmp_path_factory.mktemp("cold")) / "allowlist.yml"
    allowlist.write_text("L2:\n  - org/l2\nL4:\n  - org/l4\n")
    queue = "http://127.0.0.1:9/000000000000/"
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))},
        # Nothing here is called while dependencies are built: an endpoint nothing listens on proves it.
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "CRCR_GITHUB_APP_ID": "1",
        "CRCR_GITHUB_APP_PRIVATE_KEY": app_key.decode(),
        "CRCR_WEBHOOK_SECRET": "s3cret",
        "CRCR_TICKET_SIGNING_KEY": ticket_key.decode(),
        "CRCR_ALLOWLIST": str(allowlist),
        "CRCR_STATE_TABLE": "state",
        "CRCR_RESULTS_TABLE": "results",
        "CRCR_EVENTS_QUEUE_URL": queue + "events",
        "CRCR_DISPATCH_QUEUE_URL": queue + "dispatch",
        "CRCR_DISPATCH_DLQ_URL": queue + "dispatch-dlq",
        "CRCR_CHECKS_QUEUE_URL": queue + "checks",
        "CRCR_CHECKS_DLQ_URL": queue + "checks-dlq",
        "CRCR_REPORTER_DLQ_URL": queue + "reporter-dlq",
        "CRCR_RUNS_QUEUE_URL": queue + "runs",
        "CRCR_BODIES_BUCKET": "bodies",
        "CRCR_HUD_BUCKET": "hud",
        "CRCR_EXPORTS_BUCKET": "exports",
        "CRCR_CALLBACK_URL": "https://relay.example/callback",
    }


def _loaded(function: str, builder: str, env: dict[str, str]) -> set[str]:
    handler = ROOT / "functions" / function / "handler.py"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(handler), builder],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{function}: {done.stderr[-2000:]}"
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_each_function_builds_only_the_data_access_it_uses(env: dict[str, str]) -> None:
    assert sorted(p.name for p in (ROOT / "functions").iterdir() if (p / "handler.py").exists()) == sorted(EXPECTED)
    with ThreadPoolExecutor(max_workers=2) as pool:
        loaded = dict(
            zip(EXPECTED, pool.map(lambda f: _loaded(f, EXPECTED[f][0], env), EXPECTED), strict=True)
        )  # fmt: skip
    found = {function: modules & DATA_ACCESS for function, modules in loaded.items()}
    assert found == {function: needed for function, (_, needed) in EXPECTED.items()}
    # The JWKS function reaches no table at all.
    assert not {"table", "job_items"} & loaded["jwks"]
    # The webhook loads the allowlist when a downstream's run event first asks the inbound door (crcr.app.ingest),
    # never for an upstream event: its cold start imports neither the allowlist's source nor YAML.
    assert "allowlist_source" not in loaded["webhook"] and "allowlist_source" in loaded["runs"]
