"""One recorded stream of events through `crcr local`, and everything the relay writes compared with
tests/golden/writes.json; `CRCR_GOLDEN_UPDATE=1` rewrites it (docs/testing.md, "The golden comparison")."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.conftest import Relay, event_body
from tests.doubles.buildkite_double import BuildkiteDouble
from tests.doubles.buildkite_oidc import BuildkiteOidc
from tests.doubles.github_double import GitHubDouble
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import OidcIssuer
from tests.golden.capture import AwsWrites, Writes
from tests.golden.compare import as_text, normal_form, readable_diff
from tests.golden.normalise import BEFORE_S, Rules, Window
from tests.golden.stream import (
    BK_REPO,
    DOCS_PR,
    IDS,
    ISSUES,
    L1,
    L2,
    L3,
    L4,
    NIGHTLY,
    PR,
    SHADOW,
    UPSTREAM,
    Stream,
    sha,
)

pytestmark = pytest.mark.e2e
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "writes.json"
HEAD_A = json.loads(event_body("pull_request.opened.json"))["pull_request"]["head"]["sha"]
HEAD_B, HEAD_DOCS = "b" * 40, "d" * 40
BK_ORG_ID, BK_PIPELINE_ID = "9f9d7467-f59b-51f1-9b4d-5b26a103a1a2", "274a648f-c000-5b53-9a6f-d1a42e9ec2cd"
# Every level, a nightly-only downstream that may bisect, a shadow one, a Buildkite one; L3 and L4 skip what does
# not touch torch/.
ALLOWLIST = f"""\
L1:
  - {L1}
L2:
  - {L2}: oncall-two
  - {NIGHTLY}:
      oncalls: oncall-six
      events: [nightly]
  - {BK_REPO}
L3:
  gpu:
    {L3}: [oncall-three]
L4:
  - {L4}: [oncall-four]
  - {SHADOW}: [oncall-seven]
repos:
  {L3}:
    paths: ["torch/**"]
  {L4}:
    paths: ["torch/**", "aten/**"]
  {NIGHTLY}:
    bisect: {{runs_per_day: 6}}
  {SHADOW}:
    mode: shadow
  {BK_REPO}:
    repository_id: {IDS[BK_REPO]}
    buildkite: {{organization: vllm, pipeline: ci}}
"""
PROVIDERS = f"""\
providers:
  buildkite:
    repo_map:
      {BK_ORG_ID}/{BK_PIPELINE_ID}:
        repo: {BK_REPO}
        required_claims:
          build_branch: [main]
"""
GRANTS = {"actions": "write", "checks": "write", "contents": "write", "issues": "write", "pull_requests": "write",
          "metadata": "read"}  # fmt: skip
# Fixed, so a ticket's key id is the same every run (its signature is not: it signs the ticket's times).
TICKET_KEY = ed25519.Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"crcr golden ticket key").digest())
ENV = {
    "CRCR_OIDC_AUDIENCE": "crcr",
    "CRCR_GITHUB_APP_SLUG": "crcr-bot",
    "CRCR_GITHUB_WRITE_RATES": "600/60+100",  # no write of the stream waits for the budget
    # A burst of callbacks is one render of the PR comment; a second asked for in one step would be one more.
    "CRCR_COMMENT_SETTLE_S": "1",
    # A repository's check run completes when its jobs have: no pass looks again a second later, on its own timing.
    "CRCR_CHECK_SETTLE_S": "0",
    "CRCR_RUN_TIMEOUT_S": "2",  # the job started and never finished is past it when the stream runs the sweeper
    # Nothing runs on a timer while the stream plays: the stream runs the sweeper; the level check and the export run
    # once at start, before it.
    "CRCR_SWEEP_INTERVAL_S": "86400",
    "CRCR_LEVEL_INTERVAL_S": "86400",
    "CRCR_EXPORT_INTERVAL_S": "86400",
    "CRCR_RECONCILE_INTERVAL_S": "86400",
}


@pytest.fixture
def aws() -> Iterator[AwsWrites]:
    writes = AwsWrites().install()  # before the stack starts: every client it and the relay make copies the hook
    yield writes
    writes.remove()


@pytest.fixture
def buildkite() -> Iterator[BuildkiteDouble]:
    with BuildkiteDouble() as double:
        double.add_pipeline("vllm", "ci")
        yield double


@pytest.fixture
def agent() -> Iterator[BuildkiteOidc]:
    ids = {"organization_id": BK_ORG_ID, "pipeline_id": BK_PIPELINE_ID}
    with BuildkiteOidc(audience="crcr", organization_slug="vllm", pipeline_slug="ci", **ids) as issuer:
        yield issuer


@pytest.fixture
def oidc() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        yield issuer


def start(
    relay_factory: Callable[..., Relay],
    github: GitHubDouble,
    oidc: OidcIssuer,
    agent: BuildkiteOidc,
    buildkite: BuildkiteDouble,
    tmp: Path,
) -> Relay:
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=GRANTS)
    github.install(NIGHTLY, installation_id=160, repo_id=IDS[NIGHTLY])
    github.install(SHADOW, installation_id=170, repo_id=IDS[SHADOW])
    github.add_collaborator(UPSTREAM, "maintainer", "write")
    for number in ISSUES:
        github.add_issue(UPSTREAM, number)
    github.add_commit(UPSTREAM, sha(0), branch="main")
    for number, head, files in ((PR, HEAD_A, ["torch/a.py"]), (PR, HEAD_B, ["torch/b.py", "docs/b.md"]),
                                (DOCS_PR, HEAD_DOCS, ["docs/index.md"])):  # fmt: skip
        github.add_commit(UPSTREAM, head)
        github.set_pull_files(UPSTREAM, number, files, head=head)
    providers = tmp / "ci_providers.yml"
    providers.write_text(PROVIDERS)
    key = TICKET_KEY.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    env = ENV | {
        "CRCR_OIDC_ISSUER": oidc.url,
        "CRCR_TICKET_SIGNING_KEY": key,
        "CRCR_BUILDKITE_API_URL": buildkite.url,
        "CRCR_BUILDKITE_API_TOKEN": buildkite.token,
        "CRCR_BUILDKITE_OIDC_ISSUER": agent.url,
        "CRCR_CI_PROVIDERS": str(providers),
    }
    # One poller per queue: two polling one queue may both receive a message (SQS delivers at least once), and the
    # relay's answer to the copy (look again when the other's claim lapses) would be a write of that run only.
    return relay_factory(allowlist=ALLOWLIST, env=env, pollers_per_queue=1)


def play(w: Writes, s: Stream) -> None:
    """The recorded stream. Each step waits for the relay to settle before the next; the actions of one step touch
    different commits (the PR's head, a push), so how they interleave changes nothing the relay writes."""
    b, push2 = "golden-pr-synchronize", "golden-push-2"
    w.step("1 stack started (level check, export)", lambda: None)
    w.step("2 PR opened at A; push 1", lambda: (s.pull_request("golden-pr-opened", "opened", HEAD_A), s.push(1)))
    w.step(
        "3 PR moved to B (A cancelled); push 2",
        lambda: (s.pull_request(b, "synchronize", HEAD_B, updated_at="2026-11-30T09:00:00Z"), s.push(2)),
    )
    w.step(
        "4 docs-only PR (paths skip); push 3; L4 starts on B, passes on 1",
        lambda: (
            s.pull_request("golden-docs-pr", "opened", HEAD_DOCS, number=DOCS_PR),
            s.push(3),
            s.job(L4, b, "build", None),
            s.job(L4, "golden-push-1", "test", "success", run_id=3001),
        ),
    )
    detail = [{"name": "test_add", "classname": "TestOps", "message": "mismatch"}]
    counts = {"passed": 9, "failed": 1, "skipped": 0, "total": 10}
    w.step(
        # On B: L4 fails (the PR comment), L3 fails before its label, L2 reports with PyTorch's body and starts a job
        # that never ends, L1 and Buildkite pass. L4 fails on push 2 (a regression, its notice); a nightly passes on 1.
        "5 every body kind on B; push 2 regresses; nightly passes on 1",
        lambda: (
            s.job(L4, b, "build", "failure", failure_kind="test", test_results=counts, failed_tests_detail=detail),
            s.job(L3, b, "test", "failure", run_id=778, failure_kind="test"),
            s.pytorch_body(L2, b, "success"),
            s.job(L2, b, "slow", None, run_id=4242),
            s.job(L1, b, "build", "success"),
            s.buildkite_job(b, "success"),
            s.job(L4, push2, "test", "failure", run_id=3002, failure_kind="test"),
            s.nightly(sha(1), "success", 5001),
        ),
    )
    label = {"label": "ciflow/crcr/gpu", "labels": [{"name": "ciflow/crcr/gpu"}], "updated_at": "2026-11-30T09:10:00Z"}
    w.step(
        "6 label backfill on B; nightly fails on 3 (notice, bisection)",
        lambda: (s.pull_request("golden-pr-labeled", "labeled", HEAD_B, **label), s.nightly(sha(3), "failure", 5003)),
    )
    w.step(
        "7 re-runs: Checks tab (L4), comment command (L3)",
        lambda: (
            s.github.add_workflow_run(L4, 777, head_sha=HEAD_B, status="completed", conclusion="failure"),
            s.github.add_workflow_run(L3, 778, head_sha=HEAD_B, status="completed", conclusion="failure"),
            s.check_run_rerequested(f"crcr/{L4}/CI/build", HEAD_B),
            s.command(f"Flaky runner.\n@crcr-bot rerun {L3}"),
        ),
    )
    legacy_job = {"delivery_id": push2, "repo": L4, "run_id": "3002", "run_attempt": 1, "job_name": "test"}
    w.step(
        "8 L4 attempt 2 passes on B; old `job` and `repo` messages",
        lambda: (
            s.job(L4, b, "build", "success", attempt=2),
            s.checks_message(kind="job", head_sha=sha(2), **legacy_job),
            s.checks_message(kind="repo", head_sha=HEAD_DOCS, delivery_id="golden-docs-pr", repo=L4),
        ),
    )
    w.step("9 sweeper times out L2's unended job", s.sweep)


def test_what_the_relay_writes_for_the_recorded_stream_is_the_golden_file(
    relay_factory: Callable[..., Relay],
    github: GitHubDouble,
    hud: HudDouble,
    oidc: OidcIssuer,
    agent: BuildkiteOidc,
    buildkite: BuildkiteDouble,
    aws: AwsWrites,
    tmp_path: Path,
) -> None:
    began = time.time()
    relay = start(relay_factory, github, oidc, agent, buildkite, tmp_path)
    writes, stream = Writes(relay.stack, aws, github, hud, buildkite), Stream(relay, oidc, agent, buildkite)
    play(writes, stream)
    captured = writes.at_end()
    if raw := os.environ.get("CRCR_GOLDEN_RAW"):  # what was captured, before its normal form (docs/testing.md)
        Path(raw).write_text(json.dumps(captured, indent=1, default=str))
    # Times the run made lie between a while before it started and its longest TTL (400 days) after it.
    window = Window(began - BEFORE_S, time.time() + 3 * 366 * 86_400)
    got = as_text(normal_form(captured, Rules(window, double_ids(github), frozenset(stream.volatile_bodies))))
    if os.environ.get("CRCR_GOLDEN_UPDATE"):
        GOLDEN.write_text(got)
        return
    expected = GOLDEN.read_text()
    assert got == expected, "what the relay writes differs from tests/golden/writes.json:\n" + readable_diff(
        expected, got
    )


def double_ids(github: GitHubDouble) -> frozenset[int]:
    """The ids of the check runs and comments GitHub's double made, numbered in the order requests raced (its other
    counters, a reaction's id among them, go in the stream's order)."""
    comments = {int(c["id"]) for number in ISSUES for c in github.comments(UPSTREAM, number)}
    return frozenset(comments | {int(r["id"]) for r in github.check_runs(UPSTREAM)})
