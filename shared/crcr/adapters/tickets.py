"""Dispatch tickets: EdDSA (Ed25519) JWTs signed with the relay's current key, verified by the key their `kid` names
(current, or the previous verify-only one; an unknown one re-reads the key source), public keys served as a JWKS."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from crcr.domain.errors import Unauthorized, Unavailable
from crcr.domain.ticket import TicketClaims

# (force) -> (current signing key, previous verify-only key or None), both PEM text. `force` asks the source to
# read again now instead of answering from its cache.
TicketKeySource = Callable[[bool], tuple[str, str | None]]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_jwk(public: Ed25519PublicKey) -> dict[str, str]:
    x = _b64url(public.public_bytes(Encoding.Raw, PublicFormat.Raw))
    # RFC 7638 thumbprint: the required members in lexicographic order, no whitespace.
    thumb = hashlib.sha256(json.dumps({"crv": "Ed25519", "kty": "OKP", "x": x}, separators=(",", ":")).encode())
    return {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": x,
        "kid": _b64url(thumb.digest()),
        "alg": "EdDSA",
        "use": "sig",
    }


def load_ed25519(pem: str, name: str = "CRCR_TICKET_SIGNING_KEY") -> Ed25519PrivateKey:
    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be an Ed25519 private key in PKCS#8 PEM") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{name} must be an Ed25519 private key in PKCS#8 PEM")
    return key


def load_ed25519_public(pem: str, name: str = "CRCR_TICKET_PREVIOUS_KEY") -> Ed25519PublicKey:
    """A verify-only key: an Ed25519 public key (SPKI PEM), or a private key (PKCS#8) whose public half is kept."""
    if "PRIVATE KEY" in pem:
        return load_ed25519(pem, name).public_key()
    try:
        key = load_pem_public_key(pem.encode())
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be an Ed25519 public key (or private key) in PEM") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{name} must be an Ed25519 public key (or private key) in PEM")
    return key


def private_pem(key: Ed25519PrivateKey) -> str:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def public_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()


def kid_of(key: Ed25519PublicKey) -> str:
    return public_jwk(key)["kid"]


@dataclass(frozen=True)
class TicketKeys:
    """One version of the keys: the current key signs; it and the previous one verify, each under its kid."""

    pems: tuple[str, str | None]
    signing: Ed25519PrivateKey
    kid: str
    verifying: dict[str, Ed25519PublicKey]
    jwks: list[dict[str, str]]

    @classmethod
    def parse(cls, current: str, previous: str | None) -> TicketKeys:
        signing = load_ed25519(current)
        jwk = public_jwk(signing.public_key())
        verifying = {jwk["kid"]: signing.public_key()}
        jwks = [jwk]
        if previous:
            old = load_ed25519_public(previous)
            old_jwk = public_jwk(old)
            if old_jwk["kid"] not in verifying:  # the same key twice is one key
                verifying[old_jwk["kid"]] = old
                jwks.append(old_jwk)
        return cls((current, previous), signing, jwk["kid"], verifying, jwks)


def _fixed(current: str, previous: str | None) -> TicketKeySource:
    return lambda force: (current, previous)


class Ed25519Tickets:
    """The TicketSigner and TicketVerifier ports, and the JWKS document."""

    def __init__(
        self,
        keys: str | TicketKeySource,
        previous: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        refetch_interval_s: float = 10.0,
        on_error: Callable[..., Any] | None = None,
    ) -> None:
        self._source = _fixed(keys, previous) if isinstance(keys, str) else keys
        self._clock = clock
        self._refetch_interval_s = refetch_interval_s
        self._on_error = on_error
        self._lock = threading.Lock()
        self._unknown_kid_fetch_at = float("-inf")
        self._bad_pems: tuple[str, str | None] | None = None
        self._quiet_until = float("-inf")  # after a failed read, the last good keys are used until then
        # The first keys must be good: a function whose keys do not load fails its cold start, naming them.
        self._keys = TicketKeys.parse(*self._source(False))

    def _load(self, force: bool) -> TicketKeys:
        """The source's keys now; a source that fails or gives keys that do not load keeps the last good ones."""
        if not force and self._clock() < self._quiet_until:
            return self._keys
        try:
            pems = self._source(force)
        except Exception as exc:  # Secrets Manager unreachable: keep signing and verifying with what we have
            # ... without asking it again on every request (each try can take seconds of timeouts and retries).
            self._quiet_until = self._clock() + self._refetch_interval_s
            self._report(exc)
            if force:  # a key we may not know yet: the caller may retry, not be refused
                raise Unavailable("the ticket keys cannot be read now; retry shortly", retry_after_s=5) from exc
            return self._keys
        if pems not in (self._keys.pems, self._bad_pems):
            try:
                self._keys = TicketKeys.parse(*pems)
            except ValueError as exc:  # a bad edit of the secret never replaces the last good keys
                self._bad_pems = pems  # reported once, not on every request until it is fixed
                self._report(exc)
        return self._keys

    def _report(self, exc: Exception) -> None:
        if self._on_error is not None:
            self._on_error("ticket keys not reloaded; keeping the last good ones", extra={"reason": str(exc)})

    def keys(self) -> TicketKeys:
        with self._lock:
            return self._load(False)

    @property
    def kid(self) -> str:
        return self.keys().kid

    def sign(self, claims: TicketClaims) -> str:
        keys = self.keys()
        return jwt.encode(claims.model_dump(), keys.signing, algorithm="EdDSA", headers={"kid": keys.kid, "typ": "JWT"})

    def _key_for(self, kid: str) -> Ed25519PublicKey:
        """The key this kid names: never another one, and never each key in turn."""
        with self._lock:
            key = self._load(False).verifying.get(kid)
            if key is not None:
                return key
            now = self._clock()
            if now - self._unknown_kid_fetch_at < self._refetch_interval_s:
                raise Unavailable("ticket signed with a key not seen yet; retry shortly", retry_after_s=2)
            self._unknown_kid_fetch_at = now
            key = self._load(True).verifying.get(kid)
        if key is None:
            raise Unauthorized("the ticket was not signed by this relay (unknown key id)", field="ticket")
        return key

    def verify(self, token: str, now: float) -> TicketClaims:
        """A ticket this relay signed, unexpired and unedited; anything else is Unauthorized."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"ticket rejected: {exc}", field="ticket") from exc
        kid = header.get("kid")
        if header.get("alg") != "EdDSA" or not isinstance(kid, str) or not kid:
            raise Unauthorized("the ticket was not signed by this relay", field="ticket")
        key = self._key_for(kid)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=["EdDSA"],
                options={"require": ["exp", "iat", "sub", "jti"], "verify_exp": False},
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"ticket rejected: {exc}", field="ticket") from exc
        if claims["exp"] < now:
            raise Unauthorized("the ticket has expired", field="ticket")
        try:
            return TicketClaims.model_validate(claims)
        except ValueError as exc:
            raise Unauthorized("the ticket's claims are not the relay's", field="ticket") from exc

    def jwks(self) -> dict[str, Any]:
        """The current key first, then the previous one while it is configured."""
        return {"keys": list(self.keys().jwks)}
