"""Repository health: the figures from job attempts, the verdict and its reasons, thresholds, the use case."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from crcr.app.health import HealthDeps, health_report, page_health
from crcr.app.ports.jobs import JobRecord
from crcr.domain.allowlist import build_allowlist
from crcr.domain.health import (
    DAY_S,
    HealthConfigError,
    HealthPolicy,
    LevelThresholds,
    RepoHealth,
    Sample,
    Verdict,
    assess,
    measure,
    parse_policy,
    quantile_exact,
    spread,
)
from crcr.domain.levels import Level
from tests.unit.fakes import FakeClock, FakeJobsByRepo, StaticAllowlist

L3_DEFAULTS = HealthPolicy().thresholds(Level.L3)


def job(
    name: str,
    conclusion: str | None = "success",
    *,
    state: str = "completed",
    dispatch: str = "d1",
    run: int = 1,
    attempt: int = 1,
    pr: int | None = 5,
    dispatched: float = 0.0,
    started: float | None = 60.0,
    completed: float | None = 600.0,
) -> Sample:
    return Sample(dispatch, str(run), attempt, name, state, conclusion, pr, dispatched, started, completed, "CI")


def passing(n: int, **kw: Any) -> list[Sample]:
    return [job(f"pass-{i}", "success", **kw) for i in range(n)]


def failing(n: int, **kw: Any) -> list[Sample]:
    return [job(f"fail-{i}", "failure", **kw) for i in range(n)]


def never_started(dispatch: str) -> Sample:
    """The sweeper's row for a dispatch no job reported on."""
    return job("", "timed_out", state="timed_out", dispatch=dispatch, run=0, attempt=0, started=None, completed=3600.0)


def judged(level: Level, samples: list[Sample], min_jobs: int = 1, policy: HealthPolicy | None = None) -> Any:
    thresholds = (policy or HealthPolicy()).thresholds(level)
    return assess("org/backend", level, samples, thresholds, min_jobs, 14)


# -- defaults ------------------------------------------------------------------------------------------


def test_defaults_are_pytorchs_l3_readiness_criteria() -> None:
    policy = HealthPolicy()
    t = policy.thresholds(Level.L3)
    assert (t.pass_rate, t.timeout_rate, t.avg_queue_s, t.p50_end_to_end_s, t.max_execution_s) == (
        0.90,
        0.01,
        30 * 60,
        3 * 3600,
        3 * 3600,
    )
    assert (policy.window_days, policy.min_jobs) == (14, 10)
    assert parse_policy(None) == parse_policy("  ") == policy


# -- verdicts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("level", "verdict"), [(Level.L2, "promote"), (Level.L3, "promote"), (Level.L4, "keep")])
def test_every_criterion_met_promotes_below_l4_and_keeps_l4(level: Level, verdict: str) -> None:
    health = judged(level, passing(10))
    assert health.verdict == verdict
    assert health.reasons == (
        "pass rate 100.0% ≥ 90%",
        "timeout rate 0.0% < 1%",
        "P50 end-to-end 10m < 3h",
        "average queue 1m < 30m",
        "max execution 9m < 3h",
    )
    assert health.unmet == ()


def test_l1_is_never_judged_and_nothing_is_read_for_it() -> None:
    health = judged(Level.L1, failing(20))
    assert health.verdict == Verdict.INSUFFICIENT_DATA
    assert health.reasons == ("L1 records no results: nothing to judge",)
    assert health.jobs == 0 and health.pass_rate is None


def test_fewer_jobs_than_required_is_insufficient_data_with_the_count() -> None:
    health = judged(Level.L3, failing(3), min_jobs=10)
    assert health.verdict == Verdict.INSUFFICIENT_DATA
    assert health.reasons == ("3 finished jobs in 14 days < 10 required",)
    assert health.jobs == 3 and health.pass_rate == 0.0  # the figures are still shown


@pytest.mark.parametrize(("level", "verdict"), [(Level.L2, "keep"), (Level.L3, "demote"), (Level.L4, "demote")])
def test_a_low_pass_rate_demotes_l3_and_l4_and_leads_the_reasons(level: Level, verdict: str) -> None:
    health = judged(level, passing(5) + failing(3))
    assert health.verdict == verdict
    assert (health.jobs, health.pass_rate) == (8, 0.625)
    assert health.reasons[0] == "pass rate 62.5% < 90% required"
    assert health.unmet == ("pass rate 62.5% < 90% required",)
    assert "timeout rate 0.0% < 1%" in health.reasons


def test_timeouts_demote_even_at_exactly_the_required_pass_rate() -> None:
    health = judged(Level.L4, [*passing(9), never_started("d2")])
    assert health.verdict == Verdict.DEMOTE
    assert (health.jobs, health.pass_rate, health.timeout_rate) == (10, 0.9, 0.1)
    assert health.reasons[0] == "timeout rate 10.0% ≥ 1% limit"
    assert "pass rate 90.0% ≥ 90%" in health.reasons


def test_a_slow_end_to_end_time_demotes() -> None:
    health = judged(Level.L3, passing(10, completed=60.0 + 11_000))
    assert health.verdict == Verdict.DEMOTE
    assert health.p50_end_to_end_s == 11_060 and health.max_execution_s == 11_000
    assert health.unmet == ("P50 end-to-end 3h 4m 20s ≥ 3h limit", "max execution 3h 3m 20s ≥ 3h limit")


def test_a_long_queue_alone_keeps_the_level_without_promoting() -> None:
    health = judged(Level.L3, passing(10, started=2400.0, completed=2940.0))
    assert health.verdict == Verdict.KEEP
    assert health.avg_queue_s == 2400
    assert health.unmet == ("average queue 40m ≥ 30m limit",)


def test_one_overlong_run_fails_max_execution_but_never_demotes() -> None:
    quick = [job(f"j{i}", run=i) for i in range(9)]
    slow = job("slow", run=99, completed=60.0 + 11_000)
    health = judged(Level.L4, [*quick, slow])
    assert health.verdict == Verdict.KEEP
    assert health.p50_end_to_end_s == 600
    assert health.unmet == ("max execution 3h 3m 20s ≥ 3h limit",)


def test_unmeasured_times_block_promotion_but_do_not_demote() -> None:
    # A downstream that only ever reports `completed`: the relay never saw a job start.
    health = judged(Level.L3, passing(10, started=None))
    assert health.verdict == Verdict.KEEP
    assert health.avg_queue_s is None and health.p50_end_to_end_s is None and health.max_execution_s is None
    assert health.unmet == (
        "P50 end-to-end not measured: no run reported in_progress (the relay's start); < 3h required",
        "average queue not measured: no job reported in_progress (the relay's start); < 30m required",
        "max execution not measured: no job that did not time out reported in_progress; < 3h required",
    )


def test_a_rate_just_under_its_limit_is_not_printed_as_the_limit() -> None:
    health = judged(Level.L4, [*passing(100), never_started("d2")])
    assert health.verdict == Verdict.KEEP
    assert "timeout rate 0.99% < 1%" in health.reasons


def test_failing_reasons_come_first_then_the_met_ones() -> None:
    samples = [*passing(5, started=2400.0, completed=2940.0), *failing(5, started=2400.0, completed=2940.0)]
    health = judged(Level.L2, samples)
    assert health.reasons == (
        "pass rate 50.0% < 90% required",
        "average queue 40m ≥ 30m limit",
        "timeout rate 0.0% < 1%",
        "P50 end-to-end 49m < 3h",
        "max execution 9m < 3h",
    )


# -- figures -------------------------------------------------------------------------------------------


def test_only_finished_attempts_of_pull_requests_count_and_the_latest_attempt_wins() -> None:
    figures = measure(
        [
            job("running", None, state="in_progress", completed=None),
            job("push-build", "failure", pr=None),
            job("flaky", "failure", attempt=1),
            job("flaky", "success", attempt=2),
            job("cancelled", "cancelled"),
            job("skipped", "skipped"),
        ]
    )
    # flaky (its re-run passed), cancelled and skipped: cancelled and skipped count as jobs that did not pass.
    assert (figures.jobs, figures.passed, figures.timed_out) == (3, 1, 0)
    assert figures.pass_rate == pytest.approx(1 / 3)


def test_each_dispatch_no_job_started_on_is_one_timed_out_job() -> None:
    figures = measure([*passing(2), never_started("d2"), never_started("d3")])
    assert (figures.jobs, figures.timed_out, figures.timeout_rate) == (4, 2, 0.5)
    assert figures.avg_queue_s == 60  # the nameless rows have no start: no queue sample
    assert figures.p50_end_to_end_s == 600  # nor a run


def test_a_dispatch_github_started_no_run_for_is_counted_with_what_to_fix_never_as_a_time_out() -> None:
    first = replace(job("", "not_started", state="not_started", dispatch="d2", run=0, attempt=0), event_type="push")
    latest = replace(first, dispatch_id="d3", dispatched_at=100.0, event_type="pull_request", pr=None)
    health = judged(Level.L3, [*passing(9), first, latest])
    assert (health.not_started, health.timeout_rate) == (2, 0.0)
    assert health.jobs == 10  # a pull request's not-started dispatch is a job that did not pass; a push's is not one
    # The latest one's event type names the `types:` a workflow must listen to.
    assert "`pull_request` dispatch" in health.not_started_reason
    assert "types: [pull_request]" in health.not_started_reason
    assert health.as_json()["not_started"] == 2
    assert (
        judged(Level.L3, passing(3)).as_json() | {"not_started": 0, "not_started_reason": ""}
        == judged(Level.L3, passing(3)).as_json()
    )


def test_end_to_end_is_a_runs_longest_queue_plus_the_span_of_its_jobs() -> None:
    # Dispatched at 0; job a runs 60..600, then job b 610..1200: PyTorch's max(queue_time) + span.
    figures = measure([job("a", started=60.0, completed=600.0), job("b", started=610.0, completed=1200.0)])
    assert figures.p50_end_to_end_s == 610 + (1200 - 60)


def test_the_p50_of_an_even_count_is_the_upper_middle_run_like_quantile_exact() -> None:
    runs = [job(f"j{i}", run=i, started=50.0, completed=50.0 + e2e) for i, e2e in enumerate((100, 200, 300, 400))]
    assert measure(runs).p50_end_to_end_s == 50 + 300


def test_max_execution_leaves_out_jobs_the_sweeper_timed_out() -> None:
    ran_out = job("hung", "timed_out", state="timed_out", started=60.0, completed=60.0 + 43_200)
    figures = measure([job("ok", started=60.0, completed=600.0), ran_out])
    assert figures.max_execution_s == 540
    assert figures.timed_out == 1


def test_the_average_queue_skips_jobs_never_seen_starting() -> None:
    figures = measure([job("a", started=100.0), job("b", started=300.0), job("c", started=None)])
    assert figures.avg_queue_s == 200


def test_no_jobs_no_figures() -> None:
    figures = measure([])
    assert figures.jobs == 0 and figures.pass_rate is None and figures.timeout_rate is None
    assert (figures.flaky, figures.flaky_jobs) == (0, {})


# -- flaky jobs (docs/contracts.md): a failure followed by a pass on a retry of the same commit --------------------


def test_a_job_that_failed_then_passed_on_a_retry_is_flaky_and_counted_per_job() -> None:
    figures = measure(
        [
            job("test", "failure", attempt=1),
            job("test", "success", attempt=2),  # flaky
            job("test", "failure", dispatch="d2", attempt=1),
            job("test", "success", dispatch="d2", attempt=2),  # the same job on another dispatch: flaky again
            job("build", "timed_out", state="timed_out", attempt=1),
            job("build", "cancelled", attempt=2),
            job("build", "success", attempt=3),  # a timeout, then a later pass: flaky
            job("lint", "success", attempt=1),
            job("lint", "failure", attempt=2),  # a pass, then a failure: not flaky
            job("docs", "failure", attempt=1),
            job("docs", "failure", attempt=2),  # never passed
            job("smoke", "success"),  # never failed
        ]
    )
    assert figures.flaky_jobs == {"CI/build": 1, "CI/test": 2}
    assert figures.flaky == 3
    assert figures.jobs == 6  # flakiness adds no job: each still counts once, as its latest attempt
    assert figures.passed == 4  # test x2, build, smoke


def test_flaky_counts_only_finished_attempts_of_pull_requests_and_each_job_once() -> None:
    figures = measure(
        [
            job("push", "failure", pr=None),
            job("push", "success", pr=None, attempt=2),  # a push's re-run: not a pull request
            job("running", "failure"),
            job("running", None, state="in_progress", attempt=2, completed=None),  # not finished yet
            job("twice", "failure", attempt=1),
            job("twice", "success", attempt=2),
            job("twice", "failure", attempt=3),
            job("twice", "success", attempt=4),  # flipped twice: one flaky job
            job("other-run", "failure", run=1),
            job("other-run", "success", run=2),  # another run of the job is not a retry of this one
        ]
    )
    assert figures.flaky_jobs == {"CI/twice": 1}


def test_flaky_is_a_figure_never_a_criterion() -> None:
    flaky = [job(f"j{i}", "failure", attempt=1) for i in range(10)]
    flaky += [job(f"j{i}", "success", attempt=2) for i in range(10)]
    health = judged(Level.L3, flaky, min_jobs=10)
    assert (health.flaky, health.flaky_jobs["CI/j0"], health.verdict) == (10, 1, Verdict.PROMOTE)
    assert health.as_json()["flaky_jobs"] == {f"CI/j{i}": 1 for i in range(10)}


# -- thresholds from CRCR_HEALTH_THRESHOLDS -----------------------------------------------------------


def test_level_overrides_apply_to_their_level_only() -> None:
    policy = parse_policy('{"pass_rate": 0.95, "avg_queue_s": 600, "L4": {"pass_rate": 0.99}, "min_jobs": 3}')
    assert policy.thresholds(Level.L4).pass_rate == 0.99
    assert policy.thresholds(Level.L4).avg_queue_s == 600  # the top level still applies
    assert policy.thresholds(Level.L3).pass_rate == 0.95
    assert policy.min_jobs == 3 and policy.window_days == 14
    samples = [*passing(96), *failing(4)]
    assert judged(Level.L4, samples, policy=policy).reasons[0] == "pass rate 96.0% < 99% required"
    assert judged(Level.L3, samples, policy=policy).verdict == Verdict.PROMOTE


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ('{"pass_rat": 0.9}', "pass_rat", "pass_rat: unknown key (known: pass_rate, timeout_rate"),
        ('{"L4": {"timeout": 0.02}}', "L4.timeout", "L4.timeout: unknown key (known: pass_rate, timeout_rate"),
        ('{"L1": {"pass_rate": 0.9}}', "L1", "L1: unknown key"),
        ('{"L4": {"pass_rate": 1.5}}', "L4.pass_rate", "L4.pass_rate: input should be less than or equal to 1"),
        ('{"avg_queue_s": 0}', "avg_queue_s", "avg_queue_s: input should be greater than 0"),
        ('{"L3": {"timeout_rate": 0}}', "L3.timeout_rate", "L3.timeout_rate: input should be greater than 0"),
        ('{"pass_rate": "0.9"}', "pass_rate", "pass_rate: input should be a valid number"),
        ('{"min_jobs": 2.5}', "min_jobs", "min_jobs: input should be a valid integer"),
        ('{"L3": 0.9}', "L3", "L3: must be a JSON object"),
        ("[0.9]", "", "the document must be a JSON object"),
        ('{"pass_rate": ', "", "not valid JSON"),
    ],
)
def test_a_bad_thresholds_document_names_the_key(text: str, key: str, message: str) -> None:
    with pytest.raises(HealthConfigError) as caught:
        parse_policy(text)
    assert caught.value.key == key
    assert str(caught.value).startswith(message)


# -- the use case --------------------------------------------------------------------------------------

ALLOWLIST = build_allowlist(
    {
        "L4": ["org/zeta-l4", "org/alpha-l4"],
        "L1": ["org/only-dispatched"],
        "L3": {"gpu": {"org/Accel": None}},
        "L2": ["org/ecosystem"],
    }
)
NOW = 1_800_000_000.0


def record(repo: str, name: str, conclusion: str, *, level: int, age_days: float = 1.0) -> JobRecord:
    dispatched = NOW - age_days * DAY_S
    return JobRecord(
        dispatch_id=f"dsp-{repo}", run_id="7", run_attempt=1, job_name=name, workflow_name="CI", state="completed",
        conclusion=conclusion, fingerprint="", url=f"https://github.com/{repo}/actions/runs/7", repo=repo,
        repo_id=1, level=level, delivery_id="dlv", upstream="pytorch/pytorch", head_sha="a" * 40, pr=5,
        device=None, dispatched_at=dispatched, started_at=dispatched + 60, completed_at=dispatched + 600,
        callback_payload="",
    )  # fmt: skip


def deps(rows: list[JobRecord], policy: HealthPolicy | None = None) -> tuple[HealthDeps, FakeJobsByRepo]:
    jobs = FakeJobsByRepo(rows)
    return HealthDeps(StaticAllowlist(ALLOWLIST), jobs, FakeClock(NOW), policy or HealthPolicy()), jobs


def health_of(d: HealthDeps, repo: str, window_days: int | None = None, min_jobs: int | None = None) -> RepoHealth:
    """One repository of `crcr health`'s report, named in any case (as the allowlist matches names)."""
    return next(h for h in health_report(d, window_days, min_jobs) if h.repo.lower() == repo.lower())


def test_the_report_lists_every_repository_by_level_and_reads_nothing_for_l1() -> None:
    rows = [record("org/Accel", f"fail-{i}", "failure", level=3) for i in range(10)]
    rows += [record("org/alpha-l4", f"ok-{i}", "success", level=4) for i in range(10)]
    d, jobs = deps(rows)
    report = health_report(d)
    assert [(h.repo, h.level, h.verdict.value) for h in report] == [
        ("org/only-dispatched", "L1", "insufficient_data"),
        ("org/ecosystem", "L2", "insufficient_data"),
        ("org/Accel", "L3", "demote"),
        ("org/alpha-l4", "L4", "keep"),
        ("org/zeta-l4", "L4", "insufficient_data"),
    ]
    since = NOW - 14 * DAY_S
    assert jobs.queries == [
        ("org/ecosystem", since),
        ("org/Accel", since),
        ("org/alpha-l4", since),
        ("org/zeta-l4", since),
    ]
    accel = report[2]
    assert accel.reasons[0] == "pass rate 0.0% < 90% required"
    assert report[1].reasons == ("0 finished jobs in 14 days < 10 required",)
    assert set(accel.as_json()) == {
        "repo", "level", "jobs", "pass_rate", "timeout_rate", "avg_queue_s", "p50_end_to_end_s",
        "max_execution_s", "verdict", "reasons",  # `crcr health`'s ten (docs/contracts.md)
        "flaky", "flaky_jobs", "dispatch_dedupe", "not_started", "not_started_reason",  # added (docs/contracts.md)
    }  # fmt: skip
    assert accel.as_json()["verdict"] == "demote" and accel.as_json()["level"] == "L3"


def test_the_report_names_flaky_jobs_by_their_workflow_and_job() -> None:
    failed = replace(record("org/Accel", "test", "failure", level=3), workflow_name="XPU CI")
    rows = [failed, replace(failed, run_attempt=2, conclusion="success")]
    health = health_of(deps(rows)[0], "org/Accel")
    assert (health.jobs, health.flaky, health.flaky_jobs) == (1, 1, {"XPU CI/test": 1})


def test_flags_override_the_policys_window_and_minimum() -> None:
    rows = [record("org/Accel", "old", "failure", level=3, age_days=5), record("org/Accel", "new", "success", level=3)]
    d, jobs = deps(rows, parse_policy('{"window_days": 7, "min_jobs": 5}'))
    assert health_of(d, "org/accel").reasons == ("2 finished jobs in 7 days < 5 required",)
    assert ("org/Accel", NOW - 7 * DAY_S) in jobs.queries
    narrow = health_of(d, "org/accel", window_days=3, min_jobs=1)
    assert ("org/Accel", NOW - 3 * DAY_S) in jobs.queries
    assert (narrow.jobs, narrow.pass_rate, narrow.verdict) == (1, 1.0, Verdict.PROMOTE)


def test_each_level_is_judged_by_its_own_thresholds() -> None:
    rows = [record("org/alpha-l4", f"ok-{i}", "success", level=4) for i in range(19)]
    rows.append(record("org/alpha-l4", "broken", "failure", level=4))
    strict = parse_policy('{"L4": {"pass_rate": 0.99}}')
    assert health_of(deps(rows)[0], "org/alpha-l4").verdict == Verdict.KEEP
    demoted = health_of(deps(rows, strict)[0], "org/alpha-l4")
    assert demoted.verdict == Verdict.DEMOTE and demoted.unmet == ("pass rate 95.0% < 99% required",)


def test_one_repository_of_the_report_is_named_as_the_allowlist_names_it() -> None:
    d, _ = deps([replace(record("org/ecosystem", f"j{i}", "success", level=2), run_id=str(i + 1)) for i in range(10)])
    health = health_of(d, "ORG/Ecosystem")
    assert (health.repo, health.level, health.jobs, health.verdict) == ("org/ecosystem", "L2", 10, Verdict.PROMOTE)


def test_percentiles_are_clickhouses_quantile_exact() -> None:
    assert quantile_exact([], 0.5) is None
    assert quantile_exact([4.0, 1.0, 3.0, 2.0], 0.5) == 3.0  # the upper middle of an even count
    assert quantile_exact([float(i) for i in range(1, 11)], 0.9) == 10.0
    queues = [job(f"j{i}", started=float(10 * i), completed=float(10 * i + 100 + i)) for i in range(1, 11)]
    assert spread(queues) == {
        "queue_p50_s": 60.0,
        "queue_p90_s": 100.0,
        "execution_p50_s": 106.0,
        "execution_p90_s": 110.0,
    }


def test_the_repository_page_is_judged_at_the_level_its_job_was_dispatched_at() -> None:
    rows = [
        JobRecord(
            dispatch_id=f"d{i}",
            run_id=str(i + 1),
            run_attempt=1,
            job_name="build",
            workflow_name="CI",
            state="completed",
            conclusion="failure" if i % 2 else "success",
            fingerprint="",
            url="",
            repo="Org/Backend",
            repo_id=1,
            level=4,
            delivery_id=f"x{i}",
            upstream="pytorch/pytorch",
            head_sha="a" * 40,
            pr=5,
            device=None,
            dispatched_at=1000.0 + i,
            started_at=1010.0 + i,
            completed_at=1100.0 + i,
            callback_payload="",
        )
        for i in range(4)
    ]
    jobs = FakeJobsByRepo(rows=rows)
    policy = HealthPolicy(min_jobs=2, L4=LevelThresholds(pass_rate=0.4))
    page = page_health(jobs, policy, FakeClock(2000.0), "org/backend", Level.L4)
    assert (page["verdict"], page["jobs"], page["pass_rate"]) == ("keep", 4, 0.5)  # L4's own 40 % bar is met
    assert page["thresholds"]["pass_rate"] == 0.4 and page["min_jobs"] == 2 and page["window_days"] == 14
    assert page["queue_p50_s"] == 10.0 and page["execution_p90_s"] == 90.0
    assert jobs.queries == [("org/backend", 2000.0 - 14 * 86_400)]
    # The level criteria and the daily trend come from the same read, at the same moment.
    assert [c["criterion"] for c in page["level_status"]["criteria"]] == [
        "End-to-End Time (P50)",
        "Timeout Rate",
        "Job Pass Rate",
    ]
    assert page["level_status"]["criteria"][2]["measured"] == "50.0%"
    assert len(page["trend"]) == 14 and page["trend"][-1]["day"] == "1970-01-01"
    assert page["trend"][-1] == {"day": "1970-01-01", "jobs": 4, "passed": 2, "queue_s": 10.0, "run_s": 90.0}
    assert all(day["jobs"] == 0 for day in page["trend"][:-1])
