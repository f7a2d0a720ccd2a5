"""The job state machine and the identity rules a callback must pass."""

from __future__ import annotations

import pytest

from crcr.domain.callback_rules import check_identity
from crcr.domain.errors import Forbidden
from crcr.domain.jobs import Current, Decision, JobState, decide


@pytest.mark.parametrize(
    ("current", "status", "fingerprint", "expected"),
    [
        (None, "in_progress", "a", Decision.RECORD),
        (None, "completed", "a", Decision.RECORD),  # completed first is allowed
        (Current(JobState.IN_PROGRESS, "a"), "in_progress", "a", Decision.DUPLICATE),
        (Current(JobState.IN_PROGRESS, "a"), "in_progress", "b", Decision.CONFLICT),
        (Current(JobState.IN_PROGRESS, "a"), "completed", "b", Decision.RECORD),
        (Current(JobState.COMPLETED, "b"), "completed", "b", Decision.DUPLICATE),
        (Current(JobState.COMPLETED, "b"), "completed", "c", Decision.CONFLICT),
        (Current(JobState.COMPLETED, "b"), "in_progress", "a", Decision.STALE),  # never regresses
        (Current(JobState.TIMED_OUT, "t"), "completed", "c", Decision.RECORD),  # a genuine result replaces it
        (Current(JobState.TIMED_OUT, "t"), "in_progress", "a", Decision.STALE),
    ],
)
def test_transitions(current: Current | None, status: str, fingerprint: str, expected: Decision) -> None:
    assert decide(current, status, fingerprint) is expected


CLAIMS = {
    "repository": "Org/Backend",
    "repository_id": "5001",
    "event_name": "repository_dispatch",
    "run_id": "42",
    "run_attempt": "2",
    "job_workflow_ref": "Org/Backend/.github/workflows/ci.yml@refs/heads/main",
    # sub in the id-based format: never used for authorization
    "sub": "repository_owner_id:77:repository_id:5001:ref:refs/heads/main",
}


def check(**changes: object) -> None:
    kwargs: dict[str, object] = {
        "repo": "org/backend",
        "repo_id": 5001,
        "run_id": 42,
        "run_attempt": 2,
        "pinned_repo_id": None,
        "workflows": (),
    }
    claims = dict(CLAIMS)
    for key, value in changes.items():
        if key in kwargs:
            kwargs[key] = value
        elif value is None:
            claims.pop(key)
        else:
            claims[key] = value
    check_identity(claims, **kwargs)  # type: ignore[arg-type]


def test_the_dispatched_run_passes() -> None:
    check()
    check(workflows=("Org/Backend/.github/workflows/*@refs/heads/main",))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"repository": "Org/Other"}, "repository"),
        ({"repository_id": "9999"}, "repository_id"),
        ({"pinned_repo_id": 1234}, "repository_id"),
        ({"event_name": "push"}, "event_name"),
        ({"event_name": "workflow_dispatch"}, "event_name"),
        ({"run_id": "43"}, "run_id"),
        ({"run_attempt": "1"}, "run_attempt"),
        ({"repository_id": None}, "repository_id"),
        ({"workflows": ("Org/Backend/.github/workflows/release.yml@*",)}, "job_workflow_ref"),
    ],
)
def test_every_mismatch_is_refused_naming_the_claim(change: dict[str, object], field: str) -> None:
    with pytest.raises(Forbidden) as caught:
        check(**change)
    assert caught.value.field == field
