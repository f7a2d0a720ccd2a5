"""A regression's one notice (ChecksFunction, kind `notice`): the downstream's owners told on the PR that landed the
regression's first failing commit, paced on the upstream installation like every upstream write
(docs/decisions.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from crcr.app.budget import Budget
from crcr.app.outbound import GITHUB, Outbound, Permit, Write
from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.github import GitHubRateLimited, GitHubRejected, GitHubUnavailable, NotInstalled
from crcr.app.ports.pacing import Pacer
from crcr.app.ports.regressions import RegressionStore, change_regressions
from crcr.contracts.check_messages import RegressionNotice
from crcr.domain.markdown import text
from crcr.domain.regressions import Tracked, notice_body

WRITE_TRIES = 4


class Notices(Protocol):
    """The upstream PR's conversation (issues: write), as the PR comment writes it."""

    def installation_for(self, upstream: str) -> int: ...

    def create_comment(self, upstream: str, pr: int, body: str, *, permit: Permit) -> int: ...


@dataclass(frozen=True)
class NoticeDeps:
    api: Notices
    store: RegressionStore
    allowlist: AllowlistProvider
    pacer: Pacer
    metrics: Metrics
    clock: Clock
    door: Outbound  # a shadow downstream's regression is kept as a shadow decision, never told upstream


class NoticeBusy(Exception):
    """Another writer kept changing the job's regressions: try the notice again shortly."""


def tell(message: RegressionNotice, deps: NoticeDeps, budget: Budget) -> str:
    """The one notice of a regression: claimed on the regression (`told`) before it is written, so a redelivered
    message never writes a second; a write GitHub could not take now releases the claim (the message is retried),
    one GitHub refuses is counted and not retried. Paced on the upstream installation like every upstream write."""
    upstream, spent = message.upstream, False
    permit: Permit | None = None
    for _ in range(WRITE_TRIES):
        kept, version = deps.store.job_regressions(upstream, message.repo, message.workflow_name, message.job_name)
        t = next((t for t in kept if t.first_fail == message.head_sha and t.open), None)
        if t is None or t.told or message.pr is None:
            deps.metrics.count("RegressionNoticeSkipped", reason="told" if t is not None else "gone")
            return "told" if t is not None else "gone"
        if permit is None:
            entry = deps.allowlist.current().get(t.repo)
            body = notice_body(
                t, entry.oncalls if entry is not None else (), text(f"{t.workflow_name} / {t.job_name}", 200)
            )
            key = f"{t.repo}:{t.workflow_name}:{t.job_name}:{t.first_fail}"
            permit = deps.door.permit(
                Write(GITHUB, "notice", t.repo, upstream, key, {"body": body}, message.pr, t.first_fail)
            )
            if permit is None:
                return "withheld"  # a shadow downstream: not claimed, so its notice is kept, never written
        if not spent:
            budget.spend(deps.pacer, lambda: deps.api.installation_for(upstream), deps.clock.now())
            spent = True
        claimed = [replace(x, told=True) if x is t else x for x in kept]
        if deps.store.save_job_regressions(upstream, t.repo, t.workflow_name, t.job_name, claimed, version):
            break
    else:
        raise NoticeBusy(f"regressions of {message.repo} kept changing")
    try:
        deps.api.create_comment(upstream, message.pr, permit.write.body["body"], permit=permit)
    except (GitHubRejected, NotInstalled):
        deps.metrics.count("RegressionNoticeRefused")
        return "refused"
    except (GitHubUnavailable, GitHubRateLimited):
        _release(message, t, deps)
        raise
    deps.metrics.count("RegressionTold")
    return "told now"


def _release(message: RegressionNotice, t: Tracked, deps: NoticeDeps) -> None:
    """Give the claim back so the retried message can write the notice (best effort: a claim kept is a notice lost,
    never a second one)."""

    def unclaim(x: Tracked) -> Tracked:
        return replace(x, told=False) if x.first_fail == t.first_fail else x

    change_regressions(deps.store, message.upstream, (t.repo, t.workflow_name, t.job_name), unclaim)
