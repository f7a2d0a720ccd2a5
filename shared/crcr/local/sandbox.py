"""Sandbox GitHub for `crcr local` without CRCR_GITHUB_API_URL: a GitHub App's view of the REST API
that checks the App JWT and installation tokens, records what the relay sends, and shows it."""

from __future__ import annotations

import re
import secrets
import threading
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey


@dataclass
class SandboxReply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Token:
    repos: frozenset[str]
    expires: float


def _ids(repo: str) -> tuple[int, int]:
    """Stable installation id per owner and repository id per name, like GitHub's numeric ids."""
    owner = repo.split("/", 1)[0].lower()
    return 1000 + zlib.crc32(owner.encode()) % 100_000, 100_000 + zlib.crc32(repo.lower().encode()) % 10_000_000


class SandboxGitHub:
    def __init__(self, app_id: str, app_public_key: RSAPublicKey) -> None:
        self._app_id = app_id
        self._key = app_public_key
        self._lock = threading.Lock()
        self._tokens: dict[str, _Token] = {}
        self._owners: dict[int, str] = {}
        self.dispatches: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, int]] = []

    def _app_ok(self, auth: str) -> bool:
        token = auth.removeprefix("Bearer ").strip()
        try:
            claims = jwt.decode(token, self._key, algorithms=["RS256"], options={"require": ["iat", "exp", "iss"]})
        except jwt.PyJWTError:
            return False
        return str(claims["iss"]) == self._app_id and claims["exp"] - claims["iat"] <= 660

    def handle(self, method: str, path: str, auth: str, body: Any) -> SandboxReply:
        reply = self._route(method, path, auth, body)
        with self._lock:
            self.requests.append((method, path, reply.status))
        return reply

    def _route(self, method: str, path: str, auth: str, body: Any) -> SandboxReply:
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/installation", path):
            if method != "GET":
                return SandboxReply(404, {"message": "Not Found"})
            if not self._app_ok(auth):
                return SandboxReply(401, {"message": "A JSON web token could not be decoded"})
            inst, _ = _ids(m.group(1))
            with self._lock:
                self._owners[inst] = m.group(1).split("/")[0]
            return SandboxReply(200, {"id": inst, "account": {"login": m.group(1).split("/")[0]}})
        if m := re.fullmatch(r"/app/installations/(\d+)/access_tokens", path):
            if method != "POST" or not self._app_ok(auth):
                return SandboxReply(401, {"message": "A JSON web token could not be decoded"})
            names = (body or {}).get("repositories") or []
            with self._lock:
                owner = self._owners.get(int(m.group(1)))
            if owner is None or not names:
                return SandboxReply(422, {"message": "the sandbox needs repositories named in the request"})
            repos = [f"{owner}/{n}" for n in names]
            token = "ghs_" + secrets.token_urlsafe(24)
            with self._lock:
                self._tokens[token] = _Token(frozenset(r.lower() for r in repos), time.time() + 3600)
            expires = datetime.fromtimestamp(time.time() + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return SandboxReply(
                201,
                {
                    "token": token,
                    "expires_at": expires,
                    "permissions": (body or {}).get("permissions") or {},
                    "repository_selection": "selected",
                    "repositories": [{"id": _ids(r)[1], "full_name": r, "name": r.split("/")[1]} for r in repos],
                },
            )
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/dispatches", path):
            repo = m.group(1)
            with self._lock:
                tok = self._tokens.get(auth.removeprefix("Bearer ").removeprefix("token ").strip())
            if tok is None or tok.expires < time.time():
                return SandboxReply(401, {"message": "Bad credentials"})
            if repo.lower() not in tok.repos:
                return SandboxReply(404, {"message": "Not Found"})
            payload = (body or {}).get("client_payload") or {}
            if len(payload) > 10:
                return SandboxReply(
                    422, {"message": f"No more than 10 properties are allowed; {len(payload)} were supplied."}
                )
            with self._lock:
                self.dispatches.append(
                    {
                        "repo": repo,
                        "event_type": (body or {}).get("event_type"),
                        "client_payload": payload,
                        "at": time.time(),
                    }
                )
            return SandboxReply(204)
        return SandboxReply(404, {"message": "Not Found"})
