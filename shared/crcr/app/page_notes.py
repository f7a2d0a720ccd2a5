"""What the planner decided for each commit, and reports the relay refused, noted in crcr's page documents."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from crcr.app.summaries import (
    REFUSAL_KEYS,
    SCHEMA,
    SummaryDeps,
    commit_doc,
    first_seen,
    repo_doc_key,
    summary_of,
    update_document,
    update_prs,
    with_index,
)

# -- what the planner decided, and refused reports -------------------------------------------------------------

# A later decision on the same commit replaces an earlier one of the same or a lower rank: a dispatch (pending)
# replaces a hold (its release), a skip, a not-targeted; nothing but a dispatch replaces a dispatch.
PLAN_RANK = {"pending": 3, "dispatched": 3, "held": 2, "skipped": 2, "not_targeted": 1}


@dataclass(frozen=True)
class PlanNote:
    """What the planner decided for one upstream event, as the pages show it."""

    upstream: str
    sha: str
    event_type: str  # pull_request or push
    pr: int | None = None
    ciflow: str | None = None  # a ciflow tag push: its name (the PR's CI on the PR's head)
    meta: Mapping[str, Any] = field(default_factory=dict)  # title, author, at, pr_state, base_sha
    planned: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # repo -> state, reason, level
    replaced: str | None = None  # the PR's previous head: its dispatches not started are superseded
    nightly_only: tuple[str, ...] = ()  # repositories taking part through scheduled runs only


def _merge_plan(doc: dict[str, Any], note: PlanNote, now: float) -> bool:
    changed = False
    meta = doc.setdefault("meta", {})
    for key, value in note.meta.items():
        if value is not None and meta.get(key) != value:
            meta[key] = value
            changed = True
    planned = doc.setdefault("planned", {})
    for repo, plan in note.planned.items():
        old = planned.get(repo)
        new = {k: v for k, v in plan.items() if v is not None}
        if new["state"] == "pending":
            new["since"] = now
        if old is None or (PLAN_RANK[new["state"]] >= PLAN_RANK.get(old["state"], 0) and old["state"] != "pending"):
            changed = changed or old != new
            planned[repo] = new
        elif new["state"] == "pending":  # dispatched again (a reopened PR, a release): pending from now
            planned[repo] = new
            changed = True
    if note.pr is not None and doc.get("pr") != note.pr:
        doc["pr"] = note.pr
        changed = True
    if note.ciflow and doc.get("ciflow") != note.ciflow:
        doc["ciflow"] = note.ciflow
        changed = True
    if note.replaced and doc.pop("superseded_by", None):  # its PR went back to it (A -> B -> A): the head again
        changed = True
    doc.setdefault("event_type", note.event_type)
    if changed:
        first_seen(doc, now)
    return changed


def note_plan(note: PlanNote, deps: SummaryDeps) -> None:
    """Merge the planner's decisions for one event into its commit's document, the superseded head's, the
    overview and the PR's page."""
    now = round(deps.clock.now(), 3)
    summaries: list[dict[str, Any]] = []

    def commit(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        doc = doc if doc and doc.get("schema") == SCHEMA else commit_doc(note.upstream, note.sha, note.pr)
        changed = _merge_plan(doc, note, now)
        summaries[:] = [summary_of(doc)]
        if not changed:
            return None
        doc["updated_at"] = now
        return doc

    update_document(deps, f"commit/{note.sha}.json", commit)
    if note.replaced and note.replaced != note.sha:
        old: list[dict[str, Any]] = []

        def superseded(doc: dict[str, Any] | None) -> dict[str, Any] | None:
            if not doc or doc.get("schema") != SCHEMA or doc.get("superseded_by") == note.sha:
                return None
            doc["superseded_by"] = note.sha
            doc["updated_at"] = now
            old.append(summary_of(doc))
            return doc

        update_document(deps, f"commit/{note.replaced}.json", superseded)
        summaries += old[-1:]
    flags = {repo: {"nightly_only": True} for repo in note.nightly_only}
    update_document(deps, "index.json", partial(with_index, summaries=summaries, now=now, flags=flags))
    update_prs(summaries, deps, now)


MAX_REASONS = 20
OTHER_REASON = "other"


def note_refusals(
    repo: str, reasons: Mapping[str, int], deps: SummaryDeps, key: str | None = None, message: str | None = None
) -> None:
    """Count reports the relay refused for a downstream (a HUD push refused, a report over its quota) on its
    repository page, by reason, and keep the repository on the overview's grid. `key` names one refusal, so a
    retried record counts once (the newest REFUSAL_KEYS keys are remembered); `message`, what the relay answered,
    is kept with each reason counted."""
    now = round(deps.clock.now(), 3)
    total: list[int] = []

    def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        doc = doc if doc and doc.get("schema") == SCHEMA else {"schema": SCHEMA, "repo": repo, "history": []}
        refused = doc.get("refused") or {"total": 0, "reasons": {}, "keys": []}
        if key is not None and key in refused["keys"]:
            total.append(refused["total"])
            return None
        for reason, count in reasons.items():
            text = reason.strip()[:200] or OTHER_REASON
            if text not in refused["reasons"] and len(refused["reasons"]) >= MAX_REASONS:
                text = OTHER_REASON
            slot = refused["reasons"].setdefault(text, {"count": 0})
            slot["count"] += count
            slot["last_at"] = now
            if message:
                slot["message"] = message[:300]
            refused["total"] += count
        refused["last_at"] = now
        if key is not None:
            refused["keys"] = [*refused["keys"], key][-REFUSAL_KEYS:]
        doc["refused"] = refused
        doc["updated_at"] = now
        total.append(refused["total"])
        return doc

    update_document(deps, repo_doc_key(repo), change)
    if total:
        flags = {repo: {"refused": total[-1]}}
        update_document(deps, "index.json", partial(with_index, summaries=[], now=now, flags=flags))
