"""Self-tests of the GitHub double, with real RSA keys, real JWTs and a real HTTP client."""

from __future__ import annotations

import base64
import hmac
import http.client
import http.server
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .github_double import GitHubDouble, Reply, run_conclusion

APP_ID = "424242"
SHA = "a" * 40


@dataclass
class Keys:
    private_key: rsa.RSAPrivateKey  # key objects, not PEM: loading a PEM private key costs ~40 ms
    public_pem: bytes
    other_private_key: rsa.RSAPrivateKey


@pytest.fixture(scope="module")
def keys() -> Keys:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return Keys(key, public, other)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def gh(keys: Keys) -> Iterator[GitHubDouble]:
    with GitHubDouble(app_id=APP_ID, app_public_key_pem=keys.public_pem) as double:
        double.install(
            "Org/Repo",
            installation_id=7,
            repo_id=1001,
            permissions={"contents": "write", "checks": "write", "actions": "write", "metadata": "read"},
        )
        double.install("Org/Other", installation_id=7, repo_id=1002)
        yield double


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def call(
    gh: GitHubDouble,
    method: str,
    path: str,
    *,
    auth: str | None = None,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5,
) -> Answer:
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(gh.url + path, data=data, method=method)
    req.add_header("Accept", "application/vnd.github+json")
    if auth is not None:
        req.add_header("Authorization", auth)
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Answer(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as err:
        return Answer(err.code, {k.lower(): v for k, v in err.headers.items()}, err.read())


def app_jwt(
    keys: Keys, *, now: float | None = None, key: rsa.RSAPrivateKey | None = None, alg: str = "RS256", **claims: Any
) -> str:
    t = int(time.time() if now is None else now)
    payload = {"iat": t - 30, "exp": t + 540, "iss": APP_ID, **claims}
    payload = {k: v for k, v in payload.items() if v is not None}
    return jwt.encode(payload, key or keys.private_key, algorithm=alg)


def mint(gh: GitHubDouble, keys: Keys, installation_id: int = 7, body: Any = None) -> Answer:
    return call(
        gh, "POST", f"/app/installations/{installation_id}/access_tokens", auth=f"Bearer {app_jwt(keys)}", body=body
    )


def token(gh: GitHubDouble, keys: Keys, body: Any = None) -> str:
    answer = mint(gh, keys, body=body)
    assert answer.status == 201, answer.json
    return answer.json["token"]


def dispatch(gh: GitHubDouble, tok: str, repo: str = "Org/Repo", body: Any = None, **kw: Any) -> Answer:
    payload = {"event_type": "upstream", "client_payload": {"sha": SHA}} if body is None else body
    return call(gh, "POST", f"/repos/{repo}/dispatches", auth=f"token {tok}", body=payload, **kw)


# ----------------------------------------------------------------------------- App JWT and tokens


def test_mint_installation_token(gh: GitHubDouble, keys: Keys) -> None:
    answer = mint(gh, keys)
    assert answer.status == 201
    assert answer.headers["content-type"] == "application/json; charset=utf-8"
    body = answer.json
    assert body["token"].startswith("ghs_")
    assert body["permissions"] == {"contents": "write", "checks": "write", "actions": "write", "metadata": "read"}
    assert body["repository_selection"] == "selected"
    assert "repositories" not in body
    expires = time.mktime(time.strptime(body["expires_at"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert 3590 < expires - time.time() <= 3600
    info = gh.token_info(body["token"])
    assert info is not None
    assert info.installation_id == 7
    assert info.repository_ids is None


@pytest.mark.parametrize("iss", [APP_ID, int(APP_ID)])
def test_iss_may_be_string_or_integer(gh: GitHubDouble, keys: Keys, iss: Any) -> None:
    now = int(time.time())
    claims = json.dumps({"iat": now - 30, "exp": now + 540, "iss": iss}).encode()
    signed = jwt.PyJWS().encode(claims, keys.private_key, algorithm="RS256")  # PyJWT insists on a string iss
    answer = call(gh, "POST", "/app/installations/7/access_tokens", auth=f"Bearer {signed}")
    assert answer.status == 201


def test_docs_example_jwt_is_accepted_unless_lifetime_is_capped(keys: Keys) -> None:
    # docs.github.com's own example: iat = now - 60, exp = now + 600.
    now = int(time.time())
    example = jwt.encode({"iat": now - 60, "exp": now + 600, "iss": APP_ID}, keys.private_key, algorithm="RS256")
    with (
        GitHubDouble(APP_ID, keys.public_pem) as loose,
        GitHubDouble(APP_ID, keys.public_pem, jwt_max_lifetime=600) as capped,
    ):
        for double in (loose, capped):
            double.install("Org/Repo", installation_id=7)
        assert call(loose, "POST", "/app/installations/7/access_tokens", auth=f"Bearer {example}").status == 201
        refused = call(capped, "POST", "/app/installations/7/access_tokens", auth=f"Bearer {example}")
        assert refused.status == 401
        assert refused.json["message"] == "'Expiration time' claim ('exp') is too far in the future"


UNDECODABLE = "A JSON web token could not be decoded"
EXPIRED = (
    "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the "
    "assertion expires"
)
TOO_FAR = "'Expiration time' claim ('exp') is too far in the future"
IAT = "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("expired", EXPIRED),
        ("exp_too_far", TOO_FAR),
        ("no_exp", EXPIRED),
        ("iat_in_future", IAT),
        ("hs256", UNDECODABLE),
        ("wrong_key", UNDECODABLE),
        ("alg_none", UNDECODABLE),
        ("wrong_iss", UNDECODABLE),
        ("garbage", UNDECODABLE),
        ("token_scheme", UNDECODABLE),
        ("missing", UNDECODABLE),
    ],
)
def test_bad_app_jwts_are_refused(gh: GitHubDouble, keys: Keys, case: str, message: str) -> None:
    now = int(time.time())
    auth: str | None
    if case == "expired":
        auth = "Bearer " + app_jwt(keys, iat=now - 700, exp=now - 5)
    elif case == "exp_too_far":
        auth = "Bearer " + app_jwt(keys, iat=now, exp=now + 660)
    elif case == "no_exp":
        auth = "Bearer " + jwt.encode({"iat": now, "iss": APP_ID}, keys.private_key, algorithm="RS256")
    elif case == "iat_in_future":
        auth = "Bearer " + app_jwt(keys, iat=now + 120, exp=now + 500)
    elif case == "hs256":
        auth = "Bearer " + jwt.encode({"iat": now, "exp": now + 300, "iss": APP_ID}, "s" * 32, algorithm="HS256")
    elif case == "wrong_key":
        auth = "Bearer " + app_jwt(keys, key=keys.other_private_key)
    elif case == "alg_none":
        auth = "Bearer " + jwt.encode({"iat": now, "exp": now + 300, "iss": APP_ID}, None, algorithm="none")
    elif case == "wrong_iss":
        auth = "Bearer " + app_jwt(keys, iss="999")
    elif case == "garbage":
        auth = "Bearer not.a.jwt"
    elif case == "token_scheme":
        auth = "token " + app_jwt(keys)
    else:
        auth = None
    answer = call(gh, "POST", "/app/installations/7/access_tokens", auth=auth)
    assert answer.status == 401
    assert answer.json["message"] == message
    assert gh.tokens == []


def test_unknown_and_suspended_installations(gh: GitHubDouble, keys: Keys) -> None:
    assert mint(gh, keys, installation_id=99).status == 404
    gh.suspend_installation(7)
    answer = mint(gh, keys)
    assert answer.status == 403
    assert answer.json["message"] == "This installation has been suspended"


def test_repository_installation_lookup(gh: GitHubDouble, keys: Keys) -> None:
    answer = call(gh, "GET", "/repos/org/REPO/installation", auth=f"Bearer {app_jwt(keys)}")
    assert answer.status == 200
    assert answer.json["id"] == 7
    assert answer.json["account"]["login"] == "Org"
    assert answer.json["app_id"] == int(APP_ID)
    assert call(gh, "GET", "/repos/org/nope/installation", auth=f"Bearer {app_jwt(keys)}").status == 404
    # An installation token is not an App JWT.
    tok = token(gh, keys)
    assert call(gh, "GET", "/repos/org/repo/installation", auth=f"Bearer {tok}").status == 401


def test_token_scoped_to_repositories(gh: GitHubDouble, keys: Keys) -> None:
    answer = mint(gh, keys, body={"repositories": ["repo"]})
    assert answer.status == 201
    assert answer.json["repository_selection"] == "selected"
    assert [(r["id"], r["full_name"], r["owner"]["login"]) for r in answer.json["repositories"]] == [
        (1001, "Org/Repo", "Org")
    ]
    tok = answer.json["token"]
    assert dispatch(gh, tok).status == 204
    denied = dispatch(gh, tok, repo="Org/Other")
    assert denied.status == 404
    assert denied.json["message"] == "Not Found"
    by_id = mint(gh, keys, body={"repository_ids": [1002]}).json
    assert [r["name"] for r in by_id["repositories"]] == ["Other"]
    assert dispatch(gh, by_id["token"], repo="Org/Other").status == 204
    assert dispatch(gh, by_id["token"]).status == 404


def test_token_request_cannot_widen_the_installation(gh: GitHubDouble, keys: Keys) -> None:
    gh.install("Else/Where", installation_id=8, permissions={"checks": "read", "metadata": "read"})
    outside = mint(gh, keys, body={"repositories": ["Where"]})
    assert outside.status == 422
    assert outside.json["message"].startswith("There is at least one repository that does not exist")
    assert mint(gh, keys, body={"repository_ids": [424242]}).status == 422
    not_granted = mint(gh, keys, body={"permissions": {"issues": "write"}})
    assert not_granted.status == 422
    assert not_granted.json["message"] == "The permissions requested are not granted to this installation."
    higher = mint(gh, keys, installation_id=8, body={"permissions": {"checks": "write"}})
    assert higher.status == 422
    assert higher.json["message"] == (
        "The level of access for permissions requested are not granted to this installation."
    )


def test_down_scoped_permissions_are_enforced(gh: GitHubDouble, keys: Keys) -> None:
    answer = mint(gh, keys, body={"permissions": {"contents": "read"}})
    assert answer.json["permissions"] == {"contents": "read", "metadata": "read"}
    denied = dispatch(gh, answer.json["token"])
    assert denied.status == 403
    assert denied.json["message"] == "Resource not accessible by integration"
    assert denied.headers["x-accepted-github-permissions"] == "contents=write"
    assert gh.dispatches("org/repo") == []


def test_bad_credentials(gh: GitHubDouble, keys: Keys) -> None:
    unknown = dispatch(gh, "ghs_" + "x" * 36)
    assert (unknown.status, unknown.json["message"]) == (401, "Bad credentials")
    tok = token(gh, keys)
    gh.expire_tokens()
    assert dispatch(gh, tok).status == 401
    # No credentials at all: GitHub hides a private repository behind a 404.
    anonymous = call(gh, "POST", "/repos/Org/Repo/dispatches", body={"event_type": "x"})
    assert anonymous.status == 404
    # An App JWT cannot act on a repository.
    as_app = call(gh, "POST", "/repos/Org/Repo/dispatches", auth=f"Bearer {app_jwt(keys)}", body={"event_type": "x"})
    assert as_app.status == 403


def test_token_expires_after_an_hour(keys: Keys) -> None:
    clock = Clock()
    with GitHubDouble(APP_ID, keys.public_pem, clock=clock) as gh:
        gh.install("Org/Repo", installation_id=7)
        answer = call(gh, "POST", "/app/installations/7/access_tokens", auth=f"Bearer {app_jwt(keys, now=clock.now)}")
        tok = answer.json["token"]
        clock.now += 3599
        assert dispatch(gh, tok).status == 204
        clock.now += 1
        assert dispatch(gh, tok).status == 401


# ----------------------------------------------------------------------------- repository_dispatch


def test_dispatch_accepted_and_recorded_case_insensitively(gh: GitHubDouble, keys: Keys) -> None:
    tok = token(gh, keys)
    answer = call(
        gh,
        "POST",
        "/repos/oRG/rEPO/dispatches",
        auth=f"Bearer {tok}",
        body={"event_type": "up", "client_payload": {"a": 1}},
    )
    assert answer.status == 204
    assert answer.body == b""
    assert gh.dispatches("ORG/repo") == [{"event_type": "up", "client_payload": {"a": 1}}]
    assert gh.requests[-1].installation_id == 7


def test_dispatch_validation(gh: GitHubDouble, keys: Keys) -> None:
    tok = token(gh, keys)
    missing = dispatch(gh, tok, body={"client_payload": {}})
    assert missing.status == 422
    assert missing.json["message"] == 'Invalid request.\n\n"event_type" wasn\'t supplied.'
    assert dispatch(gh, tok, body={"event_type": ""}).status == 422
    assert dispatch(gh, tok, body={"event_type": "e" * 101}).status == 422
    assert dispatch(gh, tok, body={"event_type": "e" * 100}).status == 204
    assert dispatch(gh, tok, body={"event_type": "e", "client_payload": None}).status == 422
    assert dispatch(gh, tok, body={"event_type": "e", "client_payload": [1]}).status == 422
    assert dispatch(gh, tok, body=b"{not json").status == 400
    ten = {f"k{i}": i for i in range(10)}
    assert dispatch(gh, tok, body={"event_type": "e", "client_payload": ten}).status == 204
    eleven = dispatch(gh, tok, body={"event_type": "e", "client_payload": {**ten, "k10": 10}})
    assert eleven.status == 422
    assert eleven.json["message"] == "Invalid request.\n\nNo more than 10 properties are allowed; 11 were supplied."
    assert eleven.json["documentation_url"].endswith("#create-a-repository-dispatch-event")
    assert len(gh.dispatches("org/repo")) == 2


def test_dispatch_client_payload_size_limit(gh: GitHubDouble, keys: Keys) -> None:
    tok = token(gh, keys)
    overhead = len(json.dumps({"blob": ""}, separators=(",", ":")))
    just_under = {"blob": "x" * (64 * 1024 - 1 - overhead)}
    assert dispatch(gh, tok, body={"event_type": "e", "client_payload": just_under}).status == 204
    at_limit = {"blob": "x" * (64 * 1024 - overhead)}
    refused = dispatch(gh, tok, body={"event_type": "e", "client_payload": at_limit})
    assert refused.status == 422
    assert refused.json["message"] == "client_payload is too large."


# ----------------------------------------------------------------------------- scripted faults


def test_scripted_502s_then_normal(gh: GitHubDouble, keys: Keys) -> None:
    gh.script("POST", r"/repos/org/repo/dispatches", [Reply(502), Reply(502)])
    tok = token(gh, keys)
    statuses = [dispatch(gh, tok).status for _ in range(3)]
    assert statuses == [502, 502, 204]
    failed = [r for r in gh.requests if r.status == 502]
    assert failed[0].response_json["message"] == "Server Error"
    assert failed[0].outcome == "scripted"
    assert len(gh.dispatches("org/repo")) == 1


def test_scripted_rate_limits(gh: GitHubDouble, keys: Keys) -> None:
    tok = token(gh, keys)
    gh.script(
        "*",
        r"/repos/[^/]+/[^/]+/dispatches",
        [Reply.too_many_requests(retry_after=7), Reply.secondary_rate_limit(), Reply.primary_rate_limit(reset_in=90)],
    )
    too_many = dispatch(gh, tok)
    assert (too_many.status, too_many.headers["retry-after"]) == (429, "7")
    secondary = dispatch(gh, tok)
    assert secondary.status == 403
    assert secondary.json["message"].startswith("You have exceeded a secondary rate limit")
    assert secondary.headers["retry-after"] == "60"
    assert int(secondary.headers["x-ratelimit-remaining"]) > 0
    primary = dispatch(gh, tok)
    assert primary.status == 403
    assert primary.json["message"].startswith("API rate limit exceeded for installation ID 7.")
    assert primary.headers["x-ratelimit-remaining"] == "0"
    assert 80 <= int(primary.headers["x-ratelimit-reset"]) - time.time() <= 91
    assert dispatch(gh, tok).status == 204


def test_delay_makes_the_client_time_out_without_blocking_others(gh: GitHubDouble, keys: Keys) -> None:
    tok = token(gh, keys)
    gh.script("POST", r"/repos/org/repo/dispatches", [Reply.slow(0.6)])
    errors: list[BaseException] = []

    def slow_client() -> None:
        try:
            dispatch(gh, tok, timeout=0.15)
        except (TimeoutError, urllib.error.URLError) as exc:
            errors.append(exc)

    thread = threading.Thread(target=slow_client)
    started = time.monotonic()
    thread.start()
    time.sleep(0.05)
    assert dispatch(gh, tok, repo="Org/Other").status == 204  # served while the other waits
    assert time.monotonic() - started < 0.55
    assert gh.dispatches("org/repo") == []  # the slow one is still waiting
    thread.join()
    assert len(errors) == 1
    deadline = time.monotonic() + 2
    while not gh.dispatches("org/repo") and time.monotonic() < deadline:
        time.sleep(0.02)
    # GitHub processed it after all, although the client had given up.
    assert len(gh.dispatches("org/repo")) == 1


def test_dropped_connection(gh: GitHubDouble, keys: Keys) -> None:
    tok = token(gh, keys)
    gh.script("POST", r"/repos/org/repo/dispatches", [Reply.drop(), Reply.drop(after_processing=True)])
    for _ in range(2):
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError, urllib.error.URLError)):
            dispatch(gh, tok)
    assert [r.outcome for r in gh.requests[-2:]] == ["dropped", "dropped"]
    assert len(gh.dispatches("org/repo")) == 1  # the second one was accepted, its answer lost


# ----------------------------------------------------------------------------- routing and headers


def test_unexpected_endpoints_are_404_and_recorded(gh: GitHubDouble, keys: Keys) -> None:
    tok = token(gh, keys)
    answer = call(gh, "GET", "/repos/Org/Repo/branches", auth=f"token {tok}")
    assert answer.status == 404
    assert answer.json["message"] == "Not Found"
    assert call(gh, "DELETE", "/repos/Org/Repo/dispatches", auth=f"token {tok}").status == 404
    assert call(gh, "POST", "/repos/Org/Repo/dispatches/", auth=f"token {tok}", body={}).status == 404
    assert [(r.method, r.path) for r in gh.unexpected] == [
        ("GET", "/repos/Org/Repo/branches"),
        ("DELETE", "/repos/Org/Repo/dispatches"),
        ("POST", "/repos/Org/Repo/dispatches/"),
    ]


def test_every_response_carries_rate_limit_headers(gh: GitHubDouble, keys: Keys) -> None:
    tok = token(gh, keys)
    answers = [
        dispatch(gh, tok),
        dispatch(gh, "ghs_unknown"),
        call(gh, "GET", "/nowhere"),
        call(gh, "POST", "/app/installations/7/access_tokens", auth="Bearer x"),
    ]
    for answer in answers:
        for name in (
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "x-ratelimit-used",
            "x-ratelimit-resource",
            "x-github-request-id",
        ):
            assert name in answer.headers, (answer.status, name)
    assert answers[0].headers["x-ratelimit-used"] == "1"
    assert answers[0].headers["x-ratelimit-limit"] == "5000"


def test_primary_limit_is_enforced(keys: Keys) -> None:
    with GitHubDouble(APP_ID, keys.public_pem, primary_rate_limit=2) as gh:
        gh.install("Org/Repo", installation_id=7)
        tok = token(gh, keys)
        assert [dispatch(gh, tok).status for _ in range(3)] == [204, 204, 403]
        assert gh.requests[-1].response_json["message"].startswith("API rate limit exceeded for installation ID 7")
        assert gh.requests[-1].response_headers["x-ratelimit-remaining"] == "0"


def test_secondary_content_limit_per_installation(keys: Keys) -> None:
    clock = Clock()
    with GitHubDouble(APP_ID, keys.public_pem, clock=clock, content_writes_per_minute=2) as gh:
        gh.install("Org/Repo", installation_id=7)
        gh.install("Org/Other", installation_id=7)
        minted = call(gh, "POST", "/app/installations/7/access_tokens", auth=f"Bearer {app_jwt(keys, now=clock.now)}")
        tok = minted.json["token"]
        assert dispatch(gh, tok).status == 204
        clock.now += 30
        assert dispatch(gh, tok, repo="Org/Other").status == 204
        limited = dispatch(gh, tok)
        assert limited.status == 403
        assert limited.json["message"].startswith("You have exceeded a secondary rate limit")
        assert limited.headers["retry-after"] == "30"
        clock.now += 31
        assert dispatch(gh, tok).status == 204


def test_secondary_content_limit_per_hour(keys: Keys) -> None:
    clock = Clock()
    with GitHubDouble(
        APP_ID, keys.public_pem, clock=clock, content_writes_per_minute=80, content_writes_per_hour=3
    ) as gh:
        gh.install("Org/Repo", installation_id=7)
        tok = call(gh, "POST", "/app/installations/7/access_tokens", auth=f"Bearer {app_jwt(keys, now=clock.now)}")
        for _ in range(3):
            assert dispatch(gh, tok.json["token"]).status == 204
            clock.now += 600
        limited = dispatch(gh, tok.json["token"])
        assert limited.status == 403 and limited.headers["retry-after"] == "1800"  # the first write leaves the hour
        assert limited.json["message"].startswith("You have exceeded a secondary rate limit")
        clock.now += 1800
        tok = call(gh, "POST", "/app/installations/7/access_tokens", auth=f"Bearer {app_jwt(keys, now=clock.now)}")
        assert dispatch(gh, tok.json["token"]).status == 204


def test_user_agent_and_api_version(gh: GitHubDouble, keys: Keys) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", gh.port, timeout=5)
    conn.putrequest("POST", "/repos/Org/Repo/dispatches", skip_accept_encoding=True)
    conn.putheader("Content-Length", "0")
    conn.endheaders()
    assert conn.getresponse().status == 403
    conn.close()
    tok = token(gh, keys)
    old = dispatch(gh, tok, headers={"X-GitHub-Api-Version": "v3"})
    assert old.status == 400
    assert dispatch(gh, tok, headers={"X-GitHub-Api-Version": "2022-11-28"}).status == 204


# ----------------------------------------------------------------------------- contents and commits


def test_contents_with_etag(gh: GitHubDouble, keys: Keys) -> None:
    blob = gh.put_file("Org/Repo", ".crcr/downstreams.yml", "main", b"downstreams: []\n")
    tok = token(gh, keys)
    first = call(gh, "GET", "/repos/org/repo/contents/.crcr/downstreams.yml?ref=main", auth=f"token {tok}")
    assert first.status == 200
    assert first.json["sha"] == blob
    assert first.json["encoding"] == "base64"
    assert base64.b64decode(first.json["content"]) == b"downstreams: []\n"
    etag = first.headers["etag"]
    used = int(first.headers["x-ratelimit-used"])
    again = call(
        gh,
        "GET",
        "/repos/org/repo/contents/.crcr/downstreams.yml",
        auth=f"token {tok}",
        headers={"If-None-Match": etag},
    )
    assert again.status == 304
    assert again.body == b""
    assert int(again.headers["x-ratelimit-used"]) == used  # a 304 is free
    raw = call(
        gh,
        "GET",
        "/repos/org/repo/contents/.crcr/downstreams.yml",
        auth=f"token {tok}",
        headers={"Accept": "application/vnd.github.raw+json"},
    )
    assert raw.body == b"downstreams: []\n"
    gh.put_file("Org/Repo", ".crcr/downstreams.yml", "main", b"downstreams: [a]\n")
    changed = call(
        gh,
        "GET",
        "/repos/org/repo/contents/.crcr/downstreams.yml",
        auth=f"token {tok}",
        headers={"If-None-Match": etag},
    )
    assert changed.status == 200
    assert call(gh, "GET", "/repos/org/repo/contents/missing.yml", auth=f"token {tok}").status == 404
    bad_ref = call(gh, "GET", "/repos/org/repo/contents/.crcr/downstreams.yml?ref=nope", auth=f"token {tok}")
    assert (bad_ref.status, bad_ref.json["message"]) == (404, "No commit found for the ref nope")


def test_commits(gh: GitHubDouble, keys: Keys) -> None:
    gh.add_commit("Org/Repo", SHA, branch="main")
    tok = token(gh, keys)
    found = call(gh, "GET", f"/repos/Org/Repo/commits/{SHA}", auth=f"token {tok}")
    assert (found.status, found.json["sha"]) == (200, SHA)
    assert call(gh, "GET", "/repos/Org/Repo/commits/main", auth=f"token {tok}").json["sha"] == SHA
    missing = call(gh, "GET", f"/repos/Org/Repo/commits/{'b' * 40}", auth=f"token {tok}")
    assert (missing.status, missing.json["message"]) == (422, f"No commit found for SHA: {'b' * 40}")


# ----------------------------------------------------------------------------- check runs and workflow runs


def test_check_run_validation(gh: GitHubDouble, keys: Keys) -> None:
    gh.add_commit("Org/Repo", SHA)
    tok = token(gh, keys)

    def create(body: dict[str, Any]) -> Answer:
        return call(gh, "POST", "/repos/Org/Repo/check-runs", auth=f"token {tok}", body=body)

    base = {"name": "downstream", "head_sha": SHA}
    assert create({"head_sha": SHA}).status == 422
    assert create({"name": "x"}).status == 422
    assert create({"name": "x", "head_sha": "b" * 40}).json["message"] == f"No commit found for SHA: {'b' * 40}"
    assert create({**base, "status": "completed"}).status == 422
    assert create({**base, "status": "waiting"}).status == 422
    assert create({**base, "conclusion": "stale"}).status == 422
    assert create({**base, "conclusion": "bogus"}).status == 422
    assert create({**base, "completed_at": "2024-01-01T00:00:00Z"}).status == 422
    assert create({**base, "output": {"title": "t"}}).status == 422
    assert create({**base, "output": {"title": "t", "summary": "s" * 65536}}).status == 422
    assert create({**base, "output": {"title": "t", "summary": "s" * 65535}}).status == 201
    assert len(gh.check_runs("org/repo")) == 1


def test_check_run_lifecycle_and_listing(gh: GitHubDouble, keys: Keys) -> None:
    gh.add_commit("Org/Repo", SHA)
    tok = token(gh, keys)
    created = call(
        gh,
        "POST",
        "/repos/Org/Repo/check-runs",
        auth=f"token {tok}",
        body={"name": "downstream", "head_sha": SHA, "external_id": "e1", "details_url": "https://x.test/1"},
    )
    assert created.status == 201
    run = created.json
    assert (run["status"], run["conclusion"], run["external_id"]) == ("queued", None, "e1")
    updated = call(
        gh,
        "PATCH",
        f"/repos/Org/Repo/check-runs/{run['id']}",
        auth=f"token {tok}",
        body={"conclusion": "success", "output": {"title": "ok", "summary": "all good"}},
    )
    assert updated.status == 200
    assert updated.json["status"] == "completed"
    assert updated.json["completed_at"] is not None
    assert updated.json["output"]["summary"] == "all good"
    assert (
        call(gh, "PATCH", "/repos/Org/Other/check-runs/" + str(run["id"]), auth=f"token {tok}", body={}).status == 404
    )
    for i in range(3):
        call(gh, "POST", "/repos/Org/Repo/check-runs", auth=f"token {tok}", body={"name": f"n{i}", "head_sha": SHA})
    suite = run["check_suite"]["id"]
    assert suite == gh.check_suite_id("Org/Repo", SHA)
    page1 = call(gh, "GET", f"/repos/Org/Repo/check-suites/{suite}/check-runs?per_page=3", auth=f"token {tok}")
    assert page1.json["total_count"] == 4
    assert len(page1.json["check_runs"]) == 3
    next_url = page1.headers["link"].split(";")[0].strip("<>")
    page2 = call(gh, "GET", next_url.removeprefix(gh.url), auth=f"token {tok}")
    assert len(page2.json["check_runs"]) == 1
    by_name = call(gh, "GET", f"/repos/Org/Repo/check-suites/{suite}/check-runs?check_name=n1", auth=f"token {tok}")
    assert [r["name"] for r in by_name.json["check_runs"]] == ["n1"]
    assert gh.check_runs("ORG/REPO")[0]["conclusion"] == "success"


def test_check_runs_need_checks_permission(gh: GitHubDouble, keys: Keys) -> None:
    gh.add_commit("Org/Repo", SHA)
    tok = token(gh, keys, body={"permissions": {"contents": "write"}})
    denied = call(gh, "POST", "/repos/Org/Repo/check-runs", auth=f"token {tok}", body={"name": "n", "head_sha": SHA})
    assert denied.status == 403


def test_issue_comments_lifecycle_validation_and_pagination(keys: Keys) -> None:
    with GitHubDouble(app_id=APP_ID, app_public_key_pem=keys.public_pem, app_slug="crcr") as gh:
        perms = {"issues": "write", "pull_requests": "write", "metadata": "read"}
        gh.install("Org/Repo", installation_id=7, repo_id=1001, permissions=perms)
        gh.add_issue("Org/Repo", 5)
        tok = token(gh, keys)
        human = gh.add_comment("Org/Repo", 5, "lgtm @someone")
        assert (human["user"]["type"], human["performed_via_github_app"]) == ("User", None)
        created = call(gh, "POST", "/repos/Org/Repo/issues/5/comments", auth=f"token {tok}", body={"body": "hi"})
        assert created.status == 201
        comment = created.json
        assert (comment["user"]["login"], comment["user"]["type"]) == ("crcr[bot]", "Bot")
        assert comment["performed_via_github_app"]["id"] == int(APP_ID)
        assert comment["html_url"].endswith(f"/Org/Repo/pull/5#issuecomment-{comment['id']}")
        edited = call(
            gh, "PATCH", f"/repos/Org/Repo/issues/comments/{comment['id']}", auth=f"token {tok}", body={"body": "bye"}
        )
        assert (edited.status, edited.json["body"]) == (200, "bye")
        assert gh.comment_writes("org/repo") == [("POST", comment["id"], "hi"), ("PATCH", comment["id"], "bye")]
        # Validation, unknown issues and comments, as documented.
        too_long = call(
            gh, "POST", "/repos/Org/Repo/issues/5/comments", auth=f"token {tok}", body={"body": "x" * 65537}
        )
        assert too_long.status == 422 and "too long" in too_long.json["errors"][0]["message"]
        at_limit = call(
            gh, "POST", "/repos/Org/Repo/issues/5/comments", auth=f"token {tok}", body={"body": "x" * 65536}
        )
        assert at_limit.status == 201
        assert call(gh, "POST", "/repos/Org/Repo/issues/5/comments", auth=f"token {tok}", body={}).status == 422
        assert (
            call(gh, "POST", "/repos/Org/Repo/issues/6/comments", auth=f"token {tok}", body={"body": "x"}).status == 404
        )
        assert (
            call(gh, "PATCH", "/repos/Org/Repo/issues/comments/1", auth=f"token {tok}", body={"body": "x"}).status
            == 404
        )
        for i in range(4):
            call(gh, "POST", "/repos/Org/Repo/issues/5/comments", auth=f"token {tok}", body={"body": f"n{i}"})
        page1 = call(gh, "GET", "/repos/Org/Repo/issues/5/comments?per_page=3", auth=f"token {tok}")
        assert [c["body"] for c in page1.json] == ["lgtm @someone", "bye", "x" * 65536]
        assert 'rel="next"' in page1.headers["link"]
        last = call(gh, "GET", "/repos/Org/Repo/issues/5/comments?per_page=3&page=3", auth=f"token {tok}")
        assert [c["body"] for c in last.json] == ["n3"] and 'rel="next"' not in last.headers["link"]
        gh.delete_comment("Org/Repo", comment["id"])
        gone = call(
            gh, "PATCH", f"/repos/Org/Repo/issues/comments/{comment['id']}", auth=f"token {tok}", body={"body": "y"}
        )
        assert gone.status == 404


def test_issue_comments_need_issues_or_pull_requests_permission(keys: Keys) -> None:
    with GitHubDouble(app_id=APP_ID, app_public_key_pem=keys.public_pem) as gh:
        perms = {"issues": "write", "pull_requests": "write", "contents": "write", "metadata": "read"}
        gh.install("Org/Repo", installation_id=7, repo_id=1001, permissions=perms)
        gh.add_issue("Org/Repo", 5)
        gh.add_issue("Org/Repo", 6, pull_request=False)
        body = {"body": "x"}
        contents = token(gh, keys, body={"permissions": {"contents": "write"}})
        denied = call(gh, "POST", "/repos/Org/Repo/issues/5/comments", auth=f"token {contents}", body=body)
        assert denied.status == 403
        assert denied.headers["x-accepted-github-permissions"] == "issues=write; pull_requests=write"
        prs = token(gh, keys, body={"permissions": {"pull_requests": "write"}})
        assert call(gh, "POST", "/repos/Org/Repo/issues/5/comments", auth=f"token {prs}", body=body).status == 201
        assert call(gh, "POST", "/repos/Org/Repo/issues/6/comments", auth=f"token {prs}", body=body).status == 403


def test_workflow_run_rerun(gh: GitHubDouble, keys: Keys) -> None:
    gh.add_workflow_run("Org/Repo", 555, conclusion="failure")
    tok = token(gh, keys)
    got = call(gh, "GET", "/repos/Org/Repo/actions/runs/555", auth=f"token {tok}")
    assert (got.status, got.json["conclusion"]) == (200, "failure")
    rerun = call(gh, "POST", "/repos/Org/Repo/actions/runs/555/rerun-failed-jobs", auth=f"token {tok}")
    assert (rerun.status, rerun.json) == (201, {})
    assert gh.workflow_run("org/repo", 555)["run_attempt"] == 2
    busy = call(gh, "POST", "/repos/Org/Repo/actions/runs/555/rerun-failed-jobs", auth=f"token {tok}")
    assert (busy.status, busy.json["message"]) == (403, "This workflow is already running")
    assert call(gh, "GET", "/repos/Org/Repo/actions/runs/556", auth=f"token {tok}").status == 404
    assert gh.reruns("org/repo") == [555]


def test_install_rules(gh: GitHubDouble) -> None:
    with pytest.raises(ValueError, match="already has installation"):
        gh.install("Org/Third", installation_id=8)
    with pytest.raises(ValueError, match="belongs to"):
        gh.install("Else/Repo", installation_id=7)
    with pytest.raises(ValueError, match="set_installation_permissions"):
        gh.install("Org/Third", installation_id=7, permissions={"metadata": "read"})


def test_stop_is_prompt_even_with_a_pending_delay(keys: Keys) -> None:
    gh = GitHubDouble(APP_ID, keys.public_pem)
    gh.script("GET", r"/anything", [Reply.slow(30)])
    sock = socket.create_connection(("127.0.0.1", gh.port))
    sock.sendall(b"GET /anything HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\n")
    time.sleep(0.05)
    started = time.monotonic()
    gh.stop()
    assert time.monotonic() - started < 2
    sock.close()
    assert gh.internal_errors == []


def test_keep_alive_framing(gh: GitHubDouble, keys: Keys) -> None:
    # One persistent HTTP/1.1 connection across a 204, a 404, a 200 and a 304 (what urllib3 pools do).
    gh.put_file("Org/Repo", "f.txt", "main", "hello")
    tok = token(gh, keys)
    conn = http.client.HTTPConnection("127.0.0.1", gh.port, timeout=5)
    auth = {"Authorization": f"token {tok}", "User-Agent": "t"}
    statuses = []
    etag = ""
    for method, path, body, extra in [
        ("POST", "/repos/Org/Repo/dispatches", b'{"event_type":"e"}', {}),
        ("GET", "/repos/Org/Repo/branches", None, {}),
        ("GET", "/repos/Org/Repo/contents/f.txt", None, {}),
        ("GET", "/repos/Org/Repo/contents/f.txt", None, {"If-None-Match": "<etag>"}),
    ]:
        headers = {**auth, **{k: (etag if v == "<etag>" else v) for k, v in extra.items()}}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        etag = resp.getheader("etag") or etag
        statuses.append(resp.status)
    conn.close()
    assert statuses == [204, 404, 200, 304]


# ----------------------------------------------------------------------------- random faults


def test_chaos_draws_faults_at_the_given_shares_and_records_them(gh: GitHubDouble, keys: Keys) -> None:
    gh.chaos(
        "POST",
        r"/repos/[^/]+/[^/]+/dispatches",
        [(0.2, Reply(502)), (0.1, Reply.too_many_requests(retry_after=3)), (0.1, Reply.secondary_rate_limit(3))],
        seed=7,
    )
    tok = token(gh, keys)
    answers = [dispatch(gh, tok).status for _ in range(400)]
    assert 50 <= answers.count(502) <= 110 and 20 <= answers.count(429) <= 65 and 20 <= answers.count(403) <= 65
    recs = [r for r in gh.requests if r.path.endswith("/dispatches")]
    assert {r.fault for r in recs} == {None, "502", "429", "secondary_403"}
    assert all((r.fault is None) == r.accepted for r in recs)  # only the normal answers did anything
    assert len(gh.dispatches("Org/Repo")) == answers.count(204)
    assert all(r.response_headers["retry-after"] == "3" for r in recs if r.fault in ("429", "secondary_403"))
    # Token requests do not match the rule: they are never faulted.
    assert all(r.fault is None for r in gh.requests if r.path.endswith("/access_tokens"))


def test_a_script_takes_precedence_over_chaos(gh: GitHubDouble, keys: Keys) -> None:
    gh.chaos("*", r".*", [(1.0, Reply(502))])
    gh.script("POST", r"/app/installations/7/access_tokens", [Reply.normal()])
    assert mint(gh, keys).status == 201
    assert mint(gh, keys).status == 502


def test_accept_then_hang_carries_out_the_request_and_answers_too_late(gh: GitHubDouble, keys: Keys) -> None:
    tok = token(gh, keys)
    gh.script("POST", r"/repos/org/repo/dispatches", [Reply.accept_then_hang(2)])
    start = time.monotonic()
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        dispatch(gh, tok, timeout=0.5)
    assert time.monotonic() - start < 1.5
    assert len(gh.dispatches("Org/Repo")) == 1  # GitHub did it although the client never heard
    rec = next(r for r in gh.requests if r.path.endswith("/dispatches"))
    assert rec.fault == "timeout" and rec.accepted


def test_chaos_refuses_probabilities_over_one(gh: GitHubDouble) -> None:
    with pytest.raises(ValueError, match="sum to at most 1"):
        gh.chaos("*", r".*", [(0.7, Reply(502)), (0.4, Reply(500))])


# ----------------------------------------------------------------------------- the App's webhook deliveries


class Receiver:
    """A webhook receiver on loopback: records each request and answers with the next queued status."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.statuses: list[int] = []
        self.delay = 0.0
        self.gate: threading.Event | None = None  # when set: each request waits for it before being answered
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                time.sleep(receiver.delay)
                if receiver.gate is not None:
                    receiver.gate.wait(10)
                status = receiver.statuses.pop(0) if receiver.statuses else 202
                out = json.dumps({"status": status}).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    return  # GitHub gave up waiting (the timed-out delivery's test): nobody reads the answer

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhook"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


EVENT = {"action": "opened", "installation": {"id": 7}, "repository": {"id": 1001, "full_name": "Org/Repo"}}


def deliveries(gh: GitHubDouble, keys: Keys, query: str = "") -> Answer:
    return call(gh, "GET", f"/app/hook/deliveries{query}", auth=f"Bearer {app_jwt(keys)}")


def test_deliver_signs_like_github_and_records_the_answer(gh: GitHubDouble, keys: Keys, receiver: Receiver) -> None:
    gh.set_webhook(receiver.url, "s3cret")
    receiver.statuses = [202, 500]
    first = gh.deliver("pull_request", EVENT, guid="guid-1")
    second = gh.deliver("pull_request", EVENT)
    headers, body = receiver.requests[0]
    assert headers["x-github-event"] == "pull_request" and headers["x-github-delivery"] == "guid-1"
    assert headers["x-hub-signature-256"] == "sha256=" + hmac.new(b"s3cret", body, "sha256").hexdigest()
    assert headers["x-hub-signature"] == "sha1=" + hmac.new(b"s3cret", body, "sha1").hexdigest()
    assert headers["user-agent"].startswith("GitHub-Hookshot/")
    assert (first.status_code, first.status, first.ok) == (202, "OK", True)
    assert (second.status_code, second.status, second.ok) == (500, "Invalid HTTP Response: 500", False)
    assert (first.installation_id, first.repository_id, first.action) == (7, 1001, "opened")
    assert second.guid != first.guid and second.id > first.id


def test_a_receiver_slower_than_ten_seconds_is_a_timed_out_delivery(keys: Keys, receiver: Receiver) -> None:
    with GitHubDouble(APP_ID, keys.public_pem, webhook_timeout_s=0.3) as gh:
        gh.set_webhook(receiver.url, "s3cret")
        receiver.delay = 0.6
        record = gh.deliver("push", {"ref": "refs/heads/main"})
        assert (record.status_code, record.status) == (0, "timed out")


def test_deliveries_are_listed_newest_first_with_cursor_pages(gh: GitHubDouble, keys: Keys, receiver: Receiver) -> None:
    gh.set_webhook(receiver.url, "s3cret")
    made = [gh.deliver("push", {"n": i}) for i in range(5)]
    seen: list[int] = []
    query = "?per_page=2"
    pages = 0
    while True:
        answer = deliveries(gh, keys, query)
        assert answer.status == 200
        pages += 1
        seen += [item["id"] for item in answer.json]
        link = answer.headers.get("link")
        if not link:
            break
        assert link.endswith('>; rel="next"')
        query = "?" + urlsplit(link[1 : link.index(">")]).query
    assert pages == 3 and seen == [d.id for d in reversed(made)]
    item = deliveries(gh, keys).json[0]
    assert set(item) == {
        "id", "guid", "delivered_at", "redelivery", "duration", "status", "status_code", "event", "action",
        "installation_id", "repository_id", "throttled_at",
    }  # fmt: skip
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", item["delivered_at"])
    assert deliveries(gh, keys, "?cursor=nonsense").status == 400
    assert call(gh, "GET", "/app/hook/deliveries").status == 401  # the App's JWT only


def test_an_attempt_redelivers_the_same_event_and_guid(gh: GitHubDouble, keys: Keys, receiver: Receiver) -> None:
    gh.set_webhook(receiver.url, "s3cret")
    receiver.statuses = [503]
    failed = gh.deliver("pull_request", EVENT, guid="guid-9")
    answer = call(gh, "POST", f"/app/hook/deliveries/{failed.id}/attempts", auth=f"Bearer {app_jwt(keys)}")
    assert (answer.status, answer.json) == (202, {})
    assert gh.wait_redeliveries()
    again = gh.deliveries_of("guid-9")[-1]
    assert (again.redelivery, again.status_code, again.body, again.event) == (True, 202, failed.body, "pull_request")
    assert receiver.requests[1][0]["x-github-delivery"] == "guid-9"
    assert [d["redelivery"] for d in deliveries(gh, keys, "?redelivery=true").json] == [True]
    unknown = call(gh, "POST", "/app/hook/deliveries/1/attempts", auth=f"Bearer {app_jwt(keys)}")
    assert unknown.status == 404
    assert call(gh, "POST", f"/app/hook/deliveries/{failed.id}/attempts").status == 401


def test_a_branch_a_file_write_and_a_pull_request_as_github_answers_them(gh: GitHubDouble, keys: Keys) -> None:
    gh.set_installation_permissions(7, {"contents": "write", "pull_requests": "write", "metadata": "read"})
    main = "1" * 40
    gh.add_commit("Org/Repo", main, branch="main")
    blob = gh.put_file("Org/Repo", ".github/allowlist.yml", main, b"L1: [a/b]\n")
    auth = f"token {token(gh, keys)}"
    assert call(gh, "GET", "/repos/Org/Repo/git/ref/heads/main", auth=auth).json["object"]["sha"] == main
    assert call(gh, "GET", "/repos/Org/Repo/git/ref/heads/nope", auth=auth).status == 404
    created = call(gh, "POST", "/repos/Org/Repo/git/refs", auth=auth, body={"ref": "refs/heads/topic/x", "sha": main})
    assert created.status == 201
    again = call(gh, "POST", "/repos/Org/Repo/git/refs", auth=auth, body={"ref": "refs/heads/topic/x", "sha": main})
    assert (again.status, again.json["message"]) == (422, "Reference already exists")
    # A pull request needs commits between base and head.
    early = call(gh, "POST", "/repos/Org/Repo/pulls", auth=auth, body={"title": "t", "head": "topic/x", "base": "main"})
    assert early.status == 422 and "No commits between" in early.json["errors"][0]["message"]
    put = {"message": "edit", "content": base64.b64encode(b"L2: [a/b]\n").decode(), "branch": "topic/x"}
    assert call(gh, "PUT", "/repos/Org/Repo/contents/.github/allowlist.yml", auth=auth, body=put).status == 422
    stale = call(gh, "PUT", "/repos/Org/Repo/contents/.github/allowlist.yml", auth=auth, body=put | {"sha": "0" * 40})
    assert stale.status == 409
    done = call(gh, "PUT", "/repos/Org/Repo/contents/.github/allowlist.yml", auth=auth, body=put | {"sha": blob})
    assert done.status == 200 and gh.file_at("Org/Repo", ".github/allowlist.yml", "topic/x") == b"L2: [a/b]\n"
    assert gh.file_at("Org/Repo", ".github/allowlist.yml", "main") == b"L1: [a/b]\n"
    pull = call(gh, "POST", "/repos/Org/Repo/pulls", auth=auth, body={"title": "t", "head": "topic/x", "base": "main"})
    assert pull.status == 201
    number = pull.json["number"]
    twice = call(gh, "POST", "/repos/Org/Repo/pulls", auth=auth, body={"title": "t", "head": "topic/x", "base": "main"})
    assert twice.status == 422 and "already exists" in twice.json["errors"][0]["message"]
    listed = call(gh, "GET", "/repos/Org/Repo/pulls?state=open&head=Org:topic/x&base=main", auth=auth)
    assert [p["number"] for p in listed.json] == [number]
    labels = call(gh, "POST", f"/repos/Org/Repo/issues/{number}/labels", auth=auth, body={"labels": ["x"]})
    assert [lab["name"] for lab in labels.json] == ["x"]
    closed = call(gh, "PATCH", f"/repos/Org/Repo/pulls/{number}", auth=auth, body={"state": "closed"})
    assert closed.json["state"] == "closed"
    assert call(gh, "GET", "/repos/Org/Repo/pulls?state=open&head=Org:topic/x", auth=auth).json == []
    # Moving a branch back needs force: the double keeps no history to prove a fast-forward.
    back = {"sha": main}
    assert call(gh, "PATCH", "/repos/Org/Repo/git/refs/heads/topic/x", auth=auth, body=back).status == 422
    moved = call(gh, "PATCH", "/repos/Org/Repo/git/refs/heads/topic/x", auth=auth, body=back | {"force": True})
    assert moved.status == 200 and gh.file_at("Org/Repo", ".github/allowlist.yml", "topic/x") == b"L1: [a/b]\n"
    # A token without pull_requests cannot open one.
    gh.set_installation_permissions(7, {"contents": "write", "metadata": "read"})
    denied = call(gh, "GET", "/repos/Org/Repo/pulls", auth=f"token {token(gh, keys)}")
    assert denied.status == 403


# ----------------------------------------------------------------------------- workflow runs, their jobs and webhooks


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_hooks(receiver: Receiver) -> list[dict[str, Any]]:
    """The workflow_run webhooks the receiver got, in order."""
    return [json.loads(body) for headers, body in receiver.requests if headers["x-github-event"] == "workflow_run"]


def get_all_jobs(gh: GitHubDouble, tok: str, path: str) -> list[dict[str, Any]]:
    """Every page of a jobs listing, following the Link header."""
    jobs: list[dict[str, Any]] = []
    url: str | None = path
    while url is not None:
        answer = call(gh, "GET", url, auth=f"token {tok}")
        assert answer.status == 200, answer.json
        jobs += answer.json["jobs"]
        found = re.search(r'<([^>]+)>; rel="next"', answer.headers.get("link", ""))
        url = found.group(1).removeprefix(gh.url) if found else None
    return jobs


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def timed(keys: Keys, clock: Clock) -> Iterator[GitHubDouble]:
    """Org/Repo installed (actions: write) on a double whose time the test moves."""
    with GitHubDouble(app_id=APP_ID, app_public_key_pem=keys.public_pem, clock=clock) as double:
        double.install("Org/Repo", installation_id=7, repo_id=1001)
        yield double


def test_a_repository_dispatch_starts_a_queued_run_and_github_sends_requested(
    gh: GitHubDouble, keys: Keys, receiver: Receiver
) -> None:
    gh.set_webhook(receiver.url, "s3cret")
    gh.set_dispatch_workflow("Org/Repo", lambda body: f"crcr {body['event_type']}", jobs=("build", "test"))
    tok = token(gh, keys)
    assert dispatch(gh, tok).status == 204
    [run] = gh.runs_of("org/repo")
    assert (run["status"], run["conclusion"], run["event"], run["run_attempt"]) == (
        "queued", None, "repository_dispatch", 1
    )  # fmt: skip
    assert (run["display_title"], run["name"], run["path"]) == ("crcr upstream", "CI", ".github/workflows/ci.yml")
    got = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run['id']}", auth=f"token {tok}")
    assert (got.status, got.json["status"], got.json["display_title"]) == (200, "queued", "crcr upstream")
    listed = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run['id']}/attempts/1/jobs", auth=f"token {tok}")
    assert listed.status == 200 and listed.json["total_count"] == 2 and "link" not in listed.headers
    jobs = listed.json["jobs"]
    assert [(j["name"], j["status"], j["conclusion"], j["run_attempt"]) for j in jobs] == [
        ("build", "queued", None, 1), ("test", "queued", None, 1)
    ]  # fmt: skip
    assert len({j["id"] for j in jobs}) == 2 and all(j["run_id"] == run["id"] for j in jobs)
    assert all(j["check_run_url"].endswith(f"/repos/Org/Repo/check-runs/{j['id']}") for j in jobs)
    assert all(j["workflow_name"] == "CI" and j["runner_name"] is None for j in jobs)
    assert gh.jobs_of("org/repo", run["id"]) == jobs
    # GitHub sends the App workflow_run "requested", signed, after answering the dispatch.
    assert gh.wait_webhooks()
    [(headers, body)] = receiver.requests
    assert headers["x-github-event"] == "workflow_run"
    assert headers["x-hub-signature-256"] == "sha256=" + hmac.new(b"s3cret", body, "sha256").hexdigest()
    hook = json.loads(body)
    assert hook["action"] == "requested"
    assert {k: hook["workflow_run"][k] for k in ("id", "status", "conclusion", "event", "display_title")} == {
        "id": run["id"], "status": "queued", "conclusion": None, "event": "repository_dispatch",
        "display_title": "crcr upstream",
    }  # fmt: skip
    assert hook["workflow_run"]["html_url"] == f"https://github.com/Org/Repo/actions/runs/{run['id']}"
    assert {k: hook["workflow"][k] for k in ("id", "name", "path")} == {
        "id": run["workflow_id"], "name": "CI", "path": ".github/workflows/ci.yml"
    }  # fmt: skip
    assert (hook["repository"]["full_name"], hook["repository"]["id"], hook["installation"]["id"]) == (
        "Org/Repo", 1001, 7
    )  # fmt: skip
    assert hook["organization"]["login"] == "Org"
    assert (hook["sender"]["login"], hook["sender"]["type"]) == ("crcr-test-app[bot]", "Bot")
    [delivery] = gh.hook_deliveries
    assert (delivery.event, delivery.action, delivery.ok, delivery.installation_id, delivery.repository_id) == (
        "workflow_run", "requested", True, 7, 1001
    )  # fmt: skip
    # The positional form of before still works: one more workflow at the same path replaces this one.
    gh.set_dispatch_workflow("Org/Repo", lambda body: "CI")
    assert dispatch(gh, tok).status == 204
    assert [r["display_title"] for r in gh.runs_of("Org/Repo")] == ["crcr upstream", "CI"]
    assert [j["name"] for j in gh.jobs_of("Org/Repo", gh.runs_of("Org/Repo")[1]["id"])] == ["build-and-test"]


def test_event_types_choose_the_workflows_a_dispatch_starts_and_no_webhook_means_no_delivery(
    gh: GitHubDouble, keys: Keys
) -> None:
    gh.set_dispatch_workflow("Org/Repo", lambda body: "ci", event_types=["upstream", "pr"])
    gh.set_dispatch_workflow(
        "Org/Repo", lambda body: "nightly", name="Nightly", path=".github/workflows/nightly.yml", event_types=["night"]
    )
    gh.set_dispatch_workflow("Org/Repo", lambda body: "any", name="Any", path=".github/workflows/any.yml")
    tok = token(gh, keys)
    for event_type in ("upstream", "night", "other"):
        assert dispatch(gh, tok, body={"event_type": event_type}).status == 204
    assert [(r["display_title"], r["path"]) for r in gh.runs_of("Org/Repo")] == [
        ("ci", ".github/workflows/ci.yml"),
        ("any", ".github/workflows/any.yml"),
        ("nightly", ".github/workflows/nightly.yml"),
        ("any", ".github/workflows/any.yml"),
        ("any", ".github/workflows/any.yml"),
    ]
    assert len(gh.dispatches("Org/Repo")) == 3
    assert gh.wait_webhooks(timeout=1) and gh.hook_deliveries == []  # no webhook configured: GitHub sends nothing
    with pytest.raises(ValueError, match="distinct"):
        gh.set_dispatch_workflow("Org/Repo", lambda body: "x", jobs=("a", "a"))


def test_a_run_lifecycle_sends_requested_in_progress_completed_in_order(
    timed: GitHubDouble, keys: Keys, clock: Clock, receiver: Receiver
) -> None:
    gh = timed
    gh.set_webhook(receiver.url, "s3cret")
    gh.set_dispatch_workflow("Org/Repo", lambda body: "t", jobs=("build", "test", "lint"))
    tok = token(gh, keys)
    created = clock.now
    assert dispatch(gh, tok).status == 204
    run_id = gh.runs_of("Org/Repo")[0]["id"]
    clock.now += 60
    assert gh.start_run("Org/Repo", run_id)["status"] == "in_progress"
    running = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}/jobs", auth=f"token {tok}").json["jobs"]
    assert all(j["status"] == "in_progress" and j["started_at"] == iso(created + 60) for j in running)
    assert all(j["runner_name"] and j["completed_at"] is None for j in running)
    clock.now += 60
    done = gh.finish_run("Org/Repo", run_id, {"test": "failure"})
    assert (done["status"], done["conclusion"], done["updated_at"]) == ("completed", "failure", iso(created + 120))
    got = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}", auth=f"token {tok}").json
    assert (got["status"], got["conclusion"], got["run_attempt"]) == ("completed", "failure", 1)
    jobs = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}/attempts/1/jobs", auth=f"token {tok}").json["jobs"]
    assert [(j["name"], j["status"], j["conclusion"]) for j in jobs] == [
        ("build", "completed", "success"), ("test", "completed", "failure"), ("lint", "completed", "success")
    ]  # fmt: skip
    assert all((j["started_at"], j["completed_at"]) == (iso(created + 60), iso(created + 120)) for j in jobs)
    assert [j["id"] for j in jobs] == [j["id"] for j in running]
    assert gh.wait_webhooks()
    hooks = run_hooks(receiver)
    assert [(h["action"], h["workflow_run"]["status"], h["workflow_run"]["conclusion"]) for h in hooks] == [
        ("requested", "queued", None), ("in_progress", "in_progress", None), ("completed", "completed", "failure")
    ]  # fmt: skip
    assert {h["workflow_run"]["id"] for h in hooks} == {run_id}
    assert hooks[2]["workflow_run"]["updated_at"] == iso(created + 120)
    assert [d.action for d in gh.hook_deliveries] == ["requested", "in_progress", "completed"]
    with pytest.raises(ValueError, match="already completed"):
        gh.finish_run("Org/Repo", run_id)
    with pytest.raises(ValueError, match="not queued"):
        gh.start_run("Org/Repo", run_id)


@pytest.mark.parametrize(
    ("conclusions", "expected"),
    [
        ({}, "success"),
        ({"a": "failure", "b": "cancelled"}, "failure"),
        ({"a": "timed_out"}, "failure"),
        ({"a": "cancelled"}, "cancelled"),
        ({"a": "skipped", "b": "skipped"}, "skipped"),
        ({"a": "skipped"}, "success"),
        ({"a": "neutral"}, "success"),
    ],
)
def test_the_run_conclusion_is_derived_from_its_jobs(
    gh: GitHubDouble, keys: Keys, conclusions: dict[str, str], expected: str
) -> None:
    gh.set_dispatch_workflow("Org/Repo", lambda body: "t", jobs=("a", "b"))
    tok = token(gh, keys)
    assert dispatch(gh, tok).status == 204
    run_id = gh.runs_of("Org/Repo")[0]["id"]
    gh.finish_run("Org/Repo", run_id, conclusions)
    got = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}", auth=f"token {tok}").json
    assert (got["status"], got["conclusion"]) == ("completed", expected)
    assert run_conclusion([*conclusions.values(), *["success"] * (2 - len(conclusions))]) == expected


def test_a_run_finished_or_cancelled_without_starting(
    timed: GitHubDouble, keys: Keys, clock: Clock, receiver: Receiver
) -> None:
    gh = timed
    gh.set_webhook(receiver.url, "s3cret")
    gh.set_dispatch_workflow("Org/Repo", lambda body: "t", jobs=("build", "test"))
    tok = token(gh, keys)
    assert dispatch(gh, tok).status == 204 and dispatch(gh, tok).status == 204
    first, second = (r["id"] for r in gh.runs_of("Org/Repo"))
    clock.now += 30
    assert gh.finish_run("Org/Repo", first, "skipped")["conclusion"] == "skipped"
    for job in gh.jobs_of("Org/Repo", first):
        assert job["started_at"] == job["completed_at"] == iso(clock.now) and job["runner_name"] is None
    gh.start_run("Org/Repo", second)
    gh.finish_run("Org/Repo", second, {"build": "success"}, deliver=False)
    with pytest.raises(ValueError, match="already completed"):
        gh.cancel_run("Org/Repo", second)
    # Cancelling: the unfinished jobs are cancelled, and the run is completed, cancelled.
    assert dispatch(gh, tok).status == 204
    third = gh.runs_of("Org/Repo")[-1]["id"]
    with pytest.raises(ValueError, match="no unfinished jobs named"):
        gh.finish_run("Org/Repo", third, {"nope": "success"})
    with pytest.raises(ValueError, match="not job conclusions"):
        gh.finish_run("Org/Repo", third, "great")
    gh.start_run("Org/Repo", third)
    cancelled = gh.cancel_run("Org/Repo", third)
    assert (cancelled["status"], cancelled["conclusion"]) == ("completed", "cancelled")
    assert [(j["status"], j["conclusion"]) for j in gh.jobs_of("Org/Repo", third)] == [("completed", "cancelled")] * 2
    assert gh.wait_webhooks()
    seen = [(h["workflow_run"]["id"], h["action"], h["workflow_run"]["conclusion"]) for h in run_hooks(receiver)]
    assert seen == [
        (first, "requested", None), (second, "requested", None), (first, "completed", "skipped"),
        (second, "in_progress", None), (third, "requested", None), (third, "in_progress", None),
        (third, "completed", "cancelled"),
    ]  # fmt: skip
    assert [(e, p["workflow_run"]["id"], p["action"]) for e, p in gh.dropped_webhooks] == [
        ("workflow_run", second, "completed")
    ]  # fmt: skip


def test_rerun_failed_jobs_makes_an_attempt_whose_rerun_jobs_have_new_ids(
    gh: GitHubDouble, keys: Keys, receiver: Receiver
) -> None:
    gh.set_webhook(receiver.url, "s3cret")
    gh.set_dispatch_workflow("Org/Repo", lambda body: "t", jobs=("build", "test", "lint"))
    tok = token(gh, keys)
    assert dispatch(gh, tok).status == 204
    run_id = gh.runs_of("Org/Repo")[0]["id"]
    gh.start_run("Org/Repo", run_id)
    gh.finish_run("Org/Repo", run_id, {"test": "failure", "lint": "cancelled"})
    first = gh.jobs_of("Org/Repo", run_id)
    rerun = call(gh, "POST", f"/repos/Org/Repo/actions/runs/{run_id}/rerun-failed-jobs", auth=f"token {tok}")
    assert (rerun.status, rerun.json) == (201, {})
    got = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}", auth=f"token {tok}").json
    assert (got["status"], got["conclusion"], got["run_attempt"]) == ("queued", None, 2)
    assert got["previous_attempt_url"].endswith(f"/repos/Org/Repo/actions/runs/{run_id}/attempts/1")
    second = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}/attempts/2/jobs", auth=f"token {tok}").json
    build, test, lint = second["jobs"]
    assert build == first[0]  # carried over as it was: same id, completed, attempt 1
    assert [(j["name"], j["status"], j["conclusion"], j["run_attempt"]) for j in (test, lint)] == [
        ("test", "queued", None, 2), ("lint", "queued", None, 2)
    ]  # fmt: skip
    assert {test["id"], lint["id"]}.isdisjoint(j["id"] for j in first) and test["id"] > first[-1]["id"]
    again = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}/attempts/1/jobs", auth=f"token {tok}").json
    assert again["jobs"] == first  # the previous attempt stays listable
    assert call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}/attempts/3/jobs", auth=f"token {tok}").status == 404
    latest = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}/jobs", auth=f"token {tok}").json
    assert latest == second
    every = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}/jobs?filter=all", auth=f"token {tok}").json
    assert [j["id"] for j in every["jobs"]] == [j["id"] for j in first] + [test["id"], lint["id"]]
    done = gh.finish_run("Org/Repo", run_id)
    assert (done["conclusion"], done["run_attempt"]) == ("success", 2)
    assert gh.wait_webhooks()
    hooks = run_hooks(receiver)
    assert [(h["action"], h["workflow_run"]["run_attempt"]) for h in hooks] == [
        ("requested", 1), ("in_progress", 1), ("completed", 1), ("requested", 2), ("completed", 2)
    ]  # fmt: skip
    assert hooks[3]["workflow_run"]["status"] == "queued"
    assert hooks[3]["sender"]["login"] == "crcr-test-app[bot]"
    # A seeded run has its jobs too: a failed run's job failed, and re-running it gives it a new id.
    gh.add_workflow_run("Org/Repo", 555, conclusion="failure")
    [seeded] = call(gh, "GET", "/repos/Org/Repo/actions/runs/555/attempts/1/jobs", auth=f"token {tok}").json["jobs"]
    assert (seeded["name"], seeded["status"], seeded["conclusion"]) == ("build-and-test", "completed", "failure")
    assert call(gh, "POST", "/repos/Org/Repo/actions/runs/555/rerun-failed-jobs", auth=f"token {tok}").status == 201
    [rerun_job] = gh.jobs_of("Org/Repo", 555)
    assert rerun_job["id"] != seeded["id"] and rerun_job["status"] == "queued"


def test_jobs_are_listed_in_pages_with_a_link_header(gh: GitHubDouble, keys: Keys) -> None:
    names = tuple(f"job-{i}" for i in range(5))
    gh.set_dispatch_workflow("Org/Repo", lambda body: "t", jobs=names)
    tok = token(gh, keys)
    assert dispatch(gh, tok).status == 204
    run_id = gh.runs_of("Org/Repo")[0]["id"]
    path = f"/repos/Org/Repo/actions/runs/{run_id}/attempts/1/jobs"
    gh.reset_requests()
    first = call(gh, "GET", f"{path}?per_page=2", auth=f"token {tok}")
    assert (first.json["total_count"], [j["name"] for j in first.json["jobs"]]) == (5, ["job-0", "job-1"])
    assert f'<{gh.url}{path}?per_page=2&page=2>; rel="next"' in first.headers["link"]
    assert f'<{gh.url}{path}?per_page=2&page=3>; rel="last"' in first.headers["link"]
    middle = call(gh, "GET", f"{path}?per_page=2&page=2", auth=f"token {tok}")
    assert 'rel="prev"' in middle.headers["link"] and 'rel="first"' in middle.headers["link"]
    assert [j["name"] for j in get_all_jobs(gh, tok, f"{path}?per_page=2")] == list(names)
    assert [j["name"] for j in get_all_jobs(gh, tok, f"/repos/Org/Repo/actions/runs/{run_id}/jobs?per_page=3")] == list(
        names
    )
    big = call(gh, "GET", f"{path}?per_page=500", auth=f"token {tok}")
    assert len(big.json["jobs"]) == 5 and "link" not in big.headers
    beyond = call(gh, "GET", f"{path}?per_page=2&page=9", auth=f"token {tok}")
    assert (beyond.status, beyond.json["jobs"], beyond.json["total_count"]) == (200, [], 5)
    assert call(gh, "GET", f"{path}?per_page=x", auth=f"token {tok}").status == 422
    bad_filter = call(gh, "GET", f"/repos/Org/Repo/actions/runs/{run_id}/jobs?filter=old", auth=f"token {tok}")
    assert bad_filter.status == 422
    assert call(gh, "GET", "/repos/Org/Repo/actions/runs/1/attempts/1/jobs", auth=f"token {tok}").status == 404
    assert call(gh, "GET", "/repos/Org/Repo/actions/runs/1/jobs", auth=f"token {tok}").status == 404
    jobs_requests = [r for r in gh.requests if r.path.endswith("/jobs")]
    assert len(jobs_requests) == 2 + 3 + 2 + 6 and not gh.unexpected  # each recorded, as every request is
    assert jobs_requests[0].installation_id == 7
    # actions: read is needed.
    gh.set_installation_permissions(7, {"contents": "write", "metadata": "read"})
    denied = call(gh, "GET", path, auth=f"token {token(gh, keys)}")
    assert (denied.status, denied.headers["x-accepted-github-permissions"]) == (403, "actions=read")


def test_a_workflow_dispatch_as_github_answers_it(gh: GitHubDouble, keys: Keys, receiver: Receiver) -> None:
    gh.set_webhook(receiver.url, "s3cret")
    gh.add_commit("Org/Repo", SHA, branch="main")
    gh.set_dispatch_workflow("Org/Repo", lambda body: "ci")  # no workflow_dispatch trigger
    gh.set_dispatch_workflow(
        "Org/Repo",
        lambda body: f"deploy {body['inputs']['id']} on {body['ref']}",
        name="Deploy",
        path=".github/workflows/deploy.yml",
        jobs=("deploy",),
        on_repository_dispatch=False,
        on_workflow_dispatch=True,
    )
    tok = token(gh, keys)
    url = "/repos/Org/Repo/actions/workflows/deploy.yml/dispatches"
    plain = call(gh, "POST", url, auth=f"token {tok}", body={"ref": "main", "inputs": {"id": "a1"}})
    assert (plain.status, plain.body) == (204, b"")
    [run] = gh.runs_of("Org/Repo")
    assert (run["event"], run["display_title"], run["head_branch"], run["head_sha"]) == (
        "workflow_dispatch", "deploy a1 on main", "main", SHA
    )  # fmt: skip
    assert (run["status"], run["name"], run["path"]) == ("queued", "Deploy", ".github/workflows/deploy.yml")
    detailed = call(
        gh,
        "POST",
        url,
        auth=f"token {tok}",
        body={"ref": "refs/heads/main", "inputs": {"id": "a2"}, "return_run_details": True},
    )
    assert detailed.status == 200
    run_id = detailed.json["workflow_run_id"]
    assert detailed.json == {
        "workflow_run_id": run_id,
        "run_url": f"{gh.url}/repos/Org/Repo/actions/runs/{run_id}",
        "html_url": f"https://github.com/Org/Repo/actions/runs/{run_id}",
    }
    fetched = call(gh, "GET", detailed.json["run_url"].removeprefix(gh.url), auth=f"token {tok}").json
    assert (fetched["id"], fetched["display_title"], fetched["status"]) == (
        run_id,
        "deploy a2 on refs/heads/main",
        "queued",
    )
    by_id = f"/repos/Org/Repo/actions/workflows/{run['workflow_id']}/dispatches"
    assert call(gh, "POST", by_id, auth=f"token {tok}", body={"ref": "main", "inputs": {"id": "a3"}}).status == 204
    # The same lifecycle as a repository_dispatch's run.
    gh.start_run("Org/Repo", run_id)
    assert gh.finish_run("Org/Repo", run_id, "failure")["conclusion"] == "failure"
    assert gh.wait_webhooks()
    assert [(h["workflow_run"]["id"], h["action"]) for h in run_hooks(receiver)][1:4] == [
        (run_id, "requested"), (gh.runs_of("Org/Repo")[2]["id"], "requested"), (run_id, "in_progress")
    ]  # fmt: skip
    assert {h["workflow_run"]["event"] for h in run_hooks(receiver)} == {"workflow_dispatch"}
    assert [body["inputs"]["id"] for _, body in gh.workflow_dispatches("org/repo")] == ["a1", "a2", "a3"]
    assert {path for path, _ in gh.workflow_dispatches("org/repo")} == {".github/workflows/deploy.yml"}
    # A repository_dispatch starts ci.yml only: deploy.yml listens to workflow_dispatch alone.
    assert dispatch(gh, tok).status == 204 and gh.runs_of("Org/Repo")[-1]["path"] == ".github/workflows/ci.yml"
    before = len(gh.runs_of("Org/Repo"))

    def post(workflow: str, body: Any) -> Answer:
        return call(
            gh, "POST", f"/repos/Org/Repo/actions/workflows/{workflow}/dispatches", auth=f"token {tok}", body=body
        )

    assert post("nope.yml", {"ref": "main"}).status == 404
    no_trigger = post("ci.yml", {"ref": "main"})
    assert (no_trigger.status, no_trigger.json["message"]) == (
        422,
        "Workflow does not have 'workflow_dispatch' trigger",
    )
    many = post("deploy.yml", {"ref": "main", "inputs": {f"k{i}": "v" for i in range(26)}})
    assert many.status == 422
    assert many.json["message"] == "Invalid request.\n\nNo more than 25 properties are allowed; 26 were supplied."
    huge = post("deploy.yml", {"ref": "main", "inputs": {"id": "x" * 65535}})
    assert huge.status == 422 and "65535" in huge.json["message"]
    assert post("deploy.yml", {"inputs": {"id": "x"}}).json["message"] == 'Invalid request.\n\n"ref" wasn\'t supplied.'
    unknown_ref = post("deploy.yml", {"ref": "nope", "inputs": {"id": "x"}})
    assert (unknown_ref.status, unknown_ref.json["message"]) == (422, "No ref found for: nope")
    assert post("deploy.yml", {"ref": "main", "return_run_details": "yes"}).status == 422
    assert post("deploy.yml", {"ref": "main", "inputs": []}).status == 422
    assert len(gh.runs_of("Org/Repo")) == before  # nothing refused started a run
    assert post("deploy.yml", {"ref": "main", "inputs": {f"k{i}": "v" for i in range(24)} | {"id": "z"}}).status == 204
    # An older GitHub Enterprise Server answers 204 whatever is asked; the run still starts.
    gh.legacy_dispatch("org/repo")
    legacy = post("deploy.yml", {"ref": "main", "inputs": {"id": "old"}, "return_run_details": True})
    assert (legacy.status, legacy.body) == (204, b"")
    assert gh.runs_of("Org/Repo")[-1]["display_title"] == "deploy old on main"
    gh.legacy_dispatch(False)
    assert post("deploy.yml", {"ref": "main", "inputs": {"id": "new"}, "return_run_details": True}).status == 200
    gh.legacy_dispatch()
    assert post("deploy.yml", {"ref": "main", "inputs": {"id": "n"}, "return_run_details": True}).status == 204
    # actions: write is needed.
    read_only = token(gh, keys, body={"permissions": {"actions": "read"}})
    denied = call(gh, "POST", url, auth=f"token {read_only}", body={"ref": "main", "inputs": {"id": "x"}})
    assert (denied.status, denied.headers["x-accepted-github-permissions"]) == (403, "actions=write")
    assert not gh.internal_errors


def test_webhooks_go_out_after_the_answer_one_at_a_time_in_order(
    gh: GitHubDouble, keys: Keys, receiver: Receiver
) -> None:
    gh.set_webhook(receiver.url, "s3cret")
    gh.set_dispatch_workflow("Org/Repo", lambda body: body["event_type"])
    receiver.gate = threading.Event()  # the receiver holds every delivery until the test lets it answer
    tok = token(gh, keys)
    for n in range(3):
        assert dispatch(gh, tok, body={"event_type": f"e{n}"}, timeout=2).status == 204
    assert not gh.wait_webhooks(timeout=0.05)  # the first delivery is waiting on the receiver, the others queued
    assert len(receiver.requests) == 1
    receiver.gate.set()
    assert gh.wait_webhooks()
    assert [h["workflow_run"]["display_title"] for h in run_hooks(receiver)] == ["e0", "e1", "e2"]
    assert [d.action for d in gh.hook_deliveries] == ["requested"] * 3 and all(d.ok for d in gh.hook_deliveries)
    assert not gh.internal_errors


def test_lost_webhooks_are_failed_deliveries_or_never_tried(gh: GitHubDouble, keys: Keys, receiver: Receiver) -> None:
    gh.set_webhook(receiver.url, "s3cret")
    gh.set_dispatch_workflow("Org/Repo", lambda body: "t")
    gh.drop_webhooks(lambda event, payload: payload["action"] == "in_progress")
    tok = token(gh, keys)
    assert dispatch(gh, tok).status == 204
    run_id = gh.runs_of("Org/Repo")[0]["id"]
    gh.start_run("Org/Repo", run_id)
    gh.finish_run("Org/Repo", run_id)
    assert gh.wait_webhooks()
    assert [h["action"] for h in run_hooks(receiver)] == ["requested", "completed"]
    lost = gh.hook_deliveries[1]
    assert (lost.action, lost.status_code, lost.status, lost.ok) == (
        "in_progress",
        0,
        "failed to connect to host",
        False,
    )
    listed = deliveries(gh, keys).json
    assert [(d["action"], d["status_code"]) for d in listed] == [
        ("completed", 202),
        ("in_progress", 0),
        ("requested", 202),
    ]
    # The App's reconciler asks for it again: this time it arrives.
    assert call(gh, "POST", f"/app/hook/deliveries/{lost.id}/attempts", auth=f"Bearer {app_jwt(keys)}").status == 202
    assert gh.wait_redeliveries()
    assert [h["action"] for h in run_hooks(receiver)] == ["requested", "completed", "in_progress"]
    assert receiver.requests[-1][0]["x-github-delivery"] == lost.guid
    # Never tried at all: not in the delivery log.
    gh.drop_webhooks(lambda event, payload: payload["action"] == "requested", record=False)
    assert dispatch(gh, tok).status == 204
    second = gh.runs_of("Org/Repo")[1]["id"]
    gh.start_run("Org/Repo", second, deliver=False)
    gh.drop_webhooks(None)
    gh.cancel_run("Org/Repo", second)
    assert gh.wait_webhooks()
    assert [(p["workflow_run"]["id"], p["action"]) for _, p in gh.dropped_webhooks] == [
        (second, "requested"), (second, "in_progress")
    ]  # fmt: skip
    assert [(d.action, d.ok) for d in gh.hook_deliveries[4:]] == [("completed", True)]
    assert run_hooks(receiver)[-1]["workflow_run"]["conclusion"] == "cancelled"
    assert not gh.internal_errors


# ----------------------------------------------------------------------------- issue search


def test_issue_search_pages_caps_at_a_thousand_and_has_its_own_limit(gh: GitHubDouble, keys: Keys) -> None:
    now = time.time()
    gh.clock = lambda: now  # one minute of search's limit throughout
    for i in range(1005):
        gh.add_search_issue(
            "Org/Repo", i + 1, f"DISABLED test_{i} (__main__.T)", created_at=f"2026-11-{1 + i % 28:02d}T00:00:00Z"
        )
    gh.add_search_issue("Org/Repo", 2000, "Mentions it in the body only", "DISABLED")
    gh.add_search_issue("Org/Repo", 2001, "DISABLED test_pr (__main__.T)", pull_request=True)
    gh.add_search_issue("Org/Repo", 2002, "Flaky test", author="dev", association="MEMBER")
    tok = f"token {token(gh, keys)}"

    def search(q: str, **params: Any) -> Answer:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return call(gh, "GET", f"/search/issues?q={urllib.request.quote(q)}&{query}", auth=tok)

    first = search("repo:Org/Repo is:issue is:open in:title DISABLED", per_page=100, sort="created", order="asc")
    assert first.status == 200 and first.json["total_count"] == 1005 and not first.json["incomplete_results"]
    created = [i["created_at"] for i in first.json["items"]]
    assert created == sorted(created) and 'rel="next"' in first.headers["link"]
    assert first.headers["x-ratelimit-resource"] == "search" and first.headers["x-ratelimit-remaining"] == "29"
    past = search("repo:Org/Repo in:title DISABLED", per_page=100, page=11)
    assert past.status == 422 and "first 1000 search results" in past.json["message"]
    # Without in:title the body counts; is:pr finds the pull request only.
    assert [i["number"] for i in search("repo:Org/Repo DISABLED", per_page=2).json["items"]] == [2001, 2000]
    assert [i["number"] for i in search("repo:Org/Repo in:title DISABLED", per_page=2).json["items"]] == [2001, 1005]
    assert [i["number"] for i in search("repo:Org/Repo is:pr DISABLED").json["items"]] == [2001]
    # Each item names its author and the author's association with the repository, as GitHub's issue objects do.
    [mine] = search("repo:Org/Repo Flaky").json["items"]
    assert (mine["user"]["login"], mine["user"]["type"], mine["author_association"]) == ("dev", "User", "MEMBER")
    assert (
        first.json["items"][0]["user"]["login"] == "pytorch-bot[bot]"
        and first.json["items"][0]["user"]["type"] == "Bot"
    )
    assert search("repo:Org/Elsewhere DISABLED").status == 422  # a repository the token cannot see
    for _ in range(30 - 5):
        search("repo:Org/Repo DISABLED")
    limited = search("repo:Org/Repo DISABLED")
    assert limited.status == 403 and "rate limit exceeded" in limited.json["message"]
    assert (limited.headers["x-ratelimit-remaining"], limited.headers["x-ratelimit-resource"]) == ("0", "search")
