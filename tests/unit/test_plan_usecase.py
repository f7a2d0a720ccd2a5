"""Planner: a release that failed to send is released again when the event is retried."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.plan import PlannerDeps, plan_event
from crcr.app.summaries import SummaryDeps
from crcr.contracts.messages import DispatchMessage, EventMessage
from tests.unit.fakes import (
    FakeBlobs,
    FakeChecksQueue,
    FakeClock,
    FakeDispatchQueue,
    FakeState,
    RecordingMetrics,
    StaticAllowlist,
    door,
)
from tests.unit.test_summaries import FakeDocs

BODY = json.loads(
    (Path(__file__).resolve().parents[2] / "examples" / "events" / "pull_request.opened.json").read_text()
)
ALLOWLIST = parse_allowlist("L4:\n  - org/held\nrepos:\n  org/held:\n    trusted_authors_only: true\n")


class FlakyQueue(FakeDispatchQueue):
    failures = 1

    def send_dispatches(self, messages: list[DispatchMessage]) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("SQS unreachable")
        super().send_dispatches(messages)


def labeled_event(delivery: str) -> EventMessage:
    doc = json.loads(json.dumps(BODY))
    doc["action"] = "labeled"
    doc["label"] = {"name": "ciflow/trunk"}
    doc["pull_request"]["author_association"] = "FIRST_TIME_CONTRIBUTOR"
    text = json.dumps(doc)
    return EventMessage(
        delivery_id=delivery, event="pull_request", received_at=0, body=text,
        body_sha256=hashlib.sha256(text.encode()).hexdigest(),
    )  # fmt: skip


def test_a_release_whose_send_failed_is_released_again_on_retry() -> None:
    queue, state = FlakyQueue(), FakeState()
    deps = PlannerDeps(
        upstream="pytorch/pytorch",
        allowlist=StaticAllowlist(ALLOWLIST),
        blobs=FakeBlobs(),
        prs=state,
        branch=state,
        dispatches=queue,
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        door=door(),
    )
    with pytest.raises(ConnectionError):
        plan_event(labeled_event("d-1"), deps)  # SQS redelivers the event
    assert plan_event(labeled_event("d-1"), deps).dispatched == ["org/held"]
    # Another label (another delivery) on the same head releases nothing more.
    assert plan_event(labeled_event("d-2"), deps).skipped == {"org/held": "already_released"}
    assert [m.target_repo for m in queue.sent] == ["org/held"]


def _event(doc: dict[str, object], delivery: str, event: str = "pull_request") -> EventMessage:
    text = json.dumps(doc)
    return EventMessage(
        delivery_id=delivery, event=event, received_at=0, body=text,
        body_sha256=hashlib.sha256(text.encode()).hexdigest(),
    )  # fmt: skip


def test_a_new_head_cancels_the_old_heads_queued_runs_and_asks_for_the_prs_comment() -> None:
    checks = FakeChecksQueue()
    deps = PlannerDeps(
        upstream="pytorch/pytorch", allowlist=StaticAllowlist(parse_allowlist("L4:\n  - org/repo\n")),
        blobs=FakeBlobs(), prs=FakeState(), branch=FakeState(), dispatches=FakeDispatchQueue(),
        metrics=RecordingMetrics(),
        clock=FakeClock(), checks=checks, door=door()
    )  # fmt: skip
    plan_event(_event(BODY, "d-1"), deps)
    assert checks.sent == []
    newer = json.loads(json.dumps(BODY))
    newer["action"] = "synchronize"
    newer["pull_request"]["head"]["sha"] = "b" * 40
    newer["pull_request"]["updated_at"] = "2099-01-01T00:00:00Z"
    plan_event(_event(newer, "d-2"), deps)
    cancel, comment = (m for m, _ in checks.sent)
    assert (cancel.kind, cancel.head_sha, cancel.superseded_by, cancel.pr) == (
        "cancel",
        BODY["pull_request"]["head"]["sha"],
        "b" * 40,
        BODY["pull_request"]["number"],  # the pass reads the PR's head: one it went back to is not cancelled
    )
    assert (comment.kind, comment.head_sha, comment.pr) == ("comment", "b" * 40, BODY["pull_request"]["number"])


def test_a_dispatch_carries_when_its_commit_was_stored_as_the_prs_head_and_a_late_older_event_does_not() -> None:
    queue, clock = FakeDispatchQueue(), FakeClock()
    deps = PlannerDeps(
        upstream="pytorch/pytorch",
        allowlist=StaticAllowlist(parse_allowlist("L4:\n  - org/repo\n")),
        blobs=FakeBlobs(), prs=FakeState(), branch=FakeState(), dispatches=queue, metrics=RecordingMetrics(),
        clock=clock, door=door()
    )  # fmt: skip
    newer = json.loads(json.dumps(BODY))
    newer["action"] = "synchronize"
    newer["pull_request"]["head"]["sha"] = "b" * 40
    newer["pull_request"]["updated_at"] = "2099-01-01T00:00:00Z"
    plan_event(_event(newer, "d-new"), deps)
    plan_event(_event(BODY, "d-old"), deps)  # the older event, delivered after the newer one
    by_delivery = {m.delivery_id: m for m in queue.sent}
    assert by_delivery["d-new"].head_at == clock.now()
    # Still dispatched (the dispatcher reads the PR's head and supersedes it), but never taken as the head.
    assert by_delivery["d-old"].head_at is None


PUSH = json.loads((Path(__file__).resolve().parents[2] / "examples" / "events" / "push.main.json").read_text())


def test_a_ciflow_trunk_tag_push_is_dispatched_as_its_prs_ci_at_the_tags_commit() -> None:
    queue, state = FakeDispatchQueue(), FakeState()
    deps = PlannerDeps(
        upstream="pytorch/pytorch",
        allowlist=StaticAllowlist(parse_allowlist("L4:\n  - org/l4\n  - org/nightly:\n      events: [nightly]\n")),
        blobs=FakeBlobs(),
        prs=state,
        branch=state,
        dispatches=queue,
        metrics=RecordingMetrics(),
        clock=FakeClock(),
        door=door(),
    )
    doc = json.loads(json.dumps(PUSH)) | {"ref": "refs/tags/ciflow/trunk/171234", "base_ref": None}
    text = json.dumps(doc)
    message = EventMessage(
        delivery_id="tag-1",
        event="push",
        received_at=0,
        body=text,
        body_sha256=hashlib.sha256(text.encode()).hexdigest(),
    )
    summary = plan_event(message, deps)
    assert summary.dispatched == ["org/l4"] and summary.skipped == {"org/nightly": "nightly_only"}
    [sent] = queue.sent
    assert (sent.event_type, sent.pr_number, sent.head_sha, sent.ciflow) == ("push", 171234, doc["after"], "trunk")
    assert sent.payload["ref"] == "refs/tags/ciflow/trunk/171234"  # downstreams read the push as PyTorch sends it
    assert sent.head_at is None  # the tag says nothing of the PR's head: the dispatcher asks
    assert state.heads == {} and state.commits == {}  # nor is the PR's head (or a branch order) recorded from it


def test_the_hud_pages_hear_what_was_planned_for_each_downstream() -> None:
    """Pending, held, skipped for its paths and nightly-only, each on the commit's page with its title and author;
    a new head marks the old one's pending dispatches superseded; a failing page store never fails the event."""
    allowlist = parse_allowlist(
        "L4:\n  - org/sent\n  - org/held\nL2:\n  - org/paths\n  - org/nightly:\n      events: [nightly]\n"
        "repos:\n  org/held:\n    trusted_authors_only: true\n  org/paths:\n    paths: ['docs/**']\n"
    )
    docs = FakeDocs()
    metrics = RecordingMetrics()

    class Files:
        def change_files(self, upstream: str, base_sha: str, head_sha: str) -> tuple[str, ...]:
            return ("torch/nn/linear.py",)

    deps = PlannerDeps(
        upstream="pytorch/pytorch", allowlist=StaticAllowlist(allowlist), blobs=FakeBlobs(), prs=FakeState(),
        branch=FakeState(),
        dispatches=FakeDispatchQueue(), metrics=metrics, clock=FakeClock(), files=Files(),
        pages=SummaryDeps(docs=docs, metrics=metrics, clock=FakeClock()), door=door()
    )  # fmt: skip
    doc = json.loads(json.dumps(BODY))
    doc["pull_request"]["author_association"] = "FIRST_TIME_CONTRIBUTOR"
    doc["pull_request"]["changed_files"] = 1
    summary = plan_event(_event(doc, "d-1"), deps)
    assert summary.page_note == "noted"
    sha = doc["pull_request"]["head"]["sha"]
    commit = docs.doc(f"commit/{sha}.json")
    assert {repo: p["state"] for repo, p in commit["planned"].items()} == {
        "org/sent": "pending",
        "org/held": "held",
        "org/paths": "skipped",
        "org/nightly": "not_targeted",
    }
    assert commit["planned"]["org/nightly"]["reason"] == "nightly_only"
    assert commit["planned"]["org/paths"]["reason"] == "no_matching_files"
    assert commit["meta"]["title"] == doc["pull_request"]["title"].split("\n")[0][:200]
    assert commit["meta"]["author"] == doc["pull_request"]["user"]["login"]
    assert commit["meta"]["pr_state"] == "open"

    newer = json.loads(json.dumps(doc))
    newer["action"] = "synchronize"
    newer["pull_request"]["head"]["sha"] = "b" * 40
    newer["pull_request"]["updated_at"] = "2099-01-01T00:00:00Z"
    plan_event(_event(newer, "d-2"), deps)
    old = {c["sha"]: c for c in docs.doc("index.json")["commits"]}[sha]
    assert old["superseded_by"] == "b" * 40 and old["repos"]["org/sent"]["state"] == "superseded"

    class Broken(FakeDocs):
        def get(self, key: str) -> tuple[None, None]:
            raise ConnectionError("S3 unreachable")

    broken = PlannerDeps(**{**deps.__dict__, "pages": SummaryDeps(docs=Broken(), metrics=metrics, clock=FakeClock())})
    assert plan_event(_event(doc, "d-3"), broken).page_note.startswith("failed: ConnectionError")
    assert metrics.counts["PlanNoteFailed"] == 1


def test_a_pr_the_merge_bot_landed_is_merged_for_downstreams_and_the_pages_whatever_comes_first() -> None:
    """PyTorch's merge bot pushes the PR's commit to main itself (its message ends `Pull Request resolved: <PR URL>`)
    and closes the PR, so GitHub's `merged` is false; then it adds the label `Merged`."""
    docs, metrics = FakeDocs(), RecordingMetrics()
    state, queue = FakeState(), FakeDispatchQueue()
    deps = PlannerDeps(
        upstream="pytorch/pytorch", allowlist=StaticAllowlist(parse_allowlist("L2:\n  - org/cleans-up\n")),
        blobs=FakeBlobs(), prs=state, branch=state, dispatches=queue, metrics=metrics, clock=FakeClock(),
        pages=SummaryDeps(docs=docs, metrics=metrics, clock=FakeClock()), door=door()
    )  # fmt: skip

    def pr(number: int, action: str, **changes: object) -> EventMessage:
        doc = json.loads(json.dumps(BODY))
        doc["action"], doc["number"] = action, number
        doc["pull_request"] |= {"number": number, "head": doc["pull_request"]["head"] | {"sha": f"{number:040x}"}}
        doc["pull_request"] |= changes | ({"state": "closed", "merged": False} if action != "opened" else {})
        return _event(doc, f"{action}-{number}-{len(queue.sent)}")

    def landing(*numbers: int, upstream: str = "pytorch/pytorch", ref: str = "refs/heads/main") -> EventMessage:
        doc = json.loads(json.dumps(PUSH)) | {"ref": ref}
        doc["commits"] = [
            c | {"message": f"Fix #{n} (#{n})\n\nPull Request resolved: https://github.com/{upstream}/pull/{n}\n"}
            for c, n in zip(doc["commits"] * len(numbers), numbers, strict=False)
        ]
        return _event(doc, hashlib.sha256(f"{numbers}{upstream}{ref}".encode()).hexdigest()[:32], "push")

    def told(number: int) -> bool | None:
        return [m for m in queue.sent if m.pr_number == number and m.action == "closed"][-1].merged

    def page_state(number: int) -> str:
        return str(docs.doc(f"commit/{number:040x}.json")["meta"]["pr_state"])

    # Landed, then closed: merged for the closed PR's dispatch and on its page.
    plan_event(pr(101, "opened"), deps)
    plan_event(landing(101), deps)
    assert page_state(101) == "open"  # landed, not yet closed: the pages wait for the close
    plan_event(pr(101, "closed"), deps)
    assert (told(101), page_state(101)) == (True, "merged")
    # Closed, then landed: the dispatch could only say what was known; the page learns it when the push comes.
    plan_event(pr(102, "opened"), deps)
    plan_event(pr(102, "closed"), deps)
    assert (told(102), page_state(102)) == (False, "closed")
    plan_event(landing(102), deps)
    assert page_state(102) == "merged"
    # The bot's label: merged on the dispatch when it is there at closing, on the page when it comes later.
    plan_event(pr(103, "closed", labels=[{"name": "Merged"}]), deps)
    assert (told(103), page_state(103)) == (True, "merged")
    plan_event(pr(104, "closed"), deps)
    labeled = json.loads(pr(104, "labeled", labels=[{"name": "Merged"}]).body or "{}") | {"label": {"name": "Merged"}}
    plan_event(_event(labeled, "label-104"), deps)
    assert page_state(104) == "merged"
    # Not a landing: another repository's PR URL, a push to another branch, a PR closed unmerged.
    plan_event(landing(105, upstream="someone/fork"), deps)
    plan_event(landing(105, ref="refs/heads/release/2.9"), deps)
    plan_event(pr(105, "closed"), deps)
    assert (told(105), page_state(105)) == (False, "closed")
    assert metrics.counts["PullRequestLanded"] == 2
    # Only a closed PR's dispatch says it; every other leaves the key out.
    assert {m.merged for m in queue.sent if m.action != "closed"} == {None}


def test_a_landing_is_read_from_the_message_only_never_from_a_field_of_the_body() -> None:
    from crcr.contracts.github import PushCommit  # noqa: PLC0415

    sha = "a" * 40
    spoofed = PushCommit.model_validate({"id": sha, "message": "x", "resolves": ["pytorch/pytorch", 5]})
    assert spoofed.resolves is None
    trailer = "Fix (#7)\n\nPull Request resolved: https://github.com/pytorch/pytorch/pull/7\nApproved by: someone\n"
    assert PushCommit.model_validate({"id": sha, "message": trailer}).resolves == ("pytorch/pytorch", 7)
    quoted = 'Revert "Fix"\n\n> Pull Request resolved: https://github.com/pytorch/pytorch/pull/7\n'
    assert PushCommit.model_validate({"id": sha, "message": quoted}).resolves is None  # not a line of its own


def test_a_push_to_main_records_its_commits_in_order_with_what_a_blamelist_shows() -> None:
    state = FakeState()
    deps = PlannerDeps(
        upstream="pytorch/pytorch", allowlist=StaticAllowlist(parse_allowlist("L2:\n  - org/repo\n")),
        blobs=FakeBlobs(), prs=state, branch=state, dispatches=FakeDispatchQueue(), metrics=RecordingMetrics(),
        clock=FakeClock(), door=door()
    )  # fmt: skip
    doc = json.loads(json.dumps(PUSH))
    squashed, landed = dict(doc["commits"][0]), dict(doc["commits"][0])
    squashed |= {"id": "1" * 40}
    landed |= {"id": doc["after"], "author": {"name": "Ann Other"}, "modified": [f"f{i}.py" for i in range(101)]}
    landed |= {"message": "Speed it up\n\nPull Request resolved: https://github.com/pytorch/pytorch/pull/170002\n"}
    doc["commits"] = [squashed, landed]
    plan_event(_event(doc, "push-1", "push"), deps)
    first, second = state.commits_between("pytorch/pytorch", 0, 2**40)
    assert (first.sha, first.parent, first.pr) == ("1" * 40, doc["before"], 170001)  # the squash title's "(#N)"
    assert first.title == doc["commits"][0]["message"] and first.author == "octodev"
    assert first.files == ("torch/_inductor/select_algorithm.py",)
    assert (second.parent, second.pr, second.title, second.author) == ("1" * 40, 170002, "Speed it up", "Ann Other")
    assert second.files is None  # more files than a blamelist keeps: not known, so never narrowed away
