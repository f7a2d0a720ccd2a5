"""Where the callback's OIDC verifier may fetch keys from: the configured issuer only (https, or plain http on
loopback), and a key set only on the issuer's own origin, whatever its discovery document says."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from crcr.adapters.oidc import OidcVerifier, check_issuer_url
from crcr.domain.errors import Unauthorized, Unavailable
from tests.doubles.oidc_issuer import JWKS_PATH, OidcIssuer


class Server:
    """A loopback HTTP server answering every GET with `doc`, recording the paths asked for."""

    def __init__(self, doc: dict[str, object]) -> None:
        self.doc, self.paths = doc, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                body = json.dumps(outer.doc).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def elsewhere() -> Iterator[Server]:
    server = Server({"keys": []})
    yield server
    server.stop()


@pytest.mark.parametrize(
    "issuer", ["http://token.actions.githubusercontent.com", "http://10.0.0.8", "ftp://127.0.0.1", "https://"]
)
def test_an_issuer_must_be_https_or_loopback_http(issuer: str) -> None:
    with pytest.raises(ValueError, match="must be https"):
        check_issuer_url(issuer)
    with pytest.raises(ValueError, match="must be https"):
        OidcVerifier(issuer, "crcr", time.time)


def test_a_discovery_document_cannot_send_the_verifier_to_another_origin(elsewhere: Server) -> None:
    issuer = Server({})
    try:
        issuer.doc = {"issuer": issuer.url, "jwks_uri": f"{elsewhere.url}/.well-known/jwks"}
        verifier = OidcVerifier(issuer.url, "crcr", time.time)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        token = jwt.encode({"iss": issuer.url}, key, algorithm="RS256", headers={"kid": "k"})
        with pytest.raises(Unavailable, match="not on the issuer's origin"):
            verifier.verify(token)
        assert issuer.paths == ["/.well-known/openid-configuration"] and elsewhere.paths == []
    finally:
        issuer.stop()


def test_a_slow_fetch_for_a_new_key_holds_up_no_callback_whose_key_is_known() -> None:
    """The issuer takes its time over a key set asked for because of a key id not seen yet (a rotation, or an
    attacker's random `kid`): tokens under keys already known are verified meanwhile, and the waiting token is
    verified once the keys arrive."""
    with OidcIssuer() as issuer:
        verifier = OidcVerifier(issuer.url, "crcr", time.time, refetch_interval_s=0.0)
        known = issuer.token()
        assert verifier.verify(known)["iss"] == issuer.url
        issuer.rotate()
        waiting_token = issuer.token()  # under the new key, which the verifier has not seen
        gate = issuer.hold_next(JWKS_PATH)
        outcome: dict[str, object] = {}
        waiting = threading.Thread(target=lambda: outcome.update(claims=verifier.verify(waiting_token)), daemon=True)
        waiting.start()
        deadline = time.monotonic() + 10
        while issuer.count(JWKS_PATH) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert issuer.count(JWKS_PATH) == 2, "the new key id made the verifier ask for the key set"

        others = threading.Thread(target=lambda: outcome.update(known=[verifier.verify(known) for _ in range(20)]))
        others.start()
        others.join(timeout=10)
        held = waiting.is_alive()
        gate.set()
        waiting.join(timeout=10)
        assert not others.is_alive() and held, "tokens under a known key waited for another caller's fetch"
        assert len(outcome["known"]) == 20  # type: ignore[arg-type]
        assert outcome["claims"]["iss"] == issuer.url  # type: ignore[index]


def test_a_failed_refresh_of_an_old_key_set_keeps_the_known_keys() -> None:
    with OidcIssuer() as issuer:
        token = issuer.token()
        verifier = OidcVerifier(issuer.url, "crcr", time.time, cache_s=0.0)
        assert verifier.verify(token)
        issuer.fail_next(JWKS_PATH, n=5)
        assert verifier.verify(token)["iss"] == issuer.url  # refreshed (and failed) on every call: cached keys serve
        assert issuer.count(JWKS_PATH) >= 2


@pytest.mark.parametrize(
    ("claims", "says"),
    [
        ({"lifetime": 100 * 365 * 86_400}, "lives"),  # exp a century ahead, signed by the real issuer
        ({"exp": "in five minutes"}, "exp is not a number"),  # as digits in a string: PyJWT took int("...")
        ({"iat": "now"}, "not a number"),
        ({"exp": True}, "not a number|expired"),  # PyJWT reads True as 1970
    ],
    ids=["century", "string-exp", "string-iat", "bool-exp"],
)
def test_a_token_with_an_impossible_lifetime_or_a_time_that_is_no_number_is_refused(
    claims: dict[str, object], says: str
) -> None:
    with OidcIssuer() as issuer:
        verifier = OidcVerifier(issuer.url, "crcr", time.time)
        assert verifier.verify(issuer.token())["iss"] == issuer.url  # a genuine token passes
        lifetime = claims.pop("lifetime", None)
        now = int(time.time())  # at run time: a time fixed at collection would have passed in a long run
        times = {"in five minutes": str(now + 300), "now": str(now)}
        claims = {name: times.get(value, value) if isinstance(value, str) else value for name, value in claims.items()}
        token = issuer.token(**claims) if lifetime is None else issuer.token(lifetime=lifetime)
        with pytest.raises(Unauthorized, match=says):
            verifier.verify(token)
        # A real GitHub token's six hours pass.
        assert verifier.verify(issuer.token(lifetime=21_600))["iss"] == issuer.url
