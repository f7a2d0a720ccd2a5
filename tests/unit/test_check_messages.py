"""ChecksQueue's messages, one model per kind, against bodies the code before the split queued (tests/events/
checks_queue_bodies.json): each is still read, and what is sent now is the same to the byte."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from pydantic import BaseModel, ValidationError

from crcr.app.checks_booking import head_message, job_message
from crcr.app.ports.jobs import JobRecord
from crcr.contracts.check_messages import (
    JOB_KEYS,
    WIRE,
    CheckSync,
    CommentRequest,
    DispatchChanged,
    HeadPass,
    HeadSuperseded,
    JobKey,
    Reaction,
    RegressionNotice,
    RepoSkipped,
    RerunRequest,
    read_check_sync,
)
from tests.conftest import ROOT

CAPTURED = {row["case"]: row for row in json.loads((ROOT / "tests/events/checks_queue_bodies.json").read_text())}
U, H, H2 = "pytorch/pytorch", "a" * 40, "b" * 40
KINDS: tuple[type[BaseModel], ...] = get_args(get_args(CheckSync)[0])
JOB = JobRecord(
    dispatch_id="dsp-1", run_id="4242", run_attempt=2, job_name="build (cuda)", workflow_name="CI", state="completed",
    conclusion="failure", fingerprint="f", url="", repo="org-three/l3-repo", repo_id=7, level=3, delivery_id="d-1",
    upstream=U, head_sha=H, pr=17, device="gpu", dispatched_at=1.0, started_at=None, completed_at=None,
    callback_payload="{}",
)  # fmt: skip


def _built() -> dict[str, BaseModel]:
    """Each case as the producers build it now (the planner, reporter, commands, regressions, writers)."""
    booked = head_message(U, H, "0f" * 16, 5.0, 1765432100.25)
    failed = JobKey(dispatch_id=JOB.dispatch_id, run_id=JOB.run_id, run_attempt=JOB.run_attempt, job_name=JOB.job_name)
    return {
        "head: a booked pass": booked,
        "head: paced, holding its slot": booked.model_copy(
            update={"not_before": 1765432160.5, "attempt": 2, "slot_at": 1765432160.5}
        ),
        "head: dead-lettered for a refused check run": HeadPass(upstream=U, head_sha=H, repo="org-four/L4-Repo"),
        "job: the label backfill": job_message(JOB),  # type: ignore[dict-item]
        "repo: sent before passes existed": DispatchChanged(
            upstream=U, head_sha=H, delivery_id="d-1", repo="org-four/L4-Repo"
        ),
        "cancel: a superseded head": HeadSuperseded(upstream=U, head_sha=H, superseded_by=H2, pr=17),
        "skip: a path filter": RepoSkipped(
            upstream=U,
            head_sha=H,
            delivery_id="d-1",
            repo="org-four/L4-Repo",
            pr=17,
            reason="no_matching_files",
            ciflow="trunk",
        ),
        "comment: a request": CommentRequest(upstream=U, head_sha=H, pr=17),
        "comment: a booked render": CommentRequest(upstream=U, head_sha=H, pr=17).model_copy(
            update={"ticket": "ab" * 16, "not_before": 1765432105.0, "attempt": 1}
        ),
        "rerun: the relay's retry": RerunRequest(
            upstream=U, head_sha=H, delivery_id=JOB.delivery_id, repo=JOB.repo, job=failed
        ),
        "rerun: from the Checks tab": RerunRequest(
            requested_by="checks_tab",
            upstream=U,
            head_sha=H,
            delivery_id="d-9",
            repo="org-four/L4-Repo",
            job=JobKey(run_id="777"),
        ),
        "rerun: from a comment": RerunRequest(
            requested_by="comment",
            upstream=U,
            head_sha=H,
            delivery_id="d-9",
            repo="org-four/L4-Repo",
            job=JobKey(dispatch_id="dsp-2", run_id="778"),
            pr=17,
        ),
        "react: a command's answer": Reaction(
            upstream=U, head_sha=H, pr=17, comment_id=99, delivery_id="d-9", reaction="rocket"
        ),
        "notice: a regression": RegressionNotice(
            upstream=U, head_sha=H, repo="org-four/L4-Repo", pr=17, workflow_name="CI", job_name="test (1, 2)"
        ),
    }


@pytest.mark.parametrize("case", sorted(CAPTURED))
def test_a_body_queued_before_the_split_is_read_as_its_kind_and_sent_on_unchanged(case: str) -> None:
    row = CAPTURED[case]
    message = read_check_sync(row["body"])
    assert message.kind == json.loads(row["body"])["kind"]
    assert message.model_dump_json() == row["sent"]  # byte for byte, as the code before re-sent it
    assert read_check_sync(message.model_dump_json()) == message


@pytest.mark.parametrize("case", sorted(_built()))
def test_what_each_producer_sends_is_the_body_the_code_before_sent(case: str) -> None:
    assert _built()[case].model_dump_json() == CAPTURED[case]["body"]


def test_the_ticket_is_read_from_and_written_as_render() -> None:
    message = read_check_sync(CAPTURED["head: a booked pass"]["body"])
    assert isinstance(message, HeadPass) and message.ticket == "0f" * 16
    assert json.loads(message.model_dump_json())["render"] == "0f" * 16


def test_every_kind_has_its_own_model_of_at_most_twelve_fields_all_on_the_wire() -> None:
    kinds = [get_args(model.model_fields["kind"].annotation)[0] for model in KINDS]
    assert sorted(kinds) == ["cancel", "comment", "head", "job", "notice", "react", "repo", "rerun", "skip"]
    wire = {key for key, _ in WIRE}
    for model in KINDS:
        assert len(model.model_fields) <= 12, model.__name__
        names = {info.alias or name for name, info in model.model_fields.items()} - {"job"}
        assert names <= wire, model.__name__
        assert "job" not in model.model_fields or set(JOB_KEYS) <= wire


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"comment_id": 7}, "comment_id"),  # a key another kind fills, on a pass
        ({"reaction": "rocket", "comment_id": None}, "reaction"),
        ({"surprise": 1}, "surprise"),  # a key no release ever sent
        ({"kind": "verdict"}, "kind"),
        ({"attempt": 101}, "attempt"),
    ],
)
def test_a_body_that_no_release_sent_is_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    body = json.loads(CAPTURED["head: a booked pass"]["body"]) | changes
    with pytest.raises(ValidationError) as refused:
        read_check_sync(json.dumps(body))
    assert field in str(refused.value)
