"""The world the inbound door's tests drive every channel in: downstreams dispatched to, their allowlist entries, real
OIDC issuers and ticket keys, and recording fakes of the ports; one driver per channel that speaks of a run."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from crcr.adapters.oidc import IssuerRouter, OidcVerifier
from crcr.adapters.tickets import Ed25519Tickets
from crcr.app.callback import CallbackDeps, Reply, handle_callback
from crcr.app.ingest import IngestDeps, Outcome, ingest
from crcr.app.ports.buildkite import BuildkiteBuild, BuildkiteJob
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.ledger import LedgerRow, LedgerState
from crcr.app.ports.runs import BoundRun, GitHubJob, GitHubRun, RunSearch, Search
from crcr.app.runs import Recording, RunsDeps, observe_run
from crcr.app.sweep import BuildkiteRecord, GitHubRecord, SweepDeps, sweep
from crcr.contracts.messages import RunMessage
from crcr.domain.allowlist import Allowlist, Entry, RepoSettings
from crcr.domain.errors import CrcrError
from crcr.domain.identity import workflow_ref
from crcr.domain.ids import repo_key
from crcr.domain.levels import Level
from crcr.domain.providers import Providers, build_providers
from crcr.domain.signature import sign
from crcr.domain.ticket import TicketClaims
from tests.doubles.buildkite_oidc import BuildkiteOidc
from tests.doubles.oidc_issuer import OidcIssuer
from tests.unit.fakes import FakeBlobs, FakeClock, FakeDeliveries, FakeEventQueue, FakeJobs, RecordingMetrics

UPSTREAM, BACKEND, OTHER, BK, BK_OTHER = "pytorch/pytorch", "org/backend", "org/other", "org/bk", "org/bk-other"
IDS = {BACKEND: 5001, OTHER: 5002}  # GitHub's ids of the names, at dispatch and now
INSTALLATIONS = {BACKEND: 101, OTHER: 102}
DISPATCHES = {BACKEND: "0123456789abcdef" * 2, OTHER: "fedcba9876543210" * 2, BK: "00112233445566778899aabbccddeeff"}
PINNED_WORKFLOW = f"{BACKEND}/.github/workflows/ci.yml@refs/heads/main"
HEAD, RUN_ID, URL = "ab" * 20, 4242, "https://github.com/org/backend/actions/runs/4242"
BUILD, OTHER_BUILD = "019583d7-3737-4e38-af67-f7cc356bd580", "019583d7-0000-4e38-af67-f7cc356bd580"
ORG, PIPELINE, OTHER_PIPELINE = (f"018b5ec5-c236-4037-ba08-d8a5d29bcd{n:02d}" for n in range(3))
# org/backend pins its owner and its workflow, not its id: GitHub's id of the name when dispatched binds it.
ALLOWLIST = Allowlist(
    (
        Entry(BACKEND, Level.L2, settings=RepoSettings(repository_owner_id=77, workflows=(PINNED_WORKFLOW,))),
        Entry(OTHER, Level.L2),
        Entry(BK, Level.L2),
        Entry(BK_OTHER, Level.L2),
    )
)
PROVIDERS = build_providers(
    {"providers": {"buildkite": {"repo_map": {f"{ORG}/{PIPELINE}": BK, f"{ORG}/{OTHER_PIPELINE}": BK_OTHER}}}}
)


@dataclass(frozen=True)
class Run:
    """Who ran the run a channel speaks of: the genuine downstream's, unless a mismatch changes one fact."""

    repo: str = BACKEND
    repo_id: int = 5001
    owner_id: int = 77
    path: str = ".github/workflows/ci.yml"
    head_repo: str = BACKEND
    head_repo_id: int = 5001
    installation: int = 101
    dispatch_of: str = BACKEND  # whose dispatch its title or ticket names
    pipeline: str = PIPELINE  # Buildkite: the pipeline, and the build of it
    build_number: int = 1514
    build_id: str = BUILD

    @property
    def workflow(self) -> str | None:
        return workflow_ref(self.repo, self.path, "main")


GENUINE = Run()
MISMATCHES = {
    # A repository deleted and created again under the name (GitHub gives it a new id), which installs the App.
    "other_repository_id": Run(repo_id=6001, head_repo_id=6001),
    "other_owner": Run(owner_id=78),
    "workflow_outside_pin": Run(path=".github/workflows/release.yml"),
    # A fork's code (GitHub: another head repository; Buildkite: a fork's build of the pipeline is another build).
    "fork": Run(head_repo="mallory/backend", head_repo_id=7001, build_number=1515, build_id=OTHER_BUILD),
    "other_installation": Run(installation=202),
    # Another allowlisted downstream's own run, titled (or ticketed) with org/backend's dispatch.
    "other_repository_title": Run(
        repo=OTHER, repo_id=5002, head_repo=OTHER, head_repo_id=5002, installation=102, pipeline=OTHER_PIPELINE
    ),
}


@dataclass
class Ledger:
    """The ledger's rows (by dispatch id) as every channel reads them, and the start watches the sweeper keeps."""

    rows: dict[str, LedgerRow]
    rewatched: list[str] = field(default_factory=list)

    def get(self, delivery_id: str, repo: str) -> LedgerRow | None:
        found = (r for r in self.rows.values() if (r.delivery_id, repo_key(r.repo)) == (delivery_id, repo_key(repo)))
        return next(found, None)

    def by_dispatch(self, dispatch_id: str) -> LedgerRow | None:
        return self.rows.get(dispatch_id)

    def clear_start_watch(self, delivery_id: str, repo: str) -> None:
        row = self.get(delivery_id, repo)
        if row is not None:
            self.rows[row.dispatch_id] = replace(row, start_watched=False)

    def note_run(self, delivery_id: str, repo: str, run_id: str) -> None: ...

    def due_starts(self, now: float, limit: int = 100) -> list[LedgerRow]:
        return [r for r in self.rows.values() if r.start_watched][:limit]

    def rewatch_start(self, delivery_id: str, repo: str, until: float) -> None:
        self.rewatched.append(repo)
        self.clear_start_watch(delivery_id, repo)


@dataclass
class Runs:
    """The RunStore port: bound runs, and each attempt's jobs listing claimed once."""

    bound_runs: dict[tuple[str, str], BoundRun] = field(default_factory=dict)

    def bound(self, repo: str, run_id: str) -> BoundRun | None:
        return self.bound_runs.get((repo_key(repo), run_id))

    def record(self, run: BoundRun, now: float, watch_until: float | None) -> bool:
        current = self.bound(run.repo, run.run_id)
        if current is not None and current.progress >= run.progress:
            return False
        kept = current.reconciled if current else frozenset()
        self.bound_runs[(repo_key(run.repo), run.run_id)] = replace(run, reconciled=kept)
        return True

    def claim_reconcile(self, repo: str, run_id: str, attempt: int, owner: str, now: float, lease_s: float) -> bool:
        run = self.bound(repo, run_id)
        return run is not None and attempt not in run.reconciled

    def reconciled(self, repo: str, run_id: str, attempt: int, owner: str) -> None:
        run = self.bound_runs[(repo_key(repo), run_id)]
        self.bound_runs[(repo_key(repo), run_id)] = replace(run, reconciled=run.reconciled | {attempt})

    def release(self, repo: str, run_id: str, owner: str) -> None: ...
    def due_runs(self, now: float, limit: int = 100) -> list[BoundRun]:
        return []

    def watch(self, repo: str, run_id: str, until: float) -> None: ...


@dataclass
class GitHub:
    """GitHub's Actions API as the runs worker and the sweeper read it: its answer about the run is `said`'s."""

    said: Run = GENUINE
    asked: list[str] = field(default_factory=list)

    def installation_for(self, repo: str) -> int:
        self.asked.append(f"installation {repo}")
        return INSTALLATIONS[repo]

    def run(self, repo: str, run_id: str) -> GitHubRun | None:
        s = self.said
        return GitHubRun(
            run_id, 1, "completed", "success", "https://github.com/run", "CI", s.repo, s.repo_id, s.owner_id,
            s.workflow, s.head_repo_id,
        )  # fmt: skip

    def run_jobs(self, repo: str, run_id: str, attempt: int) -> list[GitHubJob]:
        self.asked.append(f"jobs {repo}")
        now = time.time()
        return [GitHubJob(900, "build", "completed", "success", now - 60, now, "https://github.com/job")]

    def search(self, repo: str, dispatch_id: str, since: float) -> RunSearch:
        return RunSearch(Search.FOUND, str(RUN_ID))


@dataclass
class Builds:
    """Buildkite's answer about a build: `said`'s build, finished, one job passed."""

    said: Run = GENUINE

    def build(self, organization: str, pipeline: str, number: int) -> BuildkiteBuild | None:
        now = time.time()
        job = BuildkiteJob("0184990a-477b-4fa8-9968-496074483cee", "test", "passed", "success", now - 60, now, "u")
        return BuildkiteBuild("passed", True, (job,), self.said.build_id, self.said.build_number)


class Jobs(FakeJobs):
    """The results table as the sweeper watches it too."""

    def due_runs(self, now: float, limit: int = 100) -> list[JobRecord]:
        return []

    def has_jobs(self, dispatch_id: str) -> bool:
        return bool(self.by_dispatch.get(dispatch_id))


class Anything:
    """Ports that answer the same every time: the allowlist, no rate limit, every HUD key free, every commit the
    upstream's, GitHub's id of each name."""

    def hit(self, key: str, now: float) -> float:
        return 0.0

    def claim(self, dispatch_id: str, hud_key: str | None, owner: str, now: float, max_jobs: int) -> str | None:
        return None

    def exists(self, sha: str) -> bool:
        return True

    def repo_id(self, repo: str) -> int:
        return IDS[repo]

    def current(self) -> Allowlist:
        return ALLOWLIST


class Map:
    def current(self) -> Providers:
        return PROVIDERS


@dataclass
class World:
    """One downstream dispatched to (each of org/backend, org/other and the Buildkite org/bk), and what was done."""

    oidc: OidcIssuer
    buildkite_oidc: BuildkiteOidc
    tickets: Ed25519Tickets
    clock: FakeClock = field(default_factory=lambda: FakeClock(time.time()))
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)
    jobs: Jobs = field(default_factory=Jobs)
    runs: Runs = field(default_factory=Runs)
    github: GitHub = field(default_factory=GitHub)
    builds: Builds = field(default_factory=Builds)
    queued: list[RunMessage] = field(default_factory=list)
    ledger: Ledger = field(init=False)

    def __post_init__(self) -> None:
        now = self.clock.now()

        def row(repo: str, **kw: Any) -> LedgerRow:
            return LedgerRow(
                "d-1", repo, LedgerState.DISPATCHED, DISPATCHES[repo], dispatched_at=now - 10, repo_id=IDS.get(repo),
                upstream=UPSTREAM, head_sha=HEAD, pr=7, level=2, event_type="pull_request", **kw,
            )  # fmt: skip

        bk = {"ci": "buildkite", "build_id": BUILD, "build_number": 1514, "build_pipeline": "org/pipe"}
        self.ledger = Ledger({DISPATCHES[r]: row(r, **(bk if r == BK else {})) for r in (BACKEND, OTHER, BK)})

    def ticket(self, repo: str) -> str:
        row, now = self.ledger.rows[DISPATCHES[repo]], int(self.clock.now())
        claims = TicketClaims(
            sub=repo, repo_id=row.repo_id or 0, delivery_id="d-1", upstream=UPSTREAM, pr=7, head_sha=HEAD, level=2,
            iat=now, exp=now + 3600, jti=row.dispatch_id, ci=row.ci,
        )  # fmt: skip
        return self.tickets.sign(claims)

    def recorded(self) -> list[str]:
        """The jobs recorded from a downstream's word (a report, or GitHub's or Buildkite's record of its run)."""
        return sorted(r.job_name for r in self.jobs.rows.values() if r.job_name and r.state != "timed_out")

    # -- the deps of each use case, as crcr.composition builds them, on the fakes ----------------------------------
    def callback_deps(self) -> CallbackDeps:
        verifiers = {"github": OidcVerifier(self.oidc.url, "crcr", time.time)}
        verifiers["buildkite"] = OidcVerifier(self.buildkite_oidc.url, "crcr", time.time)
        anything = Anything()
        return CallbackDeps(
            IssuerRouter(verifiers), self.tickets, self.ledger, anything, self.jobs, anything, anything, self.metrics,
            self.clock, upstream=UPSTREAM, commits=anything, providers=Map(),
        )  # fmt: skip

    def runs_deps(self) -> RunsDeps:
        return RunsDeps(
            self.ledger, self.runs, self.github, self.jobs, Anything(), self.metrics, self.clock, Anything()
        )  # fmt: skip

    def sweep_deps(self) -> SweepDeps:
        recording = Recording(self.jobs, Anything(), self.metrics, self.clock)
        return SweepDeps(
            self.ledger,
            self.jobs,
            self.metrics,
            self.clock,
            github=GitHubRecord(self.runs_deps(), self.github, start_timeout_s=3600, run_create_timeout_s=600),
            buildkite=BuildkiteRecord(self.builds, recording, 3600, 43200, Anything()),
        )

    def ingest_deps(self) -> IngestDeps:
        world = self

        class Queue:
            def send_run(self, message: RunMessage, delay_s: float = 0.0) -> None:
                world.queued.append(message)

        return IngestDeps(
            (b"k",), UPSTREAM, FakeDeliveries(), FakeEventQueue(), FakeBlobs(), self.metrics, self.clock, 1_000_000,
            200_000, runs=Queue(), bound_runs=self.runs, allowlist=Anything(),
        )  # fmt: skip


def refusal(act: Callable[[], object]) -> str | None:
    """None when the channel took what it was told; else the field its refusal names."""
    try:
        act()
    except CrcrError as exc:
        return exc.field or exc.reason
    return None


# -- one driver per channel: what the channel is told about `run`, then what it did -----------------------------
def callback(w: World, run: Run) -> str | None:
    """A GitHub Actions job of `run` reports on the dispatch its ticket names (crcr.app.callback)."""
    body = {"schema_version": 1, "ticket": w.ticket(run.dispatch_of), "status": "in_progress", "workflow_name": "CI"}
    body |= {"job_name": "build", "run_id": str(RUN_ID), "run_attempt": 1, "url": "https://github.com/run"}
    token = w.oidc.token(
        repository=run.repo, repository_id=run.repo_id, repository_owner_id=run.owner_id,
        job_workflow_ref=run.workflow, run_id=RUN_ID, lifetime=600,
    )  # fmt: skip
    return refusal(lambda: _recorded(handle_callback(json.dumps(body).encode(), f"Bearer {token}", w.callback_deps())))


def scheduled(w: World, run: Run) -> str | None:
    """A nightly run of `run` reports on an upstream commit, no dispatch named (crcr.app.callback)."""
    body = {"schema_version": 1, "scheduled": True, "head_sha": HEAD, "status": "completed", "conclusion": "success"}
    body |= {"workflow_name": "Nightly", "job_name": "build", "run_id": str(RUN_ID), "run_attempt": 1, "url": URL}
    token = w.oidc.token(
        repository=run.repo, repository_id=run.repo_id, repository_owner_id=run.owner_id,
        job_workflow_ref=run.workflow, run_id=RUN_ID, event_name="schedule", lifetime=600,
    )  # fmt: skip
    return refusal(lambda: _recorded(handle_callback(json.dumps(body).encode(), f"Bearer {token}", w.callback_deps())))


def run_event(w: World, run: Run) -> str | None:
    """GitHub tells the App `run` completed (`workflow_run`): the webhook, then the runs worker (crcr.app.ingest,
    crcr.app.runs). Dropped: the metric's reason, where it was dropped."""
    head = {"id": run.head_repo_id, "full_name": run.head_repo, "owner": {"id": run.owner_id}}
    doc = {
        "action": "completed",
        "workflow_run": {
            "id": RUN_ID, "name": "CI", "display_title": f"crcr pull_request {DISPATCHES[run.dispatch_of]}",
            "event": "repository_dispatch", "status": "completed", "conclusion": "success", "run_attempt": 1,
            "html_url": "https://github.com/run", "path": run.path, "head_branch": "main", "head_repository": head,
        },
        "repository": {"id": run.repo_id, "full_name": run.repo, "owner": {"id": run.owner_id}},
        "installation": {"id": run.installation},
    }  # fmt: skip
    body = json.dumps(doc).encode()
    headers = {"x-github-event": "workflow_run", "x-github-delivery": "d-run", "x-hub-signature-256": sign(b"k", body)}
    if ingest(body, headers, w.ingest_deps()).outcome is not Outcome.ACCEPTED:
        return "dropped at the webhook"
    [message] = w.queued
    w.clock.t += 60  # past the settle time the completion waits in the queue
    return None if observe_run(message, w.runs_deps()) == "reconciled" else "not bound"


def run_read(w: World, run: Run) -> str | None:
    """The sweeper finds the dispatch's run by its title and reads it from GitHub, whose answer is `run`'s
    (crcr.app.sweep)."""
    w.ledger.rows[DISPATCHES[BACKEND]] = replace(w.ledger.rows[DISPATCHES[BACKEND]], start_watched=True)
    w.github.said = run
    summary = sweep(w.sweep_deps())
    return None if summary.runs_found else "not bound"


def buildkite_callback(w: World, run: Run) -> str | None:
    """A Buildkite job of `run`'s pipeline and build reports on the dispatch its ticket names (crcr.app.callback)."""
    body = {"schema_version": 1, "ticket": w.ticket(BK if run.dispatch_of == BACKEND else run.dispatch_of)}
    body |= {"status": "in_progress", "workflow_name": "ci", "job_name": "test", "run_id": run.build_id}
    body |= {"run_attempt": 1, "url": "https://buildkite.com/build"}
    token = w.buildkite_oidc.mint(pipeline_id=run.pipeline, build_number=run.build_number)
    return refusal(lambda: _recorded(handle_callback(json.dumps(body).encode(), f"Bearer {token}", w.callback_deps())))


def buildkite_scheduled(w: World, run: Run) -> str | None:
    """A Buildkite build of `run`'s pipeline reports as a nightly run (crcr.app.callback); a fork's build of the
    pipeline is started by a webhook (its pull request)."""
    body = {"schema_version": 1, "scheduled": True, "head_sha": HEAD, "status": "completed", "conclusion": "success"}
    body |= {"workflow_name": "nightly", "job_name": "test", "run_id": run.build_id, "run_attempt": 1, "url": URL}
    source = "schedule" if run.build_id == BUILD else "webhook"
    token = w.buildkite_oidc.mint(
        pipeline_id=run.pipeline, build_number=run.build_number, build_id=run.build_id, build_source=source
    )
    return refusal(lambda: _recorded(handle_callback(json.dumps(body).encode(), f"Bearer {token}", w.callback_deps())))


def build_read(w: World, run: Run) -> str | None:
    """The sweeper reads the build the relay created for its dispatch; Buildkite's answer is `run`'s build
    (crcr.app.sweep)."""
    w.ledger.rows[DISPATCHES[BK]] = replace(w.ledger.rows[DISPATCHES[BK]], start_watched=True)
    w.builds.said = run
    sweep(w.sweep_deps())
    return None if w.recorded() else "not read"


def _recorded(reply: Reply) -> None:
    assert reply is Reply.RECORDED, reply


def ticket_keys() -> Ed25519Tickets:
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return Ed25519Tickets(pem.decode())
