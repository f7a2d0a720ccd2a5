"""Operator tool behind `crcr regressions`: the open and recently closed regressions of downstream jobs on the
upstream's default branch, as the HUD's route `GET /hud/api/crcr/regressions` lists them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from crcr.app.ports.regressions import RegressionStore, change_regressions
from crcr.domain.regressions import Tracked


def select(found: Sequence[Tracked], repo: str | None = None, open_only: bool = False) -> list[Tracked]:
    """The regressions of one repository or all, open ones only or all kept, oldest first (the route's order)."""
    wanted = [t for t in found if (repo is None or t.repo.lower() == repo.lower()) and (t.open or not open_only)]
    return sorted(wanted, key=lambda t: t.opened_at)


def render(found: Sequence[Tracked], as_json: bool) -> str:
    """A short table (the suspected PRs of each range: its commits the job's path filter concerns), or the route's
    entries as JSON."""
    if as_json:
        return json.dumps([t.to_json() for t in found], indent=2)
    if not found:
        return "no regressions"
    table = [("repository", "job", "state", "range", "commits", "suspected PRs", "opened")]
    for t in found:
        suspects = [b for b in t.blamelist if b.suspect] or list(t.blamelist)
        prs = ", ".join(f"#{b.pr}" if b.pr else b.sha[:7] for b in suspects[:5])
        more = f" +{len(suspects) - 5}" if len(suspects) > 5 else ""
        state = t.state if t.open else f"fixed by {t.fixed_by[:7] if t.fixed_by else '?'}"
        if t.culprit:
            state += f", culprit {t.culprit[:7]}"
        elif t.bisect_pending:
            state += f", bisecting ({t.bisect_runs} run{'s' if t.bisect_runs != 1 else ''})"
        opened = datetime.fromtimestamp(t.opened_at, UTC).strftime("%Y-%m-%d %H:%M")
        table.append(
            (t.repo, f"{t.workflow_name} / {t.job_name}", state, f"{t.last_pass[:7]}..{t.first_fail[:7]}",
             str(len(t.blamelist)), prs + more, opened)
        )  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table)


def cancel(store: RegressionStore, upstream: str, repo: str, job: str | None = None) -> int:
    """Stop the bisection of the repository's open regressions (one job's, or all): no further run is dispatched;
    a run already dispatched reports as any other. Returns how many were stopped."""
    jobs = {(t.repo, t.workflow_name, t.job_name) for t in select(store.regressions_of(upstream), repo)}

    def stop(t: Tracked) -> Tracked:
        return replace(t, bisect_stopped="cancelled") if t.open and not t.bisect_stopped else t

    return sum(change_regressions(store, upstream, key, stop) for key in jobs if job is None or key[2] == job)
