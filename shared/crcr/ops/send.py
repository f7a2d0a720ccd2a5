"""`crcr send`: a realistic upstream webhook (from examples/events/ or a file), signed as GitHub signs it, posted to a
local or deployed relay, and what the relay answered, answered in words."""

from __future__ import annotations

import copy
import json
import secrets
import urllib.parse
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crcr.local.webhook_sender import Unreachable, WebhookSender
from crcr.local.webhook_sender import webhook_url as webhook_route
from crcr.ops.input_file import FileRefused, loads
from crcr.ops.onboard import checkout_root

KINDS = (
    "pull_request.opened",
    "pull_request.synchronize",
    "pull_request.labeled",
    "push",
    "ciflow",
    "check_run.rerequested",
)
# What the relay's answer means for the event (docs/contracts.md, the webhook).
MEANINGS = {
    (202, "accepted"): "queued: the planner dispatches it to the allowlisted repositories",
    (200, "duplicate"): "a delivery id the relay has seen: not processed again",
    (200, "ignored"): "an event or action the relay does not act on",
    (200, "pong"): "the App's ping",
    (401, None): "the signature was refused: CRCR_WEBHOOK_SECRET is not the relay's webhook secret",
    (400, None): "the body or its headers were refused as malformed",
    (413, None): "the body is over the relay's size limit",
}


class SendFailed(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


@dataclass(frozen=True)
class Sent:
    event: str
    action: str | None
    delivery_id: str
    url: str
    status: int
    reply: dict[str, Any]
    sha: str | None
    pr: int | None

    def meaning(self) -> str:
        answered = self.reply.get("status") if isinstance(self.reply.get("status"), str) else None
        known = MEANINGS.get((self.status, answered)) or MEANINGS.get((self.status, None))
        if known:
            return known
        return "the relay failed; GitHub would show the delivery as failed" if self.status >= 500 else "unexpected"

    def line(self) -> str:
        what = f"{self.event}.{self.action}" if self.action else self.event
        where = (f" #{self.pr}" if self.pr else "") + (f" at {self.sha[:12]}" if self.sha else "")
        answer = self.reply.get("status") or self.reply.get("message") or self.reply.get("error") or ""
        reply = f"{self.status} {answer} (delivery {self.delivery_id})"
        return f"{what}{where} -> {self.url}: {reply}: {self.meaning()}".strip()

    def as_json(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "action": self.action,
            "delivery_id": self.delivery_id,
            "url": self.url,
            "status": self.status,
            "reply": self.reply,
            "sha": self.sha,
            "pr": self.pr,
            "meaning": self.meaning(),
        }


def webhook_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SendFailed(2, f"--url must be the relay's http(s) URL (or its WebhookUrl), got {url!r}")
    return webhook_route(url)


def _template(name: str) -> dict[str, Any]:
    path = checkout_root() / "examples" / "events" / name
    try:
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SendFailed(2, f"{path}: {exc.strerror}") from None
    return doc


def build(
    kind: str,
    upstream: str,
    *,
    sha: str | None = None,
    pr: int | None = None,
    label: str | None = None,
    ciflow: str = "trunk",
    external_id: str | None = None,
) -> tuple[str, str | None, dict[str, Any]]:
    """(event name, action, body) of a `kind` of upstream event, from examples/events/, for `upstream`."""
    sha = sha or secrets.token_hex(20)
    if kind.startswith("pull_request."):
        body = copy.deepcopy(_template("pull_request.opened.json"))
        action = kind.split(".", 1)[1]
        body["action"] = action
        if pr is not None:
            body["number"] = body["pull_request"]["number"] = pr
        body["pull_request"]["head"]["sha"] = sha
        if action == "labeled":
            if not label:
                raise SendFailed(2, "pull_request.labeled needs --label (e.g. ciflow/crcr/xpu)")
            body["label"] = {"name": label}
            body["pull_request"]["labels"] = [*body["pull_request"].get("labels", []), {"name": label}]
        _upstream(body, upstream)
        return "pull_request", action, body
    if kind in ("push", "ciflow"):
        body = copy.deepcopy(_template("push.main.json"))
        body["after"] = sha
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        # The pushed commit, with the time it was made: the relay orders a branch's commits by it (baselines).
        for commit in [*body.get("commits", [])[-1:], body.get("head_commit")]:
            if isinstance(commit, dict):
                commit["id"], commit["timestamp"] = sha, now
        if kind == "ciflow":
            if pr is None:
                raise SendFailed(2, "ciflow needs --pr: the tag is ciflow/<name>/<PR>")
            body["ref"] = f"refs/tags/ciflow/{ciflow}/{pr}"
            body["base_ref"] = None
            body["created"] = True
            body["before"] = "0" * 40
        _upstream(body, upstream)
        return "push", None, body
    if kind == "check_run.rerequested":
        if not external_id:
            raise SendFailed(
                2, "check_run.rerequested needs --external-id <downstream repo>:<run_id>:<pr> (the check run's)"
            )
        pr_body = _template("pull_request.opened.json")
        body = {
            "action": "rerequested",
            "check_run": {"id": 1, "name": "crcr", "head_sha": sha, "external_id": external_id},
            "repository": pr_body["repository"],
            "sender": pr_body["sender"],
            "installation": pr_body.get("installation"),
        }
        _upstream(body, upstream)
        return "check_run", "rerequested", body
    raise SendFailed(2, f"unknown event {kind!r} (one of {', '.join(KINDS)}, or --file with --event)")


def _upstream(body: dict[str, Any], upstream: str) -> None:
    owner, name = upstream.split("/", 1)
    repo = body.setdefault("repository", {})
    repo["full_name"], repo["name"] = upstream, name
    if isinstance(repo.get("owner"), dict):
        repo["owner"]["login"] = owner


MAX_BODY_BYTES = 10 * 1024 * 1024  # the relay's own webhook body limit (crcr.composition.webhook.MAX_WEBHOOK_BYTES)


def from_file(path: str) -> bytes:
    """A webhook body from a file, sent as it is: a JSON object (standard JSON, nested at most 64 deep) within the
    relay's body limit, read no further than that."""
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_BODY_BYTES + 1)
    except OSError as exc:
        raise SendFailed(2, f"{path}: {exc.strerror}") from None
    if len(data) > MAX_BODY_BYTES:
        raise SendFailed(2, f"{path}: over the relay's body limit ({MAX_BODY_BYTES // (1024 * 1024)} MiB)")
    try:
        doc = loads(Path(path), "its body", data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SendFailed(2, f"{path}: not UTF-8 text") from None
    except FileRefused as exc:
        raise SendFailed(2, str(exc)) from None
    if not isinstance(doc, dict):
        raise SendFailed(2, f"{path}: a webhook body is a JSON object")
    return data


def post(
    url: str, secret: str, event: str, body: bytes, delivery_id: str | None = None
) -> tuple[str, int, dict[str, Any]]:
    """POST the body to the relay's webhook as GitHub delivers it: (delivery id, status, parsed answer)."""
    delivery = delivery_id or str(uuid.uuid4())
    sender = WebhookSender(url, secret, agent="GitHub-Hookshot/crcr-send", timeout_s=30.0, connections=1)
    try:
        answer = sender.post(event, body, delivery)
    except Unreachable as exc:
        raise SendFailed(1, f"cannot reach {url}: {exc} (is crcr local running there?)") from None
    finally:
        sender.close()
    return delivery, answer.status, answer.json()
