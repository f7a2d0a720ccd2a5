"""Self-tests of the GitHub Actions OIDC issuer double: real keys, real HTTP, PyJWT as the judge."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography import x509
from jwt import PyJWK, PyJWKSet

from tests.doubles.oidc_issuer import FORGE_KINDS, GITHUB_CLAIMS_SUPPORTED, GITHUB_ISSUER, OidcIssuer

ALLOWED_ALGS = ["RS256", "ES256"]

# Every claim of a default token (no environment, no enterprise), as in GitHub's tokens.
GITHUB_DEFAULT_CLAIMS = {
    "jti",
    "sub",
    "aud",
    "iss",
    "nbf",
    "exp",
    "iat",
    "ref",
    "sha",
    "repository",
    "repository_owner",
    "repository_owner_id",
    "run_id",
    "run_number",
    "run_attempt",
    "repository_visibility",
    "repository_id",
    "actor_id",
    "actor",
    "workflow",
    "head_ref",
    "base_ref",
    "event_name",
    "ref_type",
    "ref_protected",
    "workflow_ref",
    "workflow_sha",
    "job_workflow_ref",
    "job_workflow_sha",
    "runner_environment",
    "check_run_id",
}
NUMERIC_DATE_CLAIMS = {"exp", "iat", "nbf"}


class UnknownKidError(jwt.InvalidTokenError):
    pass


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        return json.load(response)


def verify(token: str, issuer_url: str, audience: str = "crcr", *, leeway: int = 0) -> dict[str, Any]:
    """A correct verifier: discovery -> jwks_uri -> key by kid; alg allowlist; iss, aud, exp, nbf, iat."""
    discovery = _get_json(issuer_url + "/.well-known/openid-configuration")
    assert discovery["issuer"] == issuer_url
    keyset = PyJWKSet.from_dict(_get_json(discovery["jwks_uri"]))
    kid = jwt.get_unverified_header(token).get("kid")
    try:
        key = keyset[kid]
    except KeyError:
        raise UnknownKidError(f"no served key has kid {kid!r}") from None
    return jwt.decode(
        token,
        key,  # a PyJWK: PyJWT refuses a header alg other than the key's own
        algorithms=ALLOWED_ALGS,
        audience=audience,
        issuer=issuer_url,
        leeway=leeway,
        options={"require": ["exp", "iat", "nbf", "iss", "aud", "sub"]},
    )


def _segments(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    head, payload, signature = token.split(".")

    def decode(segment: str) -> bytes:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))

    return (
        json.loads(decode(head)),
        json.loads(decode(payload)),
        decode(signature),
        f"{head}.{payload}".encode(),
    )


@pytest.fixture(scope="module")
def issuer() -> Iterator[OidcIssuer]:
    with OidcIssuer() as double:
        yield double


@pytest.fixture(scope="module")
def es_issuer() -> Iterator[OidcIssuer]:
    with OidcIssuer(alg="ES256") as double:
        yield double


# -- genuine tokens ---------------------------------------------------------------------------------


def test_token_verifies_through_discovery_and_jwks(issuer: OidcIssuer) -> None:
    claims = verify(issuer.token(), issuer.url)
    assert claims["iss"] == issuer.issuer == issuer.url
    assert not issuer.url.endswith("/")
    assert claims["aud"] == "crcr"
    assert claims["sub"] == "repo:Org/Repo:ref:refs/heads/main"


def test_header_is_githubs(issuer: OidcIssuer) -> None:
    token = issuer.token()
    raw_header = base64.urlsafe_b64decode(token.split(".")[0] + "==")
    assert list(json.loads(raw_header)) == ["alg", "kid", "typ", "x5t"]  # GitHub's order (sorted)
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "RS256", "kid": issuer.kid, "typ": "JWT", "x5t": issuer.current_key.x5t}
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", header["kid"])


def test_claims_are_githubs_with_githubs_types(issuer: OidcIssuer) -> None:
    token = issuer.token(
        repository="Org/Repo",
        repository_id=1001,
        repository_owner_id=77,
        run_id=123,
        run_attempt=2,
        sha="f" * 40,
        lifetime=300,
    )
    _, claims, _, _ = _segments(token)
    assert set(claims) == GITHUB_DEFAULT_CLAIMS
    assert list(claims) == sorted(claims)  # GitHub emits its payload keys sorted
    for name, value in claims.items():
        expected = int if name in NUMERIC_DATE_CLAIMS else str
        assert type(value) is expected, (name, value)
    assert claims["repository_id"] == "1001"
    assert claims["repository_owner_id"] == "77"
    assert claims["run_id"] == "123"
    assert claims["run_attempt"] == "2"
    assert claims["ref_protected"] == "false"
    assert claims["ref_type"] == "branch"
    assert claims["repository_owner"] == "Org"
    assert claims["workflow_ref"] == "Org/Repo/.github/workflows/ci.yml@refs/heads/main"
    assert claims["job_workflow_ref"] == claims["workflow_ref"]
    assert claims["sha"] == claims["workflow_sha"] == claims["job_workflow_sha"] == "f" * 40
    assert claims["exp"] - claims["iat"] == 300
    assert claims["iat"] - claims["nbf"] == 300
    assert re.fullmatch(r"[0-9a-f-]{36}", claims["jti"])
    assert issuer.token() != issuer.token()  # fresh jti each time


def test_optional_claims_and_subject_formats(issuer: OidcIssuer) -> None:
    def payload(**kwargs: Any) -> dict[str, Any]:
        return _segments(issuer.token(**kwargs))[1]

    assert payload(sub_format="id")["sub"] == "repo:Org@77/Repo@1001:ref:refs/heads/main"
    env = payload(environment="prod:eu", environment_node_id="EN_1", sub_format="id")
    assert env["sub"] == "repo:Org@77/Repo@1001:environment:prod%3Aeu"
    assert env["environment"] == "prod:eu"
    assert env["environment_node_id"] == "EN_1"
    assert payload(event_name="pull_request", ref="refs/pull/7/merge")["sub"] == "repo:Org/Repo:pull_request"
    tag = payload(ref="refs/tags/v1", ref_protected=True)
    assert (tag["sub"], tag["ref_type"], tag["ref_protected"]) == ("repo:Org/Repo:ref:refs/tags/v1", "tag", "true")
    ent = payload(enterprise="acme", enterprise_id=12)
    assert (ent["enterprise"], ent["enterprise_id"]) == ("acme", "12")


def test_overrides_replace_add_and_delete(issuer: OidcIssuer) -> None:
    token = issuer.token(run_id=None, repository_id=5, extra="x", aud=["crcr", "other"])
    claims = verify(token, issuer.url)
    assert "run_id" not in claims
    assert claims["repository_id"] == "5"
    assert claims["extra"] == "x"
    assert claims["aud"] == ["crcr", "other"]
    dropped = _segments(issuer.token(drop=("repository_owner", "job_workflow_ref"), check_run_id=None))[1]
    assert not {"repository_owner", "job_workflow_ref", "check_run_id"} & set(dropped)
    no_kid = issuer.token(headers={"kid": None})
    assert "kid" not in jwt.get_unverified_header(no_kid)


def test_clock_is_injectable() -> None:
    with OidcIssuer(clock=lambda: 1_700_000_000.7) as fixed:
        claims = _segments(fixed.token(lifetime=21600))[1]
    assert (claims["iat"], claims["nbf"], claims["exp"]) == (1_700_000_000, 1_699_999_700, 1_700_021_600)


# -- discovery and JWKS -----------------------------------------------------------------------------


def test_discovery_document_mirrors_githubs(issuer: OidcIssuer) -> None:
    with urllib.request.urlopen(issuer.url + "/.well-known/openid-configuration", timeout=5) as response:
        assert response.headers["content-type"].startswith("application/json")
        assert response.headers["cache-control"]
        document = json.load(response)
    assert document == {
        "issuer": issuer.url,
        "jwks_uri": issuer.url + "/.well-known/jwks",
        "subject_types_supported": ["public", "pairwise"],
        "response_types_supported": ["id_token"],
        "claims_supported": list(GITHUB_CLAIMS_SUPPORTED),
        "id_token_signing_alg_values_supported": ["RS256"],
        "scopes_supported": ["openid"],
    }


def test_jwks_keys_are_githubs_shape_and_consistent(issuer: OidcIssuer) -> None:
    with urllib.request.urlopen(issuer.jwks_uri, timeout=5) as response:
        assert response.headers["content-type"].startswith("application/json")
        assert response.headers["cache-control"]
        keys = json.load(response)["keys"]
    assert len(keys) == 1
    jwk = keys[0]
    assert list(jwk) == ["kty", "alg", "use", "kid", "n", "e", "x5c", "x5t"]
    assert (jwk["kty"], jwk["alg"], jwk["use"], jwk["e"], jwk["kid"]) == ("RSA", "RS256", "sig", "AQAB", issuer.kid)
    der = base64.b64decode(jwk["x5c"][0])
    sha1 = hashlib.sha1(der).digest()
    assert jwk["x5t"] == base64.urlsafe_b64encode(sha1).rstrip(b"=").decode()
    cert = x509.load_der_x509_certificate(der)
    assert cert.public_key().public_numbers() == PyJWK(jwk).key.public_numbers()


def test_http_surface_404_head_and_recording() -> None:
    with OidcIssuer() as double:
        for method, path in [("GET", "/"), ("GET", "/.well-known/jwks.json"), ("POST", "/.well-known/jwks")]:
            connection = http.client.HTTPConnection("127.0.0.1", int(double.url.rsplit(":", 1)[1]), timeout=5)
            connection.request(method, path, body=b"{}" if method == "POST" else None)
            assert connection.getresponse().status == 404, (method, path)
            connection.close()
        head = urllib.request.Request(double.jwks_uri, method="HEAD")
        with urllib.request.urlopen(head, timeout=5) as response:
            assert response.status == 200
            assert response.read() == b""
        _get_json(double.jwks_uri + "?x=1")
        _get_json(double.discovery_url)
        assert [(r.method, r.path) for r in double.requests] == [
            ("GET", "/"),
            ("GET", "/.well-known/jwks.json"),
            ("POST", "/.well-known/jwks"),
            ("HEAD", "/.well-known/jwks"),
            ("GET", "/.well-known/jwks?x=1"),
            ("GET", "/.well-known/openid-configuration"),
        ]
        assert double.count("/.well-known/jwks") == 1
        assert double.count("/.well-known/openid-configuration") == 1
        times = [r.time for r in double.requests]
        assert times == sorted(times)
        double.reset_requests()
        assert double.requests == []


def test_fail_next_scripts_failures_then_recovers() -> None:
    with OidcIssuer() as double:
        double.fail_next("/.well-known/jwks", 2)
        double.fail_next("/.well-known/openid-configuration", 1, status=500)
        statuses = []
        for path in ["/.well-known/jwks"] * 3 + ["/.well-known/openid-configuration"] * 2:
            try:
                with urllib.request.urlopen(double.url + path, timeout=5) as response:
                    statuses.append(response.status)
            except urllib.error.HTTPError as error:
                statuses.append(error.code)
        assert statuses == [503, 503, 200, 500, 200]
        assert double.count("/.well-known/jwks") == 3


# -- rotation ---------------------------------------------------------------------------------------


def test_rotation_serves_new_and_previous_key() -> None:
    with OidcIssuer() as double:
        old_token = double.token()
        old_kid = double.kid
        new_key = double.rotate()
        new_token = double.token()
        assert new_key.kid == double.kid != old_kid
        assert jwt.get_unverified_header(new_token)["kid"] == new_key.kid
        assert [k["kid"] for k in _get_json(double.jwks_uri)["keys"]] == [new_key.kid, old_kid]
        assert verify(old_token, double.url)["sub"] == verify(new_token, double.url)["sub"]

        double.retire_previous()
        assert [k["kid"] for k in _get_json(double.jwks_uri)["keys"]] == [new_key.kid]
        with pytest.raises(UnknownKidError):
            verify(old_token, double.url)
        verify(new_token, double.url)


# -- hostile tokens ---------------------------------------------------------------------------------

EXPECTED_REJECTION: dict[str, type[Exception]] = {
    "alg_none": jwt.InvalidAlgorithmError,
    "hs256_with_public_key": jwt.InvalidAlgorithmError,
    "unknown_key_known_kid": jwt.InvalidSignatureError,
    "unknown_kid": UnknownKidError,
    "wrong_issuer": jwt.InvalidIssuerError,
    "expired": jwt.ExpiredSignatureError,
    "not_yet_valid": jwt.ImmatureSignatureError,
    "wrong_audience": jwt.InvalidAudienceError,
    "es256_unknown_key": jwt.InvalidAlgorithmError,  # ES256 header, but the served kid is an RS256 key
    "tampered_payload": jwt.InvalidSignatureError,
    "rs512": jwt.InvalidAlgorithmError,
    "embedded_jwk": UnknownKidError,
}


def test_every_forge_kind_is_covered() -> None:
    assert set(EXPECTED_REJECTION) == set(FORGE_KINDS)


@pytest.mark.parametrize("kind", FORGE_KINDS)
def test_forged_tokens_fail_a_correct_verifier(issuer: OidcIssuer, kind: str) -> None:
    with pytest.raises(EXPECTED_REJECTION[kind]):
        verify(issuer.forge(kind), issuer.url, leeway=60)


def test_forgeries_are_well_formed_and_fail_only_for_their_flaw(issuer: OidcIssuer) -> None:
    """Each forgery passes a verifier that lacks exactly the check it targets."""
    key = issuer.current_key
    public = key.public_key
    unverified = {"verify_signature": False}

    header, claims, signature, signed = _segments(issuer.forge("alg_none"))
    assert (header["alg"], header["kid"], signature) == ("none", key.kid, b"")
    assert issuer.forge("alg_none").endswith(".")  # the JWS form of an unsecured JWT (RFC 7519 section 6)
    assert jwt.decode(issuer.forge("alg_none"), options=unverified)["iss"] == issuer.url

    header, claims, signature, signed = _segments(issuer.forge("hs256_with_public_key"))
    assert header["alg"] == "HS256"
    assert hmac.compare_digest(signature, hmac.new(key.public_pem(), signed, hashlib.sha256).digest())

    for kind in ("unknown_key_known_kid", "unknown_kid", "embedded_jwk"):
        token = issuer.forge(kind)
        decoded = jwt.decode(token, issuer.attacker_key("RS256").public_key, algorithms=["RS256"], audience="crcr")
        assert decoded["iss"] == issuer.url, kind
    assert jwt.get_unverified_header(issuer.forge("unknown_key_known_kid"))["kid"] == key.kid
    assert jwt.get_unverified_header(issuer.forge("unknown_kid"))["kid"] not in {k.kid for k in issuer.served_keys}
    embedded = jwt.get_unverified_header(issuer.forge("embedded_jwk"))["jwk"]
    assert PyJWK(embedded).key.public_numbers() == issuer.attacker_key("RS256").public_key.public_numbers()

    token = issuer.forge("es256_unknown_key")
    assert jwt.get_unverified_header(token)["kid"] == key.kid
    jwt.decode(token, issuer.attacker_key("ES256").public_key, algorithms=["ES256"], audience="crcr")

    assert jwt.decode(issuer.forge("wrong_issuer"), public, algorithms=["RS256"], audience="crcr")["iss"] == (
        GITHUB_ISSUER
    )
    jwt.decode(issuer.forge("expired"), public, algorithms=["RS256"], audience="crcr", options={"verify_exp": False})
    jwt.decode(
        issuer.forge("not_yet_valid"),
        public,
        algorithms=["RS256"],
        audience="crcr",
        options={"verify_nbf": False, "verify_iat": False},
    )
    assert jwt.decode(issuer.forge("wrong_audience"), public, algorithms=["RS256"], audience="https://github.com/Org")
    assert jwt.decode(issuer.forge("rs512"), public, algorithms=["RS512"], audience="crcr")["iss"] == issuer.url

    tampered = issuer.forge("tampered_payload")
    _, claims, _, _ = _segments(tampered)
    assert (claims["repository"], claims["sub"]) == ("Attacker/Repo", "repo:Attacker/Repo:ref:refs/heads/main")
    jwt.decode(tampered, options=unverified)


def test_forge_accepts_token_parameters_and_overrides(issuer: OidcIssuer) -> None:
    _, claims, _, _ = _segments(issuer.forge("expired", repository="X/Y", exp=5))
    assert (claims["repository"], claims["sub"], claims["exp"]) == ("X/Y", "repo:X/Y:ref:refs/heads/main", 5)
    assert jwt.get_unverified_header(issuer.forge("rs512", headers={"kid": "k"}))["kid"] == "k"
    with pytest.raises(ValueError, match="unknown forge kind"):
        issuer.forge("nope")


# -- ES256 mode -------------------------------------------------------------------------------------


def test_es256_issuer(es_issuer: OidcIssuer) -> None:
    claims = verify(es_issuer.token(), es_issuer.url)
    assert claims["repository"] == "Org/Repo"
    assert jwt.get_unverified_header(es_issuer.token())["alg"] == "ES256"
    jwk = _get_json(es_issuer.jwks_uri)["keys"][0]
    assert (jwk["kty"], jwk["crv"], jwk["alg"], jwk["use"]) == ("EC", "P-256", "ES256", "sig")
    assert "n" not in jwk
    assert len(base64.urlsafe_b64decode(jwk["x"] + "=")) == 32
    assert _get_json(es_issuer.discovery_url)["id_token_signing_alg_values_supported"] == ["ES256"]


@pytest.mark.parametrize("kind", FORGE_KINDS)
def test_es256_forgeries_fail_too(es_issuer: OidcIssuer, kind: str) -> None:
    expected = jwt.InvalidSignatureError if kind == "es256_unknown_key" else EXPECTED_REJECTION[kind]
    with pytest.raises(expected):
        verify(es_issuer.forge(kind), es_issuer.url, leeway=60)


def test_stop_is_idempotent_and_closes_the_port() -> None:
    double = OidcIssuer()
    url = double.jwks_uri
    double.stop()
    double.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=1)
