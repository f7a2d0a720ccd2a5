"""`crcr replay` end to end on `crcr local`: a recorded stretch of deliveries (PRs opened, pushed to, labelled and
closed, drafts, first-time contributors, pushes to main, GitHub's redeliveries), sent to one relay as GitHub sent
them, then replayed from GitHub's delivery log to a fresh relay: the same dispatches, each once."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WEBHOOK_SECRET, Relay, event_body
from tests.doubles.github_double import GitHubDouble
from tests.doubles.hud import HudDouble
from tests.e2e.test_shadow import idle, pr_doc, second, sent_by  # noqa: F401 - `second` is a fixture

pytestmark = pytest.mark.e2e
SEED = 32
# A day's dispatches in a minute: GitHub's hourly write budget per installation would pace them over hours.
FAST = {"CRCR_GITHUB_WRITE_RATES": "100000/60+10000"}
ALLOWLIST = (
    "L1:\n  - org-one/l1-repo\nL2:\n  - org-two/l2-repo\nrepos:\n  org-two/l2-repo:\n    trusted_authors_only: true\n"
)


def day(seed: int = SEED, deliveries: int = 100, pulls: int = 20) -> list[dict[str, Any]]:
    """GitHub's delivery log, oldest first, as `GET /app/hook/deliveries/{id}` gives each entry: PR events for `pulls`
    PRs (each opened, then pushed to, labelled, closed) and pushes to main, one delivery in twenty redelivered later
    under its own guid. Every kind shows within a hundred; more only take longer (the soak plays days)."""
    rng = random.Random(seed)
    start = datetime(2026, 12, 6, tzinfo=UTC)
    out: list[dict[str, Any]] = []
    prs: dict[int, str] = {}
    push = json.loads(event_body("push.main.json"))
    while len(out) < deliveries:
        n = len(out)
        kind = rng.random()
        if kind < 0.15:
            sha = f"{rng.getrandbits(160):040x}"
            event, doc = "push", push | {"before": push["after"], "after": sha}
        else:
            number = 180_000 + rng.randrange(pulls)
            head = f"{rng.getrandbits(160):040x}"
            action = "opened" if number not in prs else rng.choice(["synchronize", "synchronize", "labeled", "closed"])
            if action in ("labeled", "closed"):
                head = prs[number]
            prs[number] = head
            who = "FIRST_TIME_CONTRIBUTOR" if number % 5 == 0 else "MEMBER"
            doc = pr_doc(number, head, author_association=who, draft=number % 7 == 0) | {"action": action}
            if action == "labeled":
                doc["label"] = {"name": rng.choice(["ciflow/trunk", "module: nn"])}
            event = "pull_request"
        at = (start + timedelta(seconds=300 * n)).isoformat().replace("+00:00", "Z")
        if event == "pull_request":
            doc["pull_request"] = doc["pull_request"] | {"updated_at": at}  # GitHub never sends one body twice
        guid = f"{n:08x}-0000-4000-8000-{seed:012x}"
        out.append({"id": n + 1, "guid": guid, "delivered_at": at, "redelivery": False, "event": event,
                    "action": doc.get("action"), "request": {"headers": {"X-GitHub-Event": event,
                    "X-GitHub-Delivery": guid}, "payload": doc}})  # fmt: skip
        if n % 20 == 19:  # GitHub redelivers an earlier one, same guid
            again = out[rng.randrange(len(out) - 1)]
            out.append(again | {"id": n + 2, "delivered_at": at.replace("Z", ".5Z"), "redelivery": True})
    return out


def test_a_recorded_day_replayed_to_a_fresh_relay_gives_the_same_dispatches(
    relay_factory: Callable[..., Relay],
    second: tuple[GitHubDouble, HudDouble],  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    print(f"recorded day: seed {SEED}")
    log = day()
    original = relay_factory(ALLOWLIST, env=FAST)
    for entry in log:  # as GitHub sent them: the bytes it signed are the recorded payload's
        body = json.dumps(entry["request"]["payload"], separators=(",", ":")).encode()
        status, _ = original.post(entry["event"], body, entry["guid"])
        assert status == (200 if entry["redelivery"] else 202), entry["guid"]
    idle(original, timeout_s=180)
    sent = sent_by(original.github)
    assert len(sent) > len(log)  # most deliveries reach both downstreams
    original.stack.stop()  # one stack at a time in this process

    double, _ = second
    fresh = relay_factory(ALLOWLIST, env=FAST, double=double)
    # Newest first, as GitHub lists them, gzipped; the secret from a file, never on the command line.
    (tmp_path / "deliveries.json.gz").write_bytes(gzip.compress(json.dumps(list(reversed(log))).encode()))
    (tmp_path / "secret").write_text(WEBHOOK_SECRET + "\n")
    run = subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "replay", str(tmp_path / "deliveries.json.gz"), "--url", fresh.url,
         "--secret-file", str(tmp_path / "secret"), "--json"], capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    redelivered = sum(1 for e in log if e["redelivery"])
    assert summary["sent"] == len(log) and summary["answers"] == {"202": len(log) - redelivered, "200": redelivered}
    idle(fresh, timeout_s=180)
    assert sent_by(double) == sent
