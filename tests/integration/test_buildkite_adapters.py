"""Buildkite adapters over the wire: the REST client against the Buildkite double; the ledger's unsettled
sends and the per-organization pacing cell on moto server."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from crcr.adapters.buildkite import BuildkiteClient
from crcr.adapters.ledger import DynamoLedger
from crcr.adapters.pacer import DynamoPacer
from crcr.app.dispatch import new_build
from crcr.app.outbound import BUILDKITE
from crcr.app.ports.buildkite import BuildkiteBuild, BuildkiteRateLimited, BuildkiteRejected, BuildkiteUnavailable
from crcr.app.ports.ledger import LedgerState
from crcr.contracts.messages import BuildkiteTarget, DispatchMessage
from crcr.domain.levels import Level
from crcr.domain.pacing import BUILDKITE_RATES
from tests.doubles.buildkite_double import BuildkiteDouble, Reply
from tests.integration.aws import dynamodb
from tests.unit.fakes import permit

BUILDS = "/v2/organizations/vllm/pipelines/ci/builds"
MESSAGE = DispatchMessage(
    delivery_id="d-1",
    event_type="pull_request",
    action="opened",
    target_repo="vllm-project/vllm",
    level=Level.L2,
    upstream="pytorch/pytorch",
    pr_number=7,
    head_sha="c" * 40,
    payload={},
    planned_at=0.0,
    buildkite=BuildkiteTarget(organization="vllm", pipeline="ci"),
)


@pytest.fixture
def bk() -> Iterator[BuildkiteDouble]:
    with BuildkiteDouble() as double:
        double.add_pipeline("vllm", "ci", branch_filter="release/*")  # main is filtered out unless ignored
        yield double
        assert double.internal_errors == []


def client(bk: BuildkiteDouble, token: str | None = None, read_timeout_s: float = 2.0) -> BuildkiteClient:
    return BuildkiteClient(bk.url, token or bk.token, read_timeout_s=read_timeout_s)


def test_create_sends_the_documented_body_with_a_bearer_token_and_returns_the_build(bk: BuildkiteDouble) -> None:
    ref = client(bk).create(
        "vllm", "ci", new_build(MESSAGE, "the-ticket", "https://relay/callback", "did-1"), permit=permit(BUILDKITE)
    )
    [build] = bk.builds("vllm", "ci")
    assert (ref.id, ref.number, ref.url) == (build["id"], 1, "https://buildkite.com/vllm/ci/builds/1")
    [request] = bk.requests
    assert request.headers["authorization"] == f"Bearer {bk.token}"
    assert request.json["ignore_pipeline_branch_filters"] is True
    assert (request.json["commit"], request.json["branch"]) == ("HEAD", "main")
    assert build["env"]["CRCR_TICKET"] == "the-ticket" and build["meta_data"]["crcr_dispatch_id"] == "did-1"


def test_find_returns_the_dispatch_builds_oldest_first(bk: BuildkiteDouble) -> None:
    api = client(bk)
    for did in ("did-1", "did-2", "did-1"):
        api.create("vllm", "ci", new_build(MESSAGE, "t", "u", did), permit=permit(BUILDKITE))
    assert [b.number for b in api.find("vllm", "ci", "did-1")] == [1, 3]
    assert api.find("vllm", "ci", "did-3") == []
    lookups = [r for r in bk.requests if r.method == "GET"]
    assert lookups[0].query["meta_data[crcr_dispatch_id]"] == ["did-1"]


def test_a_build_is_read_by_number_with_each_command_jobs_latest_retry_and_conclusion(bk: BuildkiteDouble) -> None:
    api = client(bk)
    ref = api.create("vllm", "ci", new_build(MESSAGE, "t", "u", "did-1"), permit=permit(BUILDKITE))
    assert ref.pipeline == "vllm/ci"  # where the sweeper asks about it later
    # Buildkite's answer names its build (the inbound door compares them with the build the relay created).
    assert api.build("vllm", "ci", ref.number) == BuildkiteBuild("scheduled", False, (), ref.id, ref.number)
    ids = {j["name"]: j["id"] for j in bk.play("vllm", "ci", ref.number, [("test", "running")], "running")}
    [running] = api.build("vllm", "ci", ref.number).jobs  # type: ignore[union-attr]
    assert (running.id, running.name, running.state, running.conclusion) == (ids["test"], "test", "running", None)
    assert running.started_at is not None and running.finished_at is None
    # Finished: each state read as a conclusion; a soft failure is allowed to fail; a waiter is no job; a retried
    # job's place is its retry's.
    bk.play("vllm", "ci", ref.number, [("test", "failed"), ("lint", "passed"), ("gone", "expired")], "failed")
    with bk._lock:
        jobs = bk._pipelines[("vllm", "ci")].builds[0]["jobs"]
        jobs.append(dict(jobs[0], id="retried-one", retried=True, state="failed"))
        jobs.append(dict(jobs[1], id="allowed", name="docs", state="failed", soft_failed=True))
        jobs.append({"id": "wait-1", "type": "waiter", "state": "passed"})
    build = api.build("vllm", "ci", ref.number)
    assert build is not None and (build.state, build.finished) == ("failed", True)
    assert {j.name: j.conclusion for j in build.jobs} == {
        "test": "failure",
        "lint": "success",
        "gone": "cancelled",
        "docs": "neutral",
    }
    assert api.build("vllm", "ci", 99) is None  # Buildkite has no such build
    [read] = [r for r in bk.requests if r.path == f"{BUILDS}/99"]
    assert read.headers["authorization"] == f"Bearer {bk.token}"


def test_find_checks_the_meta_data_itself(bk: BuildkiteDouble) -> None:
    api = client(bk)
    api.create("vllm", "ci", new_build(MESSAGE, "t", "u", "did-1"), permit=permit(BUILDKITE))
    # A proxy that drops the query string would answer every build: none of them is this dispatch's.
    bk.script("GET", BUILDS, [Reply(200, body=[{"id": "x", "number": 9, "web_url": "", "meta_data": {}}])])
    assert api.find("vllm", "ci", "did-1") == []


@pytest.mark.parametrize(
    ("reply", "maybe_sent", "created"),
    [
        (Reply(502), True, 0),
        (Reply.error(500, "Internal Server Error"), True, 0),
        (Reply.slow_after_processing(4), True, 1),  # read timeout after Buildkite created it
        (Reply.drop(after_processing=True), True, 1),
        (Reply.drop(), True, 0),  # the client cannot tell this from the one above
    ],
    ids=["502", "500", "timeout-after-create", "dropped-after-create", "dropped"],
)
def test_failures_after_sending_are_unavailable_and_may_have_created(
    bk: BuildkiteDouble, reply: Reply, maybe_sent: bool, created: int
) -> None:
    bk.script("POST", BUILDS, [reply])
    with pytest.raises(BuildkiteUnavailable) as caught:
        client(bk, read_timeout_s=1.0).create(
            "vllm", "ci", new_build(MESSAGE, "t", "u", "did-1"), permit=permit(BUILDKITE)
        )
    assert caught.value.maybe_sent is maybe_sent
    assert len(bk.builds("vllm", "ci")) == created


def test_a_connection_never_made_is_known_not_to_have_created() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    api = BuildkiteClient(f"http://127.0.0.1:{port}", "bkua_secret")
    with pytest.raises(BuildkiteUnavailable) as caught:
        api.create("vllm", "ci", new_build(MESSAGE, "t", "u", "did-1"), permit=permit(BUILDKITE))
    assert caught.value.maybe_sent is False


def test_a_429_says_how_long_from_the_later_reset_header(bk: BuildkiteDouble) -> None:
    bk.script("POST", BUILDS, [Reply.rate_limited(reset=3, user_reset=9)])
    with pytest.raises(BuildkiteRateLimited) as caught:
        client(bk).create("vllm", "ci", new_build(MESSAGE, "t", "u", "did-1"), permit=permit(BUILDKITE))
    assert caught.value.wait_s == 10.0
    assert bk.builds("vllm", "ci") == []


def test_a_429_over_the_double_user_limit_is_read_the_same_way() -> None:
    now = [5_000.0]
    with BuildkiteDouble(user_limit=1, clock=lambda: now[0]) as bk:
        bk.add_pipeline("vllm", "ci")
        api = client(bk)
        api.create("vllm", "ci", new_build(MESSAGE, "t", "u", "did-1"), permit=permit(BUILDKITE))
        now[0] += 15
        with pytest.raises(BuildkiteRateLimited) as caught:
            api.find("vllm", "ci", "did-1")
        assert caught.value.wait_s == 46.0  # 45 s left in the window, plus one


@pytest.mark.parametrize(
    ("setup", "status", "message"),
    [
        ("bad-token", 401, "Authentication required"),
        ("read-only", 403, "write_builds"),
        ("no-pipeline", 404, "No pipeline found"),
        ("filtered", 422, "branch filter"),
    ],
)
def test_refusals_carry_buildkite_message_and_never_the_token(
    bk: BuildkiteDouble, setup: str, status: int, message: str
) -> None:
    token = {"bad-token": "bkua_wrong", "read-only": bk.add_token(scopes=("read_builds",))}.get(setup, bk.token)
    pipeline = "nope" if setup == "no-pipeline" else "ci"
    build = new_build(MESSAGE, "t", "u", "did-1")
    if setup == "filtered":
        bk.script("POST", BUILDS, [Reply.error(422, "Branch 'main' does not match the pipeline's branch filter")])
    api = client(bk, token)
    with pytest.raises(BuildkiteRejected) as caught:
        api.create("vllm", pipeline, build, permit=permit(BUILDKITE))
    assert caught.value.status == status and message in str(caught.value)
    assert token not in str(caught.value) and token not in repr(api)


def test_a_non_loopback_http_url_is_refused_before_any_token_is_sent() -> None:
    with pytest.raises(ValueError, match="CRCR_BUILDKITE_API_URL"):
        BuildkiteClient("http://api.buildkite.example", "bkua_secret")
    BuildkiteClient("https://api.buildkite.com", "bkua_secret")
    BuildkiteClient("http://[::1]:8080", "bkua_secret")


# -- DynamoDB: unsettled sends and the Buildkite pacing cell ----------------------------------------


@pytest.fixture(scope="module")
def ddb() -> Iterator[Any]:
    with dynamodb(StateTable="state") as client:
        yield client


def test_the_ledger_keeps_attempts_that_may_have_sent_until_they_settle(ddb: Any) -> None:
    state, t = DynamoLedger(ddb, "state"), time.time()
    message = MESSAGE.model_copy(update={"delivery_id": f"d-{t}"})
    assert state.claim(message, "did", t, 30, "first", 0, "vllm-project/vllm")
    state.mark(message, LedgerState.RETRYING, "unavailable: ReadTimeoutError", t + 1, "first")  # unknown
    assert state.claim(message, "did", t + 2, 30, "second", 0, "vllm-project/vllm")
    assert state.get(message.delivery_id, message.target_repo).unsettled == {"first", "second"}  # type: ignore[union-attr]
    state.mark(message, LedgerState.RETRYING, "rate_limited: 429", t + 3, "second", settled=True)
    row = state.get(message.delivery_id, message.target_repo)
    assert row is not None and row.unsettled == {"first"} and row.state is LedgerState.RETRYING
    # Another attempt's settle cannot touch a live claim (the table's condition holds for the set too).
    assert state.claim(message, "did", t + 4, 30, "third", 0, "vllm-project/vllm")
    state.mark(message, LedgerState.RETRYING, "x", t + 5, "first", settled=True)
    assert state.get(message.delivery_id, message.target_repo).unsettled == {"first", "third"}  # type: ignore[union-attr]


def test_buildkite_pacing_has_its_own_cell_per_organization_and_leaves_github_cells_alone(ddb: Any) -> None:
    github = DynamoPacer(ddb, "state")
    buildkite = DynamoPacer(ddb, "state", rates=BUILDKITE_RATES, cell="BUILDKITE")
    waits = [buildkite.acquire("vllm", now=1000.0) for _ in range(8)]
    assert waits[:6] == [0.0] * 6 and all(w > 0 for w in waits[6:])  # a burst of 6, then 1.5 s apart
    assert buildkite.acquire("other-org", now=1000.0) == 0.0
    assert github.acquire(7, now=1000.0) == 0.0
    item = ddb.get_item(TableName="state", Key={"pk": {"S": "PACE#7"}, "sk": {"S": "CONTENT"}})["Item"]
    assert len(item["tats"]["L"]) == 2  # GitHub's cell as before: minute and hour windows
    assert "Item" in ddb.get_item(TableName="state", Key={"pk": {"S": "PACE#vllm"}, "sk": {"S": "BUILDKITE"}})
