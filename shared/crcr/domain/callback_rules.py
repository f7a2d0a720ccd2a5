"""Who may report what: the identity rules a callback must pass (DESIGN §4.3, §5)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from crcr.domain.errors import Forbidden
from crcr.domain.ids import repo_key

REQUIRED_CLAIMS = ("repository", "repository_id", "event_name", "run_id", "run_attempt")


SCHEDULED_EVENTS = frozenset({"schedule", "workflow_dispatch"})


def check_identity(
    claims: Mapping[str, Any],
    *,
    events: frozenset[str] = frozenset({"repository_dispatch"}),
    repo: str,
    repo_id: int,
    run_id: str,
    run_attempt: int,
    pinned_repo_id: int | None,
    workflows: tuple[str, ...],
) -> None:
    """Raise Forbidden unless the OIDC claims are the dispatched repository's own run of this report.

    Identity comes from `repository`/`repository_id`, never from splitting `sub` (GitHub moved new
    and renamed repositories to an id-based `sub` format in 2026).
    """
    for name in REQUIRED_CLAIMS:
        if claims.get(name) in (None, ""):
            raise Forbidden(f"the token has no {name} claim", field=name)
    if repo_key(str(claims["repository"])) != repo_key(repo):
        raise Forbidden(f"the token is for {claims['repository']}, the dispatch was to {repo}", field="repository")
    if str(claims["repository_id"]) != str(repo_id):
        raise Forbidden("the token's repository_id is not the dispatched repository's", field="repository_id")
    if pinned_repo_id is not None and str(claims["repository_id"]) != str(pinned_repo_id):
        raise Forbidden("the token's repository_id does not match the allowlist pin", field="repository_id")
    if claims["event_name"] not in events:
        raise Forbidden(f"runs started by {claims['event_name']} cannot report", field="event_name")
    if str(claims["run_id"]) != str(run_id):
        raise Forbidden("run_id does not match the token's run", field="run_id")
    if str(claims["run_attempt"]) != str(run_attempt):
        raise Forbidden("run_attempt does not match the token's run", field="run_attempt")
    if workflows:
        ref = str(claims.get("job_workflow_ref") or "")
        if not any(fnmatch.fnmatchcase(ref, pattern) for pattern in workflows):
            raise Forbidden(f"workflow {ref or '(none)'} is not allowed to report for {repo}", field="job_workflow_ref")
