"""schemathesis against `crcr local` from docs/openapi.yaml: signed webhooks and callbacks with real tokens.

Generated requests get past authentication into the parsers: each webhook body is signed with the stack's
secret (the signature header is replaced only where the generated one has the documented form, so a
missing or malformed one still tests the 401), and each callback carries a token the OIDC issuer double
really signed for the reporting run, with a real ticket or delivery id where the body has a well-formed one.
Besides schemathesis' requests (valid by the document, and invalid on purpose), GitHub's own example events
carry hostile values from tests/strategies.py (depth, size, types, number range, Unicode, control characters).

Properties: no 5xx; every answer is one the document lists, with its body and headers; a request invalid by
the document is refused with a 4xx; nothing logged as an unhandled exception; nothing recorded or dispatched
from a refused request; every webhook answered 202 that asks for a dispatch is dispatched to every target.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import given
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from crcr.domain.signature import sign
from crcr.ops.dlq import list_dead_letters
from tests.conftest import HUD_TOKEN, LISTED, WEBHOOK_SECRET, Relay, event_body
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer
from tests.fuzz.settings import examples, fuzz
from tests.strategies import hostile_values, raw_literals, splice

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# A request invalid by the document must be refused as such: a 400 naming the field, a 401 for a malformed
# credential, a 413 for a body over the limit (a summary of 65,536 characters is one), or the HTTP API's 431.
CONFIG = schemathesis.Config.from_dict(
    {"checks": {"negative_data_rejection": {"expected-statuses": [400, 401, 413, 431]}}}
)
SCHEMA = schemathesis.openapi.from_path(ROOT / "docs" / "openapi.yaml", config=CONFIG)
WEBHOOK = SCHEMA["/webhook"]["POST"]
CALLBACK = SCHEMA["/callback"]["POST"]
CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
UPSTREAM = "pytorch/pytorch"
REPO_IDS = {repo: 5000 + i for i, repo in enumerate(LISTED)}
# The repositories a callback comes from: those that record results first (an L1 report is `ignored`).
REPORTERS = [*LISTED[1:], LISTED[0]]
ACTED_ON = ("pull_request", "push", "check_run", "check_suite")
DISPATCHING_ACTIONS = ("opened", "reopened", "synchronize", "ready_for_review", "closed")
PR_ACTIONS = [*DISPATCHING_ACTIONS, "labeled", "unlabeled", "edited", "assigned"]
# What the relay logs or counts when something escaped its error handling (or a worker gave up).
FAILURE_METRICS = ("WebhookFailed", "CallbackFailed", "DispatchFailed", "CheckRunFailed", "EventRetried")
# Requests per operation in `make test` (a third each: valid by the document, invalid, hostile GitHub events).
WEBHOOK_EXAMPLES = 90
CALLBACK_EXAMPLES = 90
# The GitHub double's write budget is not what is fuzzed: pace as GitHub.com would only far past this run.
WRITE_RATES = "100000/60+100000"
UPSTREAM_PERMISSIONS = {
    "actions": "write",
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "pull_requests": "write",
    "metadata": "read",
}
WEBHOOK_DELIVERY = re.compile(r"[A-Za-z0-9._-]{1,100}")
WEBHOOK_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")
SHA = re.compile(r"[0-9a-f]{40}")


class LogErrors(logging.Handler):
    """Records the relay's ERROR logs (Powertools' logger is `crcr`): `logger.exception` is an unhandled one."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def relay_errors() -> Iterator[LogErrors]:
    handler = LogErrors()
    logger = logging.getLogger("crcr")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture
def oidc() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        yield issuer


@pytest.fixture
def fuzz_relay(relay_factory: Callable[..., Relay], oidc: OidcIssuer, hud: HudDouble) -> Relay:
    relay = relay_factory(
        env={
            "CRCR_OIDC_ISSUER": oidc.url,
            "CRCR_OIDC_AUDIENCE": "crcr",
            "CRCR_HUD_URL": hud.url,
            "CRCR_HUD_TOKEN": HUD_TOKEN,
            "CRCR_GITHUB_WRITE_RATES": WRITE_RATES,
        }
    )
    # The upstream's installation, with what the PR comment and check runs on it need.
    relay.github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=UPSTREAM_PERMISSIONS)
    # A signed webhook names commits GitHub has; generated SHAs are not in the double (check runs would 422).
    relay.github.require_known_commits = False
    return relay


@dataclass
class Sent:
    """One request and its answer, for the properties checked once the stack has settled."""

    kind: str
    status: int
    body: bytes
    reply: Any
    headers: dict[str, str] = field(default_factory=dict)


def body_bytes(case: Case) -> bytes | None:
    """The bytes sent for the case's body, as GitHub or an action would write JSON (raw UTF-8)."""
    body = case.body
    if isinstance(body, bytes):
        return body
    if type(body).__name__ == "NotSet":
        return None
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


def send(case: Case, relay: Relay, data: bytes | None, checks: list[Any]) -> Any:
    response = case.call(base_url=relay.url, data=data if data is not None else b"", timeout=30)
    # `data` is the generated body spelled as the bytes that were signed, so the case's metadata still says
    # which part, if any, is invalid by the document (no transport kwargs are passed on: the negative-data
    # check would take `data` for a body of the caller's own). Hostile cases send another body altogether;
    # only the conformance checks are applied to those.
    case.validate_response(response, checks=checks)
    return response


def reply_of(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def failure_counts(relay: Relay) -> dict[str, int]:
    return {name: relay.metric(name) for name in FAILURE_METRICS if relay.metric(name)}


def assert_nothing_escaped(relay: Relay, errors: LogErrors, capfd: pytest.CaptureFixture[str]) -> None:
    out, err = capfd.readouterr()
    assert [r.getMessage() for r in errors.records] == []
    assert "Traceback" not in out + err and '"invoke_failed"' not in out + err, (out + err)[-3000:]
    assert failure_counts(relay) == {}


def assert_no_dead_letters(relay: Relay) -> None:
    """Whatever the relay took on, it carried: no event, dispatch, check run or HUD push was dead-lettered."""
    sqs = relay.stack.client("sqs")
    for queue in ("EventsDLQ", "DispatchDLQ", "ChecksDLQ", "ReporterDLQ"):
        assert list_dead_letters(sqs, relay.stack.queue_urls[queue]) == [], queue


# -- webhooks ----------------------------------------------------------------------------------------------


GITHUB_EVENTS = {
    "pull_request": json.loads(event_body("pull_request.opened.json")),
    "push": json.loads(event_body("push.main.json")),
}


def event_of(doc: Any) -> str | None:
    """The event a body is shaped like, as GitHub's header would name it."""
    if not isinstance(doc, dict):
        return None
    for key in ("pull_request", "check_run", "check_suite"):
        if key in doc:
            return key
    if "after" in doc or "ref" in doc:
        return "push"
    return "ping" if "zen" in doc else None


@dataclass
class Counter:
    n: int = 0

    def next(self) -> int:
        self.n += 1
        return self.n


def valid_delivery(value: Any) -> bool:
    return isinstance(value, str) and WEBHOOK_DELIVERY.fullmatch(value) is not None


def arm_webhook(case: Case, ids: Counter, *, shape: bool, upstream: bool, action: str) -> None:
    """What GitHub would have made consistent: a fresh delivery id, the event the body is, the upstream's name,
    a pull request number of its own (so no two cases supersede each other). Each replaces a value valid by
    the document with another valid one, so a case invalid by the document stays so."""
    n = ids.next()
    headers = case.headers if case.headers is not None else {}
    if valid_delivery(headers.get("X-GitHub-Delivery")):
        headers["X-GitHub-Delivery"] = f"fuzz-{n}"
    doc = case.body
    if not isinstance(doc, dict) or not case.meta or case.meta.generation.mode.is_negative:
        return
    event = event_of(doc)
    if shape and event is not None and headers.get("X-GitHub-Event"):
        headers["X-GitHub-Event"] = event
    repository = doc.get("repository")
    if upstream and isinstance(repository, dict) and isinstance(repository.get("full_name"), str):
        repository["full_name"] = UPSTREAM
    pr = doc.get("pull_request")
    if isinstance(pr, dict):
        if isinstance(pr.get("number"), int) and not isinstance(pr.get("number"), bool):
            pr["number"] = 1_000_000 + n
        if shape and isinstance(doc.get("action"), str):
            doc["action"] = action
    if shape and event == "push" and isinstance(repository, dict) and isinstance(repository.get("default_branch"), str):
        doc["ref"] = f"refs/heads/{repository['default_branch']}"


def sign_case(case: Case, data: bytes | None) -> None:
    """The true signature, where the generated header has the documented form (`sha256=` and 64 hex)."""
    headers = case.headers
    if headers is None:
        return
    given_signature = headers.get("X-Hub-Signature-256")
    if isinstance(given_signature, str) and WEBHOOK_SIGNATURE.fullmatch(given_signature):
        headers["X-Hub-Signature-256"] = sign(WEBHOOK_SECRET.encode(), data or b"")


@st.composite
def github_events(draw: st.DrawFn) -> tuple[str, bytes]:
    """GitHub's own example event, aimed at the upstream, with one hostile value (or raw literal) somewhere."""
    event = draw(st.sampled_from(sorted(GITHUB_EVENTS)))
    doc = json.loads(json.dumps(GITHUB_EVENTS[event]))
    if event == "pull_request":
        doc["action"] = draw(st.sampled_from(PR_ACTIONS))
    # Last paths first: hypothesis leans towards the first element, and `action` would mostly be what it hits.
    path = draw(st.sampled_from(paths_of(doc)[::-1]))
    if draw(st.booleans()):
        return event, splice(doc, path, raw=draw(raw_literals()))
    return event, splice(doc, path, value=draw(hostile_values()))


def paths_of(doc: Any, prefix: tuple[str | int, ...] = ()) -> list[list[str | int]]:
    found = [list(prefix)] if prefix else []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        found.extend(paths_of(value, (*prefix, key)))
    return found


# Most valid cases are made consistent as GitHub or a downstream would (the rest keep what was generated).
MOSTLY = st.integers(0, 3).map(lambda i: i < 3)  # hypothesis starts from 0: True
WEBHOOK_CASES = st.one_of(
    st.tuples(st.just("valid"), WEBHOOK.as_strategy(GenerationMode.POSITIVE), MOSTLY, MOSTLY, st.none()),
    st.tuples(
        st.just("invalid"), WEBHOOK.as_strategy(GenerationMode.NEGATIVE), st.just(False), st.just(False), st.none()
    ),
    st.tuples(
        st.just("hostile"), WEBHOOK.as_strategy(GenerationMode.POSITIVE), st.just(True), st.just(True), github_events()
    ),
)


def expected_targets(event: str, body: bytes) -> list[str]:
    """Which allowlisted repositories an accepted event goes to, under the default allowlist (every repository
    takes pull requests and pushes to the upstream's default branch; no drafts skipped, no author held)."""
    doc = json.loads(body)
    if event == "pull_request" and doc["action"] in DISPATCHING_ACTIONS:
        return LISTED
    default = doc["repository"].get("default_branch")
    if event == "push" and not doc.get("deleted") and default and doc["ref"] == f"refs/heads/{default}":
        return LISTED
    return []


def test_schemathesis_webhooks_signed_get_a_documented_answer_and_every_202_is_dispatched(
    fuzz_relay: Relay, relay_errors: LogErrors, capfd: pytest.CaptureFixture[str], record_property: Any
) -> None:
    relay = fuzz_relay
    sent: list[Sent] = []
    ids = Counter()

    @fuzz(WEBHOOK_EXAMPLES)
    @given(WEBHOOK_CASES, st.sampled_from(PR_ACTIONS))
    def fuzz_webhook(drawn: tuple[str, Case, bool, bool, tuple[str, bytes] | None], action: str) -> None:
        kind, case, shape, upstream, github_event = drawn
        arm_webhook(case, ids, shape=shape, upstream=upstream, action=action)
        headers = case.headers if case.headers is not None else {}
        if github_event is not None:
            event, data = github_event
            headers["X-GitHub-Event"] = event
        else:
            data = body_bytes(case)
        sign_case(case, data)
        acted_on = headers.get("X-GitHub-Event") in ACTED_ON
        # Invalid by the document: refused with a 4xx, except a body the relay never reads (an event it does
        # not act on, or ping, is answered 200 unread).
        checks = [*CONFORMANCE, *([negative_data_rejection] if kind == "invalid" and acted_on else [])]
        response = send(case, relay, data, checks)
        sent.append(Sent(kind, response.status_code, data or b"", reply_of(response), dict(headers)))

    fuzz_webhook()

    accepted = [s for s in sent if s.status == 202]
    expected = {s.headers["X-GitHub-Delivery"]: expected_targets(s.headers["X-GitHub-Event"], s.body) for s in accepted}
    wanted = {repo: sum(repo in targets for targets in expected.values()) for repo in LISTED}
    relay.wait_dispatches(wanted, timeout_s=60, settle_s=1.0)

    dispatched: dict[str, list[str]] = {}
    for repo in LISTED:
        for dispatch in relay.github.dispatches(repo):
            dispatched.setdefault(dispatch["client_payload"]["delivery_id"], []).append(repo)
    # Every accepted delivery reached each of its targets exactly once, and nothing else was dispatched.
    assert {d: sorted(dispatched.get(d, [])) for d in expected} == {d: sorted(t) for d, t in expected.items()}
    assert set(dispatched) <= set(expected)
    # Nothing of a refused request was recorded: the ledger holds accepted deliveries only.
    items = relay.stack.client("dynamodb").scan(TableName="crcr-local-StateTable", ConsistentRead=True)["Items"]
    recorded = {item["pk"]["S"].removeprefix("DLV#") for item in items if item["pk"]["S"].startswith("DLV#")}
    assert recorded <= set(expected)
    assert_no_dead_letters(relay)
    assert_nothing_escaped(relay, relay_errors, capfd)

    statuses = {s.status for s in sent}
    record_property("webhook_requests", len(sent))
    record_property("webhook_statuses", sorted(statuses))
    print(f"webhook: {len(sent)} requests, {len(accepted)} accepted, {sum(map(len, expected.values()))} dispatches")
    # The run reached past the door: signed bodies were parsed, refused by field, and accepted all the way.
    assert {202, 200, 400, 401} <= statuses
    assert sum(len(t) > 0 for t in expected.values()) >= examples(WEBHOOK_EXAMPLES) // 20


# -- callbacks ----------------------------------------------------------------------------------------------


@dataclass
class Dispatched:
    delivery: str
    tickets: dict[str, str]
    nightly_sha: str


def valid_ticket(value: Any) -> bool:
    return isinstance(value, str) and 20 <= len(value) <= 4096


def run_claims(report: dict[str, Any]) -> tuple[str, int]:
    """The run a report names (its run_id and run_attempt), for the token of that same run."""
    run_id, attempt = report.get("run_id"), report.get("run_attempt", 1)
    run = str(run_id) if isinstance(run_id, str | int) and not isinstance(run_id, bool) else "777"
    if isinstance(attempt, float) and attempt.is_integer():
        attempt = int(attempt)  # JSON's 3.0 is an integer, to JSON Schema and to the relay alike
    ok = isinstance(attempt, int) and not isinstance(attempt, bool) and 0 < attempt < 2**31
    return run, attempt if ok else 1


def arm_callback(
    case: Case, oidc: OidcIssuer, dispatched: Dispatched, repo: str, bind: bool, *, hostile: bool = False
) -> None:
    """A real token for the run the body names, from the repository `repo`; with `bind`, the real ticket,
    delivery id or upstream commit in place of a well-formed generated one (valid stays valid). `hostile`:
    the body sent is a hostile report of run 777, attempt 1, not the case's."""
    headers = case.headers if case.headers is not None else {}
    doc = case.body if not hostile else None
    report: dict[str, Any] = doc if isinstance(doc, dict) else {"run_id": 777, "run_attempt": 1}
    event_name = "repository_dispatch"
    if isinstance(doc, dict):
        if doc.get("scheduled") is True:
            event_name = "schedule"
            if bind and isinstance(doc.get("head_sha"), str) and SHA.fullmatch(doc["head_sha"]):
                doc["head_sha"] = dispatched.nightly_sha
        elif "ticket" in doc:
            if bind and valid_ticket(doc["ticket"]):
                doc["ticket"] = dispatched.tickets[repo]
        else:
            if bind and valid_delivery(doc.get("delivery_id")):
                doc["delivery_id"] = dispatched.delivery
            report = doc["workflow"] if isinstance(doc.get("workflow"), dict) else {}
    authorization = headers.get("Authorization")
    if isinstance(authorization, str) and authorization[:7].lower() == "bearer " and authorization[7:]:
        run_id, attempt = run_claims(report)
        token = oidc.token(
            repository=repo,
            repository_id=REPO_IDS[repo],
            run_id=run_id,
            run_attempt=attempt,
            event_name=event_name,
            job_workflow_ref=f"{repo}/.github/workflows/ci.yml@refs/heads/main",
        )
        headers["Authorization"] = f"Bearer {token}"


def fingerprint(body: bytes) -> str | None:
    """What the relay records as a report's identity: the body without its ticket (None: not a JSON object)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    text = json.dumps({k: v for k, v in doc.items() if k != "ticket"}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@st.composite
def hostile_reports(draw: st.DrawFn) -> bytes:
    """A well-formed report (ours, with its ticket slot) with one hostile value or raw literal somewhere."""
    doc = {
        "schema_version": 1,
        "ticket": "t" * 40,
        "status": "completed",
        "conclusion": "failure",
        "failure_kind": "test",
        "workflow_name": "CI",
        "job_name": "build",
        "run_id": 777,
        "run_attempt": 1,
        "url": "https://github.com/org-two/l2-repo/actions/runs/777",
        "started_at": "2026-11-29T10:00:00Z",
        "check_run_id": 4242,
        "test_results": {"passed": 1, "failed": 1, "skipped": 0, "total": 2},
        "summary": "**1 failed**",
        "triage_verdict": {"category": "infra", "confidence": 0.5, "summary": "flaky"},
    }
    path = draw(st.sampled_from([p for p in paths_of(doc)[::-1] if p != ["ticket"]]))
    if draw(st.booleans()):
        return splice(doc, path, raw=draw(raw_literals()))
    return splice(doc, path, value=draw(hostile_values()))


CALLBACK_CASES = st.one_of(
    st.tuples(st.just("valid"), CALLBACK.as_strategy(GenerationMode.POSITIVE), MOSTLY, st.none()),
    st.tuples(st.just("invalid"), CALLBACK.as_strategy(GenerationMode.NEGATIVE), st.just(True), st.none()),
    st.tuples(st.just("hostile"), CALLBACK.as_strategy(GenerationMode.POSITIVE), st.just(True), hostile_reports()),
)


@pytest.fixture
def dispatched(fuzz_relay: Relay) -> Dispatched:
    """A pull request dispatched to every allowlisted repository: the tickets and delivery callbacks bind to."""
    relay = fuzz_relay
    delivery = "fuzz-callbacks"
    body = event_body("pull_request.opened.json")
    relay.github.add_issue(UPSTREAM, json.loads(body)["number"])  # the PR whose comment the results update
    assert relay.post("pull_request", body, delivery)[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    tickets = {repo: relay.github.dispatches(repo)[0]["client_payload"]["ticket"] for repo in LISTED}
    nightly = "c" * 40
    relay.github.add_commit(UPSTREAM, nightly)
    return Dispatched(delivery, tickets, nightly)


def test_schemathesis_callbacks_with_real_tokens_get_a_documented_answer_and_only_accepted_ones_are_recorded(
    fuzz_relay: Relay,
    dispatched: Dispatched,
    oidc: OidcIssuer,
    hud: HudDouble,
    relay_errors: LogErrors,
    capfd: pytest.CaptureFixture[str],
    record_property: Any,
) -> None:
    relay = fuzz_relay
    sent: list[Sent] = []

    @fuzz(CALLBACK_EXAMPLES)
    @given(CALLBACK_CASES, st.sampled_from(REPORTERS))
    def fuzz_callback(drawn: tuple[str, Case, bool, bytes | None], repo: str) -> None:
        kind, case, bind, hostile = drawn
        arm_callback(case, oidc, dispatched, repo, bind, hostile=hostile is not None)
        data = body_bytes(case)
        if hostile is not None:
            # The hostile report travels under the ticket the relay issued to the token's repository.
            data = hostile.replace(json.dumps("t" * 40).encode(), json.dumps(dispatched.tickets[repo]).encode(), 1)
        checks = [*CONFORMANCE, *([negative_data_rejection] if kind == "invalid" else [])]
        response = send(case, relay, data, checks)
        sent.append(Sent(kind, response.status_code, data or b"", reply_of(response)))

    fuzz_callback()

    recorded = [s for s in sent if s.status == 200 and s.reply == {"status": "recorded"}]
    # The reporter pushes what was recorded to PyTorch's HUD (which must take every row): let it.
    ddb = relay.stack.client("dynamodb")
    deadline = time.time() + 30
    rows: list[dict[str, Any]] = []
    while time.time() < deadline:
        rows = ddb.scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
        if len(hud.rows) >= len(rows):
            break
        time.sleep(0.2)
    accepted_prints = {fingerprint(s.body) for s in recorded}
    refused_prints = {fingerprint(s.body) for s in sent if s.status >= 400} - accepted_prints - {None}
    stored = {item["fingerprint"]["S"] for item in rows}
    # Every row is a report the relay answered `recorded`; no refused report left a row.
    assert stored <= accepted_prints
    assert not stored & refused_prints
    assert len(rows) <= len(recorded)
    assert len(hud.rows) == len(rows) and hud.refused == []
    assert_no_dead_letters(relay)
    assert_nothing_escaped(relay, relay_errors, capfd)

    statuses = {s.status for s in sent}
    record_property("callback_requests", len(sent))
    record_property("callback_statuses", sorted(statuses))
    print(f"callback: {len(sent)} requests, {len(recorded)} recorded, statuses {sorted(statuses)}")
    assert {200, 400, 401} <= statuses and recorded
