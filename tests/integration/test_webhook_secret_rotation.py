"""Rotating the webhook secret with no redeploy (Secrets Manager on moto server, through the composition root as the
webhook function builds it): the operator writes the new secret with the old one as `webhook_previous_secret`, then
changes it in the GitHub App; warm functions accept deliveries signed with either from the first one on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crcr.app.ingest import Outcome, ingest
from crcr.composition.base import load_settings, secrets_provider
from crcr.composition.webhook import build_ingest_deps
from crcr.domain.errors import BadSignature
from crcr.domain.signature import sign
from tests.integration.test_ticket_keys import env, secrets_manager  # noqa: F401 - the fixture

PING = json.dumps({"zen": "Design for failure.", "hook_id": 1}).encode()


def ping(deps: Any, secret: str, delivery: str = "d-1") -> Outcome:
    headers = {
        "x-github-event": "ping",
        "x-github-delivery": delivery,
        "x-hub-signature-256": sign(secret.encode(), PING),
    }
    return ingest(PING, headers, deps).outcome


def ingest_env(arn: str, **more: str) -> dict[str, str]:
    return env(arn, CRCR_SECRETS_MAX_AGE_S="3600", CRCR_EVENTS_QUEUE_URL="q", CRCR_BODIES_BUCKET="b") | more


def test_a_rotated_secret_is_taken_by_a_warm_function_and_the_previous_one_still_verifies(
    secrets_manager: Any,  # noqa: F811
) -> None:
    arn = secrets_manager.create_secret(Name="crcr/relay", SecretString=json.dumps({"webhook_secret": "old"}))["ARN"]
    deps = build_ingest_deps(load_settings(ingest_env(arn)))
    assert ping(deps, "old") is Outcome.PONG

    secrets_manager.put_secret_value(
        SecretId=arn, SecretString=json.dumps({"webhook_secret": "new", "webhook_previous_secret": "old"})
    )
    # GitHub signs with the new secret: the mismatch reads the secret again at once (the cache is an hour old).
    assert ping(deps, "new") is Outcome.PONG
    assert ping(deps, "old") is Outcome.PONG  # deliveries GitHub signed before the change, redelivered
    with pytest.raises(BadSignature):
        ping(deps, "neither")

    secrets_manager.put_secret_value(SecretId=arn, SecretString=json.dumps({"webhook_secret": "new"}))
    secrets_provider.cache_clear()  # a new instance after the rotation ended: a cold cache
    deps = build_ingest_deps(load_settings(ingest_env(arn)))
    assert ping(deps, "new") is Outcome.PONG
    with pytest.raises(BadSignature):
        ping(deps, "old")


def test_a_secret_fixed_in_the_environment_stays_fixed(secrets_manager: Any) -> None:  # noqa: F811
    arn = secrets_manager.create_secret(Name="crcr/relay", SecretString=json.dumps({"webhook_secret": "doc"}))["ARN"]
    deps = build_ingest_deps(load_settings(ingest_env(arn, CRCR_WEBHOOK_SECRET="env")))
    assert ping(deps, "env") is Outcome.PONG
    with pytest.raises(BadSignature):
        ping(deps, "doc")
