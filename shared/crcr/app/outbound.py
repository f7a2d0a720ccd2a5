"""The outbound door: every write the relay makes to GitHub, Buildkite or PyTorch's HUD is let through, or kept as a
shadow decision, here and nowhere else."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from crcr.app.ports import AllowlistProvider, Clock, Metrics
from crcr.app.ports.shadow import ShadowLog
from crcr.domain.shadow import LIVE, SHADOW, WITHHELD, ShadowDecision, mode_of

GITHUB, BUILDKITE, HUD = "github", "buildkite", "hud"
# Writes whose only effect is on crcr's own App (GitHub sends a failed webhook delivery to this relay again): they
# speak for no downstream and touch nothing of the upstream's, so a shadow relay makes them too (it must see every
# event to be compared).
OWN_WRITES = frozenset({"redelivery"})
MAX_KEPT_BODY = 16_384  # characters of what would have been written, kept with a withheld write
RECORDED_KEPT = 10_000  # withheld writes this instance remembers recording (a retried write is recorded once)


@dataclass(frozen=True)
class Write:
    """One write the relay means to make outside itself: to which system, what for, on whose behalf (`repo`: the
    downstream whose work it reports or starts; None: the deployment's own), and what it would carry."""

    system: str  # github, buildkite or hud
    action: str  # dispatch, build, check_run, comment, notice, reaction, rerun, level_pr, hud_push, redelivery
    repo: str | None
    upstream: str
    key: str  # what is written, stably: the same write asked for again is the same shadow decision
    body: Any = None  # what it would carry (kept, cut to MAX_KEPT_BODY, when withheld)
    pr: int | None = None
    head_sha: str = ""
    level: int = 0


class Unpermitted(RuntimeError):
    """A writing adapter was called without the door's permit for that write: a path that goes around the door."""


_ISSUED = object()  # only this module issues permits


class Permit:
    """The door's word that one write may be sent; writing adapters send nothing without one for their system."""

    __slots__ = ("write",)

    def __init__(self, write: Write, issuer: object) -> None:
        if issuer is not _ISSUED:
            raise Unpermitted("permits are issued by crcr.app.outbound.Outbound only")
        self.write = write

    def __repr__(self) -> str:
        return f"Permit({self.write.system} {self.write.action} for {self.write.repo or 'the relay'})"


def require(permit: Permit | None, system: str, action: str | None = None, repo: str | None = None) -> Permit:
    """What every writing adapter calls before it sends: the permit must be the door's, for this system (and this
    action and downstream when the adapter knows them)."""
    if not isinstance(permit, Permit):
        raise Unpermitted(f"a {system} write without the door's permit")
    write = permit.write
    if write.system != system or (action is not None and write.action != action):
        raise Unpermitted(f"a permit for {write.system} {write.action} used for {system} {action or 'a write'}")
    if repo is not None and (write.repo or "").lower() != repo.lower():
        raise Unpermitted(f"a permit for {write.repo} used for {repo}")
    return permit


@dataclass
class Outbound:
    """The door. A downstream's effective mode is its allowlist entry's `mode`, else the deployment's `CRCR_MODE`
    (`mode`); a write for a live downstream gets a permit, one for a shadow downstream becomes a shadow decision
    (what would have been written, and why) and is counted, never sent."""

    mode: str
    allowlist: AllowlistProvider | None
    log: ShadowLog | None
    metrics: Metrics
    clock: Clock
    upstream: str = ""  # the deployment's upstream, for writes about no upstream commit (a level PR, a redelivery)
    _recorded: OrderedDict[tuple[str, str], None] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def mode_of(self, repo: str | None) -> str:
        """The effective mode of a downstream (None: the deployment's own). An allowlist that cannot be read raises:
        nothing is written on a guess."""
        if not repo or self.allowlist is None:
            return self.mode
        entry = self.allowlist.current().get(repo)
        return mode_of(entry, self.mode) if entry is not None else self.mode

    def live(self, repo: str | None) -> bool:
        return self.mode_of(repo) != SHADOW

    def permit(self, write: Write) -> Permit | None:
        """A permit for a live downstream's write (and for the relay's own writes); None for a shadow downstream's,
        whose write is kept as a shadow decision instead."""
        if write.action in OWN_WRITES or self.live(write.repo):
            return Permit(write, _ISSUED)
        self.metrics.count("WriteWithheld", action=write.action)
        self._keep(write)
        return None

    def record(self, decisions: list[ShadowDecision]) -> None:
        """The planner's shadow decisions (dispatch, hold, skip) go to the same log as the withheld writes."""
        if self.log is not None and decisions:
            self.log.record(decisions)

    def _keep(self, write: Write) -> None:
        with self._lock:
            key = (write.action, write.key)
            if key in self._recorded:
                return
            self._recorded[key] = None
            while len(self._recorded) > RECORDED_KEPT:
                self._recorded.popitem(last=False)
        if self.log is None:
            return
        why = "the allowlist's mode for this downstream" if self.mode == LIVE else "CRCR_MODE"
        self.log.record(
            [
                ShadowDecision(
                    delivery_id=f"{write.action}:{write.key}",
                    received_at=self.clock.now(),
                    event=write.action,
                    action=None,
                    upstream=write.upstream,
                    pr=write.pr,
                    head_sha=write.head_sha,
                    repo=write.repo or "",
                    level=write.level,
                    decision=WITHHELD,
                    reason=f"shadow ({why}): not sent",
                    payload=_kept(write.body),
                    target={"system": write.system},
                )
            ]
        )


def _kept(body: Any) -> dict[str, Any] | None:
    """What the write would have carried, as JSON, cut to a size a shadow decision keeps."""
    if body is None:
        return None
    text = json.dumps(body, separators=(",", ":"), default=str, sort_keys=True)
    if len(text) <= MAX_KEPT_BODY:
        loaded = json.loads(text)
        return loaded if isinstance(loaded, dict) else {"value": loaded}
    return {"truncated": text[:MAX_KEPT_BODY], "chars": len(text)}
