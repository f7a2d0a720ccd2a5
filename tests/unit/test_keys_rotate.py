"""`crcr keys rotate` on a secret document: new -> current, the current key's public half -> previous, every other
key kept; not again while the previous key still verifies unexpired tickets; --revoke-current for a compromise."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from crcr.adapters.tickets import Ed25519Tickets, kid_of, load_ed25519, load_ed25519_public, private_pem, public_pem
from crcr.ops.keys import TICKET_TTL_S, USAGE, RotateFailed, rotate
from tests.unit.test_tickets import claims

NOW = 1_800_000_000.0
MAX_AGE = 300.0
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def first() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def secret(current: Ed25519PrivateKey, **more: Any) -> dict[str, Any]:
    return {"webhook_secret": "w", "github_app_private_key": "app", "ticket_signing_key": private_pem(current)} | more


def test_the_current_key_becomes_the_previous_ones_public_half(first: Ed25519PrivateKey) -> None:
    done = rotate(secret(first), NOW, max_age_s=MAX_AGE)
    doc = done.doc
    assert {k: doc[k] for k in ("webhook_secret", "github_app_private_key")} == {
        "webhook_secret": "w",
        "github_app_private_key": "app",
    }
    new = load_ed25519(doc["ticket_signing_key"])
    assert kid_of(new.public_key()) == done.current_kid != kid_of(first.public_key())
    # Only the public half is kept: the secret never holds two keys that can sign.
    assert "PRIVATE" not in doc["ticket_previous_key"]
    assert kid_of(load_ed25519_public(doc["ticket_previous_key"])) == done.previous_kid == kid_of(first.public_key())
    assert doc["ticket_rotated_at"] == "2027-01-15T08:00:00Z" and done.dropped_kid is None
    # Kept until the last ticket the old key signed (up to MAX_AGE after the change) has expired.
    assert done.previous_until == "2027-02-14T08:05:00Z"
    # The relay, given the new document, signs with the new key and still verifies the old key's tickets.
    tickets = Ed25519Tickets(doc["ticket_signing_key"], doc["ticket_previous_key"])
    old_ticket = Ed25519Tickets(private_pem(first)).sign(claims())
    assert tickets.verify(old_ticket, claims().iat).sub == "org/repo"


def test_rotating_again_before_the_previous_keys_tickets_expire_is_refused(first: Ed25519PrivateKey) -> None:
    once = rotate(secret(first), NOW, max_age_s=MAX_AGE).doc
    with pytest.raises(RotateFailed) as refused:
        rotate(once, NOW + TICKET_TTL_S, max_age_s=MAX_AGE)
    assert refused.value.code == USAGE and "verifies tickets until 2027-02-14T08:05:00Z" in str(refused.value)
    twice = rotate(once, NOW + TICKET_TTL_S + MAX_AGE, max_age_s=MAX_AGE)
    assert twice.dropped_kid == kid_of(first.public_key())
    forced = rotate(once, NOW + 60, max_age_s=MAX_AGE, force=True)
    assert forced.previous_kid == kid_of(load_ed25519(once["ticket_signing_key"]).public_key())


def test_revoking_a_compromised_current_key_keeps_the_previous_key_as_it_was(first: Ed25519PrivateKey) -> None:
    once = rotate(secret(first), NOW, max_age_s=MAX_AGE)
    compromised = kid_of(load_ed25519(once.doc["ticket_signing_key"]).public_key())
    revoked = rotate(once.doc, NOW + 60, max_age_s=MAX_AGE, revoke_current=True)
    assert revoked.dropped_kid == compromised and revoked.previous_kid == once.previous_kid
    assert revoked.doc["ticket_previous_key"] == once.doc["ticket_previous_key"]
    assert revoked.doc["ticket_rotated_at"] == once.doc["ticket_rotated_at"]
    tickets = Ed25519Tickets(revoked.doc["ticket_signing_key"], revoked.doc["ticket_previous_key"])
    assert compromised not in {k["kid"] for k in tickets.jwks()["keys"]}
    # With no previous key, nothing is kept at all.
    alone = rotate(secret(first), NOW, max_age_s=MAX_AGE, revoke_current=True)
    assert "ticket_previous_key" not in alone.doc and alone.previous_kid is None


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ({"webhook_secret": "w"}, "ticket_signing_key"),
        ({"ticket_signing_key": "not a key"}, "ticket_signing_key"),
        ({"ticket_signing_key": "", "ticket_previous_key": "x"}, "ticket_signing_key"),
    ],
)
def test_a_document_without_a_good_key_is_refused_naming_it(doc: dict[str, Any], named: str) -> None:
    with pytest.raises(RotateFailed, match=named) as refused:
        rotate(doc, NOW, max_age_s=MAX_AGE)
    assert refused.value.code == USAGE


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", "keys", "rotate", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )


def test_the_command_reads_a_file_and_writes_the_new_document_for_the_operator_only(
    first: Ed25519PrivateKey, tmp_path: Path
) -> None:
    source, out = tmp_path / "secret.json", tmp_path / "new.json"
    source.write_text(json.dumps(secret(first)))
    done = run("--from", str(source), "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["previous_kid"] == kid_of(first.public_key()) and summary["secret"] == str(out)
    assert "PRIVATE KEY" not in done.stdout  # the summary never carries a key
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert (
        kid_of(load_ed25519(json.loads(out.read_text())["ticket_signing_key"]).public_key()) == summary["current_kid"]
    )
    # From standard input to standard output (the summary then goes to standard error).
    piped = run("--from", "-", stdin=source.read_text())
    assert piped.returncode == 0 and json.loads(piped.stdout)["ticket_previous_key"] == public_pem(first.public_key())
    assert "current" in piped.stderr


@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        ((), "", "give --secret-arn ARN"),
        (("--from", "-"), "[1, 2]", "must hold a JSON object"),
        (("--from", "-"), "{", "is not JSON"),
        (("--from", "/nonexistent/secret.json"), "", "No such file"),
    ],
)
def test_the_commands_failures_are_one_line(args: tuple[str, ...], stdin: str, says: str) -> None:
    done = run(*args, stdin=stdin)
    assert done.returncode == USAGE and done.stdout == ""
    assert done.stderr.startswith("crcr keys rotate: ") and says in done.stderr and done.stderr.count("\n") == 1
