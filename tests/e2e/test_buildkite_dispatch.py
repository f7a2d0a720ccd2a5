"""Buildkite downstreams end to end on `crcr local`, judged by the independent Buildkite and GitHub doubles."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from crcr.adapters.ledger import DynamoLedger
from crcr.app.ports.ledger import LedgerRow, LedgerState
from crcr.domain.signature import sign
from crcr.local.stack import LocalStack
from tests.conftest import DEFAULT_ALLOWLIST, LISTED, ROOT, Relay, event_body, http
from tests.doubles.buildkite_double import BuildkiteDouble, Reply

pytestmark = pytest.mark.e2e

BK_REPO = "vllm-project/vllm"
BUILDS = "/v2/organizations/vllm/pipelines/ci/builds"
ALLOWLIST = DEFAULT_ALLOWLIST.replace(
    "L2:\n  - org-two/l2-repo: oncall-two\n", f"L2:\n  - org-two/l2-repo: oncall-two\n  - {BK_REPO}\n"
) + (f"repos:\n  {BK_REPO}:\n    repository_id: 4242\n    buildkite: {{organization: vllm, pipeline: ci}}\n")
ENV_KEYS = {
    "CRCR_TICKET",
    "CRCR_CALLBACK_URL",
    "CRCR_DELIVERY_ID",
    "CRCR_EVENT_TYPE",
    "CRCR_UPSTREAM_REPO",
    "CRCR_UPSTREAM_SHA",
    "CRCR_UPSTREAM_PR",
}


@pytest.fixture
def buildkite() -> Iterator[BuildkiteDouble]:
    with BuildkiteDouble() as double:
        double.add_pipeline("vllm", "ci", branch_filter="release/*")  # the relay must ignore the filter
        yield double
        assert double.internal_errors == [] and double.unexpected == []


@pytest.fixture
def bk_relay(relay_factory: Callable[..., Relay], buildkite: BuildkiteDouble) -> Callable[..., Relay]:
    def make(token: str | None = None, **env: str) -> Relay:
        config = {
            "CRCR_BUILDKITE_API_URL": buildkite.url,
            "CRCR_BUILDKITE_TIMEOUT_S": "1",  # a request the relay gave up on then settles for 3 s
            # It maps vllm/ci to vllm-project/vllm: without a map, a Buildkite downstream is refused at start-up.
            "CRCR_CI_PROVIDERS": str(ROOT / "examples" / "ci_providers.yml"),
        }
        if token != "":
            config["CRCR_BUILDKITE_API_TOKEN"] = token or buildkite.token
        return relay_factory(ALLOWLIST, env=config | env)

    return make


def wait_builds(buildkite: BuildkiteDouble, count: int, timeout_s: float = 40.0, settle_s: float = 2.0) -> None:
    """Wait until the pipeline has `count` builds, then a moment more so a duplicate would show."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and len(buildkite.builds("vllm", "ci")) < count:
        time.sleep(0.1)
    time.sleep(settle_s)


def wait_for(check: Callable[[], Any], timeout_s: float = 40.0) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    return check()


def ledger_row(relay: Relay, delivery: str) -> LedgerRow | None:
    return DynamoLedger(relay.stack.client("dynamodb"), "crcr-local-StateTable").get(delivery, BK_REPO)


def creates(buildkite: BuildkiteDouble) -> list[Any]:
    return [r for r in buildkite.requests if r.method == "POST"]


def test_a_pr_starts_exactly_one_build_with_the_relay_env_and_github_downstreams_are_unaffected(
    bk_relay: Callable[..., Relay], buildkite: BuildkiteDouble
) -> None:
    relay = bk_relay()
    pr = event_body("pull_request.opened.json")
    delivery = str(uuid.uuid4())
    assert relay.post("pull_request", pr, delivery)[0] == 202
    wait_builds(buildkite, 1)
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    # GitHub redelivers the webhook: answered duplicate, and no second build.
    assert relay.post("pull_request", pr, delivery) == (200, {"status": "duplicate", "delivery_id": delivery})
    time.sleep(2)

    [build] = buildkite.builds("vllm", "ci")
    pr_doc = json.loads(pr)
    head = pr_doc["pull_request"]["head"]["sha"]
    assert (build["commit"], build["branch"], build["source"]) == ("HEAD", "main", "api")
    assert f"pytorch/pytorch#{pr_doc['number']}" in build["message"] and head in build["message"]
    env = build["env"]
    assert set(env) == ENV_KEYS
    assert env["CRCR_CALLBACK_URL"] == f"{relay.url}/callback" and env["CRCR_DELIVERY_ID"] == delivery
    assert (env["CRCR_EVENT_TYPE"], env["CRCR_UPSTREAM_REPO"]) == ("pull_request", "pytorch/pytorch")
    assert (env["CRCR_UPSTREAM_SHA"], env["CRCR_UPSTREAM_PR"]) == (head, str(pr_doc["number"]))
    [request] = creates(buildkite)
    assert request.json["ignore_pipeline_branch_filters"] is True

    status, jwks = http("GET", f"{relay.url}/.well-known/jwks.json")
    assert status == 200
    claims = jwt.decode(env["CRCR_TICKET"], jwt.PyJWK(jwks["keys"][0]).key, algorithms=["EdDSA"])
    assert (claims["ci"], claims["sub"], claims["repo_id"]) == ("buildkite", BK_REPO, 4242)
    assert (claims["delivery_id"], claims["upstream"], claims["pr"]) == (delivery, "pytorch/pytorch", pr_doc["number"])
    assert (claims["head_sha"], claims["level"]) == (head, 2)
    assert build["meta_data"] == {"crcr_dispatch_id": claims["jti"], "crcr_delivery_id": delivery}

    row = ledger_row(relay, delivery)
    assert row is not None and row.state is LedgerState.DISPATCHED and row.ci == "buildkite"
    assert (row.build_id, row.build_number, row.build_url) == (build["id"], build["number"], build["web_url"])
    assert row.dispatch_id == claims["jti"] and row.repo_id == 4242

    # The GitHub downstreams of the same event got their repository_dispatch; the Buildkite one none, and
    # the relay asked GitHub nothing about it.
    assert {r: len(relay.github.dispatches(r)) for r in LISTED} == dict.fromkeys(LISTED, 1)
    assert not [r for r in relay.github.requests if "vllm" in r.path.lower()]
    assert relay.metric("BuildkiteBuildCreated") == 1 and relay.metric("DispatchSent.level=L2") == 2


def test_server_errors_are_retried_and_start_one_build(
    bk_relay: Callable[..., Relay], buildkite: BuildkiteDouble
) -> None:
    relay = bk_relay()
    buildkite.script("POST", BUILDS, [Reply(502), Reply(503)])
    relay.post("pull_request", event_body("pull_request.opened.json"))
    wait_builds(buildkite, 1, timeout_s=60)
    assert len(buildkite.builds("vllm", "ci")) == 1
    assert [r.status for r in creates(buildkite)] == [502, 503, 201]
    # Each 5xx may have created a build: the next attempt looked first, after Buildkite had time to finish.
    posts, lookups = creates(buildkite), [r for r in buildkite.requests if r.method == "GET"]
    assert len(lookups) == 2 and posts[1].time - posts[0].time >= 3.0
    assert relay.metric("DispatchRetried.reason=unavailable") >= 2


@pytest.mark.parametrize(
    "fault",
    [Reply.slow_after_processing(3), Reply.drop(after_processing=True)],
    ids=["timeout-after-create", "dropped-after-create"],
)
def test_a_build_created_before_the_relay_heard_back_is_found_not_created_again(
    bk_relay: Callable[..., Relay], buildkite: BuildkiteDouble, fault: Reply
) -> None:
    relay = bk_relay()
    buildkite.script("POST", BUILDS, [fault])
    delivery = str(uuid.uuid4())
    relay.post("pull_request", event_body("pull_request.opened.json"), delivery)
    row = wait_for(lambda: (r := ledger_row(relay, delivery)) and r.state is LedgerState.DISPATCHED and r)
    time.sleep(4)  # long enough for a second create to show
    [build] = buildkite.builds("vllm", "ci")
    assert len(creates(buildkite)) == 1
    assert row.build_id == build["id"] and row.build_number == 1
    assert relay.metric("BuildkiteBuildFound") == 1 and relay.metric("BuildkiteBuildCreated") == 0


def test_a_429_waits_for_the_reset_buildkite_names_and_spends_no_attempt(
    bk_relay: Callable[..., Relay], buildkite: BuildkiteDouble
) -> None:
    relay = bk_relay()
    buildkite.script("POST", BUILDS, [Reply.rate_limited(reset=1, user_reset=3)])
    relay.post("pull_request", event_body("pull_request.opened.json"))
    wait_builds(buildkite, 1)
    attempts = creates(buildkite)
    assert [r.status for r in attempts] == [429, 201] and len(buildkite.builds("vllm", "ci")) == 1
    assert attempts[1].time - attempts[0].time >= 3.0  # the later of the two resets
    assert not [r for r in buildkite.requests if r.method == "GET"]  # a 429 created nothing: no lookup
    assert relay.metric("DispatchRetried.reason=rate_limited") == 1


def test_a_422_is_dead_lettered_with_buildkite_reason_and_redriven_once_fixed(
    bk_relay: Callable[..., Relay], buildkite: BuildkiteDouble
) -> None:
    from crcr.ops.dlq import list_dead_letters, redrive  # noqa: PLC0415

    relay = bk_relay()
    buildkite.script("POST", BUILDS, [Reply.error(422, "Branch 'main' does not exist in the repository")])
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    sqs, queues = relay.stack.client("sqs"), relay.stack.queue_urls
    [dead] = wait_for(lambda: list_dead_letters(sqs, queues["DispatchDLQ"]))
    assert dead["target_repo"] == BK_REPO
    assert "422" in dead["reason"] and "Branch 'main' does not exist in the repository" in dead["reason"]
    assert buildkite.builds("vllm", "ci") == [] and relay.metric("DispatchDeadLettered") == 1

    assert redrive(sqs, queues["DispatchDLQ"], queues["DispatchQueue"]).moved == 1
    wait_builds(buildkite, 1)
    assert len(buildkite.builds("vllm", "ci")) == 1 and list_dead_letters(sqs, queues["DispatchDLQ"]) == []
    assert {r: len(relay.github.dispatches(r)) for r in LISTED} == dict.fromkeys(LISTED, 1)


def test_without_a_token_the_buildkite_repository_is_dead_lettered_naming_the_variable(
    bk_relay: Callable[..., Relay], buildkite: BuildkiteDouble
) -> None:
    from crcr.ops.dlq import list_dead_letters  # noqa: PLC0415

    relay = bk_relay(token="")
    relay.post("push", event_body("push.main.json"))
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    sqs, queues = relay.stack.client("sqs"), relay.stack.queue_urls
    [dead] = wait_for(lambda: list_dead_letters(sqs, queues["DispatchDLQ"]))
    assert dead["target_repo"] == BK_REPO and "CRCR_BUILDKITE_API_TOKEN" in dead["reason"]
    assert buildkite.requests == []
    assert {r: len(relay.github.dispatches(r)) for r in LISTED} == dict.fromkeys(LISTED, 1)


def test_on_the_sandbox_buildkite_the_build_reports_back_and_is_recorded(tmp_path: Path) -> None:
    """The whole loop on `crcr local` alone: the dispatcher creates the build on the sandbox Buildkite, whose
    job reports through /callback with an agent-shaped token mapped by examples/ci_providers.yml."""
    allowlist = tmp_path / "allowlist.yaml"
    allowlist.write_text(
        f"L2:\n  - {BK_REPO}\nrepos:\n  {BK_REPO}:\n    buildkite: {{organization: vllm, pipeline: ci}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_ENDPOINT"))}
    env |= {"CRCR_ALLOWLIST": str(allowlist), "CRCR_CI_PROVIDERS": str(ROOT / "examples" / "ci_providers.yml")}
    with LocalStack(port=0, env=env, root=ROOT) as stack:
        sandbox = stack.sandbox_buildkite
        assert sandbox is not None
        body, delivery = event_body("pull_request.opened.json"), str(uuid.uuid4())
        headers = {
            "content-type": "application/json",
            "x-github-event": "pull_request",
            "x-github-delivery": delivery,
            "x-hub-signature-256": sign(stack.secrets["webhook_secret"].encode(), body),
        }
        assert http("POST", f"{stack.url}/webhook", body, headers)[0] == 202
        replies = wait_for(lambda: [r for r in sandbox.replies if r["status"] == "completed"])
        assert [(r["status"], r["http"], r["reply"].get("status")) for r in sandbox.replies] == [
            ("in_progress", 200, "recorded"),
            ("completed", 200, "recorded"),
        ], replies
        [build] = sandbox.builds
        row = DynamoLedger(stack.client("dynamodb"), "crcr-local-StateTable").get(delivery, BK_REPO)
        assert row is not None and (row.build_id, row.build_number) == (build["id"], build["number"])
