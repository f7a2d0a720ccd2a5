"""Shadow mode (crcr.domain.shadow): a shadow downstream is planned as it would be live, its decision kept with the
payload it would have been sent or the reason it was not, and nothing is sent to it or written upstream for it."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.dispatch import client_payload
from crcr.app.plan import PlannerDeps, plan_event
from crcr.app.summaries import SummaryDeps
from crcr.domain.errors import AllowlistError
from crcr.domain.shadow import LiveRow, ShadowDecision, compare
from crcr.ops.shadow import CompareError, read_rows, render
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
from tests.unit.test_plan_usecase import BODY, _event
from tests.unit.test_summaries import FakeDocs

ALLOWLIST = (
    "L4:\n  - org/sent\n  - org/held\n  - org/paths\nL1:\n  - org/plain\n"
    "repos:\n  org/held:\n    trusted_authors_only: true\n  org/paths:\n    paths: ['docs/**']\n"
)


class Log:
    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], ShadowDecision] = {}

    def record(self, decisions: list[ShadowDecision]) -> None:
        self.kept.update({(d.delivery_id, d.repo): d for d in decisions})


class Files:
    def change_files(self, upstream: str, base_sha: str, head_sha: str) -> tuple[str, ...]:
        return ("torch/nn/linear.py",)


def world(text: str = ALLOWLIST, mode: str = "shadow") -> tuple[PlannerDeps, Log, FakeDocs]:
    metrics, docs, log = RecordingMetrics(), FakeDocs(), Log()
    allowlist = StaticAllowlist(parse_allowlist(text))
    deps = PlannerDeps(
        upstream="pytorch/pytorch", allowlist=allowlist, blobs=FakeBlobs(),
        prs=FakeState(), branch=FakeState(), dispatches=FakeDispatchQueue(), metrics=metrics, clock=FakeClock(),
        files=Files(), checks=FakeChecksQueue(), pages=SummaryDeps(docs=docs, metrics=metrics, clock=FakeClock()),
        door=door(mode, allowlist, log, metrics),  # type: ignore[arg-type]
    )  # fmt: skip
    return deps, log, docs


def first_timer() -> dict[str, object]:
    doc = json.loads(json.dumps(BODY))
    doc["pull_request"]["author_association"] = "FIRST_TIME_CONTRIBUTOR"
    doc["pull_request"]["changed_files"] = 1
    return doc


def test_a_shadow_relay_sends_nothing_and_keeps_each_decision_with_its_payload_or_reason() -> None:
    shadow, log, docs = world()
    summary = plan_event(_event(first_timer(), "d-1"), shadow)
    assert shadow.dispatches.sent == [] and shadow.checks.sent == []  # type: ignore[attr-defined]
    decided = {repo: (d.decision, d.reason) for (_, repo), d in log.kept.items()}
    assert decided == {
        "org/sent": ("dispatch", "opened"),  # what it would have been sent for
        "org/plain": ("dispatch", "opened"),
        "org/held": ("hold", "untrusted_author"),
        "org/paths": ("skip", "no_matching_files"),  # an L4 one: no concluded check run either
    }
    assert summary.dispatched == [] and summary.shadowed["org/held"] == "hold: untrusted_author"
    # The payload is what the live relay sends, but the ticket and callback URL it mints when sending.
    live, _, _ = world(mode="live")
    plan_event(_event(first_timer(), "d-1"), live)
    sent = {m.target_repo: m for m in live.dispatches.sent}  # type: ignore[attr-defined]
    for repo in ("org/sent", "org/plain"):
        want = client_payload(sent[repo], "t", "u")
        del want["ticket"], want["callback_url"]
        assert log.kept[("d-1", repo)].payload == want
    # The pages plan live downstreams only: a shadow one would stay "pending" for ever.
    assert "planned" not in docs.docs.get(f"commit/{BODY['pull_request']['head']['sha']}.json", {})


def test_one_downstream_moves_by_its_allowlist_mode_without_a_redeploy() -> None:
    moved = ALLOWLIST + "  org/sent:\n    mode: live\n"
    deps, log, _ = world(moved)  # a shadow deployment, one downstream live
    plan_event(_event(first_timer(), "d-1"), deps)
    assert [m.target_repo for m in deps.dispatches.sent] == ["org/sent"]  # type: ignore[attr-defined]
    assert ("d-1", "org/sent") not in log.kept and ("d-1", "org/plain") in log.kept
    back = ALLOWLIST + "  org/sent:\n    mode: shadow\n"
    deps, log, _ = world(back, mode="live")  # a live deployment, one downstream shadowed
    plan_event(_event(first_timer(), "d-2"), deps)
    sent = deps.dispatches.sent  # type: ignore[attr-defined]
    assert sorted(m.target_repo for m in sent if m.skip is None) == ["org/plain"]
    assert log.kept[("d-2", "org/sent")].decision == "dispatch"


def test_a_label_releases_a_held_shadow_downstream_once_as_live_would() -> None:
    deps, log, _ = world()
    doc = first_timer()
    doc["action"], doc["label"] = "labeled", {"name": "ciflow/trunk"}
    plan_event(_event(doc, "d-1"), deps)
    assert log.kept[("d-1", "org/held")].decision == "dispatch"
    plan_event(_event(doc, "d-2"), deps)
    assert (log.kept[("d-2", "org/held")].decision, log.kept[("d-2", "org/held")].reason) == (
        "skip",
        "already_released",
    )


def test_the_allowlist_mode_is_live_or_shadow_and_pytorchs_file_needs_none() -> None:
    assert parse_allowlist(ALLOWLIST).get("org/sent").settings.mode is None  # type: ignore[union-attr]
    with pytest.raises(AllowlistError, match=r"repos.org/sent.mode must be one of live, shadow"):
        parse_allowlist(ALLOWLIST + "  org/sent:\n    mode: maybe\n")


def test_a_planned_event_again_keeps_the_same_decisions() -> None:
    deps, log, _ = world()
    plan_event(_event(first_timer(), "d-1"), deps)
    first = dict(log.kept)
    plan_event(_event(first_timer(), "d-1"), replace(deps, dispatches=FakeDispatchQueue()))
    assert log.kept == first


def decided(
    delivery: str, repo: str, decision: str = "dispatch", reason: str = "opened", level: int = 2
) -> ShadowDecision:
    return ShadowDecision(
        delivery_id=delivery, received_at=float(ord(delivery[-1])), event="pull_request", action="opened",
        upstream="pytorch/pytorch", pr=1, head_sha="a" * 40, repo=repo, level=level, decision=decision, reason=reason,
    )  # fmt: skip


def test_the_comparison_names_each_difference_and_leaves_l1_out() -> None:
    decisions = [
        decided("d-1", "org/a"), decided("d-1", "Org/B"), decided("d-1", "org/l1", level=1),
        decided("d-1", "org/held", "hold", "untrusted_author"), decided("d-1", "org/quiet", "skip", "label_only"),
        decided("d-2", "org/a"),
    ]  # fmt: skip
    rows = [
        LiveRow("d-1", "org/a", "1"), LiveRow("d-1", "org/a", "1"),  # two jobs of one run: one dispatch
        LiveRow("d-1", "org/b", "2"), LiveRow("d-1", "org/b", "3"),  # two runs: dispatched twice (names any case)
        LiveRow("d-1", "org/held", "4"), LiveRow("d-9", "org/a", "5"),
    ]  # fmt: skip
    report = compare(decisions, rows)
    assert report["differences"] == {
        "dispatched_twice_in_service": 1, "hold: untrusted_author": 1, "no_rows_in_service": 1, "not_seen_by_shadow": 1
    }  # fmt: skip
    assert (report["pairs_compared"], report["pairs_agreeing"], report["agreement"]) == (5, 1, 0.2)
    first = next(e for e in report["events"] if e["delivery_id"] == "d-1")
    assert first["not_compared"] == [{"repo": "org/l1", "reason": "l1_never_reports"}]
    assert {d["repo"] for d in first["both"]} == {"org/a", "Org/B"}  # org/quiet: neither dispatched, not listed
    assert report["events"][-1]["delivery_id"] == "d-9"  # never seen by shadow: last
    assert compare([], [])["agreement"] is None


def test_the_rows_are_read_from_an_export_of_pytorchs_hud_table_or_of_crcr_workflow_job(tmp_path: Path) -> None:
    # torchci's record (lib/crcr/crcrUtils.ts): dynamoKey, downstream_repo, delivery_id, run_id, pr_number, …
    item = {"dynamoKey": {"S": "o/r/d-1/CI/build/9"}, "downstream_repo": {"S": "o/r"}, "delivery_id": {"S": "d-1"},
            "run_id": {"S": "77"}, "pr_number": {"N": "5"}, "event_type": {"S": "pull_request"}}  # fmt: skip
    (tmp_path / "hud.json.gz").write_bytes(gzip.compress(json.dumps({"Item": item}).encode() + b"\n"))
    flat = {"downstream_repo": "o/r", "delivery_id": "d-1", "run_id": 77, "pr_number": 5, "event_type": "pull_request"}
    (tmp_path / "rows.jsonl").write_text(json.dumps(flat) + "\n")
    (tmp_path / "rows.csv").write_text(
        "delivery_id,downstream_repo,run_id,pr_number,event_type\nd-1,o/r,77,5,pull_request\n"
    )
    want = [LiveRow("d-1", "o/r", "77", "pull_request", 5)]
    assert all(read_rows(tmp_path / name) == want for name in ("hud.json.gz", "rows.jsonl", "rows.csv"))


def test_an_incremental_export_of_the_hud_table_is_read_by_the_same_reader_as_the_results_tables(
    tmp_path: Path,
) -> None:
    """One reader of DynamoDB export lines (crcr.ops.export_files): an incremental export's `NewImage` line gives the
    row as a full export's `Item` does, and a bad value in it is named as `NewImage.<field>`."""
    image = {"downstream_repo": {"S": "o/r"}, "delivery_id": {"S": "d-1"}, "run_id": {"N": "77"}}
    line = {"Metadata": {"WriteTimestampMicros": {"N": "1765000000000000"}}, "Keys": {"dynamoKey": {"S": "k"}},
            "NewImage": image}  # fmt: skip
    (tmp_path / "incremental.json.gz").write_bytes(gzip.compress(json.dumps(line).encode() + b"\n"))
    assert read_rows(tmp_path / "incremental.json.gz") == [LiveRow("d-1", "o/r", "77")]
    bad = line | {"NewImage": image | {"delivery_id": {"X": "1"}}}
    (tmp_path / "bad.json").write_text(json.dumps(bad) + "\n")
    with pytest.raises(CompareError, match=r"line 1: NewImage\.delivery_id is not a DynamoDB JSON value"):
        read_rows(tmp_path / "bad.json")


def test_nothing_of_a_row_or_a_decision_reaches_the_terminal_as_a_control_sequence() -> None:
    """Red team: a delivery id or repository holding ESC, CSI or bidirectional characters was printed as it was: a
    row (or a decision, from the shadow relay's own table) could clear the screen or retitle the terminal."""
    escape = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"
    decisions = [decided(f"d-1{escape}", f"org/a{escape}"), decided("d-2", "org/b", "hold", f"why{escape}")]
    rows = [LiveRow("d-2", "org/b", "1"), LiveRow(f"d-9{escape}", f"org/c{escape}", "2")]
    table = render(compare(decisions, rows), as_json=False)
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", table), repr(table)
    assert "org/a ]0;pwned [2J 31m" in table and "hold: why ]0;pwned" in table  # what is left is inert text
    as_json = render(compare(decisions, rows), as_json=True)
    assert "\x1b" not in as_json and "\\u001b" in as_json  # JSON escapes them
