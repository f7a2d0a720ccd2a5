"""Dispatch tickets with real Ed25519 keys: the current key signs, the current and the previous key verify, each
only under its own RFC 7638 kid; a kid that names neither, or a key that is neither, is refused; a rotated key
source is followed without a cold start."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from crcr.adapters.tickets import Ed25519Tickets, kid_of, private_pem, public_pem
from crcr.domain.errors import Unauthorized, Unavailable
from crcr.domain.ticket import TicketClaims

NOW = float(int(time.time()))  # PyJWT checks `iat` against the real clock


def claims(**changes: Any) -> TicketClaims:
    base: dict[str, Any] = {
        "sub": "org/repo",
        "repo_id": 5,
        "delivery_id": "d-1",
        "upstream": "pytorch/pytorch",
        "pr": 7,
        "head_sha": "a" * 40,
        "level": 2,
        "iat": int(NOW),
        "exp": int(NOW) + 30 * 86_400,
        "jti": "j" * 32,
    }
    return TicketClaims.model_validate(base | changes)


def signed_by(key: Ed25519PrivateKey, kid: str, **changes: Any) -> str:
    """A ticket as an attacker (or an older relay) would make it: any key, any kid in the header."""
    return jwt.encode(claims(**changes).model_dump(), key, algorithm="EdDSA", headers={"kid": kid, "typ": "JWT"})


class Source:
    """A key source like the Secrets Manager one: answers from its cache unless forced; counts forced reads."""

    def __init__(self, current: Ed25519PrivateKey) -> None:
        self.key = current
        self.stored: tuple[str, str | None] = (private_pem(current), None)
        self.cached = self.stored
        self.forced = 0

    def __call__(self, force: bool) -> tuple[str, str | None]:
        if force:
            self.forced += 1
            self.cached = self.stored
        return self.cached

    def rotate(self, new: Ed25519PrivateKey, *, cache_expired: bool) -> None:
        """What `crcr keys rotate` does to the secret: new -> current, the current key's public half -> previous."""
        self.stored = (private_pem(new), public_pem(self.key.public_key()))
        self.key = new
        if cache_expired:
            self.cached = self.stored


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def old() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def new() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def test_the_kid_is_the_rfc_7638_thumbprint() -> None:
    # RFC 8037 appendix A.1 and A.3: this Ed25519 key's JWK thumbprint.
    d = base64.urlsafe_b64decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=")
    key = Ed25519PrivateKey.from_private_bytes(d)
    assert kid_of(key.public_key()) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
    [jwk] = Ed25519Tickets(private_pem(key)).jwks()["keys"]
    assert jwk == {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
        "kid": "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k",
        "alg": "EdDSA",
        "use": "sig",
    }


@pytest.mark.parametrize("previous_as", ["public", "private"])
def test_tickets_of_the_current_and_the_previous_key_both_verify(
    old: Ed25519PrivateKey, new: Ed25519PrivateKey, previous_as: str
) -> None:
    previous = public_pem(old.public_key()) if previous_as == "public" else private_pem(old)
    tickets = Ed25519Tickets(private_pem(new), previous)
    fresh = tickets.sign(claims(jti="new" * 8))
    assert jwt.get_unverified_header(fresh)["kid"] == kid_of(new.public_key())  # new tickets: the current key
    assert tickets.verify(fresh, NOW).jti == "new" * 8
    issued_before = signed_by(old, kid_of(old.public_key()), jti="old" * 8)
    assert tickets.verify(issued_before, NOW).jti == "old" * 8
    # The JWKS serves both, current first, each under its thumbprint.
    assert [k["kid"] for k in tickets.jwks()["keys"]] == [kid_of(new.public_key()), kid_of(old.public_key())]
    for jwk, ticket in zip(tickets.jwks()["keys"], (fresh, issued_before), strict=True):
        assert jwt.decode(ticket, jwt.PyJWK(jwk).key, algorithms=["EdDSA"])["sub"] == "org/repo"


def test_a_previous_key_equal_to_the_current_one_is_served_once(old: Ed25519PrivateKey) -> None:
    tickets = Ed25519Tickets(private_pem(old), public_pem(old.public_key()))
    assert len(tickets.jwks()["keys"]) == 1


def test_a_previous_ticket_still_expires_when_its_time_is_up(old: Ed25519PrivateKey, new: Ed25519PrivateKey) -> None:
    tickets = Ed25519Tickets(private_pem(new), public_pem(old.public_key()))
    expired = signed_by(old, kid_of(old.public_key()), exp=int(NOW) - 1)
    with pytest.raises(Unauthorized, match="expired"):
        tickets.verify(expired, NOW)


def test_an_unknown_kid_is_401_after_one_fresh_read_of_the_keys(old: Ed25519PrivateKey) -> None:
    source = Source(old)
    tickets = Ed25519Tickets(source, clock=Clock())
    stranger = Ed25519PrivateKey.generate()
    with pytest.raises(Unauthorized) as refused:
        tickets.verify(signed_by(stranger, kid_of(stranger.public_key())), NOW)
    assert refused.value.field == "ticket" and "unknown key id" in refused.value.message
    assert source.forced == 1


def test_unknown_kids_cost_the_key_source_one_read_per_interval(old: Ed25519PrivateKey) -> None:
    source, clock = Source(old), Clock()
    tickets = Ed25519Tickets(source, clock=clock, refetch_interval_s=10.0)
    stranger = Ed25519PrivateKey.generate()
    for i in range(20):
        with pytest.raises((Unauthorized, Unavailable)):
            tickets.verify(signed_by(stranger, f"random-kid-{i}"), NOW)
    assert source.forced == 1  # the others were told to retry shortly (503), without a read
    clock.now += 10.0
    with pytest.raises(Unauthorized):
        tickets.verify(signed_by(stranger, "random-kid-x"), NOW)
    assert source.forced == 2


@pytest.mark.parametrize("named", ["current", "previous"])
def test_a_forged_kid_is_refused_and_no_other_key_is_tried(
    old: Ed25519PrivateKey, new: Ed25519PrivateKey, named: str
) -> None:
    tickets = Ed25519Tickets(private_pem(new), public_pem(old.public_key()))
    kid = kid_of((new if named == "current" else old).public_key())
    attacker = Ed25519PrivateKey.generate()
    with pytest.raises(Unauthorized, match="Signature verification failed"):
        tickets.verify(signed_by(attacker, kid), NOW)  # an attacker's key under one of our kids
    # Our own keys, each under the other's kid: a verifier that tried every key would accept these.
    other = old if named == "current" else new
    with pytest.raises(Unauthorized, match="Signature verification failed"):
        tickets.verify(signed_by(other, kid), NOW)


def test_a_ticket_signed_by_a_third_key_is_refused(old: Ed25519PrivateKey, new: Ed25519PrivateKey) -> None:
    tickets = Ed25519Tickets(private_pem(new), public_pem(old.public_key()))
    third = Ed25519PrivateKey.generate()
    with pytest.raises(Unauthorized, match="unknown key id"):
        tickets.verify(signed_by(third, kid_of(third.public_key())), NOW)


@pytest.mark.parametrize(
    "header",
    [{"alg": "none", "kid": "k"}, {"alg": "HS256", "kid": "k"}, {"alg": "EdDSA"}, {"alg": "EdDSA", "kid": ["k"]}],
)
def test_tickets_without_eddsa_and_a_kid_are_refused(old: Ed25519PrivateKey, header: dict[str, Any]) -> None:
    tickets = Ed25519Tickets(private_pem(old))
    genuine = tickets.sign(claims())
    _, body, signature = genuine.split(".")
    head = base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()
    with pytest.raises(Unauthorized):
        tickets.verify(f"{head}.{body}.{signature}", NOW)


def test_a_rotated_source_is_followed_for_signing_serving_and_verifying(
    old: Ed25519PrivateKey, new: Ed25519PrivateKey
) -> None:
    source, clock = Source(old), Clock()
    signer = Ed25519Tickets(source, clock=clock)  # the dispatch function
    verifier = Ed25519Tickets(Source(old), clock=clock)  # the callback function: its own cache
    before = signer.sign(claims(jti="b" * 32))
    source.rotate(new, cache_expired=True)  # the secret changed and this function's cache has expired
    after = signer.sign(claims(jti="c" * 32))
    assert jwt.get_unverified_header(after)["kid"] == kid_of(new.public_key())
    assert [k["kid"] for k in signer.jwks()["keys"]] == [kid_of(new.public_key()), kid_of(old.public_key())]
    # The verifier's cache still holds the old keys: the new kid makes it read the source again at once.
    verifier._source = source  # the same secret
    source.cached = (private_pem(old), None)
    assert verifier.verify(after, NOW).jti == "c" * 32 and source.forced == 1
    assert verifier.verify(before, NOW).jti == "b" * 32


def test_a_bad_edit_of_the_keys_keeps_the_last_good_ones(old: Ed25519PrivateKey) -> None:
    source = Source(old)
    errors: list[str] = []
    tickets = Ed25519Tickets(source, on_error=lambda message, **_: errors.append(message))
    source.cached = ("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n", None)
    for _ in range(3):
        assert tickets.verify(tickets.sign(claims()), NOW).sub == "org/repo"
    assert jwt.get_unverified_header(tickets.sign(claims()))["kid"] == kid_of(old.public_key())
    assert len(errors) == 1  # said once, not on every request


def test_keys_that_do_not_load_fail_the_cold_start_naming_them(old: Ed25519PrivateKey) -> None:
    with pytest.raises(ValueError, match="CRCR_TICKET_SIGNING_KEY"):
        Ed25519Tickets("not a pem")
    with pytest.raises(ValueError, match="CRCR_TICKET_PREVIOUS_KEY"):
        Ed25519Tickets(private_pem(old), "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n")


def test_an_unreadable_source_keeps_signing_and_asks_an_unknown_kid_to_retry(old: Ed25519PrivateKey) -> None:
    calls = {"n": 0}

    def flaky(force: bool) -> tuple[str, str | None]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise ConnectionError("Secrets Manager unreachable")
        return private_pem(old), None

    clock = Clock()
    tickets = Ed25519Tickets(flaky, clock=clock, refetch_interval_s=10.0)
    for _ in range(5):
        assert tickets.verify(tickets.sign(claims()), time.time()).sub == "org/repo"
    assert calls["n"] == 2  # one failed read, then the last good keys without asking again for a while
    clock.now += 10.0
    tickets.sign(claims())
    assert calls["n"] == 3
    stranger = Ed25519PrivateKey.generate()
    with pytest.raises(Unavailable):
        tickets.verify(signed_by(stranger, kid_of(stranger.public_key())), NOW)
