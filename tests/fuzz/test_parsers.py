"""Hostile documents against every parser at the relay's edges: a value or a typed error naming what is wrong.

The webhook parser (ingest, and the planner reading what ingest accepted), the callback parser, the allowlist
and the CI providers document, with generated documents of any structure, depth, size, number range, Unicode and
control characters; and the round trip of what `crcr onboard` prints.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from crcr.adapters.allowlist_source import parse_allowlist, parse_providers
from crcr.app.callback_body import fingerprint_of, parse_report, stored_payload
from crcr.app.ingest import IngestDeps, Outcome, ingest
from crcr.app.plan import PlannerDeps, plan_event
from crcr.domain.allowlist import Allowlist
from crcr.domain.errors import AllowlistError, BadRequest, BadSignature, PayloadTooLarge
from crcr.domain.levels import Level
from crcr.domain.onboarding import OnboardError, allowlist_entry, ci_providers_entry, parse_request
from crcr.domain.providers import Providers
from crcr.domain.signature import sign
from tests.fuzz.settings import fuzz
from tests.strategies import (
    hostile_values,
    lookalike_names,
    nested_json,
    nested_text,
    out_of_range_numbers,
    raw_literals,
    splice,
    with_controls,
)
from tests.unit.fakes import (
    FakeBlobs,
    FakeChecksQueue,
    FakeClock,
    FakeDeliveries,
    FakeDispatchQueue,
    FakeEventQueue,
    FakeState,
    RecordingMetrics,
    StaticAllowlist,
    door,
)

UPSTREAM = "pytorch/pytorch"
SECRET = b"fuzz-secret"
ALLOWLIST = parse_allowlist("L1: [org/one]\nL2: [org/two]\nL3:\n  gpu: [org/three]\nL4: [org/four]\n")
PARSER_EXAMPLES = 200


@functools.cache
def leaf() -> st.SearchStrategy[Any]:
    """A value wrong for some field: types, sizes, depth, number range, look-alike names, control characters."""
    return st.one_of(hostile_values(), lookalike_names(UPSTREAM))


@functools.cache
def yaml_leaf() -> st.SearchStrategy[Any]:
    """Hostile values for an operator's YAML file: types, numbers, names, control characters, nesting."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        out_of_range_numbers(),
        st.floats(),
        st.text(max_size=30),
        with_controls(),
        lookalike_names(UPSTREAM),
    )
    return st.one_of(scalars, st.lists(scalars, max_size=3), st.integers(1, 40).flatmap(nested_json))


@functools.cache
def any_json() -> st.SearchStrategy[Any]:
    """A JSON value of any structure: hostile scalars, or containers of them nested 1 to 100 deep."""
    return st.one_of(hostile_values(), st.integers(1, 100).flatmap(lambda depth: nested_json(depth, leaf=None)))


def paths_of(doc: Any, prefix: tuple[str | int, ...] = ()) -> list[list[str | int]]:
    """Every path in `doc` (containers and leaves), for `splice` to put a raw literal at."""
    found = [list(prefix)]
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        found.extend(paths_of(value, (*prefix, key)))
    return found


@st.composite
def spliced(draw: st.DrawFn, template: Any) -> bytes:
    """`template` as JSON text with a literal json.dumps never writes (deep nesting, 4,301+ digit integers,
    NaN/Infinity, lone surrogate escapes) at one of its paths."""
    path = draw(st.sampled_from(paths_of(template)))
    return splice(template, path, raw=draw(raw_literals()))


_SHAPED: dict[tuple[str, str], st.SearchStrategy[Any]] = {}


def shaped(template: Any, leaves: str = "json") -> st.SearchStrategy[Any]:
    """`template` with any of its leaves (and sometimes whole subtrees) replaced by hostile values
    (`leaves="yaml"`: without the long strings, which an operator's file never holds and PyYAML reads slowly).

    Built once per template: constructing strategies inside every draw would cost more than the tests."""
    key = (json.dumps(template, sort_keys=True), leaves)
    if key not in _SHAPED:
        _SHAPED[key] = _shaped(template, leaf() if leaves == "json" else yaml_leaf())
    return _SHAPED[key]


def _shaped(template: Any, hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    if isinstance(template, dict):
        items = {key: st.one_of(_shaped(value, hostile), hostile) for key, value in template.items()}
        return st.fixed_dictionaries({}, optional=items) | st.fixed_dictionaries(items)
    if isinstance(template, list):
        return st.lists(_shaped(template[0], hostile) if template else hostile, max_size=3)
    return st.one_of(st.just(template), hostile)


PR_EVENT = {
    "action": "opened",
    "number": 1,
    "pull_request": {
        "number": 1,
        "state": "open",
        "draft": False,
        "author_association": "MEMBER",
        "user": {"login": "octocat"},
        "labels": [{"name": "ciflow/trunk"}],
        "updated_at": "2026-11-29T10:00:00Z",
        "head": {"ref": "feature", "sha": "0123456789abcdef0123456789abcdef01234567"},
        "base": {"ref": "main", "sha": "89abcdef0123456789abcdef0123456789abcdef"},
    },
    "repository": {"id": 1, "full_name": UPSTREAM, "default_branch": "main"},
    "label": {"name": "ciflow/crcr/gpu"},
    "installation": {"id": 1},
}
PUSH_EVENT = {
    "ref": "refs/heads/main",
    "before": "89abcdef0123456789abcdef0123456789abcdef",
    "after": "0123456789abcdef0123456789abcdef01234567",
    "deleted": False,
    "commits": [{"id": "0123456789abcdef0123456789abcdef01234567", "timestamp": "2026-11-29T10:00:00Z"}],
    "head_commit": {"id": "0123456789abcdef0123456789abcdef01234567"},
    "repository": {"id": 1, "full_name": UPSTREAM, "default_branch": "main"},
}
CHECK_RUN_EVENT = {
    "action": "rerequested",
    "check_run": {"id": 1, "name": "crcr/org/four", "head_sha": "0123456789abcdef0123456789abcdef01234567"},
    "repository": {"id": 1, "full_name": UPSTREAM},
}
CHECK_SUITE_EVENT = {
    "action": "rerequested",
    "check_suite": {"id": 1, "head_sha": "0123456789abcdef0123456789abcdef01234567"},
    "repository": {"id": 1, "full_name": UPSTREAM},
}
EVENTS = {
    "pull_request": PR_EVENT,
    "push": PUSH_EVENT,
    "check_run": CHECK_RUN_EVENT,
    "check_suite": CHECK_SUITE_EVENT,
}


def as_json(doc: Any, ascii_only: bool) -> bytes:
    """JSON text as a sender could write it; lone surrogates travel as \\ud800 escapes, as JSON allows."""
    if ascii_only:
        return json.dumps(doc).encode()
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def webhook_requests(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    event = draw(st.sampled_from([*EVENTS, "ping", "issues", ""]) | st.text(max_size=20))
    kind = draw(st.sampled_from(["shaped", "any", "spliced", "deep", "raw"]))
    template = EVENTS.get(event, PR_EVENT)
    if kind == "shaped":
        body = as_json(draw(shaped(template)), draw(st.booleans()))
    elif kind == "any":
        body = as_json(draw(any_json()), draw(st.booleans()))
    elif kind == "spliced":
        body = draw(spliced(template))
    elif kind == "deep":
        body = nested_text(draw(st.integers(1, 5000))).encode()
    else:
        body = draw(st.binary(max_size=200))
    delivery = draw(st.sampled_from(["72d3162e-cc78-11e3-81ab-4c9367dc0958", ""]) | with_controls())
    headers = {"x-github-event": event, "x-github-delivery": delivery}
    if draw(st.integers(0, 9)):  # mostly a valid signature, so the parser is reached
        headers["x-hub-signature-256"] = sign(SECRET, body)
    else:
        headers["x-hub-signature-256"] = draw(st.sampled_from(["", "sha256=", "sha1=00"]) | with_controls())
    return body, headers


def planner_deps(blobs: FakeBlobs, queue: FakeDispatchQueue) -> PlannerDeps:
    return PlannerDeps(
        upstream=UPSTREAM,
        allowlist=StaticAllowlist(ALLOWLIST),
        blobs=blobs,
        prs=FakeState(),
        branch=FakeState(),
        dispatches=queue,
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        checks=FakeChecksQueue(),
        door=door(),
    )


@fuzz(PARSER_EXAMPLES)
@given(webhook_requests())
def test_the_webhook_parser_answers_or_names_the_field_and_the_planner_reads_what_it_accepted(
    request: tuple[bytes, dict[str, str]],
) -> None:
    body, headers = request
    blobs, events = FakeBlobs(), FakeEventQueue()
    deps = IngestDeps(
        secrets=(SECRET,),
        upstream=UPSTREAM,
        deliveries=FakeDeliveries(),
        events=events,
        blobs=blobs,
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        max_body_bytes=10 * 1024 * 1024,
        inline_body_bytes=200 * 1024,
    )
    try:
        result = ingest(body, headers, deps)
    except (BadSignature, BadRequest, PayloadTooLarge) as exc:
        assert isinstance(exc.field, str) and exc.field, f"{exc.reason} names no field: {exc.message}"
        assert events.sent == [], "a refused delivery was queued"
        return
    if result.outcome is not Outcome.ACCEPTED:
        assert events.sent == []
        return
    # A 202 promises the delivery reaches its targets: the planner must read every body ingest accepted.
    [message] = events.sent
    queue = FakeDispatchQueue()
    plan_event(message, planner_deps(blobs, queue))
    for dispatch in queue.sent:
        dispatch.model_dump_json().encode()  # what the SQS adapter sends


def callback_template(kind: str) -> dict[str, Any]:
    ours: dict[str, Any] = {
        "schema_version": 1,
        "ticket": "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJvcmcvcmVwbyJ9.c2ln",
        "status": "completed",
        "conclusion": "failure",
        "failure_kind": "infra",
        "workflow_name": "CI",
        "job_name": "build",
        "run_id": 777,
        "run_attempt": 1,
        "url": "https://github.com/org/two/actions/runs/777",
        "started_at": "2026-11-29T10:00:00Z",
        "completed_at": "2026-11-29T10:05:00",
        "check_run_id": 4242,
        "test_results": {"passed": 1, "failed": 1, "skipped": 0, "total": 2},
        "artifact_url": "https://example.com/a",
        "summary": "**failed**",
        "triage_verdict": {"category": "infra", "confidence": 0.5, "summary": "flaky"},
    }
    if kind == "scheduled":
        del ours["ticket"]
        return ours | {"scheduled": True, "head_sha": "0" * 40}
    if kind == "pytorch":
        workflow = {k: v for k, v in ours.items() if k not in ("schema_version", "ticket", "workflow_name")}
        return {
            "schema_version": "1",
            "delivery_id": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            "event_type": "pull_request",
            "payload": {"pull_request": {"number": 1}},
            "workflow": workflow | {"name": "CI", "run_id": "777"},
        }
    return ours


@st.composite
def callback_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["ours", "scheduled", "pytorch", "any", "spliced", "deep", "raw"]))
    if kind in ("ours", "scheduled", "pytorch"):
        return as_json(draw(shaped(callback_template(kind))), draw(st.booleans()))
    if kind == "any":
        return as_json(draw(any_json()), draw(st.booleans()))
    if kind == "spliced":
        return draw(spliced(callback_template(draw(st.sampled_from(["ours", "scheduled", "pytorch"])))))
    if kind == "deep":
        return nested_text(draw(st.integers(1, 5000))).encode()
    return draw(st.binary(max_size=200))


@fuzz(PARSER_EXAMPLES)
@given(callback_bodies())
def test_the_callback_parser_answers_or_names_the_field_and_a_parsed_report_can_be_stored(body: bytes) -> None:
    try:
        _, report = parse_report(body)
    except BadRequest as exc:
        assert isinstance(exc.field, str) and exc.field, f"bad_request names no field: {exc.message}"
        return
    # Every report the parser lets through is fingerprinted and stored as text (the results table, the HUD).
    fingerprint_of(report.raw)
    try:
        stored_payload(report.raw)
    except PayloadTooLarge as exc:
        assert exc.field


def yaml_of(value: Any) -> str:
    """A YAML rendering of any value, flow style (JSON is YAML), keys of every type."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{yaml_of(k)}: {yaml_of(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(yaml_of(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


YAML_TOKENS = [
    "L1:", "L2:", "L3:", "L4:", "repos:", "providers:", "buildkite:", "repo_map:", "required_claims:", "\n", "  ",
    "- ", "? ", ": ", "[", "]", "{", "}", "&a ", "*a", "<<: ", "!!python/object:os.system ", "!!binary ", "!!set ",
    "---\n", "...\n", "#", "'", '"', "|\n", "org/repo", "0x1f", ".inf", "~", "yes", "2001-01-01", "\t", "\x00",
    "\ufeff", "%YAML 1.1\n",
]  # fmt: skip
UUID_PAIR = "0193a1c2-0000-4000-8000-000000000001/0193a1c2-0000-4000-8000-000000000002"


@st.composite
def yaml_documents(draw: st.DrawFn) -> str | bytes:
    kind = draw(st.sampled_from(["allowlist", "providers", "any", "tokens", "deep", "raw"]))
    if kind == "allowlist":
        template = {
            "L1": ["org/one", {"org/two": "a, b"}],
            "L3": {"gpu": {"org/three": ["x"]}},
            "L4": ["org/four"],
            "repos": {
                "org/four": {
                    "events": ["push"],
                    "branches": ["main"],
                    "skip_drafts": True,
                    "repository_id": 5,
                    "workflows": ["org/four/.github/workflows/ci.yml@*"],
                    "trusted_authors_only": False,
                    "oncalls": ["a"],
                    "check_runs": "per_repo",
                    "buildkite": {"organization": "org", "pipeline": "ci", "branch": "main"},
                }
            },
        }
        return yaml_of(draw(shaped(template, "yaml")))
    if kind == "providers":
        entry = {"repo": "org/four", "required_claims": {"build_branch": ["main"], "step_key": "a"}}
        template = {"providers": {"buildkite": {"repo_map": {UUID_PAIR: entry}}}, "buildkite": {UUID_PAIR: "org/x"}}
        return yaml_of(draw(shaped(template, "yaml")))
    if kind == "any":
        return yaml_of(draw(yaml_leaf()))
    if kind == "tokens":
        return "".join(draw(st.lists(st.sampled_from(YAML_TOKENS) | with_controls(st.text(max_size=3)), max_size=40)))
    if kind == "deep":
        # PyYAML gives up near 600 levels; its scanner is quadratic in flow nesting (`[[[…` 800 deep takes half
        # a second), so past the limit only block sequences and flow mappings, which it reads in linear time.
        depth = draw(st.integers(1, 300) | st.sampled_from([800, 3_000]))
        forms = ["{a: " * depth + "}" * depth, "- " * depth] + (["[" * depth + "]" * depth] if depth <= 300 else [])
        return draw(st.sampled_from(forms))
    return draw(st.binary(max_size=300))


@fuzz(PARSER_EXAMPLES)
@given(yaml_documents())
def test_the_allowlist_parser_returns_an_allowlist_or_an_allowlist_error(text: str | bytes) -> None:
    try:
        allowlist = parse_allowlist(text)
    except AllowlistError as exc:
        assert exc.message
        return
    assert isinstance(allowlist, Allowlist)


@fuzz(PARSER_EXAMPLES)
@given(yaml_documents())
def test_the_providers_parser_returns_providers_or_a_providers_error(text: str | bytes) -> None:
    try:
        providers = parse_providers(text)
    except AllowlistError as exc:  # ProvidersError is one
        assert exc.message
        return
    assert isinstance(providers, Providers)


SLUG = st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,20}\Z")
OWNER = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9-]{0,12}\Z")
NAME = st.from_regex(r"\A[A-Za-z0-9._-]{1,20}\Z").filter(lambda n: n not in (".", ".."))


@st.composite
def onboard_requests(draw: st.DrawFn) -> tuple[str, str, str | None, str | None, int | None]:
    repo = f"{draw(OWNER)}/{draw(NAME)}"
    level = draw(st.sampled_from(["L1", "L2", "L3", "L4", "l2"]))
    device = draw(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,12}\Z")) if level == "L3" else None
    buildkite = f"{draw(SLUG)}/{draw(SLUG)}" if draw(st.booleans()) else None
    repository_id = None if buildkite else draw(st.none() | st.integers(1, 2**53))
    return repo, level, device, buildkite, repository_id


@fuzz(PARSER_EXAMPLES)
@given(onboard_requests())
def test_every_entry_crcr_onboard_prints_reads_back_as_that_entry(
    args: tuple[str, str, str | None, str | None, int | None],
) -> None:
    repo, level, device, buildkite, repository_id = args
    try:
        request = parse_request(repo, level, device, buildkite)
    except OnboardError:
        return  # refused before anything is printed
    text = allowlist_entry(request, repository_id)
    [entry] = parse_allowlist(text).entries
    assert (entry.repo, entry.level, entry.device) == (repo, Level.parse(level), device)
    assert entry.settings.repository_id == repository_id
    assert entry.settings.buildkite == request.buildkite
    if request.buildkite is not None:
        providers = parse_providers(ci_providers_entry(repo).replace("<organization_id>/<pipeline_id>", UUID_PAIR))
        [rule] = providers.buildkite.values()
        assert rule.repo == repo
