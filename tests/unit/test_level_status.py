"""Level status as PyTorch's HUD computes it, over a seeded 30-day history, and the demotion PR it leads to: opened
once, updated rather than duplicated, closed when the repository recovers, never for a silent one."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from crcr.adapters.allowlist_source import parse_allowlist
from crcr.app.levels import LEVEL_STATUS_DOC, LevelDeps, check_levels
from crcr.app.outbound import Permit
from crcr.app.ports.jobs import JobRecord
from crcr.app.ports.levels import Demotion, PullRef
from crcr.domain.ids import repo_key
from crcr.domain.level_status import duration_display, js_round, to_fixed
from tests.unit.fakes import FakeClock, RecordingMetrics, StaticAllowlist, door

DAY = 86_400.0
NOW = 1_800_000_000.0
ALLOWLIST = """\
# The relay's downstreams.
L1:
  - org/l1
L2:
  - org/promote
  - org/young
  - org/nightly:
      events: [nightly]
L3:
  npu:
    # Backend for NPUs.
    org/failing: [npu-oncall, "@npu-team/ci"]
    org/silent: [quiet]
  gpu:
    org/slow:
      oncalls: gpu-oncall
L4:
  - org/l4: l4-oncall
"""


def job(repo: str, n: int, *, days_ago: float, conclusion: str = "success", queue: float = 60.0,
        run: float = 600.0, pr: int | None = 1, level: int = 3) -> JobRecord:  # fmt: skip
    dispatched = NOW - days_ago * DAY
    return JobRecord(
        dispatch_id=f"{repo}-{n}", run_id=str(1000 + n), run_attempt=1, job_name="test", workflow_name="CI",
        state="completed", conclusion=conclusion, fingerprint="", url="", repo=repo, repo_id=1, level=level,
        delivery_id=f"d{n}", upstream="pytorch/pytorch", head_sha="a" * 40, pr=pr, device=None,
        dispatched_at=dispatched, started_at=dispatched + queue, completed_at=dispatched + queue + run,
        callback_payload="", event_type="pull_request" if pr else "nightly",
    )  # fmt: skip


def history() -> list[JobRecord]:
    jobs = [job("org/promote", i, days_ago=1 + i * 0.5, level=2) for i in range(20)]
    jobs += [job("org/young", i, days_ago=1 + i * 0.2, level=2) for i in range(10)]
    jobs += [job("org/nightly", i, days_ago=1 + i, pr=None, level=2) for i in range(5)]
    # 6 of 10 pass over the last week; the older failures are outside the 7-day window.
    jobs += [
        job("org/failing", i, days_ago=0.5 + i * 0.5, conclusion="success" if i < 6 else "failure") for i in range(10)
    ]
    jobs += [job("org/failing", 100 + i, days_ago=10 + i, conclusion="failure") for i in range(10)]
    jobs += [job("org/silent", i, days_ago=20 + i, conclusion="failure") for i in range(5)]
    jobs += [job("org/slow", i, days_ago=1 + i, queue=3600.0 + i, run=10_000.0) for i in range(5)]
    jobs += [job("org/l4", i, days_ago=1 + i * 0.3, level=4, queue=120.0, run=1800.0 + i) for i in range(8)]
    return jobs


@dataclass
class Jobs:
    rows: list[JobRecord]

    def jobs_of_repo(self, repo: str, since: float) -> list[JobRecord]:
        return [r for r in self.rows if r.repo.lower() == repo.lower() and r.dispatched_at >= since]


@dataclass
class Levels:
    first_seen: dict[str, float] = field(default_factory=dict)
    demotions: dict[str, Demotion] = field(default_factory=dict)
    dedupe: dict[str, tuple[str, float]] = field(default_factory=dict)
    closed: dict[str, float] = field(default_factory=dict)  # demotion PRs the relay closed, and when

    def dedupe_states(self) -> dict[str, tuple[str, float]]:
        return dict(self.dedupe)

    def set_dedupe(self, repo: str, state: str, now: float) -> None:
        self.dedupe[repo_key(repo)] = (state, now)

    def l2_since(self, levels: list[tuple[str, int]], now: float) -> dict[str, float]:
        for repo, level in levels:
            if level >= 2:
                self.first_seen.setdefault(repo_key(repo), now)
        return dict(self.first_seen)

    def open_demotions(self) -> dict[str, Demotion]:
        return dict(self.demotions)

    def set_demotion(self, repo: str, pr: int, since: float) -> None:
        self.demotions.setdefault(repo_key(repo), Demotion(repo, pr, since))

    def clear_demotion(self, repo: str, closed_at: float | None = None) -> None:
        self.demotions.pop(repo_key(repo), None)
        if closed_at is not None:
            self.closed[repo_key(repo)] = closed_at

    def cooling(self, now: float, within: float) -> set[str]:
        return {key for key, at in self.closed.items() if now - at < within}


@dataclass
class Docs:
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        return self.docs.get(key), str(id(self.docs.get(key))) if key in self.docs else None

    def put(self, key: str, doc: dict[str, Any], tag: str | None) -> bool:
        self.docs[key] = doc
        return True


@dataclass
class Pulls:
    """The allowlist's repository as the demotion PRs see it: files per ref, branches, PRs."""

    text: str
    repo: str = "pytorch/pytorch"
    path: str = ".github/allowlist.yml"
    base: str = "main"
    branches: dict[str, str] = field(default_factory=dict)  # branch -> text
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)

    def installation_for(self, repo: str) -> int:
        return 1

    def find_open(self, branch: str) -> PullRef | None:
        for number, pull in self.pulls.items():
            if pull["branch"] == branch and pull["state"] == "open":
                return PullRef(number, pull["body"], pull["title"])
        return None

    def base_sha(self) -> str:
        return "base-sha"

    def read_file(self, ref: str) -> tuple[str, str]:
        assert ref == "base-sha"
        return self.text, "blob-sha"

    def prepare_branch(self, branch: str, sha: str, *, permit: Permit) -> None:
        self.branches[branch] = self.text
        self.writes.append(f"branch {branch}")

    def write_file(self, branch: str, text: str, blob_sha: str, message: str, *, permit: Permit) -> None:
        self.branches[branch] = text
        self.writes.append(f"file {branch}")

    def open_pull(self, branch: str, title: str, body: str, labels: list[str], *, permit: Permit) -> int:
        number = 100 + len(self.pulls)
        self.pulls[number] = {"branch": branch, "title": title, "body": body, "state": "open", "labels": labels}
        self.writes.append(f"open {number}")
        return number

    def update_pull(self, number: int, title: str, body: str, *, permit: Permit) -> None:
        self.pulls[number] |= {"title": title, "body": body}
        self.writes.append(f"update {number}")

    def close_pull(self, number: int, comment: str, *, permit: Permit) -> None:
        self.pulls[number] |= {"state": "closed", "closing_comment": comment}
        self.writes.append(f"close {number}")


@pytest.fixture
def world() -> tuple[LevelDeps, Jobs, Levels, Docs, Pulls]:
    jobs, levels, docs, pulls = Jobs(history()), Levels(), Docs(), Pulls(ALLOWLIST)
    levels.first_seen = {"org/promote": NOW - 40 * DAY, "org/young": NOW - 10 * DAY}
    deps = LevelDeps(
        allowlist=StaticAllowlist(parse_allowlist(ALLOWLIST)), jobs=jobs, history=levels, demotions=levels, docs=docs,
        metrics=RecordingMetrics(), clock=FakeClock(NOW), parse=parse_allowlist, pulls=pulls, door=door(),
        hud_url="https://relay.example.com/hud", demotion_min_jobs=5,  # the seeded history's few jobs count
    )  # fmt: skip
    return deps, jobs, levels, docs, pulls


def expected_rows(repo: str, jobs: list[JobRecord], window_days: int, tenure: float | None) -> list[dict[str, Any]]:
    """The criteria computed here, independently, from the seeded jobs (as crcr_l3_summary and l3Readiness do)."""
    mine = [j for j in jobs if j.repo == repo and j.dispatched_at >= NOW - window_days * DAY and j.pr]
    if not mine:
        measured: dict[str, str] = {k: "\u2013" for k in ("e2e", "overrun", "queue", "timeout", "pass")}
        met: dict[str, bool | None] = dict.fromkeys(measured)
    else:
        e2e = sorted((j.started_at - j.dispatched_at) + (j.completed_at - j.started_at) for j in mine)  # type: ignore[operator]
        p50 = e2e[len(e2e) // 2]
        queue = statistics.mean(j.started_at - j.dispatched_at for j in mine)  # type: ignore[operator]
        passed = sum(j.conclusion == "success" for j in mine) / len(mine)
        overrun = sum((j.completed_at - j.started_at) > 3 * 3600 for j in mine) / len(mine)  # type: ignore[operator]
        measured = {
            "e2e": duration_display(js_round(p50)), "overrun": f"{overrun * 100:.1f}%",
            "queue": duration_display(js_round(queue)), "timeout": "0.0%", "pass": f"{passed * 100:.1f}%",
        }  # fmt: skip
        met = {"e2e": p50 < 3 * 3600, "overrun": overrun < 0.01, "queue": queue < 1800, "timeout": True,
               "pass": passed >= 0.9}  # fmt: skip
    rows = {
        "e2e": ("End-to-End Time (P50)", "< 3 h"), "overrun": ("Overrun Rate", "< 1%"),
        "queue": ("Avg Queue Time", "< 30 min"), "timeout": ("Timeout Rate", "< 1%"),
        "pass": ("Job Pass Rate", "≥ 90%"),
    }  # fmt: skip
    keys = ["e2e", "overrun", "queue", "timeout", "pass"] if window_days == 14 else ["e2e", "timeout", "pass"]
    out = [{"criterion": rows[k][0], "measured": measured[k], "target": rows[k][1], "met": met[k]} for k in keys]
    if window_days == 14:
        shown = "\u2013" if tenure is None else f"{tenure:.0f} days"
        out.insert(0, {"criterion": "Time at L2", "measured": shown, "target": "≥ 1 month",
                       "met": None if tenure is None else tenure >= 30})  # fmt: skip
    return out


def test_level_status_matches_figures_computed_here(world: tuple[LevelDeps, Jobs, Levels, Docs, Pulls]) -> None:
    deps, jobs, _, docs, _ = world
    check_levels(deps)
    doc = docs.docs["level-status.json"]
    repos = {r["repo"]: r for r in doc["repos"]}
    assert list(repos) == ["org/nightly", "org/promote", "org/young", "org/failing", "org/silent", "org/slow", "org/l4"]
    assert "org/l1" not in repos  # L1 records no results
    expected_change = {
        "org/promote": "promote", "org/young": None, "org/nightly": None, "org/failing": "demote", "org/silent": None,
        "org/slow": "demote", "org/l4": None,
    }  # fmt: skip
    assert {repo: r["change"] for repo, r in repos.items()} == expected_change
    assert {repo: r["noData"] for repo, r in repos.items() if r["noData"]} == {"org/nightly": True, "org/silent": True}
    tenure = {"org/promote": 40.0, "org/young": 10.0, "org/nightly": 0.0}
    for repo, status in repos.items():
        window = 14 if status["level"] == "L2" else 7
        assert status["windowDays"] == window
        assert status["criteria"] == expected_rows(repo, jobs.rows, window, tenure.get(repo)), repo
    assert repos["org/failing"]["criteria"][2] == {"criterion": "Job Pass Rate", "measured": "60.0%",
                                                   "target": "≥ 90%", "met": False}  # fmt: skip
    assert repos["org/slow"]["figures"]["max_exec_time_s"] == 10_000.0


def test_javascripts_rounding_is_kept() -> None:
    assert to_fixed(0.25, 1) == "0.3" and to_fixed(0.35, 1) == "0.3"  # the binary value of 0.35 is below .35
    assert to_fixed(2.5, 0) == "3" and js_round(-2.5) == -2.0
    assert duration_display(5400) == "1.5h" and duration_display(59.96) == "60.0s" and duration_display(90000) == "1.0d"


def test_a_demotion_pr_is_opened_once_updated_and_closed_on_recovery(
    world: tuple[LevelDeps, Jobs, Levels, Docs, Pulls],
) -> None:
    deps, jobs, levels, _, pulls = world
    check_levels(deps)
    opened = {pull["branch"]: (number, pull) for number, pull in pulls.pulls.items()}
    assert set(opened) == {"crcr-demotion/org/failing", "crcr-demotion/org/slow"}  # never the silent one
    number, pull = opened["crcr-demotion/org/failing"]
    assert pull["title"] == "[crcr] Demote org/failing from L3 to L2" and pull["labels"] == ["crcr-auto-demotion"]
    assert "| Job Pass Rate | 60.0% | ≥ 90% |" in pull["body"] and "@npu-oncall @npu-team/ci" in pull["body"]
    assert "https://relay.example.com/hud/repo/org/failing" in pull["body"]
    edited = parse_allowlist(pulls.branches["crcr-demotion/org/failing"])
    moved = edited.get("org/failing")
    assert moved is not None and moved.level.name == "L2" and moved.device is None
    assert moved.oncalls == ("npu-oncall", "@npu-team/ci")
    assert "    # Backend for NPUs.\n" not in pulls.branches["crcr-demotion/org/failing"]  # its comment moved with it
    assert levels.demotions["org/failing"] == Demotion("org/failing", number, NOW)

    # The next run, the same figures: no second PR, no write at all.
    before = list(pulls.writes)
    check_levels(deps)
    assert pulls.writes == before and len(pulls.pulls) == 2

    # Worse figures: the same PR is updated.
    jobs.rows.append(job("org/failing", 50, days_ago=0.1, conclusion="failure"))
    check_levels(deps)
    assert pulls.writes[len(before) :] == [f"update {number}"]
    assert "| Job Pass Rate | 54.5% | ≥ 90% |" in pulls.pulls[number]["body"]

    # It recovers: the PR is closed, its demotion ends (its check runs come back).
    jobs.rows += [job("org/failing", 200 + i, days_ago=0.05) for i in range(60)]
    check_levels(deps)
    assert (
        pulls.pulls[number]["state"] == "closed"
        and "back within its L3 targets" in pulls.pulls[number]["closing_comment"]
    )
    assert "org/failing" not in levels.demotions and "org/slow" in levels.demotions


def test_no_demotion_pr_on_few_jobs_nor_within_a_day_of_the_relay_closing_one(
    world: tuple[LevelDeps, Jobs, Levels, Docs, Pulls],
) -> None:
    deps, _, levels, _, pulls = world
    few = replace(deps, demotion_min_jobs=11)  # org/failing has 10 finished jobs in its window, org/slow 5
    check_levels(few)
    assert pulls.pulls == {} and levels.demotions == {}
    status = few.docs.get(LEVEL_STATUS_DOC)[0] or {}  # the status still says so
    assert {r["repo"]: r["change"] for r in status["repos"]}["org/failing"] == "demote"
    # The relay closed org/failing's PR an hour ago (it had recovered): however its figures swing now, no new PR
    # until the cool-down is over; org/slow, closed two days ago, gets its PR.
    levels.closed = {"org/failing": NOW - 3600, "org/slow": NOW - 2 * DAY}
    check_levels(deps)
    assert [p["branch"] for p in pulls.pulls.values()] == ["crcr-demotion/org/slow"]
    deps.clock.t = NOW + DAY  # type: ignore[attr-defined]
    check_levels(deps)
    assert sorted(p["branch"] for p in pulls.pulls.values()) == ["crcr-demotion/org/failing", "crcr-demotion/org/slow"]


def test_a_pr_someone_closed_ends_the_demotion_and_a_new_one_follows_while_it_still_fails(
    world: tuple[LevelDeps, Jobs, Levels, Docs, Pulls],
) -> None:
    deps, _, levels, _, pulls = world
    check_levels(deps)
    number = next(n for n, p in pulls.pulls.items() if p["branch"] == "crcr-demotion/org/slow")
    pulls.pulls[number]["state"] = "closed"
    check_levels(deps)
    reopened = [n for n, p in pulls.pulls.items() if p["branch"] == "crcr-demotion/org/slow" and p["state"] == "open"]
    assert len(reopened) == 1 and reopened[0] != number
    assert levels.demotions["org/slow"].pr == reopened[0]


def test_without_the_allowlist_on_github_the_status_is_still_published(
    world: tuple[LevelDeps, Jobs, Levels, Docs, Pulls],
) -> None:
    deps, _, _, docs, pulls = world
    from dataclasses import replace  # noqa: PLC0415

    outcome = check_levels(replace(deps, pulls=None))
    assert outcome.actions == [] and pulls.pulls == {} and "level-status.json" in docs.docs


@dataclass
class Titles:
    titles: dict[tuple[str, str], str]
    asked: list[tuple[str, str]] = field(default_factory=list)

    def find(self, repo: str, dispatch_id: str, since: float) -> str | None:
        raise AssertionError("the level check only reads titles")

    def title(self, repo: str, run_id: str) -> str:
        self.asked.append((repo, run_id))
        return self.titles.get((repo, run_id), "CI")


def test_which_downstreams_could_be_dispatched_twice_is_looked_at_once_a_day(
    world: tuple[LevelDeps, Jobs, Levels, Docs, Pulls],
) -> None:
    from dataclasses import replace  # noqa: PLC0415

    deps, jobs, _, docs, _ = world
    latest = max((j for j in jobs.rows if j.repo == "org/failing"), key=lambda j: j.dispatched_at)
    titles = Titles({("org/failing", latest.run_id): f"crcr pull_request {latest.dispatch_id}"})
    check_levels(replace(deps, runs=titles))
    figures = {r["repo"]: r["figures"]["dispatch_dedupe"] for r in docs.docs["level-status.json"]["repos"]}
    assert figures["org/failing"] == "run-name"  # its run-name carries the dispatch id
    assert figures["org/slow"] == "none"  # a lost answer may start a second run there
    assert figures["org/silent"] == "unknown"  # nothing dispatched in the window to look at
    asked = len(titles.asked)
    check_levels(replace(deps, runs=titles))
    assert len(titles.asked) == asked  # known for a day: not asked again
