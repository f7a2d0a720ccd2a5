"""An independent test double of GitHub Actions' OIDC token issuer (``token.actions.githubusercontent.com``).

Written from GitHub's public documentation and from real tokens GitHub has issued that are
published verbatim, never from the relay's code:

* "OpenID Connect" (docs.github.com/actions/concepts/security/openid-connect, formerly "About
  security hardening with OpenID Connect"): the example token, header ``{"typ", "alg", "x5t",
  "kid"}``, every custom claim a STRING (``"actor_id": "12"``, ``"repository_id": "74"``,
  ``"run_attempt": "2"``...).
* "OpenID Connect reference" (docs.github.com/actions/reference/security/oidc): the claim list, the
  default ``sub`` formats (environment > pull_request > ref), ``:`` in values escaped as ``%3A``,
  and the immutable (id-based) ``sub`` format of 2026.
* The discovery document served at ``https://token.actions.githubusercontent.com/.well-known/
  openid-configuration`` (captures quoted in public repositories).
* Real tokens and the real JWKS printed by ``rgl/github-actions-validate-jwt`` (README and main.go)
  and ``github/actions-oidc-debugger``: payload keys emitted in sorted order, ``nbf = iat - 300``,
  ``exp = iat + 21600`` (6 h), ``ref_protected`` as ``"true"``/``"false"``, a UUID-like ``kid``, and
  JWKS entries ``{"kty": "RSA", "alg": "RS256", "use": "sig", "kid", "n", "e": "AQAB", "x5c":
  [<self-signed cert, CN=actions.self-signed.github>], "x5t": <base64url SHA-1 of that cert>}``.

It is a real HTTP server (``ThreadingHTTPServer`` on 127.0.0.1, a free port, a daemon thread).

Usage::

    issuer = OidcIssuer()                 # serving; or: with OidcIssuer() as issuer: ...
    issuer.url == issuer.issuer           # "http://127.0.0.1:<port>" (no trailing slash) == the `iss`
    issuer.jwks_uri                       # issuer.url + "/.well-known/jwks"
    tok = issuer.token(audience="crcr", repository="Org/Repo", repository_id=1001, ...)
    tok = issuer.token(sub_format="id")   # repo:Org@77/Repo@1001:ref:refs/heads/main
    tok = issuer.token(run_id=None)       # claim overrides: None deletes a claim, others replace/add
    issuer.claims(...)                    # the payload token() would sign (same parameters)
    issuer.rotate()                       # new key + new kid; JWKS = [new, previous]; tokens use new
    issuer.retire_previous()              # finish the rotation: JWKS = [current]
    issuer.forge("alg_none")              # hostile tokens, see FORGE_KINDS
    issuer.requests                       # [RecordedRequest(method, path, time), ...]
    issuer.count("/.well-known/jwks")     # GET requests to that path (query string ignored)
    issuer.fail_next("/.well-known/jwks", 2, status=503)
    issuer.stop()

``OidcIssuer(alg="ES256")`` signs with P-256 keys and serves EC JWKs instead (GitHub itself only
ever uses RS256; this mode exists for verifiers that also allow ES256).  ``clock=`` (a
``time.time``-like callable) moves token time without sleeping.

HTTP (anything else: ``404``):

* ``GET /.well-known/openid-configuration`` -> GitHub's discovery document, with ``issuer`` and
  ``jwks_uri`` pointing at this server.
* ``GET /.well-known/jwks`` -> ``{"keys": [...]}``.
* ``HEAD`` of either -> the same headers, no body.

Headers: ``content-type: application/json; charset=utf-8`` and ``cache-control`` (default
``public, max-age=3600``; GitHub's exact value is not documented - pass ``cache_control=`` to change
it).

Subject (``sub``), GitHub's default formats ("Example subject claims"): ``repo:OWNER/REPO:
environment:NAME`` when the job references an environment, else ``repo:OWNER/REPO:pull_request``
for a ``pull_request`` event, else ``repo:OWNER/REPO:ref:REF``; any ``:`` inside a value becomes
``%3A``.  ``sub_format="id"`` gives the immutable format ("Immutable subject claims": the default
for repositories created - or renamed/transferred - after July 15, 2026, opt-in before; not on
GHES): ``repo:OWNER@OWNER_ID/REPO@REPO_ID:<same context>``, e.g.
``repo:octo-org@123456/octo-repo@456789:ref:refs/heads/main``.  (GitHub's changelog of 2026-04-23
first announced ``repo:octocat-123456/my-repo-456789:...`` and June 18; those docs were reverted
and re-published with the ``@`` separator - "``@`` cannot appear in GitHub usernames or repository
names" - and July 15.  This double follows the current reference.)

Token defaults follow the brief of the test suite (``lifetime=300``, the lifetime in the docs'
example token); GitHub's real tokens observed in 2025 live 6 h (``GITHUB_OBSERVED_LIFETIME``).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
GITHUB_OBSERVED_LIFETIME = 21600  # exp - iat of real tokens (2025 captures)
NBF_BACKDATE = 300  # iat - nbf of real tokens (2025 captures)

DISCOVERY_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/.well-known/jwks"

# claims_supported exactly as served by GitHub (the most recent capture found; GitHub's list is not
# exhaustive: tokens also carry ref_protected, check_run_id, enterprise, enterprise_id).
GITHUB_CLAIMS_SUPPORTED = (
    "sub",
    "aud",
    "exp",
    "iat",
    "iss",
    "jti",
    "nbf",
    "ref",
    "repository",
    "repository_id",
    "repository_owner",
    "repository_owner_id",
    "run_id",
    "run_number",
    "run_attempt",
    "actor",
    "actor_id",
    "workflow",
    "workflow_ref",
    "workflow_sha",
    "head_ref",
    "base_ref",
    "event_name",
    "ref_type",
    "environment",
    "environment_node_id",
    "job_workflow_ref",
    "job_workflow_sha",
    "repository_visibility",
    "runner_environment",
)

FORGE_KINDS = (
    "alg_none",  # {"alg": "none"} + served kid, empty signature
    "hs256_with_public_key",  # HS256, HMAC key = the served public key's PEM (SubjectPublicKeyInfo)
    "unknown_key_known_kid",  # signed by a fresh key of the issuer's kind, header carries the served kid
    "unknown_kid",  # signed by a fresh key, kid never served
    "wrong_issuer",  # real key; iss = "https://token.actions.githubusercontent.com" (the real GitHub)
    "expired",  # real key; exp 600 s in the past
    "not_yet_valid",  # real key; nbf (and iat) 600 s in the future
    "wrong_audience",  # real key; aud = "https://github.com/<owner>" (GitHub's default audience)
    "es256_unknown_key",  # ES256 by a fresh P-256 key, header carries the served kid
    "tampered_payload",  # real signature of the genuine claims, payload swapped (repository changed)
    "rs512",  # RS512 by the real key, served kid (an EC issuer: by a fresh RSA key, served kid)
    "embedded_jwk",  # fresh key, its public JWK embedded in the header (+ its own kid)
)

_TOKEN_PARAMS = frozenset(
    {
        "audience",
        "repository",
        "repository_id",
        "repository_owner",
        "repository_owner_id",
        "run_id",
        "run_number",
        "run_attempt",
        "event_name",
        "job_workflow_ref",
        "job_workflow_sha",
        "workflow",
        "workflow_ref",
        "workflow_sha",
        "ref",
        "sha",
        "lifetime",
        "actor",
        "actor_id",
        "head_ref",
        "base_ref",
        "environment",
        "environment_node_id",
        "repository_visibility",
        "runner_environment",
        "ref_protected",
        "check_run_id",
        "enterprise",
        "enterprise_id",
        "sub_format",
        "now",
        "drop",
    }
)


class RecordedRequest(NamedTuple):
    method: str
    path: str  # as sent, query string included
    time: float  # time.monotonic() on arrival


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _int_b64url(value: int, length: int | None = None) -> str:
    size = length if length is not None else max(1, (value.bit_length() + 7) // 8)
    return _b64url(value.to_bytes(size, "big"))


def _json_segment(obj: dict[str, Any]) -> str:
    return _b64url(json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8"))


def _sign(signing_input: bytes, alg: str, key: Any) -> bytes:
    if alg == "none":
        return b""
    if alg.startswith("HS"):
        digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
        return hmac.new(key, signing_input, digest).digest()
    hash_alg = {"256": hashes.SHA256(), "384": hashes.SHA384(), "512": hashes.SHA512()}[alg[2:]]
    if alg.startswith("RS"):
        return key.sign(signing_input, padding.PKCS1v15(), hash_alg)  # type: ignore[no-any-return]
    if alg.startswith("ES"):
        r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hash_alg)))
        size = (key.curve.key_size + 7) // 8
        return r.to_bytes(size, "big") + s.to_bytes(size, "big")
    raise ValueError(f"unsupported alg {alg!r}")


def _encode(header: dict[str, Any], payload: dict[str, Any], alg: str, key: Any) -> str:
    signing_input = f"{_json_segment(header)}.{_json_segment(payload)}"
    return f"{signing_input}.{_b64url(_sign(signing_input.encode('ascii'), alg, key))}"


def _sub_escape(value: str) -> str:
    # "Any `:` within the metadata values will be replaced with `%3A` in the subject claim."
    return value.replace(":", "%3A")


@dataclass
class SigningKey:
    """One issuer key, as GitHub publishes it: a key pair plus a self-signed certificate."""

    alg: str  # "RS256" or "ES256"
    private_key: Any
    kid: str
    x5t: str  # base64url SHA-1 thumbprint of the certificate (DER)
    x5c: str  # standard base64 of the certificate (DER)

    @classmethod
    def generate(cls, alg: str = "RS256") -> SigningKey:
        private_key: Any
        if alg == "RS256":
            private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif alg == "ES256":
            private_key = ec.generate_private_key(ec.SECP256R1())
        else:
            raise ValueError(f"unsupported issuer alg {alg!r}")
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "actions.self-signed.github")])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(private_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(private_key, hashes.SHA256())
        )
        der = cert.public_bytes(serialization.Encoding.DER)
        thumbprint = hashlib.sha1(der).digest()  # x5t is defined as a SHA-1 thumbprint (RFC 7515)
        # GitHub's kids look like UUIDs ("38826b17-6a30-5f9b-b169-8beb8202f723"); derive one.
        kid = str(uuid.uuid5(uuid.NAMESPACE_OID, thumbprint.hex()))
        return cls(alg, private_key, kid, _b64url(thumbprint), base64.b64encode(der).decode("ascii"))

    @property
    def public_key(self) -> Any:
        return self.private_key.public_key()

    def public_pem(self) -> bytes:
        return self.public_key.public_bytes(  # type: ignore[no-any-return]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def jwk(self) -> dict[str, Any]:
        numbers = self.public_key.public_numbers()
        if self.alg == "RS256":
            body: dict[str, Any] = {
                "kty": "RSA",
                "alg": "RS256",
                "use": "sig",
                "kid": self.kid,
                "n": _int_b64url(numbers.n),
                "e": _int_b64url(numbers.e),
            }
        else:
            body = {
                "kty": "EC",
                "alg": "ES256",
                "use": "sig",
                "kid": self.kid,
                "crv": "P-256",
                "x": _int_b64url(numbers.x, 32),
                "y": _int_b64url(numbers.y, 32),
            }
        body["x5c"] = [self.x5c]
        body["x5t"] = self.x5t
        return body

    def header(self, alg: str | None = None) -> dict[str, Any]:
        return {"alg": alg or self.alg, "kid": self.kid, "typ": "JWT", "x5t": self.x5t}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    double: OidcIssuer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "oidc-issuer-double"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def version_string(self) -> str:
        return self.server_version

    def _handle(self, head: bool = False) -> None:
        double = self.server.double
        status, body, headers = double._respond(self.command, self.path)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        self._handle()

    do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_POST


class OidcIssuer:
    """A GitHub Actions OIDC issuer on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        *,
        alg: str = "RS256",
        clock: Callable[[], float] = time.time,
        cache_control: str = "public, max-age=3600",
    ) -> None:
        if alg not in ("RS256", "ES256"):
            raise ValueError("alg must be 'RS256' or 'ES256'")
        self.alg = alg
        self.clock = clock
        self.cache_control = cache_control
        self._lock = threading.Lock()
        self._keys: list[SigningKey] = [SigningKey.generate(alg)]  # current first
        self._attacker: dict[str, SigningKey] = {}
        self._failures: dict[str, list[int]] = {}
        self._holds: dict[str, list[threading.Event]] = {}
        self.requests: list[RecordedRequest] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.double = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------------------------

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2)

    def __enter__(self) -> OidcIssuer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the issuer's public face --------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        return self.url

    @property
    def jwks_uri(self) -> str:
        return self.url + JWKS_PATH

    @property
    def discovery_url(self) -> str:
        return self.url + DISCOVERY_PATH

    @property
    def current_key(self) -> SigningKey:
        with self._lock:
            return self._keys[0]

    @property
    def served_keys(self) -> list[SigningKey]:
        with self._lock:
            return list(self._keys)

    @property
    def kid(self) -> str:
        return self.current_key.kid

    def discovery_document(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "jwks_uri": self.jwks_uri,
            "subject_types_supported": ["public", "pairwise"],
            "response_types_supported": ["id_token"],
            "claims_supported": list(GITHUB_CLAIMS_SUPPORTED),
            "id_token_signing_alg_values_supported": [self.alg],
            "scopes_supported": ["openid"],
        }

    def jwks(self) -> dict[str, Any]:
        return {"keys": [key.jwk() for key in self.served_keys]}

    # -- keys ----------------------------------------------------------------------------------------

    def rotate(self) -> SigningKey:
        """New signing key with a new kid; the JWKS serves [new, previous]; new tokens use the new key."""
        new = SigningKey.generate(self.alg)
        with self._lock:
            self._keys = [new, self._keys[0]]
        return new

    def retire_previous(self) -> None:
        """End a rotation: only the current key stays in the JWKS."""
        with self._lock:
            self._keys = self._keys[:1]

    # -- tokens --------------------------------------------------------------------------------------

    def claims(
        self,
        *,
        audience: str | None = "crcr",
        repository: str | None = "Org/Repo",
        repository_id: int | str | None = 1001,
        repository_owner: str | None = None,
        repository_owner_id: int | str | None = 77,
        run_id: int | str | None = 123,
        run_number: int | str | None = 1,
        run_attempt: int | str | None = 1,
        event_name: str | None = "repository_dispatch",
        job_workflow_ref: str | None = None,
        job_workflow_sha: str | None = None,
        workflow: str | None = "CI",
        workflow_ref: str | None = None,
        workflow_sha: str | None = None,
        ref: str | None = "refs/heads/main",
        sha: str | None = "0123456789abcdef0123456789abcdef01234567",
        lifetime: int = 300,
        actor: str | None = "octocat",
        actor_id: int | str | None = 583231,
        head_ref: str | None = "",
        base_ref: str | None = "",
        environment: str | None = None,
        environment_node_id: str | None = None,
        repository_visibility: str | None = "private",
        runner_environment: str | None = "github-hosted",
        ref_protected: bool | str | None = False,
        check_run_id: int | str | None = 4242,
        enterprise: str | None = None,
        enterprise_id: int | str | None = None,
        sub_format: str = "repo",
        now: float | None = None,
        drop: tuple[str, ...] | list[str] = (),
        **overrides: Any,
    ) -> dict[str, Any]:
        """The payload ``token()`` signs: every claim GitHub puts in a job's token, typed as GitHub does.

        Numeric ids/counters may be given as ints; they are emitted as strings, as GitHub does.
        ``repository_owner`` defaults to the part of ``repository`` before ``/``; ``workflow_ref``
        to ``<repository>/.github/workflows/ci.yml@<ref>``; ``job_workflow_ref`` to ``workflow_ref``
        (GitHub sets both even without a reusable workflow); the ``*_sha`` to ``sha``.
        ``environment`` / ``enterprise`` / ``enterprise_id`` / ``environment_node_id`` are only
        present when given; ``check_run_id`` is present unless ``None``.
        ``sub_format``: ``"repo"`` (the classic default) or ``"id"`` (the 2026 immutable format).
        A parameter given as ``None`` leaves its claim out (for the derived ones above, ``None``
        means "derive"; use ``drop=("repository_owner",)`` to leave those out).  ``overrides``
        replace or add claims verbatim; an override of ``None`` deletes the claim.
        """

        def text(value: object) -> str | None:
            return None if value is None else str(value)

        repo = repository or ""
        owner = repository_owner if repository_owner is not None else repo.split("/", 1)[0]
        repo_name = repo.split("/", 1)[1] if "/" in repo else repo
        ref_text = ref or ""
        wf_ref = workflow_ref if workflow_ref is not None else f"{repo}/.github/workflows/ci.yml@{ref_text}"
        iat = int(self.clock() if now is None else now)

        if environment is not None:
            context = f"environment:{_sub_escape(environment)}"
        elif event_name == "pull_request":
            context = "pull_request"
        else:
            context = f"ref:{_sub_escape(ref_text)}"
        if sub_format == "repo":
            subject = f"repo:{_sub_escape(repo)}:{context}"
        elif sub_format == "id":
            subject = (
                f"repo:{_sub_escape(owner)}@{repository_owner_id}/{_sub_escape(repo_name)}@{repository_id}:{context}"
            )
        else:
            raise ValueError("sub_format must be 'repo' or 'id'")

        claims: dict[str, Any] = {
            "jti": str(uuid.uuid4()),
            "sub": subject,
            "aud": audience,
            "ref": ref,
            "sha": sha,
            "repository": repository,
            "repository_owner": owner,
            "repository_owner_id": text(repository_owner_id),
            "run_id": text(run_id),
            "run_number": text(run_number),
            "run_attempt": text(run_attempt),
            "repository_visibility": repository_visibility,
            "repository_id": text(repository_id),
            "actor_id": text(actor_id),
            "actor": actor,
            "workflow": workflow,
            "head_ref": head_ref,
            "base_ref": base_ref,
            "event_name": event_name,
            "ref_type": None if ref is None else ("tag" if ref.startswith("refs/tags/") else "branch"),
            "ref_protected": ref_protected if not isinstance(ref_protected, bool) else str(ref_protected).lower(),
            "workflow_ref": wf_ref,
            "workflow_sha": workflow_sha if workflow_sha is not None else sha,
            "job_workflow_ref": job_workflow_ref if job_workflow_ref is not None else wf_ref,
            "job_workflow_sha": job_workflow_sha if job_workflow_sha is not None else sha,
            "runner_environment": runner_environment,
            "check_run_id": text(check_run_id),
            "environment": environment,
            "environment_node_id": environment_node_id if environment is not None else None,
            "enterprise": enterprise,
            "enterprise_id": text(enterprise_id),
            "iss": self.issuer,
            "nbf": iat - NBF_BACKDATE,
            "exp": iat + lifetime,
            "iat": iat,
        }
        claims = {name: value for name, value in claims.items() if value is not None and name not in drop}
        return self._apply(claims, overrides)

    def token(self, *, headers: dict[str, Any] | None = None, **kwargs: Any) -> str:
        """A token signed by the current key (parameters: see ``claims``).

        ``headers`` replace or add JOSE header parameters (``None`` deletes one); the signature
        stays valid, and the ``alg`` used to sign is the header's ``alg`` if it is changed.
        """
        key = self.current_key
        header = self._with(key.header(), headers)
        return _encode(header, self.claims(**kwargs), header.get("alg", key.alg), key.private_key)

    # -- hostile tokens ------------------------------------------------------------------------------

    def forge(self, kind: str, *, headers: dict[str, Any] | None = None, **kwargs: Any) -> str:
        """A hostile token of ``kind`` (see ``FORGE_KINDS``); every one must be rejected.

        ``kwargs`` take ``claims`` parameters and claim overrides; overrides are applied after the
        kind's own changes (so ``forge("expired", exp=...)`` wins).  ``headers`` are applied last.
        """
        params = {k: v for k, v in kwargs.items() if k in _TOKEN_PARAMS}
        overrides = {k: v for k, v in kwargs.items() if k not in _TOKEN_PARAMS}
        claims = self.claims(**params)
        now = claims["iat"]
        key = self.current_key
        header = key.header()
        sign_alg = key.alg
        sign_key: Any = key.private_key

        if kind == "alg_none":
            header["alg"] = sign_alg = "none"
            header.pop("x5t")
        elif kind == "hs256_with_public_key":
            header["alg"] = sign_alg = "HS256"
            header.pop("x5t")
            sign_key = key.public_pem()
        elif kind == "unknown_key_known_kid":
            sign_key = self.attacker_key(self.alg).private_key
        elif kind == "unknown_kid":
            attacker = self.attacker_key(self.alg)
            header = attacker.header()
            sign_key = attacker.private_key
        elif kind == "wrong_issuer":
            claims["iss"] = GITHUB_ISSUER
        elif kind == "expired":
            claims.update(iat=now - 900, nbf=now - 900 - NBF_BACKDATE, exp=now - 600)
        elif kind == "not_yet_valid":
            claims.update(iat=now + 600 + NBF_BACKDATE, nbf=now + 600, exp=now + 600 + NBF_BACKDATE + 300)
        elif kind == "wrong_audience":
            claims["aud"] = f"https://github.com/{claims['repository_owner']}"
        elif kind == "es256_unknown_key":
            header["alg"] = sign_alg = "ES256"
            header.pop("x5t")
            sign_key = self.attacker_key("ES256").private_key
        elif kind == "tampered_payload":
            header = self._with(header, headers)
            signed = self._apply(claims, overrides)
            genuine = _encode(header, signed, header.get("alg", sign_alg), sign_key)
            tampered = dict(signed)
            tampered["repository"] = "Attacker/Repo"
            tampered["repository_owner"] = "Attacker"
            tampered["sub"] = (
                "repo:Attacker/Repo:" + str(signed.get("sub", "repo:x:ref:refs/heads/main")).split(":", 2)[-1]
            )
            head, _, signature = genuine.split(".")
            return f"{head}.{_json_segment(tampered)}.{signature}"
        elif kind == "rs512":
            header["alg"] = sign_alg = "RS512"
            if key.alg != "RS256":  # an EC issuer has no RSA key: an attacker's, under the served kid
                sign_key = self.attacker_key("RS256").private_key
        elif kind == "embedded_jwk":
            attacker = self.attacker_key(self.alg)
            header = attacker.header()
            jwk = attacker.jwk()
            jwk.pop("x5c")
            header["jwk"] = jwk
            sign_key = attacker.private_key
        else:
            raise ValueError(f"unknown forge kind {kind!r}; known: {', '.join(FORGE_KINDS)}")

        header = self._with(header, headers)
        return _encode(header, self._apply(claims, overrides), header.get("alg", sign_alg), sign_key)

    def attacker_key(self, alg: str) -> SigningKey:
        """The fresh, never-served key ``forge`` signs with for ``alg`` ("RS256"/"ES256"); one per issuer."""
        with self._lock:
            existing = self._attacker.get(alg)
        if existing is None:
            existing = SigningKey.generate(alg)
            with self._lock:
                existing = self._attacker.setdefault(alg, existing)
        return existing

    @staticmethod
    def _apply(claims: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
        result = dict(claims)
        for name, value in (overrides or {}).items():
            if value is None:
                result.pop(name, None)
            else:
                result[name] = value
        return result

    _with = _apply

    # -- HTTP ----------------------------------------------------------------------------------------

    def fail_next(self, path: str, n: int = 1, status: int = 503) -> None:
        """The next ``n`` requests to ``path`` (query string ignored, any method) get ``status``."""
        with self._lock:
            self._failures.setdefault(path, []).extend([status] * n)

    def hold_next(self, path: str) -> threading.Event:
        """The next request to ``path`` is answered only once the returned event is set (a slow issuer)."""
        gate = threading.Event()
        with self._lock:
            self._holds.setdefault(path, []).append(gate)
        return gate

    def count(self, path: str, method: str = "GET") -> int:
        """How many ``method`` requests reached ``path`` (query string ignored)."""
        with self._lock:
            return sum(1 for r in self.requests if r.method == method and r.path.split("?", 1)[0] == path)

    def reset_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def _respond(self, method: str, raw_path: str) -> tuple[int, bytes, dict[str, str]]:
        path = raw_path.split("?", 1)[0]
        with self._lock:
            self.requests.append(RecordedRequest(method, raw_path, time.monotonic()))
            queue = self._failures.get(path)
            failure = queue.pop(0) if queue else None
            holds = self._holds.get(path)
            gate = holds.pop(0) if holds else None
        if gate is not None:
            gate.wait(timeout=60)
        json_headers = {"content-type": "application/json; charset=utf-8"}
        if failure is not None:
            body = json.dumps({"message": f"scripted failure {failure}"}).encode()
            return failure, body, json_headers
        if method in ("GET", "HEAD") and path in (DISCOVERY_PATH, JWKS_PATH):
            document = self.discovery_document() if path == DISCOVERY_PATH else self.jwks()
            body = json.dumps(document, separators=(",", ":")).encode()
            return 200, body, {**json_headers, "cache-control": self.cache_control}
        return 404, b"Not Found", {"content-type": "text/plain; charset=utf-8"}
