"""Dispatch tickets: EdDSA (Ed25519) JWTs signed by the relay, public keys served as a JWKS."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_private_key

from crcr.domain.errors import Unauthorized
from crcr.domain.ticket import TicketClaims


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


def load_ed25519(pem: str) -> Ed25519PrivateKey:
    key = load_pem_private_key(pem.encode(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("CRCR_TICKET_SIGNING_KEY must be an Ed25519 private key in PKCS#8 PEM")
    return key


class Ed25519Tickets:
    def __init__(self, private_pem: str) -> None:
        self._key = load_ed25519(private_pem)
        self._jwk = public_jwk(self._key.public_key())

    @property
    def kid(self) -> str:
        return self._jwk["kid"]

    def sign(self, claims: TicketClaims) -> str:
        return jwt.encode(claims.model_dump(), self._key, algorithm="EdDSA", headers={"kid": self.kid, "typ": "JWT"})

    def verify(self, token: str, now: float) -> TicketClaims:
        """A ticket this relay signed, unexpired and unedited; anything else is Unauthorized."""
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != "EdDSA" or header.get("kid") != self.kid:
                raise Unauthorized("the ticket was not signed by this relay", field="ticket")
            claims = jwt.decode(
                token,
                self._key.public_key(),
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
        return {"keys": [self._jwk]}
