"""The results table's scheduled export on `crcr local`: the stack exports the table when it starts (its first run is
a full export) and on its schedule; `crcr hud export --from-export` of the exports gives the rows `crcr hud export`
gives from the table."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import LISTED, Relay, event_body
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.test_callback import Scenario, oidc  # noqa: F401 - a fixture

pytestmark = pytest.mark.e2e


def export(relay: Relay, out: Path, *source: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "hud", "export", "--out", str(out), *source],
        capture_output=True, text=True, timeout=60, env=relay.stack.operator_env(), check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr


def test_the_stack_exports_the_results_table_and_the_export_reads_back_as_the_table(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    relay = relay_factory(env={"CRCR_OIDC_ISSUER": oidc.url})
    s3, bucket = relay.stack.client("s3"), relay.stack.function_env["CRCR_EXPORTS_BUCKET"]

    def exported(kind: str) -> list[str]:
        found = s3.list_objects_v2(Bucket=bucket, Prefix=f"exports/{kind}/").get("Contents", [])
        return [o["Key"] for o in found if o["Key"].endswith(".gz")]

    deadline = time.time() + 30
    while not exported("full") and time.time() < deadline:  # the run at start
        time.sleep(0.2)
    assert len(exported("full")) == 1
    delivery = str(uuid.uuid4())
    body = event_body("pull_request.opened.json")
    assert relay.post("pull_request", body, delivery)[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    s = Scenario(relay, oidc, delivery, json.loads(body)["pull_request"]["head"]["sha"])
    assert s.post(s.body(status="completed", conclusion="failure"), s.token()) == (200, {"status": "recorded"})
    # The daily full export, as its schedule invokes it.
    assert relay.stack.invoke("ExportFunction", {"kind": "full"})["kind"] == "full"
    while len(exported("full")) < 2 and time.time() < deadline + 30:
        time.sleep(0.2)
    export(relay, tmp_path / "from-table.jsonl")
    export(relay, tmp_path / "from-exports.jsonl", "--from-export", f"s3://{bucket}/exports")
    rows = (tmp_path / "from-table.jsonl").read_text()
    assert rows and (tmp_path / "from-exports.jsonl").read_text() == rows
