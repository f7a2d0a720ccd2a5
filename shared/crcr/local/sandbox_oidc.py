"""Sandbox OIDC issuer for `crcr local`: GitHub-Actions-shaped tokens for the sandbox workflows (a second instance on
another path: Buildkite-agent-shaped ones), discovery and JWKS on the local port (loopback http, which the relay
accepts only there), so the sandbox runs call back through the real verification path."""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa


def _b64(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes((n.bit_length() + 7) // 8, "big")).rstrip(b"=").decode()


class SandboxOidc:
    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._kid = uuid.uuid4().hex

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "jwks_uri": f"{self.issuer}/.well-known/jwks",
            "subject_types_supported": ["public", "pairwise"],
            "response_types_supported": ["id_token"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid"],
        }

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "alg": "RS256",
                    "use": "sig",
                    "kid": self._kid,
                    "n": _b64(numbers.n),
                    "e": _b64(numbers.e),
                }
            ]
        }

    def mint(self, claims: dict[str, Any], lifetime_s: int = 300) -> str:
        """A token with these claims, signed by this issuer, valid for `lifetime_s`."""
        now = int(time.time())
        base = {"iss": self.issuer, "iat": now, "nbf": now, "exp": now + lifetime_s}
        return jwt.encode(base | claims, self._key, algorithm="RS256", headers={"kid": self._kid})

    def token(self, *, audience: str, repository: str, repository_id: int, run_id: int, run_attempt: int) -> str:
        now = int(time.time())
        owner = repository.split("/", 1)[0]
        workflow_ref = f"{repository}/.github/workflows/crcr.yml@refs/heads/main"
        claims = {
            "jti": str(uuid.uuid4()),
            "sub": f"repo:{repository}:ref:refs/heads/main",
            "aud": audience,
            "iss": self.issuer,
            "iat": now,
            "nbf": now - 5,
            "exp": now + 300,
            "ref": "refs/heads/main",
            "repository": repository,
            "repository_id": str(repository_id),
            "repository_owner": owner,
            "repository_owner_id": "1",
            "run_id": str(run_id),
            "run_number": "1",
            "run_attempt": str(run_attempt),
            "event_name": "repository_dispatch",
            "workflow": "crcr sandbox",
            "workflow_ref": workflow_ref,
            "job_workflow_ref": workflow_ref,
            "runner_environment": "self-hosted",
        }
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self._kid})
