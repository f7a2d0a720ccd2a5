"""Properties of the two edges under hostile input (hypothesis, strategies in tests/strategies.py).

Webhook: ingest never fails unhandled; a refusal is a CrcrError naming a field; whatever it answers 202 the
planner parses, plans and the dispatcher sends, every message within its queue's and GitHub's limits.
Callback: the body parser and the identity rules never fail unhandled; a refusal names a field; what the
parser accepts can be stored, fingerprinted and pushed to the HUD as strict JSON, with names free of controls.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.callback_body import fingerprint_of, parse_report, stored_payload
from crcr.app.callback_deps import MAX_CALLBACK_BYTES
from crcr.app.dispatch import DispatchDeps, Result, dispatch
from crcr.app.ingest import IngestDeps, Outcome, ingest
from crcr.app.plan import PAYLOAD_BUDGET_BYTES, PlannerDeps, plan_event
from crcr.contracts.messages import DispatchMessage, EventMessage
from crcr.domain.allowlist import Entry, RepoSettings
from crcr.domain.callback_rules import (
    buildkite_pipeline,
    check_buildkite_build,
    check_buildkite_scheduled,
    check_identity,
)
from crcr.domain.errors import CrcrError
from crcr.domain.identity import Known
from crcr.domain.levels import Level
from crcr.domain.providers import build_providers
from crcr.domain.retry import RetryPolicy
from crcr.domain.signature import sign
from crcr.domain.text import control_in
from tests.strategies import hostile_values, raw_literals, splice
from tests.unit.fakes import (
    FakeBlobs,
    FakeChecksQueue,
    FakeClock,
    FakeDeliveries,
    FakeDispatchQueue,
    FakeEventQueue,
    FakeGitHub,
    FakePacer,
    FakeSigner,
    FakeState,
    RecordingMetrics,
    StaticAllowlist,
    door,
)

EVENTS = Path(__file__).resolve().parents[2] / "examples" / "events"
PR = json.loads((EVENTS / "pull_request.opened.json").read_text())
PUSH = json.loads((EVENTS / "push.main.json").read_text())
PR_PATHS: list[list[str | int]] = [
    ["pull_request", "head", "sha"],
    ["pull_request", "head", "ref"],
    ["pull_request", "head", "label"],
    ["pull_request", "head", "repo"],
    ["pull_request", "head", "repo", "full_name"],
    ["pull_request", "base", "sha"],
    ["pull_request", "base", "ref"],
    ["pull_request", "number"],
    ["pull_request", "labels"],
    ["pull_request", "labels", 0],
    ["pull_request", "title"],
    ["pull_request", "updated_at"],
    ["pull_request", "draft"],
    ["pull_request", "state"],
    ["pull_request", "user"],
    ["pull_request", "merged"],
    ["pull_request", "author_association"],
    ["pull_request"],
    ["number"],
    ["action"],
    ["label"],
    ["label", "name"],
    ["repository", "full_name"],
    ["repository", "default_branch"],
    ["repository", "id"],
    ["repository"],
    ["installation", "id"],
    ["after"],
    ["ref"],
    ["forced"],
    ["surprise"],
    ["pull_request", "surprise", "deeper"],
]
PUSH_PATHS: list[list[str | int]] = [
    ["after"],
    ["before"],
    ["ref"],
    ["deleted"],
    ["commits"],
    ["commits", 0],
    ["commits", 0, "id"],
    ["commits", 0, "timestamp"],
    ["head_commit"],
    ["repository", "full_name"],
    ["repository", "default_branch"],
    ["surprise"],
]
# A GitHub and a Buildkite downstream, one trusting only known authors: every branch of the planner runs.
ALLOWLIST = parse_allowlist(
    "L4:\n  - org/gh\nL2:\n  - org/bk\n  - org/held\n"
    "repos:\n  org/bk:\n    buildkite: {organization: org, pipeline: ci}\n"
    "  org/held:\n    trusted_authors_only: true\n    branches: ['*']\n"
)
PROPERTY = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same examples every run, as the fuzz step (tests/fuzz/settings.py) runs them
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


# Values at the edge of what GitHub sends (and so of what ingest takes): most bodies built from these pass,
# so the planner and the dispatcher get to carry them.
EXTREMES: dict[str, list[tuple[list[str | int], Any]]] = {
    "pull_request": [
        (["pull_request", "head", "ref"], "b" * 244),
        (["pull_request", "head", "ref"], "\u00e9" * 122),
        (["pull_request", "base", "ref"], "release/" + "v" * 236),
        (["pull_request", "head", "sha"], "0" * 40),
        (["pull_request", "number"], 2**31 - 1),
        (["number"], 2**31 - 1),
        (["pull_request", "labels"], [{"name": "\u0001" * 100, "color": "x" * 1000} for _ in range(500)]),
        (["pull_request", "labels"], [{"name": "ciflow/crcr/gpu"}, {"name": "ciflow/trunk"}]),
        (["pull_request", "title"], "t" * 300_000),
        (["pull_request", "body"], "\U0001f680" * 60_000),
        (["pull_request", "head", "label"], "l" * 100_000),
        (["pull_request", "head", "repo", "full_name"], "o" * 39 + "/" + "r" * 100),
        (["pull_request", "user", "login"], "u" * 50_000),
        (["pull_request", "merged"], list(range(20_000))),
        (["pull_request", "author_association"], "FIRST_TIME_CONTRIBUTOR"),
        (["pull_request", "draft"], True),
        (["pull_request", "state"], "closed"),
        (["pull_request", "updated_at"], "9999-12-31T23:59:59Z"),
        (["repository", "default_branch"], "d" * 244),
        (["repository", "id"], 2**63 - 1),
        (["action"], "labeled"),
        (["action"], "synchronize"),
        (["label"], {"name": "ciflow/crcr/gpu"}),
        (["ref"], "r" * 100_000),
        (["deep"], json.loads("[" * 63 + "]" * 63)),
        (["big"], 10**38 - 1),
    ],
    "push": [
        (["ref"], "refs/heads/" + "m" * 244),
        (["ref"], "refs/tags/v1.0"),
        (["before"], "0" * 40),
        (["after"], "0" * 40),
        (["deleted"], True),
        (["commits"], [{"id": f"{i:040x}", "timestamp": "0001-01-01T00:00:00+14:00"} for i in range(2048)]),
        (["commits", 0, "timestamp"], "not a time"),
        (["repository", "default_branch"], "m" * 244),
        (["head_commit", "message"], "x" * 500_000),
        (["deep"], json.loads('{"a":' * 63 + "1" + "}" * 63)),
    ],
}


def events() -> st.SearchStrategy[tuple[str, bytes]]:
    """A real pull_request or push body with values at the edge of GitHub's at some paths, and often one
    hostile value (or raw JSON text) at one more."""

    @st.composite
    def body(draw: st.DrawFn) -> tuple[str, bytes]:
        event = draw(st.sampled_from(["pull_request", "push"]))
        doc = json.loads(json.dumps(PR if event == "pull_request" else PUSH))
        for path, value in draw(st.lists(st.sampled_from(EXTREMES[event]), max_size=4)):
            doc = json.loads(splice(doc, path, value))
        if draw(st.integers(0, 3)) == 0:
            return event, json.dumps(doc, ensure_ascii=False).encode()
        path = draw(st.sampled_from(PR_PATHS if event == "pull_request" else PUSH_PATHS))
        raw = draw(st.one_of(st.none(), raw_literals())) if draw(st.integers(0, 3)) == 0 else None
        return event, splice(doc, path, draw(hostile_values()), raw)

    return body()


def _ingest(body: bytes, event: str) -> tuple[Outcome | CrcrError, EventMessage | None, FakeBlobs]:
    queue, blobs = FakeEventQueue(), FakeBlobs()
    deps = IngestDeps(
        secrets=(b"k",),
        upstream="pytorch/pytorch",
        deliveries=FakeDeliveries(),
        events=queue,
        blobs=blobs,
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        max_body_bytes=10 * 1024 * 1024,
        inline_body_bytes=200 * 1024,
    )
    headers = {"x-github-event": event, "x-github-delivery": "d-1", "x-hub-signature-256": sign(b"k", body)}
    try:
        result = ingest(body, headers, deps)
    except CrcrError as exc:
        return exc, None, blobs
    return result.outcome, (queue.sent[0] if queue.sent else None), blobs


@PROPERTY
@given(events())
def test_ingest_refuses_with_a_field_or_accepts_what_the_planner_and_dispatcher_carry(drawn: tuple[str, bytes]) -> None:
    name, body = drawn
    outcome, message, blobs = _ingest(body, name)
    event(type(outcome).__name__ if isinstance(outcome, CrcrError) else outcome.value)
    if isinstance(outcome, CrcrError):
        assert outcome.field, f"a refusal must name a field: {outcome.message}"
        return
    if outcome is not Outcome.ACCEPTED:
        return
    assert message is not None
    # The message as SQS carries it, then the planner with every branch it has.
    message = EventMessage.model_validate_json(message.model_dump_json())
    dispatches, state = FakeDispatchQueue(), FakeState()
    planner = PlannerDeps(
        upstream="pytorch/pytorch",
        allowlist=StaticAllowlist(ALLOWLIST),
        blobs=blobs,
        prs=state,
        branch=state,
        dispatches=dispatches,
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        checks=FakeChecksQueue(),
        door=door(),
    )
    plan_event(message, planner)
    for info in state.prs.values():  # the PR's row: under DynamoDB's 400 KB item limit
        assert len(json.dumps(info.labels, ensure_ascii=False).encode()) < 350_000
    for sent in dispatches.sent:
        wire = sent.model_dump_json()
        assert len(wire.encode()) < 256 * 1024  # SQS
        carried = DispatchMessage.model_validate_json(wire)
        # What the ticket, the ledger's keys, a check run's head_sha and a Buildkite build's commit need.
        assert re.fullmatch(r"[0-9a-f]{40}", carried.head_sha)
        assert carried.ref is None or 0 < len(carried.ref.encode()) <= 255
        assert carried.pr_number is None or 0 < carried.pr_number < 2**31
        assert len(json.dumps(carried.payload, separators=(",", ":"), ensure_ascii=False).encode()) <= (
            PAYLOAD_BUDGET_BYTES
        )
        if carried.buildkite is not None:
            continue
        github = FakeGitHub(installed={carried.target_repo})
        state = FakeState()
        deps = DispatchDeps(
            github=github,
            ledger=state,
            prs=state,
            queue=FakeDispatchQueue(),
            pacer=FakePacer(),
            signer=FakeSigner(),
            metrics=RecordingMetrics(),
            clock=FakeClock(),
            callback_url="https://relay.example/callback",
            ticket_ttl_s=3600,
            policy=RetryPolicy(),
            rand=lambda: 0.5,
            door=door(),
        )
        assert dispatch(carried, deps).result is Result.DISPATCHED
        [(_repo, _event_type, client_payload)] = github.sent
        text = json.dumps(client_payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        assert len(client_payload) <= 10 and len(text.encode()) < 64 * 1024  # GitHub's client_payload limits


OURS: dict[str, Any] = {
    "schema_version": 1,
    "ticket": "t" * 40,
    "status": "completed",
    "conclusion": "failure",
    "failure_kind": "test",
    "workflow_name": "CI",
    "job_name": "build",
    "run_id": 777,
    "run_attempt": 1,
    "url": "https://github.com/org/repo/actions/runs/777",
    "started_at": "2026-12-01T10:00:00Z",
    "check_run_id": 4242,
    "test_results": {"passed": 1, "failed": 1, "skipped": 0, "total": 2},
    "artifact_url": "https://example.com/a",
    "summary": "failed",
    "triage_verdict": {"schema_version": 1, "category": "infra", "confidence": "low", "summary": "x"},
}
THEIRS: dict[str, Any] = {
    "delivery_id": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    "event_type": "pull_request",
    "payload": {"pull_request": {"number": 1, "head": {"sha": "0" * 40}}},
    "workflow": {k: OURS[k] for k in ("status", "conclusion", "job_name", "run_id", "url", "test_results")}
    | {"name": "CI", "run_attempt": "1"},
}
SCHEDULED: dict[str, Any] = {k: v for k, v in OURS.items() if k != "ticket"} | {"scheduled": True, "head_sha": "c" * 40}
CALLBACK_PATHS: list[list[str | int]] = (
    [[k] for k in [*OURS, "scheduled", "head_sha", "surprise"]]
    + [["test_results", k] for k in ("passed", "failed", "total")]
    + [["triage_verdict", k] for k in ("confidence", "summary", "evidence", "suspected_upstream")]
    + [["workflow", k] for k in ("name", "job_name", "run_id", "run_attempt", "url", "started_at", "test_results")]
    + [
        ["payload"],
        ["payload", "pull_request", "head"],
        ["delivery_id"],
    ]
)


@st.composite
def callback_bodies(draw: st.DrawFn) -> bytes:
    base = draw(st.sampled_from([OURS, THEIRS, SCHEDULED]))
    path = draw(st.sampled_from(CALLBACK_PATHS))
    raw = draw(st.one_of(st.none(), raw_literals())) if draw(st.integers(0, 3)) == 0 else None
    return splice(base, path, draw(hostile_values()), raw)


@PROPERTY
@given(callback_bodies())
def test_the_callback_parser_refuses_with_a_field_or_accepts_what_can_be_stored_and_shown(body: bytes) -> None:
    if len(body) > MAX_CALLBACK_BYTES:  # answered 413 before anything is parsed
        return
    try:
        _parsed, report = parse_report(body)
        stored = stored_payload(report.raw)  # 413 for a report too large to store
    except CrcrError as exc:
        event(type(exc).__name__)
        assert exc.field, exc.message
        return
    event("accepted")
    json.loads(stored, parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))
    assert stored.encode() and fingerprint_of(report.raw)
    for name in (report.workflow_name, report.job_name, report.url):
        assert control_in(name) is None
    assert 1 <= report.run_attempt < 2**31


GITHUB_CLAIMS: dict[str, Any] = {
    "repository": "Org/Backend",
    "repository_id": "5001",
    "event_name": "repository_dispatch",
    "run_id": "42",
    "run_attempt": "2",
    "job_workflow_ref": "Org/Backend/.github/workflows/ci.yml@refs/heads/main",
}
ORG, PIPELINE = "018b5ec5-c236-4037-ba08-d8a5d29bcdae", "018cdabc-d930-49f6-9085-634c4cb582ed"
BUILD = "019583d7-3737-4e38-af67-f7cc356bd580"
BUILDKITE_CLAIMS: dict[str, Any] = {
    "organization_id": ORG,
    "pipeline_id": PIPELINE,
    "build_number": 1514,
    "build_branch": "main",
    "build_source": "api",
    "build_id": BUILD,
    "job_id": "0184990a-477b-4fa8-9968-496074483cee",
}
PROVIDERS = build_providers(
    {"providers": {"buildkite": {"repo_map": {f"{ORG}/{PIPELINE}": {"repo": "v/v", "required_claims": {
        "build_branch": ["main"]}}}}}}
)  # fmt: skip
ENTRY = Entry("v/v", Level.L2)


def _claims(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda name, value, drop: {k: v for k, v in (base | {name: value}).items() if k != drop},
        st.sampled_from([*base, "sub"]),
        hostile_values(),
        st.one_of(st.none(), st.sampled_from(list(base))),
    )


@PROPERTY
@given(_claims(GITHUB_CLAIMS))
def test_the_github_identity_rules_refuse_naming_the_claim_or_pass(claims: dict[str, Any]) -> None:
    try:
        check_identity(
            claims,
            entry=Entry("org/backend", Level.L2, settings=RepoSettings(workflows=("Org/Backend/*",))),
            known=Known(repository_id=5001),
            run_id="42",
            run_attempt=2,
        )
    except CrcrError as exc:
        assert exc.field in {*GITHUB_CLAIMS, "job_workflow_ref"}
        return
    assert claims["repository"].lower() == "org/backend" and claims["repository"].isascii()


@PROPERTY
@given(_claims(BUILDKITE_CLAIMS))
def test_the_buildkite_identity_rules_refuse_naming_the_claim_or_pass(claims: dict[str, Any]) -> None:
    for rule in (
        lambda: buildkite_pipeline(claims, PROVIDERS),
        lambda: check_buildkite_build(
            claims, entry=ENTRY, repo=ENTRY.repo, build_number=1514, build_id=BUILD, run_id=BUILD, check_run_id=None
        ),
        lambda: check_buildkite_scheduled(claims, run_id=BUILD, check_run_id=None),
    ):
        try:
            rule()
        except CrcrError as exc:
            assert exc.field in {*BUILDKITE_CLAIMS, "run_id", "check_run_id"}
