"""Shadow mode end to end on `crcr local`: one stream of upstream events (a member's PR and a first-time
contributor's, a draft, a redelivery, a ciflow label and a ciflow tag, a device label, a push, a docs-only change) sent
to a live relay and to a shadow one. The shadow relay touches no downstream repository and no HUD, and what it records
it would have sent is what the live relay sent; one downstream moved to live by the allowlist is dispatched from the
next event on, and moved back is not."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import APP_ID, LISTED, ROOT, Relay, event_body, http
from tests.doubles.github_double import DEFAULT_PERMISSIONS, GitHubDouble
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.browser import headless, open_page
from tests.e2e.test_callback import Scenario, oidc  # noqa: F401 - a fixture

pytestmark = pytest.mark.e2e
UPSTREAM, L4, HELD = "pytorch/pytorch", "org-four/L4-Repo", "org-two/l2-repo"
ALLOWLIST = f"""\
L1:
  - org-one/l1-repo
L2:
  - {HELD}
L3:
  gpu:
    org-three/l3-repo: [oncall-three]
L4:
  - {L4}
repos:
  {HELD}:
    trusted_authors_only: true
    skip_drafts: true
  {L4}:
    paths: ["torch/**"]
"""
# Fields a dispatch carries that are minted when it is sent: a shadow relay never mints them.
MINTED = ("ticket", "callback_url", "dispatch_id")
SHOTS = ROOT / "test-output" / "shadow"


def pr_doc(number: int, head: str, **pr: Any) -> dict[str, Any]:
    doc = json.loads(event_body("pull_request.opened.json"))
    doc["number"] = number
    doc["pull_request"] |= {"number": number, "head": doc["pull_request"]["head"] | {"sha": head}} | pr
    return doc


def stream() -> list[tuple[str, str, bytes]]:
    """(event, delivery id, body) in order; one delivery twice, as GitHub redelivers it."""
    member = pr_doc(170001, "a" * 40)
    newcomer = pr_doc(170002, "b" * 40, author_association="FIRST_TIME_CONTRIBUTOR", changed_files=1)
    draft = pr_doc(170003, "c" * 40, draft=True)
    released = newcomer | {"action": "labeled", "label": {"name": "ciflow/trunk"}}
    device = member | {"action": "labeled", "label": {"name": "ciflow/crcr/gpu"}}
    docs_only = pr_doc(170004, "d" * 40) | {"action": "synchronize"}
    tag = json.loads(event_body("push.main.json", ref="refs/tags/ciflow/trunk/170001", after="a" * 40, base_ref=None))
    events = [
        ("pull_request", member), ("pull_request", newcomer), ("pull_request", draft), ("pull_request", released),
        ("pull_request", device), ("push", json.loads(event_body("push.main.json"))), ("push", tag),
        ("pull_request", docs_only),
    ]  # fmt: skip
    out = [(name, str(uuid.UUID(int=i + 1)), json.dumps(doc).encode()) for i, (name, doc) in enumerate(events)]
    return [out[0], out[0], *out[1:]]  # the first delivery redelivered


def prepare(double: GitHubDouble) -> None:
    double.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=DEFAULT_PERMISSIONS | {"issues": "write"})
    for number, head, files in ((170001, "a", ["torch/x.py"]), (170002, "b", ["torch/y.py"]),
                                (170003, "c", ["torch/z.py"]), (170004, "d", ["docs/index.md"])):  # fmt: skip
        double.add_commit(UPSTREAM, head * 40)
        double.set_pull_files(UPSTREAM, number, files, head=head * 40)


def send(relay: Relay, events: list[tuple[str, str, bytes]]) -> None:
    seen = set()
    for name, delivery, body in events:
        assert relay.post(name, body, delivery)[0] == (200 if delivery in seen else 202)  # a redelivery: taken once
        seen.add(delivery)


def decisions(relay: Relay, want: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """The shadow relay's decisions once `want` are recorded and a moment more passed (a duplicate would show)."""
    deadline, found = time.time() + timeout_s, []
    while time.time() < deadline:
        status, doc = http("GET", f"{relay.url}/hud/api/crcr/shadow")
        assert status == 200
        found = doc["decisions"]
        if len(found) >= want:
            break
        time.sleep(0.2)
    time.sleep(1.0)
    return list(http("GET", f"{relay.url}/hud/api/crcr/shadow")[1]["decisions"])


def idle(relay: Relay, timeout_s: float = 60.0) -> None:
    """Every event planned and every dispatch handled: the two queues hold nothing, visible, in flight or delayed."""
    sqs, names = relay.stack.client("sqs"), ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                                               "ApproximateNumberOfMessagesDelayed"]  # fmt: skip
    deadline, quiet = time.time() + timeout_s, 0
    while time.time() < deadline and quiet < 5:
        held = 0
        for queue in ("EventsQueue", "DispatchQueue"):
            got = sqs.get_queue_attributes(QueueUrl=relay.stack.queue_urls[queue], AttributeNames=names)
            held += sum(int(v) for v in got["Attributes"].values())
        quiet = quiet + 1 if held == 0 else 0
        time.sleep(0.2)
    assert quiet >= 5, "the relay did not settle"


def sent_by(double: GitHubDouble) -> dict[tuple[str, str], dict[str, Any]]:
    """Each dispatch a relay sent: (delivery id, repository) -> its client_payload but what is minted when sent."""
    out = {}
    for repo in LISTED:
        for sent in double.dispatches(repo):
            payload = {k: v for k, v in sent["client_payload"].items() if k not in MINTED}
            out[(payload["delivery_id"], repo)] = payload | {"event_type": sent["event_type"]}
    return out


@pytest.fixture
def second(app_key: rsa.RSAPrivateKey) -> Any:
    public = app_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with GitHubDouble(app_id=APP_ID, app_public_key_pem=public) as double:
        hud = HudDouble("hud-bot-token")
        yield double, hud
        hud.stop()
        assert double.internal_errors == []


def in_service(
    sent: dict[tuple[str, str], dict[str, Any]], events: list[tuple[str, str, bytes]]
) -> list[dict[str, Any]]:
    """`crcr_workflow_job` rows a relay in service would have left for the stream, with what it does differently:
    no holds or path filters (a first-time contributor's PR and a docs-only change dispatched), one dispatch lost, one
    redelivery dispatched twice, and an event the shadow relay never saw. L1 downstreams never report: no rows."""
    pairs = [(d, r) for d, r in sent if r != "org-one/l1-repo"]
    pairs.remove((events[7][1], L4))  # lost
    pairs += [(events[2][1], HELD), (events[8][1], L4), (str(uuid.UUID(int=99)), L4)]
    rows = [{"delivery_id": d, "downstream_repo": r, "run_id": 9000 + n, "event_type": "pull_request"}
            for n, (d, r) in enumerate(pairs)]  # fmt: skip
    twice = {"delivery_id": events[0][1], "downstream_repo": L4, "run_id": 8999, "event_type": "pull_request"}
    return [*rows, twice]


def test_a_shadow_relay_decides_what_the_live_one_sends_and_sends_nothing(
    relay_factory: Callable[..., Relay], second: tuple[GitHubDouble, HudDouble], tmp_path: Any
) -> None:
    events = stream()
    live = relay_factory(ALLOWLIST)
    prepare(live.github)
    send(live, events)
    idle(live)
    sent = sent_by(live.github)
    # The live relay's own decisions, which the shadow one must make too: the first-time contributor's PR reaches
    # the trusted-authors-only downstream only once labelled, a draft never, a docs-only change not the L4 one.
    delivered = {(d[-1], repo) for d, repo in sent}
    assert ("4", HELD) in delivered and not {("2", HELD), ("3", HELD), ("8", L4)} & delivered
    live.stack.stop()  # one stack at a time: stacks in one process share its environment and AWS clients

    double, hud = second
    prepare(double)
    shadow = relay_factory(ALLOWLIST, env={"CRCR_MODE": "shadow", "CRCR_HUD_URL": hud.url}, double=double)
    send(shadow, events)
    idle(shadow)
    # One decision per downstream for each distinct delivery (the redelivery is dropped at the door, as live).
    found = decisions(shadow, want=len(LISTED) * (len(events) - 1))
    would = {(d["delivery_id"], d["repo"]): d["payload"] | {"event_type": d["event"]} for d in found
             if d["decision"] == "dispatch"}  # fmt: skip
    assert would == sent
    why = {(d["delivery_id"][-1], d["repo"]): d["reason"] for d in found if d["decision"] != "dispatch"}
    assert why[("2", HELD)] == "untrusted_author" and why[("3", HELD)] == "draft"
    assert why[("8", L4)] == "no_matching_files" and ("4", HELD) not in why  # released by its label
    # Nothing reached a downstream repository, the HUD or any upstream write: reads of the upstream only.
    touched = {(r.method, r.path) for r in double.requests}
    assert all(m == "GET" or p.startswith("/app/installations/") for m, p in touched), touched
    assert not [p for _, p in touched if p.startswith("/repos/") and not p.startswith(f"/repos/{UPSTREAM}/")]
    assert {r.installation_id for r in double.requests if r.installation_id} == {1}  # the upstream's installation
    assert hud.attempts == [] and shadow.metric("DispatchSent") == 0
    assert shadow.metric("ShadowDecided") == len(found)

    # `crcr shadow compare` against the relay in service's rows names every difference with its reason.
    rows = in_service(sent, events)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "shadow", "compare", "--rows", str(tmp_path / "rows.jsonl"), "--json",
         "--publish"], capture_output=True, text=True, timeout=60, env=shadow.stack.operator_env(), check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["differences"] == {
        "dispatched_twice_in_service": 1, "hold: untrusted_author": 1, "no_rows_in_service": 1,
        "not_seen_by_shadow": 1, "skip: no_matching_files": 1,
    }  # fmt: skip
    by_delivery = {e["delivery_id"]: e for e in report["events"]}
    assert by_delivery[events[7][1]]["only_shadow"] == [{"repo": L4, "reason": "no_rows_in_service"}]
    assert by_delivery[events[2][1]]["only_in_service"] == [
        {"repo": HELD, "reason": "hold: untrusted_author", "runs": 1}
    ]
    assert report["pairs_compared"] == report["pairs_agreeing"] + 5 and 0 < report["agreement"] < 1
    assert {"repo": "org-one/l1-repo", "reason": "l1_never_reports"} in by_delivery[events[0][1]]["not_compared"]
    status, published = http("GET", f"{shadow.url}/hud/api/crcr/shadow/compare")
    assert status == 200 and published["differences"] == report["differences"]
    # The pages show the decisions apart from live results, in words, at desktop and phone widths.
    with headless() as browser:
        for width in (1400, 390):
            page = open_page(browser, f"{shadow.url}/hud/shadow", SHOTS / f"shadow-{width}.png", width)
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            newcomer = page.locator(f'li[data-delivery="{events[2][1]}"] li[data-repo="{HELD}"]')
            assert " ".join(newcomer.inner_text().split()) == f"{HELD} L2 HELD · untrusted author"
            member = page.locator(f'li[data-delivery="{events[0][1]}"] li[data-repo="{L4}"]')
            assert "WOULD DISPATCH" in member.inner_text() and member.locator("details").count() == 1
            assert page.locator("li.shadow-event").count() == len(events) - 1
            agreement = page.locator("#agreement").inner_text()
            assert agreement.startswith(
                f"{report['pairs_agreeing']} of {report['pairs_compared']} event and downstream"
            )
            lost = page.locator(f'ul.differences li[data-delivery="{events[7][1]}"]').inner_text()
            assert lost.endswith("only this relay would dispatch · no rows in service")
            skipped = page.locator(f'li[data-delivery="{events[-1][1]}"] li[data-repo="{L4}"]')
            said = " ".join(skipped.inner_text().split())
            assert skipped.locator(".sstate").is_visible() and said == f"{L4} L4 SKIPPED · no matching files"


def test_a_downstream_moved_to_live_in_the_allowlist_is_dispatched_from_the_next_event_and_moved_back_is_not(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811 - the fixture
) -> None:
    env = {"CRCR_MODE": "shadow", "CRCR_ALLOWLIST_REFRESH_S": "1", "CRCR_OIDC_ISSUER": oidc.url,
           "CRCR_OIDC_AUDIENCE": "crcr,pytorch-cross-repo-ci-relay"}  # fmt: skip
    relay = relay_factory(ALLOWLIST, env=env)
    prepare(relay.github)
    events = stream()
    send(relay, events[:3])
    decisions(relay, want=2 * len(LISTED))
    assert all(relay.github.dispatches(r) == [] for r in LISTED)
    relay.allowlist.write_text(ALLOWLIST.replace("    skip_drafts: true\n", "    skip_drafts: true\n    mode: live\n"))
    time.sleep(1.5)  # the allowlist is read again after a second here (CRCR_ALLOWLIST_REFRESH_S)
    push = events[6][1]
    send(relay, events[6:7])
    relay.wait_dispatches({HELD: 1})
    assert [d["client_payload"]["delivery_id"] for d in relay.github.dispatches(HELD)] == [push]
    assert all(relay.github.dispatches(r) == [] for r in LISTED if r != HELD)
    # Its run reports with PyTorch's callback action unchanged: its body, its audience.
    s = Scenario(relay, oidc, push, "")
    theirs = {
        "schema_version": "1", "delivery_id": push, "payload": {},
        "workflow": {"status": "completed", "conclusion": "success", "name": "OOT L2 CI", "job_name": "build",
                     "url": f"https://github.com/{HELD}/actions/runs/777", "run_id": "777", "run_attempt": 1},
    }  # fmt: skip
    assert s.post(theirs, s.token(HELD, audience="pytorch-cross-repo-ci-relay")) == (200, {"status": "recorded"})
    [job] = s.jobs()
    assert (job["repo"], job["state"], job["conclusion"], job["delivery_id"]) == (HELD, "completed", "success", push)
    # Moved back: the next event is recorded, not sent.
    relay.allowlist.write_text(ALLOWLIST)
    time.sleep(1.5)
    send(relay, events[8:9])
    found = decisions(relay, want=2 * len(LISTED) + 3 + len(LISTED))
    assert len(relay.github.dispatches(HELD)) == 1
    assert {(d["repo"], d["decision"]) for d in found if d["delivery_id"] == events[8][1]} >= {(HELD, "dispatch")}
