"""OIDC token verification for GitHub Actions and Buildkite: the issuer (fixed in code) selects the verifier;
discovery → JWKS (cached; an unknown `kid` refetches at once, rate-bounded), RS256/ES256 only, pinned iss/aud."""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import jwt
import urllib3

from crcr.adapters.http_pool import pool_for
from crcr.app.ports.identity import VerifiedToken
from crcr.domain.errors import Unauthorized, Unavailable

ALLOWED_ALGORITHMS = ("RS256", "ES256")
# GitHub's job tokens live 6 hours, Buildkite's about 5 minutes: a longer-lived token is not one of theirs.
MAX_TOKEN_LIFETIME_S = 86_400
_KTY_FOR_ALG = {"RS256": "RSA", "ES256": "EC"}


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_issuer_url(url: str) -> None:
    """https, except plain http on loopback for local runs (docs/security.md)."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname and _is_loopback(parts.hostname):
        return
    raise ValueError(f"OIDC issuer {url!r} must be https (plain http only on loopback)")


class OidcVerifier:
    def __init__(
        self,
        issuer: str,
        audience: str | Sequence[str],
        clock: Callable[[], float],
        *,
        pool: urllib3.PoolManager | None = None,
        cache_s: float = 300.0,
        refetch_interval_s: float = 2.0,
        leeway_s: int = 60,
        fetch_wait_s: float = 15.0,
    ) -> None:
        check_issuer_url(issuer)
        self.issuer = issuer.rstrip("/")
        # A token whose `aud` names any one of these is for this relay (PyJWT accepts any of a list).
        self.audience = [audience] if isinstance(audience, str) else list(audience)
        self._clock = clock
        self._http = pool or pool_for(self.issuer, maxsize=8)
        self._timeout = urllib3.Timeout(connect=2.0, read=5.0)
        self._cache_s = cache_s
        self._refetch_interval_s = refetch_interval_s
        self._leeway = leeway_s
        self._fetch_wait_s = fetch_wait_s  # a fetch is discovery + key set: two requests of (2 + 5) s at most
        self._fetching = threading.Lock()  # held only by the one caller talking to the issuer
        self._keys: dict[str, jwt.PyJWK] = {}  # replaced whole, never changed in place: read without a lock
        self._fetched_at = float("-inf")
        self._unknown_kid_fetch_at = float("-inf")  # only these refetches are rate-limited
        self._jwks_uri: str | None = None

    def _get_json(self, url: str) -> Any:
        try:
            resp = self._http.request("GET", url, timeout=self._timeout, headers={"Accept": "application/json"})
        except urllib3.exceptions.HTTPError as exc:
            raise Unavailable(f"OIDC issuer unreachable: {type(exc).__name__}", retry_after_s=5) from exc
        if resp.status != 200:
            raise Unavailable(f"OIDC issuer answered {resp.status} for {url}", retry_after_s=5)
        try:
            return json.loads(resp.data)
        except ValueError as exc:
            raise Unavailable("OIDC issuer sent a document that is not JSON", retry_after_s=5) from exc

    def _refresh(self) -> None:
        self._fetched_at = self._clock()
        if self._jwks_uri is None:
            discovery = self._get_json(f"{self.issuer}/.well-known/openid-configuration")
            if not isinstance(discovery, dict) or discovery.get("issuer", "").rstrip("/") != self.issuer:
                raise Unavailable("the OIDC discovery document names another issuer", retry_after_s=30)
            jwks_uri = str(discovery.get("jwks_uri") or "")
            # The key set must come from the issuer's own origin: a discovery document cannot send us elsewhere.
            if urlsplit(jwks_uri)[:2] != urlsplit(self.issuer)[:2]:
                raise Unavailable("the OIDC jwks_uri is not on the issuer's origin", retry_after_s=30)
            self._jwks_uri = jwks_uri
        doc = self._get_json(self._jwks_uri)
        keys: dict[str, jwt.PyJWK] = {}
        for raw in doc.get("keys", []) if isinstance(doc, dict) else []:
            kid, kty = raw.get("kid"), raw.get("kty")
            if not kid or kty not in {"RSA", "EC"} or raw.get("use", "sig") != "sig":
                continue
            try:
                keys[str(kid)] = jwt.PyJWK(raw)
            except jwt.PyJWTError:
                continue  # a key we cannot use cannot verify anything either
        self._keys = keys

    def _key(self, kid: str) -> jwt.PyJWK:
        """The key `kid` names. One fetch at a time, never in the way of a token whose key is known (verified with the
        cached keys meanwhile; a failed refresh keeps them): only callers waiting for a key not seen yet wait."""
        key = self._keys.get(kid)
        if key is not None:
            if self._clock() - self._fetched_at >= self._cache_s and self._fetching.acquire(blocking=False):
                try:
                    self._refresh()
                except Unavailable:
                    pass  # the issuer is unreachable: the cached keys still verify; retried after cache_s
                finally:
                    self._fetching.release()
                key = self._keys.get(kid)
                if key is None:
                    raise Unauthorized("the token's key is no longer one of the issuer's keys", field="Authorization")
            return key
        # A key not seen yet (or none loaded): one fetch at a time; whoever waited looks again after it.
        if not self._fetching.acquire(timeout=self._fetch_wait_s):
            raise Unavailable("the issuer's keys are being fetched; retry shortly", retry_after_s=2)
        try:
            key = self._keys.get(kid)
            if key is not None:
                return key
            now = self._clock()
            if now - self._fetched_at >= self._cache_s:
                self._refresh()  # nothing loaded yet, or the cache is old: an ordinary fetch
            else:
                if now - self._unknown_kid_fetch_at < self._refetch_interval_s:
                    raise Unavailable("token signed with a key not seen yet; retry shortly", retry_after_s=2)
                self._unknown_kid_fetch_at = now
                self._refresh()
            key = self._keys.get(kid)
            if key is None:
                raise Unauthorized("the token's key id is not one of the issuer's keys", field="Authorization")
            return key
        finally:
            self._fetching.release()

    def verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthorized("the bearer token is not a JWT", field="Authorization") from exc
        alg = header.get("alg")
        if alg not in ALLOWED_ALGORITHMS:
            raise Unauthorized(f"token algorithm {alg!r} is not accepted", field="Authorization")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthorized("the token names no key id", field="Authorization")
        key = self._key(kid)
        if key.key_type != _KTY_FOR_ALG[alg]:
            raise Unauthorized("the token's algorithm does not fit its key", field="Authorization")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self._leeway,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"token rejected: {exc}", field="Authorization") from exc
        # PyJWT takes a time that int() accepts: "9999999999" as a string passed, and so did an exp a century away.
        for name in ("exp", "iat", "nbf"):
            value = claims.get(name)
            if name in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise Unauthorized(f"the token's {name} is not a number", field="Authorization")
        if claims["exp"] - claims["iat"] > MAX_TOKEN_LIFETIME_S:
            raise Unauthorized(
                f"the token lives {int(claims['exp'] - claims['iat'])} s (exp - iat); at most {MAX_TOKEN_LIFETIME_S}",
                field="Authorization",
            )
        return claims


class IssuerRouter:
    """The TokenVerifier port: the token's (unverified) issuer picks one of the fixed verifiers, which then
    verifies signature, issuer, audience and times. A Buildkite token is only ever judged by Buildkite's
    identity rules, whatever claims it carries, and a GitHub token only by GitHub's."""

    def __init__(self, verifiers: dict[str, OidcVerifier]) -> None:
        self._by_issuer: dict[str, tuple[str, OidcVerifier]] = {}
        for ci, verifier in verifiers.items():
            if verifier.issuer in self._by_issuer:
                raise ValueError(f"the {ci} and {self._by_issuer[verifier.issuer][0]} issuers must differ")
            self._by_issuer[verifier.issuer] = (ci, verifier)

    def verify(self, token: str) -> VerifiedToken:
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise Unauthorized("the bearer token is not a JWT", field="Authorization") from exc
        issuer = unverified.get("iss")
        if not isinstance(issuer, str) or not issuer:
            raise Unauthorized("the token names no issuer", field="Authorization")
        found = self._by_issuer.get(issuer.rstrip("/"))
        if found is None:
            accepted = ", ".join(sorted(self._by_issuer))
            raise Unauthorized(
                f"tokens from {issuer[:200]!r} are not accepted (issuers: {accepted})", field="Authorization"
            )
        ci, verifier = found
        return VerifiedToken(ci, verifier.verify(token))
