"""The Buildkite REST double's own tests: what Buildkite's docs say it does, and its scripted faults."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.doubles.buildkite_double import AUTH_REQUIRED, BuildkiteDouble, Reply

BUILDS = "/v2/organizations/acme/pipelines/ci/builds"


@pytest.fixture
def bk() -> Iterator[BuildkiteDouble]:
    with BuildkiteDouble() as double:
        double.add_pipeline("acme", "ci")
        yield double
        assert double.internal_errors == []


def call(
    bk: BuildkiteDouble,
    method: str,
    path: str,
    body: Any = None,
    token: str | None = "default",
    timeout: float = 5.0,
) -> tuple[int, dict[str, str], Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {bk.token if token == 'default' else token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(bk.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, json.loads(exc.read() or b"null")


def build_body(**changes: Any) -> dict[str, Any]:
    return {
        "commit": "HEAD",
        "branch": "main",
        "message": "crcr: pytorch/pytorch#1",
        "env": {"CRCR_TICKET": "t"},
        "meta_data": {"crcr_dispatch_id": "d1"},
    } | changes


def test_create_answers_201_with_a_build_numbered_per_pipeline(bk: BuildkiteDouble) -> None:
    bk.add_pipeline("acme", "other")
    status, _, first = call(bk, "POST", BUILDS, build_body())
    assert status == 201
    assert str(uuid.UUID(first["id"])) == first["id"]
    assert first["number"] == 1 and first["state"] == "scheduled" and first["source"] == "api"
    assert first["url"] == f"{bk.url}{BUILDS}/1"
    assert first["web_url"] == "https://buildkite.com/acme/ci/builds/1"
    assert first["env"] == {"CRCR_TICKET": "t"} and first["meta_data"] == {"crcr_dispatch_id": "d1"}
    assert first["commit"] == "HEAD" and first["branch"] == "main" and first["message"] == "crcr: pytorch/pytorch#1"
    # No idempotency: the same body again is a second build.
    assert call(bk, "POST", BUILDS, build_body())[2]["number"] == 2
    assert call(bk, "POST", "/v2/organizations/acme/pipelines/other/builds", build_body())[2]["number"] == 1
    assert [b["number"] for b in bk.builds("acme", "ci")] == [1, 2]


def test_the_token_must_be_a_bearer_api_token_with_the_scope(bk: BuildkiteDouble) -> None:
    assert call(bk, "POST", BUILDS, build_body(), token=None)[0] == 401
    status, _, body = call(bk, "POST", BUILDS, build_body(), token="bkua_nope")
    assert (status, body) == (401, {"message": AUTH_REQUIRED})
    read_only = bk.add_token(scopes=("read_builds",))
    status, _, body = call(bk, "POST", BUILDS, build_body(), token=read_only)
    assert status == 403 and "write_builds" in body["message"]
    assert call(bk, "GET", BUILDS, token=read_only)[0] == 200
    write_only = bk.add_token(scopes=("write_builds",))
    assert call(bk, "GET", BUILDS, token=write_only)[0] == 403
    assert bk.builds("acme", "ci") == []


def test_unknown_organizations_and_pipelines_are_404(bk: BuildkiteDouble) -> None:
    assert call(bk, "POST", "/v2/organizations/acme/pipelines/nope/builds", build_body())[2] == {
        "message": "No pipeline found"
    }
    assert call(bk, "POST", "/v2/organizations/nobody/pipelines/ci/builds", build_body())[0] == 404
    other_org = bk.add_token(organizations=["elsewhere"])
    assert call(bk, "POST", BUILDS, build_body(), token=other_org)[0] == 404
    assert call(bk, "DELETE", BUILDS)[0] == 404 and len(bk.unexpected) == 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"commit": None}, "commit"),
        ({"branch": ""}, "branch"),
        ({"env": ["A=1"]}, "env"),
        ({"meta_data": {"n": 1}}, "meta_data"),
        ({"ignore_pipeline_branch_filters": "yes"}, "ignore_pipeline_branch_filters"),
    ],
)
def test_invalid_bodies_are_422_validation_failed(bk: BuildkiteDouble, changes: dict[str, Any], field: str) -> None:
    body = {k: v for k, v in (build_body() | changes).items() if v is not None}
    status, _, answer = call(bk, "POST", BUILDS, body)
    assert status == 422 and answer["message"] == "Validation Failed"
    assert [e["field"] for e in answer["errors"]] == [field]
    assert bk.builds("acme", "ci") == []


def test_the_pipeline_branch_filter_applies_unless_ignored(bk: BuildkiteDouble) -> None:
    bk.add_pipeline("acme", "ci", branch_filter="release/*")
    status, _, body = call(bk, "POST", BUILDS, build_body())
    assert status == 422 and "branch filter" in body["message"]
    assert call(bk, "POST", BUILDS, build_body(ignore_pipeline_branch_filters=True))[0] == 201
    assert call(bk, "POST", BUILDS, build_body(branch="release/2.9"))[0] == 201


def test_the_list_filters_by_meta_data_newest_first_with_pages(bk: BuildkiteDouble) -> None:
    for i in range(3):
        call(bk, "POST", BUILDS, build_body(meta_data={"crcr_dispatch_id": "a", "n": str(i)}))
    call(bk, "POST", BUILDS, build_body(meta_data={"crcr_dispatch_id": "b"}))
    status, _, found = call(bk, "GET", f"{BUILDS}?meta_data%5Bcrcr_dispatch_id%5D=a")
    assert status == 200 and [b["number"] for b in found] == [3, 2, 1]
    assert [b["number"] for b in call(bk, "GET", f"{BUILDS}?meta_data[crcr_dispatch_id]=b")[2]] == [4]
    assert call(bk, "GET", f"{BUILDS}?meta_data[crcr_dispatch_id]=a&meta_data[n]=1")[2][0]["number"] == 2
    assert call(bk, "GET", f"{BUILDS}?meta_data[crcr_dispatch_id]=c")[2] == []
    _, headers, page = call(bk, "GET", f"{BUILDS}?per_page=2")
    assert [b["number"] for b in page] == [4, 3] and 'rel="next"' in headers["link"]
    assert [b["number"] for b in call(bk, "GET", f"{BUILDS}?per_page=2&page=2")[2]] == [2, 1]
    assert call(bk, "GET", f"{BUILDS}?state=bogus")[0] == 422


def test_every_answer_carries_both_rate_limit_windows(bk: BuildkiteDouble) -> None:
    for _, headers, _ in (call(bk, "POST", BUILDS, build_body()), call(bk, "GET", BUILDS), call(bk, "GET", "/x")):
        assert headers["ratelimit-scope"] == "rest" and headers["ratelimit-user-scope"] == "rest_user"
        for name in ("limit", "remaining", "reset"):
            assert headers[f"ratelimit-{name}"].isdigit() and headers[f"ratelimit-user-{name}"].isdigit()
    _, headers, _ = call(bk, "GET", BUILDS)
    assert headers["ratelimit-user-limit"] == "50" and headers["ratelimit-limit"] == "200"
    assert int(headers["ratelimit-user-remaining"]) == 50 - 3  # the answer counts itself after the fact
    assert 0 < int(headers["ratelimit-user-reset"]) <= 60


def test_over_the_user_limit_is_429_with_the_documented_body() -> None:
    now = [1_000.0]
    with BuildkiteDouble(user_limit=3, clock=lambda: now[0]) as bk:
        bk.add_pipeline("acme", "ci")
        assert [call(bk, "GET", BUILDS)[0] for _ in range(3)] == [200, 200, 200]
        now[0] += 20
        status, headers, body = call(bk, "GET", BUILDS)
        assert status == 429
        assert body == {
            "message": "You have exceeded your API rate limit. Please wait 40 seconds before making more requests.",
            "scope": "rest_user",
            "limit": 3,
            "current": 4,
            "reset": 40,
        }
        assert headers["ratelimit-user-remaining"] == "0" and headers["ratelimit-user-reset"] == "40"
        assert "retry-after" not in headers
        now[0] += 40
        assert call(bk, "GET", BUILDS)[0] == 200


def test_scripted_faults_come_first_then_the_endpoint_behaves(bk: BuildkiteDouble) -> None:
    bk.script("POST", BUILDS, [Reply(502), Reply.rate_limited(reset=3, user_reset=7), Reply.error(422, "No way")])
    assert call(bk, "POST", BUILDS, build_body())[:3:2] == (502, {"message": "Bad Gateway"})
    status, headers, body = call(bk, "POST", BUILDS, build_body())
    assert status == 429 and body["scope"] == "rest_user" and body["reset"] == 7
    assert (headers["ratelimit-reset"], headers["ratelimit-user-reset"]) == ("3", "7")
    assert call(bk, "POST", BUILDS, build_body())[2] == {"message": "No way"}
    assert bk.builds("acme", "ci") == []
    assert call(bk, "POST", BUILDS, build_body())[0] == 201


def test_a_slow_answer_after_processing_creates_the_build_before_the_client_gives_up(bk: BuildkiteDouble) -> None:
    bk.script("POST", BUILDS, [Reply.slow_after_processing(2)])
    started = time.monotonic()
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        call(bk, "POST", BUILDS, build_body(), timeout=0.5)
    assert time.monotonic() - started < 1.5
    assert [b["number"] for b in bk.builds("acme", "ci")] == [1]  # created although the client never heard


def test_a_slow_answer_waits_before_doing_anything(bk: BuildkiteDouble) -> None:
    bk.script("POST", BUILDS, [Reply.slow(0.5, then=Reply(503))])
    started = time.monotonic()
    assert call(bk, "POST", BUILDS, build_body())[0] == 503
    assert time.monotonic() - started >= 0.5 and bk.builds("acme", "ci") == []


@pytest.mark.parametrize("after_processing", [False, True])
def test_a_dropped_connection_may_come_after_the_build(bk: BuildkiteDouble, after_processing: bool) -> None:
    bk.script("POST", BUILDS, [Reply.drop(after_processing=after_processing)])
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        call(bk, "POST", BUILDS, build_body())
    assert len(bk.builds("acme", "ci")) == (1 if after_processing else 0)
    assert bk.requests[-1].outcome == "dropped"
