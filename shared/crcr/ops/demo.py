"""`crcr demo`: the relay end to end on the embedded stack with the sandbox GitHub: passing downstreams, then failing
ones in the ways that matter, with the PR comment, check runs, a dead letter's redrive and the HUD pages to open."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Any

from crcr.adapters.item_codec import from_dynamo
from crcr.local.sandbox import SandboxJob
from crcr.local.stack import LocalStack, project_root
from crcr.local.webhook_sender import WebhookSender


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
        # Part two's overdue job asked about within seconds (production: 12 h), swept every second, the comment
        # settled in one.
        "CRCR_RUN_TIMEOUT_S": "6",
        "CRCR_SWEEP_INTERVAL_S": "1",
        "CRCR_COMMENT_SETTLE_S": "1",
    }
    events = root / "examples" / "events"
    pr_body = (events / "pull_request.opened.json").read_bytes()
    push_body = (events / "push.main.json").read_bytes()
    print(
        "Starting the local stack (moto server, queues and table from template.yaml, sandbox GitHub and Buildkite)..."
    )
    with LocalStack(port=0, env=env) as stack:
        webhooks = WebhookSender(stack.url, stack.secrets["webhook_secret"], agent="GitHub-Hookshot/crcr-demo")
        print(f"Relay listening at {stack.url}")
        print(f"HUD pages at {stack.url}/hud/ (live while the demo runs)\n")
        print("1. A PR and a push; every downstream passes. Each job's transitions as they happen:\n")
        live = Transitions(stack)
        live.start()
        sent = []
        pr_delivery, push_delivery = str(uuid.uuid4()), str(uuid.uuid4())
        for label, event, body, delivery in (
            ("pull_request opened #170001", "pull_request", pr_body, pr_delivery),
            ("push to main", "push", push_body, push_delivery),
            ("redelivery of the pull_request", "pull_request", pr_body, pr_delivery),
        ):
            answer = webhooks.post(event, body, delivery)
            sent.append((label, delivery, answer.status, answer.json().get("status")))
        print(f"{'webhook':34} {'delivery':38} {'HTTP':4}  status")
        for label, delivery, status, outcome in sent:
            print(f"{label:34} {delivery:38} {status:<4}  {outcome}")

        # PR: all 6 GitHub repositories; push to main: all but the pull_request-only MPS repository. The
        # Buildkite downstream (vllm-project/vllm) gets one build for each.
        expected = 6 + 5
        dispatches = _wait_for(stack, expected)
        builds = _wait_for_builds(stack, 2)
        callbacks = _wait_for_callbacks(stack, 2 * len(dispatches))
        build_reports = _wait_for_build_reports(stack, 2 * len(builds))
        live.pause()
        ignored = sum(1 for c in callbacks if c["reply"].get("status") == "ignored")
        refused = [c for c in callbacks if c["http"] != 200]
        bk_refused = [r for r in build_reports if r["http"] != 200]
        print(
            f"\n{len(callbacks)} callbacks from GitHub Actions runs: {ignored} answered 'ignored' (L1 records "
            f"nothing), {len(refused)} refused; {len(build_reports)} from Buildkite jobs, {len(bk_refused)} refused."
        )
        for c in refused + bk_refused:  # nothing should be: say what was, so a failed demo explains itself
            print(f"  refused: {c['repo']} {c['status']}: HTTP {c['http']} {json.dumps(c['reply'])[:300]}")

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
            # Queued at dispatch, then completed: two writes; one when its jobs finished before the first was made.
            and all((r["status"], r["conclusion"]) == ("completed", "success") and r["writes"] <= 2 for r in runs)
            and not hud_refused
            and accepted >= len(_jobs(stack))
            and hud_rows == len(_jobs(stack))
        )
        failures_ok = failing_pr(stack, webhooks, live)
        live.stop()
        _hud_pages(stack)
        ok = ok and failures_ok
        print("\nDemo passed." if ok else "\nDemo FAILED.")
        _keep(stack, keep_s)
        return 0 if ok else 1


def _hud_pages(stack: LocalStack) -> None:
    hud = f"{stack.url}/hud"
    print("\nOpen the HUD pages:")
    print(f"  {hud}/  recent PRs and commits x downstream repositories")
    print(f"  {hud}/pr/{FAILING_PR}  the failing PR: verdicts, failing tests, re-runs")
    print(f"  {hud}/commit/{FAILING_HEAD}  its head commit")
    print(f"  {hud}/repo/riscv/pytorch-riscv-ci  one repository: history, pass rate, times, level")


FAILING_PR = 170002
BASELINE = "ba5e" * 10  # the failing PR's base: a push to main that sets each job's baseline
FAILING_HEAD = "fa11" * 10
REFUSED = "intel/torch-xpu-ops"
LABELS = ("ciflow/crcr/rocm", "ciflow/crcr/mps")  # the two L3 repositories take part in this PR
# The repositories with an upstream check run of their own on the failing PR's head: both L3 ones and the L4 one.
REPO_RUNS = ("rocm/pytorch-rocm-ci", "apple/pytorch-mps-ci", "riscv/pytorch-riscv-ci")


def script(repo: str, payload: dict[str, Any]) -> list[tuple[str, list[SandboxJob], list[SandboxJob]]] | None:
    """What each downstream's runs report in part two (attempt 1, then a re-run's attempt 2)."""
    body = payload.get("payload") or {}
    sha = (body.get("pull_request") or {}).get("head", {}).get("sha") or body.get("after")
    test = "build-and-test"
    if sha == BASELINE and repo == "rocm/pytorch-rocm-ci":
        failing = SandboxJob(test, "failure", "test", ("test/test_ops.py::TestCommonROCM::test_out_addmm",))
        return [("crcr sandbox", [failing], [failing])]
    if sha != FAILING_HEAD:
        return None
    # L4: a new failure, and in another run a job whose runner vanishes: it never reports again, and GitHub fails it.
    if repo == "riscv/pytorch-riscv-ci":
        new = SandboxJob(
            test,
            "failure",
            "test",
            ("test/test_nn.py::TestNN::test_conv2d_riscv", "test/test_nn.py::TestNN::test_gelu"),
        )
        hang = SandboxJob("distributed", finish=False)
        return [("crcr sandbox", [new], [new]), ("crcr sandbox distributed", [hang], [hang])]
    if repo == "rocm/pytorch-rocm-ci":  # L3: fails as it did on the base commit
        failing = SandboxJob(test, "failure", "test", ("test/test_ops.py::TestCommonROCM::test_out_addmm",))
        return [("crcr sandbox", [failing], [failing])]
    if repo == "apple/pytorch-mps-ci":  # L3: its runner's infrastructure fails, on the automatic re-run as well
        infra = SandboxJob(test, "failure", "infra")
        return [("crcr sandbox", [infra], [infra])]
    return None


def failing_pr(stack: LocalStack, webhooks: WebhookSender, live: Transitions) -> bool:
    """Part two: a base commit, then a PR whose downstreams fail; the comment, check runs, a dead letter."""
    from crcr.ops.dlq import list_dead_letters, redrive, target_for  # noqa: PLC0415
    from crcr.ops.send import build  # noqa: PLC0415

    assert stack.sandbox is not None and stack.workflows is not None
    stack.workflows.script = script
    print(
        f"\n2. A PR whose downstreams fail. First a push to main at {BASELINE[:12]} (each job's baseline: "
        "rocm, which passed on the first push, fails there already: a regression of the branch), then PR "
        "#{FAILING_PR} on it, labelled for both L3 devices; "
        f"{REFUSED}'s dispatch is refused (403):\n".replace("{FAILING_PR}", str(FAILING_PR))
    )
    live.resume()
    _, _, push = build("push", "pytorch/pytorch", sha=BASELINE)
    webhooks.post("push", json.dumps(push).encode(), str(uuid.uuid4()))
    _until(lambda: _finished(stack, BASELINE) >= 4, 40)
    stack.sandbox.refuse_dispatch[REFUSED] = "Repository access blocked"
    _, _, pr = build("pull_request.opened", "pytorch/pytorch", sha=FAILING_HEAD, pr=FAILING_PR)
    pr["pull_request"]["base"]["sha"] = BASELINE
    pr["pull_request"]["labels"] = [{"name": name} for name in LABELS]
    webhooks.post("pull_request", json.dumps(pr).encode(), str(uuid.uuid4()))

    def comment() -> str:
        found = [c for c in stack.sandbox.comments.values() if c["pr"] == FAILING_PR] if stack.sandbox else []
        return str(found[0]["body"]) if found else ""

    def complete(body: str) -> bool:
        """Every verdict in the comment's table, and the new failure's failing tests (as text, unescaped)."""
        plain = body.replace("\\", "").replace("**", "")
        wanted = ("| new |", "| broken trunk |", "| infra |", "| no baseline |", "failing: test/test_nn.py")
        return all(w in plain for w in wanted)

    _until(lambda: complete(comment()), 120)
    live.pause()
    body = comment()
    print(f"\nThe PR comment on #{FAILING_PR} (one, edited in place as results arrive):\n")
    print("\n".join("    " + line for line in body.splitlines()))

    def runs_of_head() -> list[dict[str, Any]]:
        return (
            [r for r in list(stack.sandbox.check_runs.values()) if r["head_sha"] == FAILING_HEAD]
            if stack.sandbox
            else []
        )

    # A repository's check run completes once its jobs finished and nothing changed for CRCR_CHECK_SETTLE_S. Each
    # L3/L4 repository's own run is waited for by name: on a busy machine one may not be written yet (check runs and
    # the comment share one budget) while the others are already completed.
    def settled() -> bool:
        runs = runs_of_head()
        names = {r["name"] for r in runs}
        return names >= {f"crcr/{repo}" for repo in REPO_RUNS} and all(r["status"] == "completed" for r in runs)

    _until(settled, 60)
    runs = runs_of_head()
    print(f"\n{'check run on ' + FAILING_HEAD[:12]:52} {'status':10} {'conclusion':10} writes")
    for run in sorted(runs, key=lambda r: r["name"]):
        print(f"{run['name']:52} {run['status']:10} {run['conclusion'] or '-':10} {run['writes']}")
    print(f"\nAutomatic re-runs the relay asked for (rerun-failed-jobs): {len(stack.sandbox.reruns)}")

    sqs = stack.client("sqs")
    dlq = stack.queue_urls["DispatchDLQ"]
    _until(lambda: bool(list_dead_letters(sqs, dlq)), 30)
    dead = list_dead_letters(sqs, dlq)
    print("\nDead letters (crcr dlq list):")
    for row in dead:
        print(f"  {row['target_repo']:28} {row['reason']}")
    stack.sandbox.refuse_dispatch.clear()  # the cause fixed: the App's access restored
    moved = redrive(sqs, dlq, target_for(sqs, dlq, None, False))
    _until(lambda: any(d["repo"] == REFUSED and _head(d) == FAILING_HEAD for d in stack.sandbox.dispatches), 30)
    redriven = any(d["repo"] == REFUSED and _head(d) == FAILING_HEAD for d in stack.sandbox.dispatches)
    print(f"Fixed, then redriven (crcr dlq redrive): {moved.line()}; {REFUSED} dispatched: {redriven}")
    checks = {r["name"].split("/")[2]: (r["status"], r["conclusion"]) for r in runs if r["name"].count("/") == 2}
    return (
        complete(body)
        and len(dead) == 1
        and moved.moved == 1
        and redriven
        and len(stack.sandbox.reruns) >= 1
        and checks.get("pytorch-riscv-ci") == ("completed", "failure")
    )


def _head(dispatch: dict[str, Any]) -> str | None:
    body = dispatch["client_payload"].get("payload") or {}
    return (body.get("pull_request") or {}).get("head", {}).get("sha") or body.get("after")


def _finished(stack: LocalStack, sha: str) -> int:
    items = stack.client("dynamodb").scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
    return sum(1 for i in map(from_dynamo, items) if i["head_sha"] == sha and i["state"] in ("completed", "timed_out"))


def _until(predicate: Any, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not predicate():
        time.sleep(0.3)


class Transitions(threading.Thread):
    """Prints each job's state change as the relay records it: dispatched -> in_progress -> completed."""

    def __init__(self, stack: LocalStack) -> None:
        super().__init__(daemon=True)
        self._stack = stack
        self._seen: dict[tuple[str, str], str] = {}
        self._quiet = threading.Event()
        self._done = threading.Event()
        self._start = time.time()

    def pause(self) -> None:
        time.sleep(0.6)  # what is recorded now is still shown
        self._quiet.set()

    def resume(self) -> None:
        self._quiet.clear()

    def stop(self) -> None:
        self._done.set()

    def run(self) -> None:
        ddb = self._stack.client("dynamodb")
        while not self._done.wait(0.25):
            try:
                items = ddb.scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
            except Exception:  # the stack stopping
                return
            for item in sorted(map(from_dynamo, items), key=lambda i: float(i.get("dispatched_at", 0))):
                key = (item["pk"], item["sk"])
                state = ":".join(item.get(k) or "" for k in ("state", "conclusion", "verdict"))
                if self._seen.get(key) == state:
                    continue
                before = self._seen.get(key)
                self._seen[key] = state
                if not self._quiet.is_set():
                    print(self._line(item, before), flush=True)

    def _line(self, item: dict[str, Any], before: str | None) -> str:
        def num(name: str) -> float | None:
            return float(item[name]) if item.get(name) is not None else None

        state, conclusion = item["state"], item.get("conclusion")
        previous = (before or "dispatched:").split(":")[0]
        job = f"{item['job_name']}" + (f" (attempt {item['run_attempt']})" if item["run_attempt"] != 1 else "")
        started, dispatched, completed = num("started_at"), num("dispatched_at"), num("completed_at")
        if state == "in_progress" and started and dispatched:
            timing = f"queued {started - dispatched:.1f} s"
        elif completed and started:
            timing = f"ran {completed - started:.1f} s"
        else:
            timing = ""
        verdict = f", verdict {item['verdict']}" if item.get("verdict") else ""
        outcome = f"{state} {conclusion}" if conclusion and conclusion != state else state
        if previous == state and verdict:
            outcome, verdict, timing = f"judged:{verdict[1:]}", "", ""
            return f"  +{time.time() - self._start:5.1f} s  {item['head_sha'][:7]}  {item['repo']:26} " + (
                f"L{item['level']}  {job:26} {outcome}"
            )
        return (
            f"  +{time.time() - self._start:5.1f} s  {item['head_sha'][:7]}  {item['repo']:26} "
            f"L{item['level']}  {job:26} "
            f"{previous} -> {outcome}{verdict}" + (f"  ({timing})" if timing else "")
        )


def _hud_pushes(stack: LocalStack, timeout_s: float = 15.0) -> tuple[int, list[int], int]:
    """Pushes the sandbox HUD (PyTorch's extraction) accepted and refused, and rows whose identity is the
    ledger's: each row's PR and commit are compared with the job the relay recorded under the same key."""
    from crcr.adapters.job_items import from_item  # noqa: PLC0415
    from crcr.app.torchci import row  # noqa: PLC0415

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
        return float(item[name]) if item.get(name) is not None else None

    rows = []
    for item in map(from_dynamo, items):
        dispatched, started, completed = num(item, "dispatched_at"), num(item, "started_at"), num(item, "completed_at")
        rows.append(
            {
                "repo": item["repo"],
                "level": str(item["level"]),
                "event": events.get(item["delivery_id"], "?"),
                "job": item["job_name"],
                "state": item["state"],
                "conclusion": item.get("conclusion") or "-",
                "queue_s": f"{started - dispatched:.2f}" if started and dispatched else "-",
                "run_s": f"{completed - started:.2f}" if completed and started else "-",
            }
        )
    return rows


if __name__ == "__main__":
    raise SystemExit(run_demo())
