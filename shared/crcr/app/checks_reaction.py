"""ChecksQueue's `react`: the answer to a PR comment command, a reaction paced on the upstream installation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from crcr.app.budget import Budget
from crcr.app.checks_outcome import SyncOutcome
from crcr.app.outbound import GITHUB, Outbound, Permit, Write
from crcr.app.ports import Clock, Metrics
from crcr.app.ports.github import GitHubRejected, NotInstalled
from crcr.app.ports.pacing import Pacer
from crcr.contracts.check_messages import Reaction


class Reactions(Protocol):
    def installation_for(self, upstream: str) -> int: ...
    def react(self, upstream: str, comment_id: int, content: str, *, permit: Permit) -> None:
        """A reaction on an issue comment (`+1`, `rocket`, `confused`, …)."""
        ...


@dataclass(frozen=True)
class ReactionDeps:
    reactions: Reactions | None  # None: reactions off
    door: Outbound  # a reaction is written only with its permit
    pacer: Pacer
    clock: Clock
    metrics: Metrics


def react(message: Reaction, deps: ReactionDeps, budget: Budget) -> SyncOutcome:
    """A 4xx (the comment was deleted) is counted and dropped: there is nothing left to answer."""
    if deps.reactions is None or message.comment_id is None or not message.reaction:
        return SyncOutcome(detail="reactions_off")
    reactions = deps.reactions
    what = Write(GITHUB, "reaction", None, message.upstream, f"{message.comment_id}:{message.reaction}",
                 {"content": message.reaction}, message.pr)  # fmt: skip
    permit = deps.door.permit(what)
    if permit is None:
        return SyncOutcome(detail="withheld")
    budget.spend(deps.pacer, lambda: reactions.installation_for(message.upstream), deps.clock.now())
    try:
        reactions.react(message.upstream, message.comment_id, message.reaction, permit=permit)
    except (GitHubRejected, NotInstalled) as exc:
        deps.metrics.count("CommandReactionRefused")
        return SyncOutcome(detail=f"refused: {exc}")
    deps.metrics.count("CommandReacted", reaction=message.reaction)
    return SyncOutcome(detail=message.reaction)
