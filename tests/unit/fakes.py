"""In-memory fakes of the ports that record what the use cases did (no patching of internals)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from crcr.app.outbound import BUILDKITE, GITHUB, Outbound, Permit, Write, require
from crcr.app.ports import AllowlistProvider
from crcr.app.ports.buildkite import DISPATCH_META_KEY, BuildkiteError, NewBuild
from crcr.app.ports.checkruns import HeadSync
from crcr.app.ports.comment import CommentRow, IssueComment
from crcr.app.ports.deliveries import Claim, DeliveryListing, RedeliveryClaim
from crcr.app.ports.github import GitHubError, GitHubRejected, NotInstalled, RepoToken
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.ledger import BuildRef, LedgerClaim, LedgerRow, LedgerState
from crcr.app.ports.pulls import HeadRecord, PrInfo
from crcr.contracts.check_messages import CheckSync
from crcr.contracts.messages import DispatchMessage, EventMessage
from crcr.domain.allowlist import Allowlist
from crcr.domain.checks import Known
from crcr.domain.comment import Posted
from crcr.domain.ids import repo_key
from crcr.domain.pacing import WindowLevel
from crcr.domain.redelivery import Attempt
from crcr.domain.regressions import BranchCommit, Tracked
from crcr.domain.shadow import ShadowDecision
from crcr.domain.ticket import TicketClaims


class RecordingMetrics:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def count(self, name: str, value: int = 1, **dimensions: str) -> None:
        self.counts[name] += value
        for dim, dim_value in dimensions.items():
            self.counts[f"{name}.{dim}={dim_value}"] += value


@dataclass
class FakeClock:
    t: float = 1_800_000_000.0

    def now(self) -> float:
        return self.t


@dataclass
class FakeDeliveries:
    rows: dict[str, str] = field(default_factory=dict)
    bodies: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)  # delivery id -> the body it was claimed with

    def claim_delivery(self, delivery_id: str, event: str, now: float, body_sha256: str) -> Claim:
        """Both claims or neither, as the table's transaction takes them."""
        state = self.rows.get(delivery_id)
        if state is not None:
            if self.digests[delivery_id] != body_sha256:
                return Claim.REUSED
            return Claim.QUEUED if state == "queued" else Claim.PENDING
        if self.bodies.get(body_sha256, delivery_id) != delivery_id:
            return Claim.REPLAYED
        self.bodies[body_sha256] = delivery_id
        self.digests[delivery_id] = body_sha256
        self.rows[delivery_id] = "received"
        return Claim.NEW

    def mark_queued(self, delivery_id: str, now: float) -> None:
        self.rows[delivery_id] = "queued"


@dataclass
class FakeEventQueue:
    sent: list[EventMessage] = field(default_factory=list)
    fail: bool = False

    def send_event(self, message: EventMessage) -> None:
        if self.fail:
            raise ConnectionError("SQS unreachable")
        self.sent.append(message)


@dataclass
class FakeBlobs:
    items: dict[str, bytes] = field(default_factory=dict)

    def put(self, key: str, data: bytes) -> None:
        self.items[key] = data

    def get(self, key: str) -> bytes:
        return self.items[key]


@dataclass
class FakeShadowLog:
    """The ShadowLog port: every decision kept, in the order recorded."""

    kept: list[ShadowDecision] = field(default_factory=list)

    def record(self, decisions: list[ShadowDecision]) -> None:
        self.kept += decisions

    def recent(self, upstream: str, limit: int, before: float | None = None) -> list[ShadowDecision]:
        found = [d for d in self.kept if before is None or d.received_at < before]
        return sorted(found, key=lambda d: -d.received_at)[:limit]

    def between(self, upstream: str, start: float, end: float) -> list[ShadowDecision]:
        return [d for d in self.kept if start <= d.received_at <= end]


def door(
    mode: str = "live",
    allowlist: AllowlistProvider | None = None,
    log: FakeShadowLog | None = None,
    metrics: RecordingMetrics | None = None,
    upstream: str = "pytorch/pytorch",
) -> Outbound:
    """The outbound door as a function builds it: the deployment's mode, each downstream's from the allowlist."""
    return Outbound(mode, allowlist, log, metrics or RecordingMetrics(), FakeClock(), upstream)


def permit(system: str = GITHUB, action: str = "dispatch", repo: str | None = None) -> Permit:
    """A live door's permit for one write a test makes itself (seeding a double, as an earlier attempt did)."""
    granted = door().permit(Write(system, action, repo, "pytorch/pytorch", "test"))
    assert granted is not None
    return granted


@dataclass
class StaticAllowlist:
    allowlist: Allowlist

    def current(self) -> Allowlist:
        return self.allowlist


@dataclass
class FakeDispatchQueue:
    sent: list[DispatchMessage] = field(default_factory=list)
    rescheduled: list[tuple[DispatchMessage, float]] = field(default_factory=list)
    dead: list[tuple[DispatchMessage, str]] = field(default_factory=list)

    def send_dispatches(self, messages: list[DispatchMessage]) -> None:
        self.sent.extend(messages)

    def reschedule(self, message: DispatchMessage, delay_s: float) -> None:
        self.rescheduled.append((message, delay_s))

    def dead_letter(self, message: DispatchMessage, reason: str) -> None:
        self.dead.append((message, reason))


@dataclass
class FakeState:
    """PlannerState and Ledger in one, like the DynamoDB table."""

    heads: dict[tuple[str, int], str] = field(default_factory=dict)
    head_updated_at: dict[tuple[str, int], str] = field(default_factory=dict)
    prs: dict[tuple[str, int], PrInfo] = field(default_factory=dict)
    commits: dict[str, float] = field(default_factory=dict)
    branch: dict[str, BranchCommit] = field(default_factory=dict)
    released: dict[tuple[int, str, str], str] = field(default_factory=dict)
    merged: dict[tuple[str, int], str] = field(default_factory=dict)
    ledger: dict[tuple[str, str], LedgerRow] = field(default_factory=dict)
    dispatched_claims: list[TicketClaims] = field(default_factory=list)

    def record_pr_head(
        self,
        upstream: str,
        pr: int,
        head_sha: str,
        updated_at: str,
        labels: tuple[str, ...] = (),
        base_sha: str = "",
        closed: bool = False,
    ) -> HeadRecord:
        if updated_at < self.head_updated_at.get((upstream, pr), ""):
            return HeadRecord(newest=False)  # an older event delivered late
        previous = self.heads.get((upstream, pr))
        self.heads[(upstream, pr)] = head_sha
        self.head_updated_at[(upstream, pr)] = updated_at
        self.prs[(upstream, pr)] = PrInfo(head_sha, base_sha, labels, closed)
        return HeadRecord(newest=True, replaced=previous if previous != head_sha else None)

    def record_commits(self, upstream: str, commits: list[BranchCommit]) -> None:
        self.commits.update((c.sha, c.committed_at) for c in commits)
        self.branch.update((c.sha, c) for c in commits)

    def commits_between(self, upstream: str, start: float, end: float) -> list[BranchCommit]:
        return sorted((c for c in self.branch.values() if start <= c.committed_at <= end), key=lambda c: c.order)

    def commit_times(self, upstream: str, shas: list[str]) -> dict[str, float]:
        return {sha: self.commits[sha] for sha in shas if sha in self.commits}

    def pr_info(self, upstream: str, pr: int) -> PrInfo | None:
        self.head_reads += 1
        head, info = self.heads.get((upstream, pr)), self.prs.get((upstream, pr))
        if head is None:
            return info
        return dataclasses.replace(info, head_sha=head) if info is not None else PrInfo(head)

    def mark_merged(self, upstream: str, pr: int, sha: str, now: float) -> None:
        self.merged[(upstream, pr)] = sha

    def merged_commit(self, upstream: str, pr: int) -> str | None:
        return self.merged.get((upstream, pr))

    def mark_released(self, upstream: str, pr: int, head_sha: str, repo: str, delivery_id: str, now: float) -> bool:
        key = (pr, head_sha, repo.lower())
        return self.released.setdefault(key, delivery_id) == delivery_id

    def get(self, delivery_id: str, repo: str) -> LedgerRow | None:
        key = (delivery_id, repo.lower())
        row = self.ledger.get(key)
        if row is None:
            return None
        return dataclasses.replace(row, unsettled=frozenset(self.unsettled.get(key, set())))

    owners: dict[tuple[str, str], str] = field(default_factory=dict)
    # Attempts that claimed and may have sent, as the table's string set.
    unsettled: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    claims: int = 0  # claims taken
    head_reads: int = 0  # pr_info calls (each a read of the PR's row)

    def claim(
        self,
        message: DispatchMessage,
        dispatch_id: str,
        now: float,
        lease_s: float,
        owner: str,
        repo_id: int,
        full_name: str,
        *,
        row: bool = False,
    ) -> LedgerClaim:
        key = (message.delivery_id, message.target_repo.lower())
        found = self.get(message.delivery_id, message.target_repo)
        final = (LedgerState.DISPATCHED, LedgerState.SUPERSEDED)
        if found is not None and (found.state in final or found.lease_until >= now):
            return LedgerClaim(False, found)  # the refusing row, as the table's ALL_OLD brings it
        # An update, as the table's: what an earlier attempt or the runs worker wrote (a bound run) stays.
        self.ledger[key] = LedgerRow(
            message.delivery_id, full_name, LedgerState.SENDING, dispatch_id, now + lease_s, repo_id=repo_id,
            run_id=found.run_id if found else None,
        )  # fmt: skip
        self.owners[key] = owner
        self.unsettled.setdefault(key, set()).add(owner)
        self.claims += 1
        return LedgerClaim(True, self.get(message.delivery_id, message.target_repo) if row else None)

    def mark_dispatched(
        self,
        message: DispatchMessage,
        claims: TicketClaims,
        now: float,
        build: BuildRef | None = None,
        run_id: str | None = None,
    ) -> None:
        self.ledger[(message.delivery_id, message.target_repo.lower())] = LedgerRow(
            message.delivery_id, claims.sub, LedgerState.DISPATCHED, claims.jti, 0.0, now, repo_id=claims.repo_id,
            ci=claims.ci, build_id=build.id if build else None, build_number=build.number if build else None,
            build_url=build.url if build else None, run_id=run_id,
        )  # fmt: skip
        self.dispatched_claims.append(claims)

    def mark(
        self,
        message: DispatchMessage,
        state: LedgerState,
        reason: str,
        now: float,
        owner: str = "",
        settled: bool = False,
    ) -> None:
        key = (message.delivery_id, message.target_repo.lower())
        row = self.ledger.get(key)
        if row is not None and (
            row.state is LedgerState.DISPATCHED or (row.lease_until >= now and self.owners.get(key) != owner)
        ):
            return  # as the table's condition: never undo a sent dispatch or another attempt's live claim
        if settled:
            self.unsettled.get(key, set()).discard(owner)
        did = row.dispatch_id if row else ""
        self.ledger[key] = LedgerRow(
            message.delivery_id, message.target_repo, state, did, 0.0, None, reason, run_id=row.run_id if row else None
        )

    def clear_start_watch(self, delivery_id: str, repo: str) -> None:
        return


@dataclass
class FakeGitHub:
    """Answers from a script: each call pops the next error for that repo, if any."""

    errors: dict[str, list[GitHubError]] = field(default_factory=dict)
    installed: set[str] = field(default_factory=set)
    sent: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)

    def installation_for(self, repo: str) -> int:
        if repo.lower() not in self.installed:
            raise NotInstalled(repo)
        return 7

    def repo_token(self, installation_id: int, repo: str) -> RepoToken:
        return RepoToken("ghs_fake", 1000 + len(repo), repo, 1e12)

    def forget_token(self, repo: str) -> None:
        self.forgotten.append(repo)

    def dispatch(
        self, repo: str, token: RepoToken, event_type: str, client_payload: dict[str, Any], *, permit: Permit
    ) -> None:
        require(permit, GITHUB, "dispatch", repo)
        queue = self.errors.get(repo.lower()) or []
        if queue:
            raise queue.pop(0)
        self.sent.append((repo, event_type, client_payload))


@dataclass
class FakePacer:
    waits: list[float] = field(default_factory=list)
    keys: list[int | str] = field(default_factory=list)
    reserved: list[bool] = field(default_factory=list)  # per call: asked to book the slot it names
    counts: list[int] = field(default_factory=list)  # per acquire_many: how many writes it asked for at once

    def acquire(self, key: int | str, now: float, reserve: bool = False) -> float:
        self.keys.append(key)
        self.reserved.append(reserve)
        return self.waits.pop(0) if self.waits else 0.0

    def acquire_many(self, key: int | str, now: float, count: int) -> tuple[int, float]:
        """All of them, or none while a wait is scripted (that wait)."""
        self.keys.append(key)
        self.counts.append(count)
        if self.waits and self.waits[0] > 0:
            return 0, self.waits.pop(0)
        if self.waits:
            self.waits.pop(0)
        return count, 0.0


@dataclass
class FakeBuilds:
    """Buildkite's create and list-by-meta_data. Scripted errors are popped per call kind ("create",
    "find"); `created_anyway` makes the next scripted create error happen after the build was created
    (a timeout or a 5xx after Buildkite did it)."""

    errors: dict[str, list[BuildkiteError]] = field(default_factory=dict)
    created_anyway: int = 0
    builds: list[tuple[str, str, NewBuild, BuildRef]] = field(default_factory=list)
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, organization/pipeline, detail)

    def create(self, organization: str, pipeline: str, build: NewBuild, *, permit: Permit) -> BuildRef:
        require(permit, BUILDKITE, "dispatch")
        self.calls.append(("create", f"{organization}/{pipeline}", build.meta_data[DISPATCH_META_KEY]))
        queue = self.errors.get("create") or []
        if queue and not self.created_anyway:
            raise queue.pop(0)
        number = 1 + sum(1 for org, pipe, _, _ in self.builds if (org, pipe) == (organization, pipeline))
        ref = BuildRef(
            f"0190a000-0000-4000-8000-{number:012d}",
            number,
            f"https://buildkite.com/{organization}/{pipeline}/builds/{number}",
        )
        self.builds.append((organization, pipeline, build, ref))
        if queue:
            self.created_anyway -= 1
            raise queue.pop(0)
        return ref

    def find(self, organization: str, pipeline: str, dispatch_id: str) -> list[BuildRef]:
        self.calls.append(("find", f"{organization}/{pipeline}", dispatch_id))
        queue = self.errors.get("find") or []
        if queue:
            raise queue.pop(0)
        return [
            ref
            for org, pipe, build, ref in self.builds
            if (org, pipe) == (organization, pipeline) and build.meta_data[DISPATCH_META_KEY] == dispatch_id
        ]


class FakeSigner:
    def sign(self, claims: TicketClaims) -> str:
        return f"ticket-for-{claims.sub}-{claims.jti}"


@dataclass
class FakeJobsByRepo:
    """JobsByRepo over a list of rows, recording each query (repository, since)."""

    rows: list[JobRecord] = field(default_factory=list)
    queries: list[tuple[str, float]] = field(default_factory=list)

    def jobs_of_repo(self, repo: str, since: float) -> list[JobRecord]:
        self.queries.append((repo, since))
        found = [r for r in self.rows if r.repo.lower() == repo.lower() and r.dispatched_at >= since]
        return sorted(found, key=lambda r: r.dispatched_at)


@dataclass
class FakeCommentStore:
    """The PR comment's row (and the PR's head) as the state table keeps them, with the same conditions."""

    prs: dict[int, PrInfo] = field(default_factory=dict)
    rows: dict[int, CommentRow] = field(default_factory=dict)

    def pr_info(self, upstream: str, pr: int) -> PrInfo | None:
        return self.prs.get(pr)

    def get_comment(self, upstream: str, pr: int) -> CommentRow:
        return self.rows.get(pr, CommentRow())

    def book_render(self, upstream: str, pr: int, ticket: str, now: float, due_at: float, stale_before: float) -> str:
        row = self.rows.get(pr, CommentRow())
        pending, since = (row.pending, row.pending_since or now) if row.pending else (ticket, now)
        if pending != ticket and since < stale_before and row.lock_until < now:
            pending, since = ticket, now  # the booked render was lost: take over
        self.rows[pr] = dataclasses.replace(row, pending=pending, pending_since=since, due_at=due_at)
        return pending

    def lock_comment(self, upstream: str, pr: int, ticket: str, version: int, now: float, lease_s: float) -> int | None:
        row = self.rows.get(pr, CommentRow())
        if row.version != version or row.pending != ticket or row.lock_until >= now:
            return None
        self.rows[pr] = dataclasses.replace(
            row, version=version + 1, lock_until=now + lease_s, pending_since=now, due_at=None
        )
        return version + 1

    def release_comment(self, upstream: str, pr: int, locked: int, now: float, posted: Posted | None = None) -> bool:
        row = self.rows[pr]
        if row.version != locked:
            return False
        self.rows[pr] = dataclasses.replace(
            row,
            version=locked + 1,
            lock_until=0.0,
            posted=posted if posted is not None else row.posted,
            searched=row.searched or posted is not None,
        )
        return True

    def end_render(self, upstream: str, pr: int, ticket: str, now: float, keep: bool = False) -> float | None:
        row = self.rows[pr]
        if row.pending != ticket:
            return None
        if row.due_at is not None:
            return row.due_at
        if keep:
            return now
        self.rows[pr] = dataclasses.replace(row, pending=None, pending_since=None)
        return None

    def drop_render(self, upstream: str, pr: int, ticket: str) -> None:
        row = self.rows[pr]
        if row.pending == ticket:
            self.rows[pr] = dataclasses.replace(row, pending=None, pending_since=None, due_at=None)


@dataclass
class FakeIssueComments:
    """A PR conversation; records every write. `errors` are raised by the next writes, in order."""

    comments: dict[int, IssueComment] = field(default_factory=dict)
    writes: list[tuple[str, int, str]] = field(default_factory=list)  # (create | update, comment id, body)
    errors: list[GitHubError] = field(default_factory=list)
    listed: int = 0
    next_id: int = 500

    def installation_for(self, upstream: str) -> int:
        return 1

    def _fail(self) -> None:
        if self.errors:
            raise self.errors.pop(0)

    def create_comment(self, upstream: str, pr: int, body: str, *, permit: Permit) -> int:
        require(permit, GITHUB)
        self._fail()
        self.next_id += 1
        self.comments[self.next_id] = IssueComment(self.next_id, body, True)
        self.writes.append(("create", self.next_id, body))
        return self.next_id

    def update_comment(self, upstream: str, comment_id: int, body: str, *, permit: Permit) -> None:
        require(permit, GITHUB, "comment")
        self._fail()
        if comment_id not in self.comments:
            raise GitHubRejected(404, "Not Found")
        self.comments[comment_id] = IssueComment(comment_id, body, self.comments[comment_id].ours)
        self.writes.append(("update", comment_id, body))

    def list_comments(self, upstream: str, pr: int) -> list[IssueComment]:
        self.listed += 1
        return [self.comments[k] for k in sorted(self.comments)]


@dataclass
class FakeJobsByHead:
    rows: list[JobRecord] = field(default_factory=list)

    def jobs_for_head(self, upstream: str, head_sha: str) -> list[JobRecord]:
        return [r for r in self.rows if r.head_sha == head_sha]


@dataclass
class FakeRerunMarks:
    marks: dict[tuple[str, str], str] = field(default_factory=dict)

    def rerun_state(self, dispatch_id: str, run_id: str) -> str | None:
        return self.marks.get((dispatch_id, run_id))


@dataclass
class FakeChecksQueue:
    sent: list[tuple[CheckSync, float]] = field(default_factory=list)
    dead: list[tuple[CheckSync, str]] = field(default_factory=list)
    sends: int = 0  # calls to send_checks (each an SQS call, however many messages)

    def send_checks(self, messages: list[CheckSync], delay_s: float = 0.0) -> None:
        self.sends += 1
        self.sent += [(m, delay_s) for m in messages]

    def dead_letter(self, message: CheckSync, reason: str) -> None:
        self.dead.append((message, reason))


@dataclass
class FakeHookDeliveries:
    """GitHub's delivery list and redeliveries. `errors` are raised by the next redeliveries, in order; every
    redelivery asked for is recorded by attempt id (`asked`), and `listed` records each run's `since`."""

    attempts: list[Attempt] = field(default_factory=list)
    errors: list[GitHubError] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)
    listed: list[float] = field(default_factory=list)
    truncated: bool = False
    incomplete: bool = False
    upstream: int | None = None

    def list_deliveries(self, since: float, max_pages: int) -> DeliveryListing:
        self.listed.append(since)
        found = [a for a in self.attempts if a.delivered_at >= since]
        return DeliveryListing(found, self.truncated, self.incomplete)

    def redeliver(self, delivery_id: int, *, permit: Permit) -> None:
        require(permit, GITHUB, "redelivery")
        if self.errors:
            raise self.errors.pop(0)
        self.asked.append(delivery_id)

    def upstream_id(self) -> int | None:
        return self.upstream


@dataclass
class _Ask:
    last_id: int
    asks: int
    state: str
    owner: str
    lease_until: float


@dataclass
class FakeRedeliveries:
    """The webhook's records (`states`: guid -> received/queued) and the reconciler's rows, with the DynamoDB
    adapter's rules: each failed attempt claimed once, at most `max_asks` attempts per event, then abandoned."""

    states: dict[str, str] = field(default_factory=dict)
    rows: dict[str, _Ask] = field(default_factory=dict)
    cursor: float | None = None

    def delivery_state(self, guid: str) -> str | None:
        return self.states.get(guid)

    def claim_redelivery(
        self, guid: str, attempt_id: int, owner: str, now: float, lease_s: float, max_asks: int
    ) -> RedeliveryClaim:
        row = self.rows.get(guid)
        live = row is not None and row.state == "asking" and row.lease_until >= now
        if row is None or (row.last_id != attempt_id and row.asks < max_asks and row.state != "abandoned" and not live):
            self.rows[guid] = _Ask(attempt_id, (row.asks if row else 0) + 1, "asking", owner, now + lease_s)
            return RedeliveryClaim.CLAIMED
        if row.state == "abandoned":
            return RedeliveryClaim.ABANDONED
        if row.last_id == attempt_id:
            if row.state in ("requested", "refused"):
                return RedeliveryClaim.ASKED
            if live:
                return RedeliveryClaim.BUSY
            row.owner, row.lease_until = owner, now + lease_s
            return RedeliveryClaim.CLAIMED
        if live:
            return RedeliveryClaim.BUSY
        row.state = "abandoned"
        return RedeliveryClaim.EXHAUSTED

    def finish_redelivery(self, guid: str, attempt_id: int, owner: str, status: str, now: float) -> None:
        row = self.rows[guid]
        if row.last_id == attempt_id and row.owner == owner:
            row.state, row.lease_until = status, 0.0

    def release_redelivery(self, guid: str, attempt_id: int, owner: str) -> None:
        row = self.rows[guid]
        if row.last_id == attempt_id and row.owner == owner:
            row.lease_until = 0.0

    def reconcile_cursor(self) -> float | None:
        return self.cursor

    def save_reconcile_cursor(self, at: float) -> None:
        self.cursor = at


@dataclass
class FakeCheckStore:
    """The CheckRunStore port: what was last written to each check run, with the row's version, and each head's pass
    row (booking, lock, booked dispatches), as crcr.adapters.check_runs keeps them."""

    rows: dict[tuple[str, str, str], tuple[Known | None, int]] = field(default_factory=dict)
    heads: dict[tuple[str, str], HeadSync] = field(default_factory=dict)

    def get_check(self, upstream: str, head_sha: str, name: str) -> tuple[Known | None, int]:
        return self.rows.get((upstream, head_sha, name), (None, 0))

    def checks_of_head(self, upstream: str, head_sha: str) -> dict[str, tuple[Known | None, int]]:
        return {name: row for (up, sha, name), row in self.rows.items() if (up, sha) == (upstream, head_sha)}

    def record_check(self, upstream: str, head_sha: str, name: str, known: Known, version: int, now: float) -> bool:
        key = (upstream, head_sha, name)
        if self.rows.get(key, (None, 0))[1] != version:
            return False
        self.rows[key] = (known, version + 1)
        return True

    def book_head(
        self, upstream: str, head_sha: str, ticket: str, now: float, due_at: float, stale_before: float, rows: set[str]
    ) -> str:
        row = self.heads.get((upstream, head_sha), HeadSync())
        pending, since, timer = row.pending or ticket, row.pending_since if row.pending else now, row.timer_at
        waiting = timer is not None and timer > due_at  # the pending pass waits for a later timer of its own
        if pending != ticket and ((since or 0.0) < stale_before or waiting) and row.lock_until < now:
            pending, since, timer = ticket, now, None  # the pending pass was lost, or is not due soon enough: take over
        self.heads[(upstream, head_sha)] = replace(
            row, pending=pending, pending_since=since, due_at=due_at, rows=row.rows | frozenset(rows), timer_at=timer
        )
        return pending

    def lock_head(
        self,
        upstream: str,
        head_sha: str,
        ticket: str | None,
        now: float,
        lease_s: float,
        due_by: float,
        booked_before: float,
    ) -> tuple[int | None, HeadSync]:
        row = self.heads.get((upstream, head_sha), HeadSync())
        if row.lock_until >= now:
            return None, row
        if ticket is not None:
            settled = row.due_at is None or row.due_at <= due_by or (row.pending_since or now) < booked_before
            if row.pending != ticket or not settled:
                return None, row
            self.heads[(upstream, head_sha)] = replace(
                row, lock_until=now + lease_s, version=row.version + 1, due_at=None, pending_since=now, timer_at=None
            )
        else:
            self.heads[(upstream, head_sha)] = replace(row, lock_until=now + lease_s, version=row.version + 1)
        return row.version + 1, row

    def finish_head(
        self,
        upstream: str,
        head_sha: str,
        ticket: str | None,
        locked: int,
        now: float,
        done: set[str],
        keep: bool,
        timer_at: float | None = None,
    ) -> float | None:
        row = self.heads.get((upstream, head_sha), HeadSync())
        if row.version != locked:
            return None
        row = replace(row, lock_until=0.0, rows=row.rows - frozenset(done))
        if ticket is not None and not keep and row.pending == ticket and row.due_at is None:
            row = replace(row, pending=None, pending_since=None)
        elif ticket is not None and timer_at is not None:
            row = replace(row, timer_at=timer_at)
        self.heads[(upstream, head_sha)] = row
        return row.due_at if ticket is not None and row.pending == ticket else None

    def drop_head(self, upstream: str, head_sha: str, ticket: str) -> None:
        row = self.heads.get((upstream, head_sha), HeadSync())
        if row.pending == ticket:
            self.heads[(upstream, head_sha)] = replace(
                row, pending=None, pending_since=None, due_at=None, timer_at=None
            )


@dataclass
class FakeJobs:
    """The ResultsStore port: job rows by dispatch, written with the version check the table makes."""

    rows: dict[tuple[str, str, int, str], JobRecord] = field(default_factory=dict)
    by_dispatch: dict[str, set[tuple[str, str, int, str]]] = field(default_factory=dict)  # the table's partition

    def get_job(self, dispatch_id: str, run_id: str, run_attempt: int, job_name: str) -> JobRecord | None:
        return self.rows.get((dispatch_id, str(run_id), run_attempt, job_name))

    def jobs_of_dispatch(self, dispatch_id: str) -> list[JobRecord]:
        return [self.rows[k] for k in sorted(self.by_dispatch.get(dispatch_id, ()))]

    def jobs_for_head(self, upstream: str, head_sha: str) -> list[JobRecord]:
        return [row for _, row in sorted(self.rows.items()) if (row.upstream, row.head_sha) == (upstream, head_sha)]

    def attempts_of_job(self, dispatch_id: str, run_id: str, job_name: str) -> list[JobRecord]:
        found = [self.rows.get((dispatch_id, run_id, attempt, job_name)) for attempt in range(1, 52)]
        return [replace(j, callback_payload="", fingerprint="") for j in found if j is not None]

    def put_job(self, record: JobRecord, expected_version: int | None) -> bool:
        current = self.rows.get((record.dispatch_id, record.run_id, record.run_attempt, record.job_name))
        if (current.version if current else None) != expected_version:
            return False
        self.record(record)
        return True

    def record(self, record: JobRecord) -> None:
        """The row as a test has it, whatever was there."""
        key = (record.dispatch_id, record.run_id, record.run_attempt, record.job_name)
        self.rows[key] = record
        self.by_dispatch.setdefault(record.dispatch_id, set()).add(key)


@dataclass
class FakeCheckRunApi:
    """The CheckRunApi port: GitHub's check runs by id, as last written, and every call in order."""

    installation: int = 1
    runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def installation_for(self, upstream: str) -> int:
        return self.installation

    def create_check_run(self, upstream: str, fields: dict[str, Any], *, permit: Permit) -> int:
        require(permit, GITHUB, "check_run")
        self.calls.append(("create", fields))
        run_id = 1000 + len(self.runs)
        self.runs[run_id] = dict(fields)
        return run_id

    def update_check_run(self, upstream: str, check_run_id: int, fields: dict[str, Any], *, permit: Permit) -> None:
        require(permit, GITHUB, "check_run")
        self.calls.append(("update", fields))
        self.runs[check_run_id] |= fields

    def by_name(self) -> dict[str, dict[str, Any]]:
        return {run["name"]: run for run in self.runs.values()}


@dataclass
class FakeGauge:
    """The BudgetGauge port: the installation's hourly window as a test sets it; `reads` counts the questions."""

    window: WindowLevel = field(default_factory=lambda: WindowLevel(0.0, 50))
    reads: int = 0

    def level(self, key: int | str, now: float) -> WindowLevel:
        self.reads += 1
        return self.window


class FakeResultsRows:
    """The results table's rows as the stream's new images left them (a row's newest version), for the repository
    page's newest job attempts (the NewestJobs port)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, int, str], JobRecord] = {}
        self.reads = 0  # attempts_of_job calls

    def record(self, jobs: list[JobRecord]) -> list[JobRecord]:
        for j in jobs:
            key = (j.dispatch_id, j.run_id, j.run_attempt, j.job_name)
            if key not in self.rows or self.rows[key].version <= j.version:
                self.rows[key] = j
        return jobs

    def newest_of_repo(self, repo: str, limit: int) -> list[JobRecord]:
        mine = [j for j in self.rows.values() if repo_key(j.repo) == repo_key(repo)]
        return sorted(mine, key=lambda j: j.dispatched_at, reverse=True)[:limit]

    def attempts_of_job(self, dispatch_id: str, run_id: str, job_name: str) -> list[JobRecord]:
        self.reads += 1
        return [j for (d, r, _, n), j in self.rows.items() if (d, r, n) == (dispatch_id, run_id, job_name)]

    def branch_results(self, repo: str, workflow_name: str, job_name: str, limit: int) -> list[JobRecord]:
        mine = [
            j
            for j in self.rows.values()
            if repo_key(j.repo) == repo_key(repo) and (j.workflow_name, j.job_name) == (workflow_name, job_name)
            if j.event_type in ("push", "nightly", "bisect") and j.pr is None  # the rows by_baseline holds
        ]
        return sorted(mine, key=lambda j: j.dispatched_at, reverse=True)[:limit]


class FakeRegressions:
    """The RegressionStore port: each job's regressions with a version, as the state table keeps them."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str, str, str], tuple[list[Tracked], int]] = {}
        self.writes = 0

    def job_regressions(self, upstream: str, repo: str, workflow_name: str, job_name: str) -> tuple[list[Tracked], int]:
        return self.jobs.get((upstream, repo_key(repo), workflow_name, job_name), ([], 0))

    def save_job_regressions(
        self, upstream: str, repo: str, workflow_name: str, job_name: str, kept: list[Tracked], version: int
    ) -> bool:
        key = (upstream, repo_key(repo), workflow_name, job_name)
        if self.jobs.get(key, ([], 0))[1] != version:
            return False
        self.writes += 1
        self.jobs[key] = (list(kept), version + 1)
        return True

    def regressions_of(self, upstream: str) -> list[Tracked]:
        found = [t for (u, *_), (kept, _) in self.jobs.items() if u == upstream for t in kept]
        return sorted(found, key=lambda t: t.opened_at)
