"""Ticket keys from Secrets Manager (moto server), through the composition root as the functions build them: keys
read from the CRCR_SECRETS_ARN document follow its new versions without a cold start; a key fixed in the
environment stays fixed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from moto.server import ThreadedMotoServer

from crcr.adapters.tickets import kid_of, private_pem
from crcr.composition.base import load_settings
from crcr.composition.callback import build_callback_deps, build_jwks
from crcr.composition.dispatch import build_dispatch_deps
from crcr.local.stack import free_port
from crcr.ops.keys import rotate_secret
from tests.conftest import ROOT, http
from tests.unit.test_tickets import claims


@pytest.fixture
def secrets_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    http("POST", f"{url}/moto-api/reset")
    for name, value in {
        "AWS_ENDPOINT_URL": url,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
    }.items():
        monkeypatch.setenv(name, value)
    yield boto3.client("secretsmanager", endpoint_url=url, region_name="us-east-1")
    server.stop()


def env(arn: str, **more: str) -> dict[str, str]:
    return {
        "CRCR_SECRETS_ARN": arn,
        "CRCR_SECRETS_MAX_AGE_S": "0",  # read again on every use: what an expired cache does
        "CRCR_STATE_TABLE": "state",
        "CRCR_RESULTS_TABLE": "results",
        # PyTorch's own allowlist: a cold start checks the allowlist it is given.
        "CRCR_ALLOWLIST": str(ROOT / "tests" / "events" / "pytorch" / "allowlist.yml"),
        "CRCR_DISPATCH_QUEUE_URL": "q",
        "CRCR_DISPATCH_DLQ_URL": "dlq",
        "CRCR_CALLBACK_URL": "https://crcr.example.com/callback",
        "CRCR_GITHUB_APP_ID": "1",
    } | more


def test_keys_from_the_secret_follow_its_new_version(secrets_manager: Any, app_key_pem: str) -> None:
    first = Ed25519PrivateKey.generate()
    arn = secrets_manager.create_secret(
        Name="crcr/relay",
        SecretString=json.dumps({"ticket_signing_key": private_pem(first), "github_app_private_key": app_key_pem}),
    )["ARN"]
    settings = load_settings(env(arn))
    signer = build_dispatch_deps(settings).signer
    verifier = build_callback_deps(settings).tickets
    served = build_jwks(settings)
    before = signer.sign(claims())
    assert [k["kid"] for k in served.jwks()["keys"]] == [kid_of(first.public_key())]

    rotated = rotate_secret(secrets_manager, arn, 1_800_000_000.0, max_age_s=0)
    after = signer.sign(claims())
    assert jwt.get_unverified_header(after)["kid"] == rotated.current_kid != kid_of(first.public_key())
    assert [k["kid"] for k in served.jwks()["keys"]] == [rotated.current_kid, kid_of(first.public_key())]
    assert verifier.verify(before, claims().iat).sub == verifier.verify(after, claims().iat).sub == "org/repo"


def test_a_key_set_in_the_environment_stays_fixed(secrets_manager: Any) -> None:
    fixed, in_secret = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    arn = secrets_manager.create_secret(
        Name="crcr/relay", SecretString=json.dumps({"ticket_signing_key": private_pem(in_secret)})
    )["ARN"]
    settings = load_settings(env(arn, CRCR_TICKET_SIGNING_KEY=private_pem(fixed)))
    assert not settings.from_secret("ticket_signing_key") and settings.from_secret("ticket_previous_key")
    served = build_jwks(settings)
    rotate_secret(secrets_manager, arn, 1_800_000_000.0, max_age_s=0)
    assert served.jwks()["keys"][0]["kid"] == kid_of(fixed.public_key())


def test_the_jwks_costs_secrets_manager_one_read_per_max_age_however_often_it_is_asked(
    secrets_manager: Any, app_key_pem: str
) -> None:
    from crcr.composition.base import aws_client  # noqa: PLC0415 - the functions' own client, the one that is counted

    first = Ed25519PrivateKey.generate()
    arn = secrets_manager.create_secret(
        Name="crcr/relay", SecretString=json.dumps({"ticket_signing_key": private_pem(first)})
    )["ARN"]
    reads: list[str] = []
    aws_client("secretsmanager").meta.events.register(
        "before-call.secrets-manager.GetSecretValue", lambda **kwargs: reads.append("read")
    )
    served = build_jwks(load_settings(env(arn, CRCR_SECRETS_MAX_AGE_S="300")))
    for _ in range(500):  # anyone may GET the JWKS: it is answered from memory
        assert len(served.jwks()["keys"]) == 1
    assert len(reads) == 1
