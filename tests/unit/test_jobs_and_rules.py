"""The job state machine and the identity rules a callback must pass."""

from __future__ import annotations

import pytest

from crcr.domain.allowlist import Entry, RepoSettings
from crcr.domain.callback_rules import check_identity
from crcr.domain.errors import Forbidden
from crcr.domain.identity import Known
from crcr.domain.jobs import Current, Decision, JobState, decide
from crcr.domain.levels import Level


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
    """The dispatch to org/backend (GitHub's id 5001 then), its allowlist entry pinned as `pinned_repo_id` and
    `workflows` say, and the token's claims with `changes`."""
    kwargs: dict[str, object] = {
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
    pins = RepoSettings(repository_id=kwargs["pinned_repo_id"], workflows=kwargs["workflows"])  # type: ignore[arg-type]
    check_identity(
        claims,
        entry=Entry("org/backend", Level.L2, settings=pins),
        known=Known(repository_id=kwargs["repo_id"]),  # type: ignore[arg-type]
        run_id=kwargs["run_id"],  # type: ignore[arg-type]
        run_attempt=kwargs["run_attempt"],  # type: ignore[arg-type]
    )


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


@pytest.mark.parametrize("claim", ["repository", "repository_id", "event_name", "run_id", "run_attempt"])
@pytest.mark.parametrize("value", [["x"], {"a": 1}, True, 1.5, "9" * 1001])
def test_a_claim_of_the_wrong_type_is_refused_naming_it_never_a_500(claim: str, value: object) -> None:
    """An issuer-signed token whose claim is a list (event_name in a frozenset was a TypeError), an object, a
    boolean, a float or a text no identity is that long."""
    with pytest.raises(Forbidden) as caught:
        check(**{claim: value})
    assert caught.value.field == claim and len(caught.value.message) < 300


def test_a_job_workflow_ref_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(Forbidden) as caught:
        check(job_workflow_ref=["Org/Backend/.github/workflows/ci.yml@refs/heads/main"], workflows=("*",))
    assert caught.value.field == "job_workflow_ref"


def test_numeric_claims_compare_as_their_digits() -> None:
    check(repository_id=5001, run_id=42, run_attempt=2)  # an issuer writing numbers is still that run
    with pytest.raises(Forbidden) as caught:
        check(run_attempt=10**40)
    assert caught.value.field == "run_attempt"


@pytest.mark.parametrize(
    "lookalike",
    [
        "Org/Bac\u212aend",  # Kelvin sign: "\u212a".lower() == "k", so str.lower() made it the dispatched repo
        "Org/Backend".replace("a", "\u0430"),  # Cyrillic a
        "\u041erg/Backend",  # Cyrillic capital O
        "Org/Backend\n",
        "Org/\uff22ackend",  # fullwidth B
    ],
)
def test_a_look_alike_repository_claim_is_refused(lookalike: str) -> None:
    with pytest.raises(Forbidden) as caught:
        check(repository=lookalike)
    assert caught.value.field == "repository"
