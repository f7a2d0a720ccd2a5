"""`crcr demo`: the relay end to end on the embedded stack with the sandbox GitHub, shown as a table."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from crcr.domain.signature import sign
from crcr.local.stack import LocalStack, project_root


def post_webhook(url: str, secret: str, event: str, body: bytes, delivery_id: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(  # noqa: S310 - a local http URL we started ourselves
        f"{url}/webhook",
        data=body,
        method="POST",
        headers={
            "content-type": "application/json",
            "x-github-event": event,
            "x-github-delivery": delivery_id,
            "x-hub-signature-256": sign(secret.encode(), body),
            "user-agent": "GitHub-Hookshot/crcr-demo",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _wait_for(stack: LocalStack, count: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    assert stack.sandbox is not None
    deadline = time.time() + timeout_s
    while time.time() < deadline and len(stack.sandbox.dispatches) < count:
        time.sleep(0.2)
    time.sleep(1.0)  # anything beyond the expected count would be a duplicate: give it a moment to show
    return list(stack.sandbox.dispatches)


def run_demo(keep_s: float | None = 0.0) -> int:
    """Run the scenario; then keep the stack (and its HUD) up for `keep_s` seconds, or until Ctrl-C if None."""
    root = project_root()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_ENDPOINT"))}
    env |= {
        "CRCR_UPSTREAM_REPO": "pytorch/pytorch",
        "CRCR_ALLOWLIST": str(root / "examples" / "allowlist.yaml"),
        "CRCR_CHECK_SETTLE_S": "2",  # production waits 60 s for a repository's jobs to settle
        # vllm-project/vllm builds on the sandbox Buildkite; its pipeline's ids map it here, as PyTorch maps vLLM.
        "CRCR_CI_PROVIDERS": str(root / "examples" / "ci_providers.yml"),
    }
    events = root / "examples" / "events"
    pr_body = (events / "pull_request.opened.json").read_bytes()
    push_body = (events / "push.main.json").read_bytes()
    print(
        "Starting the local stack (moto server, queues and table from template.yaml, sandbox GitHub and Buildkite)..."
    )
    with LocalStack(port=0, env=env) as stack:
        secret = stack.secrets["webhook_secret"]
        print(f"Relay listening at {stack.url}")
        print(f"HUD pages at {stack.url}/hud/ (live while the demo runs)\n")
        sent = []
        pr_delivery, push_delivery = str(uuid.uuid4()), str(uuid.uuid4())
        for label, event, body, delivery in (
            ("pull_request opened #170001", "pull_request", pr_body, pr_delivery),
            ("push to main", "push", push_body, push_delivery),
            ("redelivery of the pull_request", "pull_request", pr_body, pr_delivery),
        ):
            status, reply = post_webhook(stack.url, secret, event, body, delivery)
            sent.append((label, delivery, status, reply.get("status")))
        print(f"{'webhook':34} {'delivery':38} {'HTTP':4}  status")
        for label, delivery, status, outcome in sent:
            print(f"{label:34} {delivery:38} {status:<4}  {outcome}")

        # PR: all 6 GitHub repositories; push to main: all but the pull_request-only MPS repository. The
        # Buildkite downstream (vllm-project/vllm) gets one build for each.
        expected = 6 + 5
        dispatches = _wait_for(stack, expected)
        builds = _wait_for_builds(stack, 2)
        print(f"\n{'downstream repository':28} {'level':5} {'event':13} {'delivery':38} ticket")
        for d in sorted(dispatches, key=lambda d: (d["event_type"], d["repo"])):
            payload = d["client_payload"]
            print(
                f"{d['repo']:28} {_level(payload):5} {d['event_type']:13} {payload['delivery_id']:38} "
                f"{payload['ticket'][:24]}…"
            )
        print(f"\n{'Buildkite build':28} {'event':13} {'upstream commit':16} {'build id':38} number")
        for b in sorted(builds, key=lambda b: b["env"]["CRCR_EVENT_TYPE"]):
            print(
                f"{b['organization']['slug'] + '/' + b['pipeline']['slug']:28} {b['env']['CRCR_EVENT_TYPE']:13} "
                f"{b['env']['CRCR_UPSTREAM_SHA'][:12]:16} {b['id']:38} {b['number']}"
            )
        callbacks = _wait_for_callbacks(stack, 2 * len(dispatches))
        build_reports = _wait_for_build_reports(stack, 2 * len(builds))
        print(
            f"\n{'downstream repository':28} {'level':5} {'event':13} {'job':16} {'state':10} {'conclusion':10} "
            f"{'queue s':>7} {'run s':>6}"
        )
        for job in sorted(_jobs(stack), key=lambda j: (j["event"], j["repo"])):
            print(
                f"{job['repo']:28} L{job['level']:4} {job['event']:13} {job['job']:16} {job['state']:10} "
                f"{job['conclusion']:10} {job['queue_s']:>7} {job['run_s']:>6}"
            )
        ignored = sum(1 for c in callbacks if c["reply"].get("status") == "ignored")
        refused = [c for c in callbacks if c["http"] != 200]
        bk_refused = [r for r in build_reports if r["http"] != 200]
        print(
            f"\n{len(callbacks)} callbacks from GitHub Actions runs: {ignored} answered 'ignored' (L1 records "
            f"nothing), {len(refused)} refused; {len(build_reports)} from Buildkite jobs, {len(bk_refused)} refused."
        )

        # The L4 repository (check_runs: per_repo) has one check run per upstream commit: PR head and main.
        runs = _wait_for_check_runs(stack, 2)
        print(f"\n{'upstream check run':40} {'commit':12} {'status':10} {'conclusion':10} writes")
        for run in runs:
            print(
                f"{run['name']:40} {run['head_sha'][:12]:12} {run['status']:10} {run['conclusion'] or '-':10} "
                f"{run['writes']}"
            )

        accepted, hud_refused, hud_rows = _hud_pushes(stack)
        print(
            f"\n{accepted} HUD pushes accepted by the port of PyTorch's HUD endpoint ({len(hud_refused)} refused), "
            f"{hud_rows} rows in its table, each with the ledger's PR and commit."
        )

        per_key: dict[tuple[str, str], int] = {}
        for d in dispatches:
            key = (d["repo"].lower(), d["client_payload"]["delivery_id"])
            per_key[key] = per_key.get(key, 0) + 1
        duplicates = sum(n - 1 for n in per_key.values())
        print(f"\n{len(dispatches)} dispatches, {duplicates} duplicates (expected {expected}, 0).")
        ok = (
            len(dispatches) == expected
            and duplicates == 0
            and [s[2] for s in sent] == [202, 202, 200]
            and len(callbacks) == 2 * expected
            and not refused
            and len(builds) == 2
            and len(build_reports) == 4
            and not bk_refused
            and len(_jobs(stack)) == expected - 4 + 2  # less the two L1 repositories, for both events; plus builds
            and len(runs) == 2
            and all((r["status"], r["conclusion"], r["writes"]) == ("completed", "success", 2) for r in runs)
            and not hud_refused
            and accepted >= len(_jobs(stack))
            and hud_rows == len(_jobs(stack))
        )
        print("Demo passed." if ok else "Demo FAILED.")
        _keep(stack, keep_s)
        return 0 if ok else 1


def _hud_pushes(stack: LocalStack, timeout_s: float = 15.0) -> tuple[int, list[int], int]:
    """Pushes the sandbox HUD (PyTorch's extraction) accepted and refused, and rows whose identity is the
    ledger's: each row's PR and commit are compared with the job the relay recorded under the same key."""
    from crcr.adapters.results import from_item  # noqa: PLC0415
    from crcr.app.hud import row  # noqa: PLC0415

    hud = stack.sandbox_hud
    assert hud is not None
    items = stack.client("dynamodb").scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
    ours = {r["dynamoKey"]: r for r in (row(from_item(item)) for item in items)}
    deadline = time.time() + timeout_s
    while time.time() < deadline and len(hud.table) < len(ours):
        time.sleep(0.2)
    matching = sum(
        1
        for key, theirs in dict(hud.table).items()
        if key in ours
        and (theirs.get("pr_number"), theirs.get("pytorch_head_sha"))
        == (ours[key]["pr_number"], ours[key]["pytorch_head_sha"])
    )
    answers = list(hud.answers)
    return sum(1 for a in answers if a == 200), [a for a in answers if a != 200], matching


def _keep(stack: LocalStack, keep_s: float | None) -> None:
    if keep_s == 0:
        return
    until = "Ctrl-C" if keep_s is None else f"{keep_s:.0f} s or Ctrl-C"
    print(f"\nThe relay and its HUD stay up at {stack.url}/hud/ for {until}.", flush=True)
    try:
        time.sleep(keep_s if keep_s is not None else 10**9)
    except KeyboardInterrupt:
        print()


def _wait_for_callbacks(stack: LocalStack, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    assert stack.workflows is not None
    deadline = time.time() + timeout_s
    while time.time() < deadline and len(stack.workflows.replies) < count:
        time.sleep(0.2)
    time.sleep(0.5)
    return list(stack.workflows.replies)


def _wait_for_builds(stack: LocalStack, count: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    assert stack.sandbox_buildkite is not None
    sandbox = stack.sandbox_buildkite
    deadline = time.time() + timeout_s
    while time.time() < deadline and len(sandbox.builds) < count:
        time.sleep(0.2)
    time.sleep(1.0)  # a duplicate build would show
    return list(sandbox.builds)


def _wait_for_build_reports(stack: LocalStack, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    assert stack.sandbox_buildkite is not None
    sandbox = stack.sandbox_buildkite
    deadline = time.time() + timeout_s
    while time.time() < deadline and len(sandbox.replies) < count:
        time.sleep(0.2)
    time.sleep(0.5)
    return list(sandbox.replies)


def _wait_for_check_runs(stack: LocalStack, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    assert stack.sandbox is not None
    sandbox = stack.sandbox

    def done() -> list[dict[str, Any]]:
        return [r for r in list(sandbox.check_runs.values()) if r.get("status") == "completed"]

    deadline = time.time() + timeout_s
    while time.time() < deadline and len(done()) < count:
        time.sleep(0.2)
    time.sleep(0.5)
    return sorted(sandbox.check_runs.values(), key=lambda r: r["head_sha"])


def _jobs(stack: LocalStack) -> list[dict[str, Any]]:
    """Job rows as the relay recorded them, with queue and run times on the relay's clock."""
    ddb = stack.client("dynamodb")
    items = ddb.scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
    events = {
        d["client_payload"]["delivery_id"]: d["event_type"] for d in (stack.sandbox.dispatches if stack.sandbox else [])
    }

    def num(item: dict[str, Any], name: str) -> float | None:
        return float(item[name]["N"]) if "N" in item.get(name, {}) else None

    rows = []
    for item in items:
        dispatched, started, completed = num(item, "dispatched_at"), num(item, "started_at"), num(item, "completed_at")
        rows.append(
            {
                "repo": item["repo"]["S"],
                "level": item["level"]["N"],
                "event": events.get(item["delivery_id"]["S"], "?"),
                "job": item["job_name"]["S"],
                "state": item["state"]["S"],
                "conclusion": item.get("conclusion", {}).get("S", "-"),
                "queue_s": f"{started - dispatched:.2f}" if started and dispatched else "-",
                "run_s": f"{completed - started:.2f}" if completed and started else "-",
            }
        )
    return rows


def _level(client_payload: dict[str, Any]) -> str:
    import base64  # noqa: PLC0415

    claims = client_payload["ticket"].split(".")[1]
    doc = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    return f"L{doc['level']}"


if __name__ == "__main__":
    raise SystemExit(run_demo())
