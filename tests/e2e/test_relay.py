"""The relay end to end on `crcr local`, judged by an independent GitHub double over HTTP."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable

import jwt
import pytest

from tests.conftest import LISTED, Relay, event_body, http
from tests.doubles.github_double import Reply

pytestmark = pytest.mark.e2e

ALLOWED_ENDPOINTS = [
    ("POST", r"/app/installations/\d+/access_tokens"),
    ("GET", r"/repos/[^/]+/[^/]+/installation"),
    ("POST", r"/repos/[^/]+/[^/]+/dispatches"),
    ("POST", r"/repos/[^/]+/[^/]+/check-runs"),
    ("PATCH", r"/repos/[^/]+/[^/]+/check-runs/\d+"),
    ("GET", r"/repos/[^/]+/[^/]+/check-suites/\d+/check-runs"),
    ("POST", r"/repos/[^/]+/[^/]+/actions/runs/\d+/rerun-failed-jobs"),
    ("GET", r"/repos/[^/]+/[^/]+/actions/runs/\d+"),
    ("GET", r"/repos/[^/]+/[^/]+/contents/.+"),
    ("GET", r"/repos/[^/]+/[^/]+/commits/[^/]+"),
    ("POST", r"/repos/[^/]+/[^/]+/issues/\d+/comments"),
    ("PATCH", r"/repos/[^/]+/[^/]+/issues/comments/\d+"),
    ("GET", r"/repos/[^/]+/[^/]+/issues/\d+/comments"),
    ("GET", r"/app/hook/deliveries"),
    ("POST", r"/app/hook/deliveries/\d+/attempts"),
]


def only_allowed_endpoints(relay: Relay) -> None:
    assert relay.github.unexpected == []
    for request in relay.github.requests:
        assert any(
            request.method == method and re.fullmatch(pattern, request.path) for method, pattern in ALLOWED_ENDPOINTS
        ), f"{request.method} {request.path} is not an endpoint docs/contracts.md allows"


def counts(relay: Relay) -> dict[str, int]:
    return {repo: len(relay.github.dispatches(repo)) for repo in [*LISTED, "org-one/installed-not-listed"]}


def test_every_listed_repository_gets_exactly_one_dispatch_per_delivery(relay: Relay) -> None:
    pr = event_body("pull_request.opened.json")
    delivery = str(uuid.uuid4())
    assert relay.post("pull_request", pr, delivery) == (202, {"status": "accepted", "delivery_id": delivery})
    assert relay.post("push", event_body("push.main.json"))[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 2))
    # GitHub redelivers the same delivery: answered 200 and dispatched nowhere again.
    assert relay.post("pull_request", pr, delivery) == (200, {"status": "duplicate", "delivery_id": delivery})
    # Someone replays the captured body and signature under a fresh delivery id: a duplicate too.
    replay = str(uuid.uuid4())
    assert relay.post("pull_request", pr, replay) == (200, {"status": "duplicate", "delivery_id": replay})
    assert relay.metric("WebhookReplayed") == 1
    # Another repository's event (the App is installed there too) and an event the relay does not act on.
    other = event_body("pull_request.opened.json", repository={"full_name": "someone/else", "id": 1})
    assert relay.post("pull_request", other)[1]["status"] == "ignored"
    assert relay.post("issues", b'{"action": "opened"}')[1]["status"] == "ignored"
    time.sleep(2)

    assert counts(relay) == dict.fromkeys(LISTED, 2) | {"org-one/installed-not-listed": 0}
    only_allowed_endpoints(relay)


def test_a_reused_delivery_id_neither_hides_nor_stands_in_for_another_body(relay: Relay) -> None:
    """Delivery D with body X is accepted; D again with body Y is a duplicate and claims nothing for Y; Y under its
    own id is then accepted: each body is dispatched once."""
    x = event_body("pull_request.opened.json")
    y = event_body("pull_request.opened.json", number=170002, pr_number=170002)
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    assert relay.post("pull_request", x, first) == (202, {"status": "accepted", "delivery_id": first})
    assert relay.post("pull_request", y, first) == (200, {"status": "duplicate", "delivery_id": first})
    assert relay.metric("WebhookIdReused") == 1
    assert relay.post("pull_request", y, second) == (202, {"status": "accepted", "delivery_id": second})
    relay.wait_dispatches(dict.fromkeys(LISTED, 2))
    time.sleep(2)
    assert counts(relay) == dict.fromkeys(LISTED, 2) | {"org-one/installed-not-listed": 0}
    sent = relay.github.dispatches("org-one/l1-repo")
    assert sorted(
        (d["client_payload"]["delivery_id"], d["client_payload"]["payload"]["number"]) for d in sent
    ) == sorted([(first, 170001), (second, 170002)])


def test_dispatch_payload_keeps_pytorch_keys_and_a_ticket_that_verifies(relay: Relay) -> None:
    pr = event_body("pull_request.opened.json")
    delivery = str(uuid.uuid4())
    relay.post("pull_request", pr, delivery)
    relay.wait_dispatches({"org-four/L4-Repo": 1})
    [body] = relay.github.dispatches("org-four/l4-repo")
    assert body["event_type"] == "pull_request"
    payload = body["client_payload"]
    assert set(payload) == {"event_type", "delivery_id", "payload", "ticket", "callback_url", "dispatch_id", "changes"}
    # No path filter asked for the PR's files: the change hints say only GitHub's count.
    count = json.loads(pr)["pull_request"]["changed_files"]
    assert payload["changes"] == {"files": count, "complete": False, "dirs": [], "paths": [], "tests": []}
    assert payload["delivery_id"] == delivery and payload["callback_url"] == f"{relay.url}/callback"
    assert payload["payload"] == json.loads(pr)  # small enough to travel whole

    status, jwks = http("GET", f"{relay.url}/.well-known/jwks.json")
    assert status == 200
    [key] = jwks["keys"]
    assert key["kty"] == "OKP" and key["crv"] == "Ed25519"
    header = jwt.get_unverified_header(payload["ticket"])
    assert header["alg"] == "EdDSA" and header["kid"] == key["kid"]
    claims = jwt.decode(payload["ticket"], jwt.PyJWK(key).key, algorithms=["EdDSA"])
    pr_doc = json.loads(pr)
    assert claims["sub"] == "org-four/L4-Repo"
    assert claims["repo_id"] == 5003  # from GitHub's token response, not from configuration
    assert claims["delivery_id"] == delivery and claims["upstream"] == "pytorch/pytorch"
    assert claims["pr"] == 170001 and claims["head_sha"] == pr_doc["pull_request"]["head"]["sha"]
    assert claims["level"] == 4 and claims["exp"] > claims["iat"] and len(claims["jti"]) == 32

    # The token that sent it was down-scoped to that one repository and contents:write.
    dispatch_request = next(r for r in relay.github.requests if r.path.endswith("/L4-Repo/dispatches"))
    token = relay.github.token_info(dispatch_request.headers["authorization"].split()[-1])
    assert token is not None and token.repository_ids == frozenset({5003})
    assert token.permissions == {"contents": "write", "metadata": "read"}  # metadata comes with any token


def test_a_repository_answering_502_three_times_still_gets_its_dispatch_once(relay: Relay) -> None:
    relay.github.script("POST", r"/repos/org-two/l2-repo/dispatches", [Reply(502), Reply(502), Reply(502)])
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), timeout_s=40)
    assert counts(relay) == dict.fromkeys(LISTED, 1) | {"org-one/installed-not-listed": 0}
    attempts = [r for r in relay.github.requests if r.path == "/repos/org-two/l2-repo/dispatches"]
    assert [r.status for r in attempts] == [502, 502, 502, 204]
    # Exponential backoff: each wait longer than the last on average; at least not back to back.
    assert attempts[-1].time - attempts[0].time >= 1.0
    assert relay.metric("DispatchRetried.reason=unavailable") >= 3


@pytest.mark.parametrize(
    ("reply", "min_wait"),
    [
        (Reply.too_many_requests(retry_after=2), 2.0),
        (Reply.secondary_rate_limit(retry_after=2), 2.0),
        (Reply.primary_rate_limit(reset_in=2), 2.0),
    ],
    ids=["429-retry-after", "secondary-403", "primary-403-reset"],
)
def test_rate_limits_are_honoured_by_delaying_never_dropping(relay: Relay, reply: Reply, min_wait: float) -> None:
    relay.github.script("POST", r"/repos/org-three/l3-repo/dispatches", [reply])
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), timeout_s=30)
    attempts = [r for r in relay.github.requests if r.path == "/repos/org-three/l3-repo/dispatches"]
    assert [r.status for r in attempts][-1] == 204 and len(relay.github.dispatches("org-three/l3-repo")) == 1
    assert attempts[-1].time - attempts[0].time >= min_wait - 0.5  # SQS delays are whole seconds
    # The other repositories were not held back by one repository's limit.
    others = [r for r in relay.github.requests if r.path.endswith("/dispatches") and "l3-repo" not in r.path]
    assert max(r.time for r in others) < attempts[-1].time


@pytest.mark.parametrize(
    "fault",
    [Reply.drop(), Reply.slow(4, then=Reply(502))],
    ids=["connection-dropped", "read-timeout"],
)
def test_connection_failures_are_retried_and_dispatched_once(relay: Relay, fault: Reply) -> None:
    relay.github.script("POST", r"/repos/org-one/l1-repo/dispatches", [fault])
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), timeout_s=40, settle_s=4)
    assert counts(relay) == dict.fromkeys(LISTED, 1) | {"org-one/installed-not-listed": 0}


def test_a_client_error_is_recorded_and_dead_lettered_with_its_reason(relay: Relay) -> None:
    relay.github.script(
        "POST", r"/repos/org-two/l2-repo/dispatches", [Reply.error(422, "client_payload is too large.")]
    )
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches({r: 1 for r in LISTED if r != "org-two/l2-repo"})
    sqs = relay.stack.client("sqs")
    got = sqs.receive_message(
        QueueUrl=relay.stack.queue_urls["DispatchDLQ"], MessageAttributeNames=["All"], WaitTimeSeconds=2
    )
    [dead] = got["Messages"]
    assert json.loads(dead["Body"])["target_repo"] == "org-two/l2-repo"
    assert "client_payload is too large" in dead["MessageAttributes"]["failure_reason"]["StringValue"]
    assert relay.metric("DispatchDeadLettered") >= 1
    assert relay.github.dispatches("org-two/l2-repo") == []


def test_an_unlisted_or_uninstalled_repository_is_never_dispatched(relay_factory: Callable[..., Relay]) -> None:
    relay = relay_factory("L1:\n  - org-one/l1-repo\n  - nobody/not-installed\n")
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches({"org-one/l1-repo": 1})
    assert counts(relay)["org-two/l2-repo"] == 0
    deadline = time.time() + 10
    while time.time() < deadline and relay.metric("DispatchDeadLettered") < 1:
        time.sleep(0.2)
    assert relay.metric("DispatchDeadLettered") == 1  # not installed: visible, not silent


def test_an_oversize_body_travels_through_s3_and_is_trimmed_for_github(relay: Relay) -> None:
    doc = json.loads(event_body("pull_request.opened.json"))
    doc["pull_request"]["body"] = "y" * 400_000  # over the SQS message limit
    doc["pull_request"]["merge_commit_sha"] = "e" * 40
    body = json.dumps(doc).encode()
    assert relay.post("pull_request", body)[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1))
    assert relay.metric("WebhookBodyOffloaded") >= 1
    [sent] = relay.github.dispatches("org-one/l1-repo")
    payload = sent["client_payload"]["payload"]
    assert len(json.dumps(sent["client_payload"]).encode()) < 65_536
    assert payload["pull_request"]["head"]["sha"] == doc["pull_request"]["head"]["sha"]
    assert payload["pull_request"]["number"] == 170001
    # Fields outside the documented skeleton are added back while they fit, inside pull_request too.
    assert payload["pull_request"]["merge_commit_sha"] == "e" * 40
    assert payload["pull_request"]["body"].startswith("y" * 1000)  # cut, not dropped


def test_a_newer_push_supersedes_an_older_commit_not_yet_sent(relay: Relay) -> None:
    # The L2 repository fails once for the first commit, so that dispatch waits in the queue ...
    relay.github.script("POST", r"/repos/org-two/l2-repo/dispatches", [Reply(503)])
    first = event_body("pull_request.opened.json", action="synchronize", pr_updated_at="2026-11-29T18:00:00Z")
    relay.post("pull_request", first)
    relay.wait_dispatches({r: 1 for r in LISTED if r != "org-two/l2-repo"}, settle_s=0)
    # ... and meanwhile the author pushes again.
    newer = json.loads(event_body("pull_request.opened.json", action="synchronize"))
    newer["pull_request"]["head"]["sha"] = "b" * 40
    newer["pull_request"]["updated_at"] = "2026-11-29T18:05:00Z"
    relay.post("pull_request", json.dumps(newer).encode())
    relay.wait_dispatches(dict.fromkeys(LISTED, 2) | {"org-two/l2-repo": 1}, settle_s=3)
    shas = [
        d["client_payload"]["payload"]["pull_request"]["head"]["sha"]
        for d in relay.github.dispatches("org-two/l2-repo")
    ]
    assert shas == ["b" * 40]
    assert relay.metric("DispatchSuperseded") == 1


def test_first_time_contributors_wait_for_a_ciflow_label(relay_factory: Callable[..., Relay]) -> None:
    relay = relay_factory(
        "L1:\n  - org-one/l1-repo\nL4:\n  - org-four/L4-Repo\n"
        "repos:\n  org-four/L4-Repo:\n    trusted_authors_only: true\n"
    )
    opened = event_body("pull_request.opened.json", pr_author_association="FIRST_TIME_CONTRIBUTOR")
    relay.post("pull_request", opened)
    relay.wait_dispatches({"org-one/l1-repo": 1})
    assert relay.github.dispatches("org-four/L4-Repo") == []
    assert relay.metric("TargetHeld") == 1

    labeled = json.loads(opened)
    labeled["action"] = "labeled"
    labeled["label"] = {"name": "ciflow/trunk"}
    labeled["pull_request"]["labels"].append({"name": "ciflow/trunk"})
    relay.post("pull_request", json.dumps(labeled).encode())
    labeled["label"] = {"name": "ciflow/crcr/gpu"}  # a second ciflow label releases nothing more
    relay.post("pull_request", json.dumps(labeled).encode())
    relay.wait_dispatches({"org-four/L4-Repo": 1}, settle_s=2)
    assert len(relay.github.dispatches("org-four/L4-Repo")) == 1
    assert len(relay.github.dispatches("org-one/l1-repo")) == 1


def test_a_bad_allowlist_edit_keeps_the_last_good_one(relay_factory: Callable[..., Relay]) -> None:
    relay = relay_factory(env={"CRCR_ALLOWLIST_REFRESH_S": "0"})
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    relay.allowlist.write_text("L1:\n  - org-one/l1-repo\n  - org-one/l1-repo\n")  # listed twice
    relay.post("push", event_body("push.main.json"))
    relay.wait_dispatches(dict.fromkeys(LISTED, 2))
    assert counts(relay) == dict.fromkeys(LISTED, 2) | {"org-one/installed-not-listed": 0}
    assert relay.metric("AllowlistRejected") >= 1


def test_dead_letters_are_listed_with_reasons_and_redriven_once_fixed(relay: Relay) -> None:
    from crcr.ops.dlq import list_dead_letters, redrive  # noqa: PLC0415

    relay.github.script("POST", r"/repos/org-two/l2-repo/dispatches", [Reply.error(403, "Repository access blocked")])
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches({r: 1 for r in LISTED if r != "org-two/l2-repo"})
    sqs, queues = relay.stack.client("sqs"), relay.stack.queue_urls
    [row] = list_dead_letters(sqs, queues["DispatchDLQ"])
    assert row["target_repo"] == "org-two/l2-repo" and "Repository access blocked" in row["reason"]
    assert len(list_dead_letters(sqs, queues["DispatchDLQ"])) == 1  # listing hides nothing

    assert redrive(sqs, queues["DispatchDLQ"], queues["DispatchQueue"]).moved == 1
    relay.wait_dispatches({"org-two/l2-repo": 1})
    assert counts(relay) == dict.fromkeys(LISTED, 1) | {"org-one/installed-not-listed": 0}
    assert list_dead_letters(sqs, queues["DispatchDLQ"]) == []
