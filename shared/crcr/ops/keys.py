"""`crcr keys rotate`: a new Ed25519 ticket signing key; the current one stays, as its public half, to verify the
tickets it signed until they expire."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from crcr.adapters.tickets import kid_of, load_ed25519, load_ed25519_public, private_pem, public_pem

# Exit statuses, as the other operator commands: 2 for the operator's input or configuration, 1 for what AWS
# answered or an output that could not be written.
USAGE = 2
FAILED = 1

# A ticket lives as long as its ledger row (crcr.adapters.table.LEDGER_TTL_S), so re-runs days later report.
TICKET_TTL_S = 30 * 24 * 3600


class RotateFailed(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


@dataclass(frozen=True)
class Rotated:
    doc: dict[str, Any]  # the secret's new JSON document
    current_kid: str
    previous_kid: str | None
    dropped_kid: str | None  # a key that verifies nothing from now on
    rotated_at: str | None  # when the previous key stopped signing (ISO 8601)
    previous_until: str | None  # when the last ticket the previous key signed expires: keep it until then

    def summary(self) -> dict[str, Any]:
        return {
            "current_kid": self.current_kid,
            "previous_kid": self.previous_kid,
            "dropped_kid": self.dropped_kid,
            "rotated_at": self.rotated_at,
            "previous_until": self.previous_until,
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def rotate(
    doc: dict[str, Any],
    now: float,
    *,
    max_age_s: float,
    revoke_current: bool = False,
    force: bool = False,
    new_key: Ed25519PrivateKey | None = None,
) -> Rotated:
    """The secret document after a rotation: a new key signs; the old current key is kept as the previous,
    verify-only key (its public half, so the secret never holds two signing keys), or with `revoke_current`
    (the current key is compromised) dropped, leaving the previous key as it was.

    Functions may go on signing with the old key for `max_age_s` after the secret changes (their cache), and
    those tickets live TICKET_TTL_S: the previous key must verify until then. Rotating again sooner would drop
    the key before that, so it is refused unless `force`d."""
    try:
        current = load_ed25519(str(doc.get("ticket_signing_key") or ""), "ticket_signing_key")
        old_previous = doc.get("ticket_previous_key")
        previous = load_ed25519_public(str(old_previous), "ticket_previous_key") if old_previous else None
    except ValueError as exc:
        raise RotateFailed(USAGE, f"the secret's {exc}") from None
    last_rotation = _parse_time(doc.get("ticket_rotated_at"))
    if previous is not None and not (force or revoke_current) and last_rotation is not None:
        until = last_rotation + max_age_s + TICKET_TTL_S
        if now < until:
            raise RotateFailed(
                USAGE,
                f"the previous key {kid_of(previous)} verifies tickets until {_iso(until)}; rotating now drops it and "
                "refuses them (--force to rotate anyway; --revoke-current if the current key is compromised)",
            )
    new = new_key or Ed25519PrivateKey.generate()
    kept: Ed25519PublicKey | None
    dropped: str | None
    rotated_at: float | None
    out = dict(doc)
    out["ticket_signing_key"] = private_pem(new)
    if revoke_current:
        kept, dropped = previous, kid_of(current.public_key())
        rotated_at = last_rotation if previous is not None else None
        if previous is None:
            out.pop("ticket_previous_key", None)
            out.pop("ticket_rotated_at", None)
    else:
        kept, dropped = current.public_key(), (kid_of(previous) if previous is not None else None)
        rotated_at = now
        out["ticket_previous_key"] = public_pem(kept)
        out["ticket_rotated_at"] = _iso(now)
    if dropped is not None and kept is not None and dropped == kid_of(kept):
        dropped = None
    return Rotated(
        doc=out,
        current_kid=kid_of(new.public_key()),
        previous_kid=kid_of(kept) if kept is not None else None,
        dropped_kid=dropped,
        rotated_at=_iso(rotated_at) if rotated_at is not None else None,
        previous_until=_iso(rotated_at + max_age_s + TICKET_TTL_S) if rotated_at is not None else None,
    )


def _read_doc(text: str, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise RotateFailed(USAGE, f"{where} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RotateFailed(USAGE, f"{where} must hold a JSON object")
    return doc


def _write_private(path: str, text: str) -> None:
    """Whole or not at all, readable by its owner only: it holds the signing key."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        raise


def rotate_file(source: str, out: str | None, now: float, **options: Any) -> tuple[Rotated, str]:
    """From a secret document in a file (`-`: standard input) to `out` (None: returned for standard output)."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise RotateFailed(USAGE, f"{exc.filename}: {exc.strerror}") from None
    rotated = rotate(_read_doc(text, "the standard input" if source == "-" else source), now, **options)
    document = json.dumps(rotated.doc)
    if out is not None:
        try:
            _write_private(out, document + "\n")
        except OSError as exc:
            raise RotateFailed(FAILED, f"{exc.filename or out}: {exc.strerror}") from None
    return rotated, document


def rotate_secret(secrets_manager: Any, arn: str, now: float, **options: Any) -> Rotated:
    """Read the secret's current version, put the rotated document as its new version (PutSecretValue)."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    try:
        current = secrets_manager.get_secret_value(SecretId=arn)
    except (BotoCoreError, ClientError) as exc:
        raise RotateFailed(FAILED, f"{arn}: {exc}") from None
    if "SecretString" not in current:
        raise RotateFailed(USAGE, f"{arn} holds a binary secret, not the relay's JSON document")
    rotated = rotate(_read_doc(current["SecretString"], arn), now, **options)
    try:
        secrets_manager.put_secret_value(
            SecretId=arn, SecretString=json.dumps(rotated.doc), ClientRequestToken=str(uuid.uuid4())
        )
    except (BotoCoreError, ClientError) as exc:
        raise RotateFailed(FAILED, f"{arn}: {exc}") from None
    return rotated


def describe(rotated: Rotated, where: str, max_age_s: float) -> str:
    lines = [f"ticket key rotated: {where}", f"current   {rotated.current_kid}  signs new tickets"]
    if rotated.previous_kid:
        lines.append(
            f"previous  {rotated.previous_kid}  verifies the tickets it signed until {rotated.previous_until}; "
            "do not rotate again before then"
        )
    if rotated.dropped_kid:
        lines.append(f"dropped   {rotated.dropped_kid}  tickets it signed are refused (401) from now on")
    lines.append(
        f"functions sign with the new key within {int(max_age_s)} s (CRCR_SECRETS_MAX_AGE_S); the callback "
        "verifies its tickets at once"
    )
    return "\n".join(lines)
