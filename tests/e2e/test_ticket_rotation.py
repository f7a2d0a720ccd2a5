"""Ticket key rotation on `crcr local`: a dispatch before `crcr keys rotate --secret-arn` (run with the ready line's
env, as an operator would), one after; the warm functions pick the new secret up once their cached read is older
than CRCR_SECRETS_MAX_AGE_S; both tickets' callbacks are recorded, the JWKS serves both keys, and a ticket under a
third key is refused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from crcr.adapters.tickets import kid_of, load_ed25519
from tests.conftest import ROOT, Relay, event_body, http
from tests.doubles.oidc_issuer import OidcIssuer

pytestmark = pytest.mark.e2e
L2, L2_ID = "org-two/l2-repo", 5001


@pytest.fixture
def oidc() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        yield issuer


def jwks_kids(relay: Relay) -> list[str]:
    status, doc = http("GET", f"{relay.url}/.well-known/jwks.json")
    assert status == 200
    return [key["kid"] for key in doc["keys"]]


def dispatched_ticket(relay: Relay, pr: int) -> str:
    for sent in relay.github.dispatches(L2):
        payload: dict[str, Any] = sent["client_payload"]
        if payload["payload"]["pull_request"]["number"] == pr:
            return str(payload["ticket"])
    raise AssertionError(f"no dispatch of PR {pr} to {L2}")


def report(relay: Relay, oidc: OidcIssuer, ticket: str, run_id: int) -> tuple[int, dict[str, Any]]:
    token = oidc.token(
        repository=L2,
        repository_id=L2_ID,
        run_id=run_id,
        run_attempt=1,
        job_workflow_ref=f"{L2}/.github/workflows/ci.yml@refs/heads/main",
    )
    body = {
        "schema_version": 1,
        "ticket": ticket,
        "status": "completed",
        "conclusion": "success",
        "workflow_name": "CI",
        "job_name": "build-and-test",
        "run_id": run_id,
        "run_attempt": 1,
        "url": f"https://github.com/{L2}/actions/runs/{run_id}",
    }
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    return http("POST", f"{relay.url}/callback", json.dumps(body).encode(), headers)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.2)


def test_tickets_signed_before_and_after_a_rotation_both_report(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer
) -> None:
    relay = relay_factory(
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_SECRETS_MAX_AGE_S": "1"}
    )
    assert relay.post("pull_request", event_body("pull_request.opened.json", pr_number=170001))[0] == 202
    relay.wait_dispatches({L2: 1}, settle_s=0)
    before = dispatched_ticket(relay, 170001)
    first_kid = jwt.get_unverified_header(before)["kid"]
    assert jwks_kids(relay) == [first_kid]

    # The operator's command, with the env of the ready line (which names the secret), against the embedded AWS.
    summary = rotate(relay)
    assert summary["previous_kid"] == first_kid and summary["current_kid"] != first_kid
    # No restart: the running functions read the secret again once their copy is older than its max age.
    wait_for(lambda: jwks_kids(relay) == [summary["current_kid"], first_kid])

    assert relay.post("pull_request", event_body("pull_request.opened.json", pr_number=170002))[0] == 202
    relay.wait_dispatches({L2: 2}, settle_s=0)
    after = dispatched_ticket(relay, 170002)
    assert jwt.get_unverified_header(after)["kid"] == summary["current_kid"]

    assert report(relay, oidc, before, 777) == (200, {"status": "recorded"})  # verified by the previous key
    assert report(relay, oidc, after, 778) == (200, {"status": "recorded"})  # by the current key
    items = relay.stack.client("dynamodb").scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
    assert sorted(item["pr"]["N"] for item in items) == ["170001", "170002"]

    # The same claims under a third key, with its own kid or with the current key's: refused, nothing recorded.
    claims = jwt.decode(after, options={"verify_signature": False})
    third = Ed25519PrivateKey.generate()
    for kid in (kid_of(third.public_key()), summary["current_kid"]):
        forged = jwt.encode(claims, third, algorithm="EdDSA", headers={"kid": kid, "typ": "JWT"})
        status, reply = report(relay, oidc, forged, 779)
        assert status == 401 and reply["field"] == "ticket", reply
    assert len(relay.stack.client("dynamodb").scan(TableName="crcr-local-ResultsTable")["Items"]) == 2


def rotate(relay: Relay, *flags: str) -> dict[str, Any]:
    env = relay.stack.operator_env() | {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "crcr.ops.cli",
            "keys",
            "rotate",
            "--secret-arn",
            env["CRCR_SECRETS_ARN"],
            "--json",
            *flags,
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def test_a_stolen_ticket_key_speaks_only_for_dispatches_in_the_ledger_until_it_is_revoked(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer
) -> None:
    relay = relay_factory(
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_SECRETS_MAX_AGE_S": "1"}
    )
    assert relay.post("pull_request", event_body("pull_request.opened.json", pr_number=170001))[0] == 202
    relay.wait_dispatches({L2: 1, "org-three/l3-repo": 1}, settle_s=0)
    genuine = jwt.decode(dispatched_ticket(relay, 170001), options={"verify_signature": False})
    # The attacker has the relay's signing key (read here from the secret itself).
    secret = relay.stack.client("secretsmanager").get_secret_value(
        SecretId=relay.stack.operator_env()["CRCR_SECRETS_ARN"]
    )
    stolen = load_ed25519(json.loads(secret["SecretString"])["ticket_signing_key"])
    kid = kid_of(stolen.public_key())

    def mint(**changes: Any) -> str:
        return jwt.encode(genuine | changes, stolen, algorithm="EdDSA", headers={"kid": kid, "typ": "JWT"})

    # A dispatch that never happened, or another dispatch's id: the ledger has no such row.
    assert report(relay, oidc, mint(delivery_id=str(uuid.uuid4())), 801)[0] == 401
    assert report(relay, oidc, mint(jti="0" * 32), 802)[0] == 401
    # Another repository's dispatch: the OIDC token (org-two/l2-repo) is not that repository.
    status, reply = report(relay, oidc, mint(sub="org-three/l3-repo"), 803)
    assert (status, reply["field"]) == (403, "ticket")
    # The real dispatch with another commit and PR written in: recorded, as the ledger's commit and PR.
    assert report(relay, oidc, mint(head_sha="f" * 40, pr=1, level=4), 804) == (200, {"status": "recorded"})
    [item] = relay.stack.client("dynamodb").scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
    assert (item["head_sha"]["S"], item["pr"]["N"], item["level"]["N"]) == (genuine["head_sha"], "170001", "2")

    # Revoked: once the functions have read the new secret, nothing the stolen key signs verifies.
    summary = rotate(relay, "--revoke-current")
    assert summary["dropped_kid"] == kid and summary["previous_kid"] is None
    wait_for(lambda: jwks_kids(relay) == [summary["current_kid"]])
    status, reply = report(relay, oidc, mint(), 805)
    assert (status, reply["field"]) == (401, "ticket")
