"""POST /callback on `crcr local`: real OIDC tokens from an independent issuer, real tickets, real ledger."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import DEFAULT_ALLOWLIST, HUD_TOKEN, LISTED, Relay, event_body, http
from tests.doubles.github_double import Reply
from tests.doubles.hud import HudDouble
from tests.doubles.oidc_issuer import GITHUB_OBSERVED_LIFETIME, OidcIssuer

pytestmark = pytest.mark.e2e
REPO_IDS = {repo: 5000 + i for i, repo in enumerate(LISTED)}
L2 = "org-two/l2-repo"


@pytest.fixture
def oidc() -> Iterator[OidcIssuer]:
    with OidcIssuer() as issuer:
        yield issuer


@dataclass
class Scenario:
    relay: Relay
    oidc: OidcIssuer
    delivery: str
    head_sha: str

    def dispatch_payload(self, repo: str) -> dict[str, Any]:
        [sent] = self.relay.github.dispatches(repo)
        payload: dict[str, Any] = sent["client_payload"]
        return payload

    def token(self, repo: str = L2, **claims: Any) -> str:
        params: dict[str, Any] = {
            "repository": repo,
            "repository_id": REPO_IDS.get(repo, 1),
            "run_id": 777,
            "run_attempt": 1,
            "job_workflow_ref": f"{repo}/.github/workflows/ci.yml@refs/heads/main",
        }
        return self.oidc.token(**(params | claims))

    def body(self, repo: str = L2, **changes: Any) -> dict[str, Any]:
        body = {
            "schema_version": 1,
            "ticket": self.dispatch_payload(repo)["ticket"],
            "status": "in_progress",
            "workflow_name": "CI",
            "job_name": "build-and-test",
            "run_id": 777,
            "run_attempt": 1,
            "url": f"https://github.com/{repo}/actions/runs/777",
        }
        return body | changes

    def post(self, body: dict[str, Any] | bytes, token: str | None) -> tuple[int, dict[str, Any]]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return http("POST", f"{self.relay.url}/callback", data, headers)

    def jobs(self) -> list[dict[str, Any]]:
        ddb = self.relay.stack.client("dynamodb")
        items = ddb.scan(TableName="crcr-local-ResultsTable", ConsistentRead=True)["Items"]
        return [{k: next(iter(v.values())) for k, v in item.items()} for item in items]


@pytest.fixture
def scenario(relay_factory: Callable[..., Relay], oidc: OidcIssuer, hud: HudDouble) -> Scenario:
    relay = relay_factory(
        env={
            "CRCR_OIDC_ISSUER": oidc.url,
            "CRCR_OIDC_AUDIENCE": "crcr",
            "CRCR_HUD_URL": hud.url,
            "CRCR_HUD_TOKEN": HUD_TOKEN,
        }
    )
    delivery = str(uuid.uuid4())
    body = event_body("pull_request.opened.json")
    assert relay.post("pull_request", body, delivery)[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    return Scenario(relay, oidc, delivery, json.loads(body)["pull_request"]["head"]["sha"])


def test_a_job_is_recorded_with_the_ledgers_identity_and_retries_are_duplicates(scenario: Scenario) -> None:
    s = scenario
    assert s.post(s.body(), s.token()) == (200, {"status": "recorded"})
    assert s.post(s.body(), s.token()) == (200, {"status": "duplicate"})
    done = s.body(
        status="completed", conclusion="success", test_results={"passed": 5, "failed": 0, "skipped": 1, "total": 6}
    )
    assert s.post(done, s.token()) == (200, {"status": "recorded"})
    assert s.post(done, s.token()) == (200, {"status": "duplicate"})
    # A late in_progress after completion never regresses the job.
    assert s.post(s.body(), s.token()) == (200, {"status": "duplicate"})
    [job] = s.jobs()
    assert job["state"] == "completed" and job["conclusion"] == "success"
    assert (job["repo"], job["repo_id"], job["level"]) == ("org-two/l2-repo", "5001", "2")
    assert (job["delivery_id"], job["head_sha"], job["pr"]) == (s.delivery, s.head_sha, "170001")
    assert float(job["started_at"]) <= float(job["completed_at"])
    # A different result for a job already completed is a conflict, not an overwrite.
    status, reply = s.post(s.body(status="completed", conclusion="failure"), s.token())
    assert status == 409 and reply["error"] == "conflict"


def test_completed_first_is_recorded(scenario: Scenario) -> None:
    s = scenario
    token = s.token(lifetime=GITHUB_OBSERVED_LIFETIME)  # real GitHub tokens live for hours
    assert s.post(s.body(status="completed", conclusion="failure"), token)[1] == {"status": "recorded"}
    [job] = s.jobs()
    assert job["state"] == "completed" and "started_at" not in job  # never seen starting: no attribute


@pytest.mark.parametrize(
    "kind",
    [
        "wrong_audience",
        "expired",
        "alg_none",
        "hs256_with_public_key",
        "unknown_key_known_kid",
        "wrong_issuer",
        "tampered_payload",
    ],
)
def test_every_forged_token_is_refused_with_401(scenario: Scenario, kind: str) -> None:
    s = scenario
    forged = s.oidc.forge(kind, repository=L2, repository_id=REPO_IDS[L2], run_id=777, run_attempt=1)
    status, reply = s.post(s.body(), forged)
    assert status == 401 and reply["error"] == "unauthorized" and reply["field"] == "Authorization"
    assert s.jobs() == []


def test_a_missing_token_is_401(scenario: Scenario) -> None:
    status, reply = scenario.post(scenario.body(), None)
    assert status == 401 and reply["field"] == "Authorization"


def test_a_ticket_used_by_another_repository_is_refused(scenario: Scenario) -> None:
    s = scenario
    stolen = s.body(L2)  # L2's ticket, presented by the L3 repository's own valid token
    status, reply = s.post(stolen, s.token("org-three/l3-repo"))
    assert status == 403 and reply["field"] == "ticket"
    assert s.jobs() == []


def test_an_edited_ticket_is_refused(scenario: Scenario) -> None:
    s = scenario
    header, claims, signature = s.body()["ticket"].split(".")
    import base64  # noqa: PLC0415

    doc = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    doc["head_sha"] = "f" * 40
    edited = base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    status, reply = s.post(s.body(ticket=f"{header}.{edited}.{signature}"), s.token())
    assert status == 401 and reply["field"] == "ticket"


@pytest.mark.parametrize(
    ("claims", "field"),
    [
        ({"run_id": 778}, "run_id"),
        ({"run_attempt": 2}, "run_attempt"),
        ({"repository_id": 9999}, "repository_id"),
        ({"event_name": "push"}, "event_name"),
    ],
)
def test_a_token_from_another_run_or_trigger_is_refused(scenario: Scenario, claims: dict[str, Any], field: str) -> None:
    status, reply = scenario.post(scenario.body(), scenario.token(**claims))
    assert status == 403 and reply["field"] == field


def test_pytorchs_body_is_bound_through_the_ledger(scenario: Scenario) -> None:
    s = scenario
    theirs = {
        "schema_version": "1",
        "delivery_id": s.delivery,
        "payload": {"pull_request": {"number": 1, "head": {"sha": "0" * 40}}},  # ignored: the ledger decides
        "workflow": {
            "status": "completed",
            "conclusion": "success",
            "name": "OOT L2 CI",
            "url": "https://github.com/org-two/l2-repo/actions/runs/777",
            "job_name": "build-and-test",
            "run_id": "777",
            "run_attempt": 1,
        },
    }
    assert s.post(theirs, s.token()) == (200, {"status": "recorded"})
    [job] = s.jobs()
    assert job["head_sha"] == s.head_sha and job["pr"] == "170001"
    # The same body for a delivery that was never dispatched to this repository.
    status, reply = s.post(theirs | {"delivery_id": str(uuid.uuid4())}, s.token())
    assert status == 403 and reply["field"] == "delivery_id"


def test_an_l1_repository_is_answered_ignored(scenario: Scenario) -> None:
    s = scenario
    l1 = "org-one/l1-repo"
    assert s.post(s.body(l1), s.token(l1)) == (200, {"status": "ignored"})
    assert s.jobs() == []


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"status": "done"}, "status"),
        ({"status": "completed"}, "body"),  # conclusion missing
        ({"conclusion": "success"}, "body"),  # conclusion without completed
        ({"run_id": "seven"}, "run_id"),
        ({"schema_version": 2}, "schema_version"),
        ({"surprise": True}, "surprise"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(scenario: Scenario, changes: dict[str, Any], field: str) -> None:
    status, reply = scenario.post(scenario.body(**changes), scenario.token())
    assert status == 400 and reply["error"] == "bad_request" and reply["field"] == field


def test_a_3mb_body_is_413(scenario: Scenario) -> None:
    status, reply = scenario.post(scenario.body(summary="x" * 3_000_000), scenario.token())
    assert status == 413 and reply["field"] == "body"


def test_two_identical_callbacks_racing_record_once(scenario: Scenario) -> None:
    s = scenario
    body, token = s.body(status="completed", conclusion="success"), s.token()
    results: list[tuple[int, dict[str, Any]]] = []
    threads = [threading.Thread(target=lambda: results.append(s.post(body, token))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(reply["status"] for _, reply in results)
    assert statuses == ["duplicate"] * 5 + ["recorded"]
    assert len(s.jobs()) == 1


def test_a_rotated_issuer_key_verifies_at_once(scenario: Scenario) -> None:
    s = scenario
    assert s.post(s.body(job_name="one"), s.token())[0] == 200
    s.oidc.rotate()
    assert s.post(s.body(job_name="two"), s.token()) == (200, {"status": "recorded"})


def test_random_key_ids_do_not_hammer_the_issuer(scenario: Scenario) -> None:
    s = scenario
    assert s.post(s.body(), s.token())[0] == 200
    before = len([r for r in s.oidc.requests if r.path.endswith("/jwks")])
    for _ in range(40):
        status, _ = s.post(s.body(), s.oidc.forge("unknown_kid", repository=L2, repository_id=REPO_IDS[L2]))
        assert status in (401, 503)
    fetched = len([r for r in s.oidc.requests if r.path.endswith("/jwks")]) - before
    assert fetched <= 5


def test_callbacks_over_the_repository_rate_limit_get_429(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer
) -> None:
    relay = relay_factory(
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_CALLBACK_RATE_PER_MIN": "3"}
    )
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    s = Scenario(relay, oidc, "", "")
    # The limit counts per minute of the clock: all four reports within one minute (they once straddled one).
    if (left := 60 - time.time() % 60) < 15:
        time.sleep(left)
    answers = [s.post(s.body(job_name=f"job-{i}"), s.token())[0] for i in range(3)]
    assert answers == [200, 200, 200]
    request = urllib.request.Request(
        f"{relay.url}/callback",
        data=json.dumps(s.body(job_name="job-4")).encode(),
        headers={"authorization": f"Bearer {s.token()}", "content-type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 429
    assert 1 <= int(caught.value.headers["retry-after"]) <= 60
    assert json.loads(caught.value.read())["error"] == "rate_limited"


def wait_for(predicate: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline and not predicate():
        time.sleep(0.1)


def test_each_state_change_is_pushed_to_the_hud_once(scenario: Scenario, hud: HudDouble) -> None:
    s = scenario
    s.post(s.body(), s.token())
    s.post(s.body(), s.token())  # duplicate: no second push
    done = s.body(
        status="completed", conclusion="failure", test_results={"passed": 1, "failed": 2, "skipped": 0, "total": 3}
    )
    s.post(done, s.token())
    s.post(done, s.token())
    s.post(s.body(), s.token())  # late in_progress: no push
    wait_for(lambda: len(hud.pushes) >= 2)
    time.sleep(1.5)
    assert len(hud.pushes) == 2
    first, second = hud.pushes
    trusted = second["trusted"]
    assert trusted["verified_repo"] == "org-two/l2-repo" and trusted["downstream_repo_level"] == "L2"
    assert (trusted["pr_number"], trusted["head_sha"], trusted["delivery_id"]) == (170001, s.head_sha, s.delivery)
    assert (
        first["trusted"]["ci_metrics"]["queue_time"] >= 0 and first["trusted"]["ci_metrics"]["execution_time"] is None
    )
    assert second["trusted"]["ci_metrics"]["execution_time"] >= 0
    # PyTorch's callback shape whatever the downstream sent, identity from the ledger ...
    pushed = second["untrusted"]["callback_payload"]
    assert "ticket" not in json.dumps(second)
    assert (pushed["event_type"], pushed["delivery_id"]) == ("pull_request", s.delivery)
    assert pushed["payload"]["pull_request"] == {"number": 170001, "head": {"sha": s.head_sha}}
    assert pushed["payload"]["repository"] == {"full_name": "pytorch/pytorch"}
    # ... and the job's own words in `workflow`.
    wf = pushed["workflow"]
    assert (wf["name"], wf["job_name"], wf["status"], wf["conclusion"]) == (
        "CI",
        "build-and-test",
        "completed",
        "failure",
    )
    assert (wf["run_id"], wf["run_attempt"], wf["check_run_id"]) == ("777", 1, "crcr-777-1")
    # The row PyTorch's HUD holds: one per job attempt, upserted by both pushes.
    [(key, row)] = hud.rows.items()
    assert key == f"org-two/l2-repo/{s.delivery}/CI/build-and-test/crcr-777-1"
    assert (row["pr_number"], row["pytorch_head_sha"], row["status"], row["conclusion"]) == (
        170001,
        s.head_sha,
        "completed",
        "failure",
    )
    assert (row["total_tests"], row["failed_tests"], row["queue_time"] >= 0) == (3, 2, True)


def test_the_hud_row_is_keyed_by_the_downstreams_check_run_id_per_attempt(scenario: Scenario, hud: HudDouble) -> None:
    s = scenario
    s.post(s.body(check_run_id=51725241954, started_at="2026-11-30T13:00:00+01:00"), s.token())
    # The completed report forgot the id: the job keeps the one it was first recorded with.
    s.post(s.body(status="completed", conclusion="failure"), s.token())
    # A re-run attempt is another job attempt: another row.
    retry = {"run_attempt": 2, "check_run_id": "51725249999"}
    s.post(s.body(**retry), s.token(run_attempt=2))
    s.post(s.body(status="completed", conclusion="success", **retry), s.token(run_attempt=2))
    wait_for(lambda: len(hud.pushes) >= 4)
    prefix = f"org-two/l2-repo/{s.delivery}/CI/build-and-test"
    assert sorted(hud.rows) == [f"{prefix}/51725241954", f"{prefix}/51725249999"]
    first = hud.rows[f"{prefix}/51725241954"]
    assert (first["conclusion"], first["run_attempt"], first["started_at"]) == ("failure", 1, "2026-11-30T12:00:00Z")
    assert hud.rows[f"{prefix}/51725249999"]["conclusion"] == "success"
    # A timestamp the HUD could not store is refused at the callback, naming the field.
    status, reply = s.post(s.body(job_name="x", started_at="yesterday"), s.token())
    assert status == 400 and reply["field"] == "started_at"


def test_pytorchs_body_is_pushed_with_the_ledgers_pr_and_commit_not_its_echo(
    scenario: Scenario, hud: HudDouble
) -> None:
    s = scenario
    body = {
        "delivery_id": s.delivery,
        "event_type": "pull_request",
        # A caller's echo of the dispatch: it claims another PR and commit.
        "payload": {"pull_request": {"number": 1, "head": {"sha": "f" * 40}}, "repository": {"full_name": "a/b"}},
        "workflow": {
            "status": "completed",
            "conclusion": "success",
            "name": "CI",
            "job_name": "xpu",
            "run_id": "777",
            "run_attempt": "1",
            "url": "https://github.com/org-two/l2-repo/actions/runs/777",
            "check_run_id": "4242",
        },
    }
    assert s.post(body, s.token()) == (200, {"status": "recorded"})
    wait_for(lambda: len(hud.pushes) >= 1)
    [row] = hud.rows.values()
    assert (row["pr_number"], row["pytorch_head_sha"], row["upstream_repo"]) == (170001, s.head_sha, "pytorch/pytorch")
    assert row["dynamoKey"] == f"org-two/l2-repo/{s.delivery}/CI/xpu/4242"


def test_refused_callbacks_never_reach_the_hud(scenario: Scenario, hud: HudDouble) -> None:
    s = scenario
    s.post(s.body(), s.oidc.forge("wrong_audience", repository=L2, repository_id=REPO_IDS[L2], run_id=777))
    s.post(s.body(L2), s.token("org-three/l3-repo"))
    s.post(s.body(), s.token(run_id=778))
    s.post(s.body("org-one/l1-repo"), s.token("org-one/l1-repo"))
    time.sleep(2)
    assert hud.attempts == []


def test_hud_server_errors_are_retried_and_client_errors_dead_lettered(scenario: Scenario, hud: HudDouble) -> None:
    s = scenario
    hud.script(503, 502)  # two failures, then the push goes through
    s.post(s.body(job_name="retried"), s.token())
    wait_for(lambda: len(hud.pushes) >= 1)
    assert [status for status, _ in hud.attempts] == [503, 502, 200]
    hud.script(422)
    s.post(s.body(job_name="refused"), s.token())
    wait_for(lambda: len(hud.attempts) >= 4)
    time.sleep(1)
    assert [status for status, _ in hud.attempts] == [503, 502, 200, 422]  # 4xx: not retried
    # The refused record does not hold back the ones behind it on the stream.
    s.post(s.body(job_name="after"), s.token())
    wait_for(lambda: len(hud.attempts) >= 5)
    assert hud.attempts[4][0] == 200
    assert hud.attempts[4][1]["untrusted"]["callback_payload"]["workflow"]["job_name"] == "after"
    from crcr.ops.dlq import list_dead_letters  # noqa: PLC0415

    [dead] = list_dead_letters(s.relay.stack.client("sqs"), s.relay.stack.queue_urls["ReporterDLQ"])
    assert "HUD rejected the push: 422" in dead["reason"]


def scheduled_body(sha: str, **changes: Any) -> dict[str, Any]:
    body = {
        "schema_version": 1,
        "scheduled": True,
        "head_sha": sha,
        "status": "completed",
        "conclusion": "success",
        "workflow_name": "nightly",
        "job_name": "full-suite",
        "run_id": 777,
        "run_attempt": 1,
        "url": "https://github.com/org-two/l2-repo/actions/runs/777",
    }
    return body | changes


def test_a_scheduled_run_on_an_upstream_commit_is_recorded(scenario: Scenario) -> None:
    s = scenario
    github = s.relay.github
    github.install("pytorch/pytorch", installation_id=1, repo_id=65600975)
    nightly_sha = "c" * 40
    github.add_commit("pytorch/pytorch", nightly_sha)
    nightly = s.token(event_name="schedule")
    assert s.post(scheduled_body(nightly_sha), nightly) == (200, {"status": "recorded"})
    assert s.post(scheduled_body(nightly_sha), nightly) == (200, {"status": "duplicate"})
    [job] = s.jobs()
    assert (job["repo"], job["head_sha"], job["delivery_id"], job.get("pr")) == (
        "org-two/l2-repo",
        nightly_sha,
        "scheduled",
        None,  # no PR: no attribute
    )
    # Not a commit of the upstream.
    status, reply = s.post(scheduled_body("d" * 40, job_name="other"), nightly)
    assert status == 403 and reply["field"] == "head_sha"
    # Only completed runs.
    status, reply = s.post(scheduled_body(nightly_sha, status="in_progress", conclusion=None), nightly)
    assert status == 400 and reply["field"] == "status"
    # An L1 repository's nightly is not recorded.
    l1 = "org-one/l1-repo"
    assert s.post(scheduled_body(nightly_sha), s.token(l1, event_name="schedule")) == (200, {"status": "ignored"})
    # A repository recreated under the same name (another id) cannot report as the allowlisted one.
    status, reply = s.post(
        scheduled_body(nightly_sha, job_name="y"), s.token(event_name="schedule", repository_id=4242)
    )
    assert status == 403 and reply["field"] == "repository_id"
    # A run started by something else cannot pose as a nightly.
    status, reply = s.post(scheduled_body(nightly_sha, job_name="x"), s.token(event_name="push"))
    assert status == 403 and reply["field"] == "event_name"
    assert len(s.jobs()) == 1


def test_scheduled_commits_cost_the_upstream_one_lookup_each_within_the_repositorys_budget(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer
) -> None:
    """Random scheduled SHAs once cost a GitHub request each, with the upstream installation's token: now a commit the
    relay saw pushed costs none, an answer (found or not) is remembered, and the lookups one downstream may cause an
    hour are capped; past it, 429 naming the limit, counted, and its HUD repository page names the refusal."""
    relay = relay_factory(
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_COMMIT_LOOKUPS_PER_HOUR": "3"}
    )
    github = relay.github
    github.install("pytorch/pytorch", installation_id=1, repo_id=65600975)
    push = json.loads(event_body("push.main.json"))
    assert relay.post("push", json.dumps(push).encode())[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    s = Scenario(relay, oidc, "", "")
    nightly = s.token(event_name="schedule")

    def lookups() -> int:
        return len([r for r in github.requests if r.method == "GET" and "/commits/" in r.path])

    pushed = push["commits"][-1]["id"]  # the planner kept the pushed commits: no lookup at all
    assert s.post(scheduled_body(pushed, job_name="pushed"), nightly) == (200, {"status": "recorded"})
    assert lookups() == 0
    randoms = [f"{i:040x}" for i in range(1, 6)]
    status, reply = s.post(scheduled_body(randoms[0]), nightly)
    assert (status, reply["field"], lookups()) == (403, "head_sha", 1)
    assert s.post(scheduled_body(randoms[0]), nightly)[0] == 403 and lookups() == 1  # remembered: asked once
    for sha in randoms[1:3]:
        assert s.post(scheduled_body(sha), nightly)[0] == 403
    assert lookups() == 3
    status, reply = s.post(scheduled_body(randoms[3]), nightly)
    assert (status, reply["error"], reply["limit"], reply["field"]) == (
        429,
        "rate_limited",
        "commit_lookups_per_hour",
        "head_sha",
    )
    assert lookups() == 3  # the budget holds: nothing more asked of GitHub this hour
    assert relay.metric("DownstreamThrottled") == 1 and relay.metric("CommitLookedUp") == 3
    status, page = http("GET", f"{relay.url}/hud/data/repo/org-two/l2-repo.json")
    reasons = page["refused"]["reasons"]
    assert status == 200 and set(reasons) == {"unknown_commit", "commit_lookups_per_hour"}
    assert "budget of GitHub lookups" in reasons["commit_lookups_per_hour"]["message"]
    assert reasons["commit_lookups_per_hour"]["count"] == 1


def test_one_downstreams_unknown_commit_is_not_refused_to_another_once_github_has_it(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer
) -> None:
    """Red team: the relay remembered "not an upstream commit" for everyone, so a downstream reporting a commit before
    it reached the upstream got every other downstream's report of that commit refused, unasked, for ten minutes."""
    relay = relay_factory(env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr"})
    github = relay.github
    github.install("pytorch/pytorch", installation_id=1, repo_id=65600975)
    s, early, late = Scenario(relay, oidc, "", ""), "org-two/l2-repo", "org-four/L4-Repo"
    sha = "ab" * 20

    def lookups() -> int:
        return len([r for r in github.requests if r.method == "GET" and r.path.endswith(f"/commits/{sha}")])

    status, reply = s.post(scheduled_body(sha), s.token(early, event_name="schedule"))
    assert (status, reply["field"], lookups()) == (403, "head_sha", 1)  # GitHub has no such commit yet
    github.add_commit("pytorch/pytorch", sha)  # now it has (pushed to a branch, not the default one)
    body = scheduled_body(sha) | {"url": f"https://github.com/{late}/actions/runs/777"}
    assert s.post(body, s.token(late, event_name="schedule")) == (200, {"status": "recorded"})
    assert lookups() == 2  # the other downstream asked GitHub itself
    # "Found" is everyone's: the first downstream's next report is taken without asking again.
    assert s.post(scheduled_body(sha, job_name="again"), s.token(early, event_name="schedule"))[1] == {
        "status": "recorded"
    }
    assert lookups() == 2


def test_hostile_bodies_get_400_or_413_never_500(scenario: Scenario) -> None:
    s = scenario
    nested = b"[" * 100_000 + b"]" * 100_000
    status, reply = s.post(nested, s.token())
    # Refused where it passes the cap, naming that path (bounded), not after a RecursionError
    assert status == 400 and str(reply["field"]).startswith("0.0.0.") and "nested deeper" in str(reply["message"])
    # Non-ASCII text is stored as UTF-8, not as escapes: 100 KB as UTF-8 is within the stored bytes per job, where
    # the same text as twelve-byte surrogate escapes (300 KB) would not be.
    wide = s.body(status="completed", conclusion="success", summary="\U0001f680" * 25_000)
    assert s.post(json.dumps(wide, ensure_ascii=False).encode(), s.token()) == (200, {"status": "recorded"})


def test_limits_per_dispatch_and_per_job_are_refused_naming_the_limit(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer
) -> None:
    """A downstream reporting on its own dispatch cannot make the relay keep (and the reporter read) without bound:
    jobs per dispatch, attempts per job and stored bytes per job are capped, and a refusal names its limit."""
    relay = relay_factory(
        env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_MAX_JOBS_PER_DISPATCH": "3"}
    )
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    s = Scenario(relay, oidc, "", "")
    assert [s.post(s.body(job_name=f"job-{i}"), s.token())[1]["status"] for i in range(3)] == ["recorded"] * 3
    status, reply = s.post(s.body(job_name="job-3"), s.token())
    assert (status, reply["error"], reply["limit"], reply["field"]) == (
        403,
        "over_limit",
        "jobs_per_dispatch",
        "job_name",
    )
    assert "3 jobs" in reply["message"]
    # The jobs it holds still report (a job counts once, however often it reports).
    assert s.post(s.body(job_name="job-0", status="completed", conclusion="success"), s.token())[0] == 200
    status, reply = s.post(s.body(job_name="job-0", run_attempt=52), s.token(run_attempt=52))
    assert (status, reply["limit"], reply["field"]) == (403, "attempts_per_job", "run_attempt")
    big = s.body(job_name="job-1", status="completed", conclusion="success", summary="\U0001f680" * 40_000)
    status, reply = s.post(json.dumps(big, ensure_ascii=False).encode(), s.token())
    assert (status, reply["error"], reply["limit"]) == (413, "too_large", "stored_bytes_per_job")
    assert str(128 * 1024) in reply["message"]
    # What the relay drops is not stored: an oversize triage verdict leaves no trace in the row.
    oversize_triage = {
        "category": "infra",
        "confidence": "high",
        "summary": "s",
        "evidence": [{"excerpt": "e" * 40_000}],
    }
    failed = s.body(job_name="job-2", status="completed", conclusion="failure", triage_verdict=oversize_triage)
    assert s.post(failed, s.token()) == (200, {"status": "recorded"})
    [row] = [job for job in s.jobs() if job["job_name"] == "job-2"]
    assert "triage" not in row and "triage_verdict" not in json.loads(str(row["callback_payload"]))
    assert relay.metric("CallbackRejected") >= 3


def test_a_run_reports_even_while_its_dispatch_is_being_retried(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer
) -> None:
    """GitHub accepted a POST the relay timed out on: the run it started must still be able to report."""
    relay = relay_factory(env={"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_RETRY_BASE_S": "30"})
    relay.github.script("POST", r"/repos/org-two/l2-repo/dispatches", [Reply.slow(3)])  # accepted after the timeout
    relay.post("pull_request", event_body("pull_request.opened.json"))
    relay.wait_dispatches({L2: 1}, settle_s=0)
    s = Scenario(relay, oidc, "", "")
    assert s.post(s.body(), s.token()) == (200, {"status": "recorded"})


def test_tokens_as_github_issues_them_since_july_2026_and_pytorchs_audience_are_accepted_and_an_owner_pin_holds(
    relay_factory: Callable[..., Relay], oidc: OidcIssuer
) -> None:
    # Two audiences (crcr's and the one PyTorch's callback action requests), and an owner-id pin for L2.
    pinned = DEFAULT_ALLOWLIST + f"repos:\n  {L2}:\n    repository_owner_id: 4242\n"
    env = {"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr, pytorch-cross-repo-ci-relay"}
    relay = relay_factory(allowlist=pinned, env=env)
    delivery = str(uuid.uuid4())
    body = event_body("pull_request.opened.json")
    assert relay.post("pull_request", body, delivery)[0] == 202
    relay.wait_dispatches(dict.fromkeys(LISTED, 1), settle_s=0)
    s = Scenario(relay, oidc, delivery, json.loads(body)["pull_request"]["head"]["sha"])
    theirs = {  # PyTorch's action's body, with the token its action mints (audience pytorch-cross-repo-ci-relay)
        "schema_version": "1",
        "delivery_id": s.delivery,
        "payload": {},
        "workflow": {
            "status": "in_progress",
            "name": "OOT L2 CI",
            "url": f"https://github.com/{L2}/actions/runs/777",
            "job_name": "build-and-test",
            "run_id": "777",
            "run_attempt": 1,
        },
    }
    immutable = {"sub_format": "id", "repository_owner_id": 4242}  # sub: repo:org-two@4242/l2-repo@5001:ref:…
    assert oidc.claims(**immutable)["sub"].startswith("repo:Org@4242/Repo@1001:")
    status, reply = s.post(theirs, s.token(audience="pytorch-cross-repo-ci-relay", repository_owner_id=4243))
    assert (status, reply["field"]) == (403, "repository_owner_id"), reply  # another owner with the same names
    status, reply = s.post(theirs, s.token(audience="pytorch-cross-repo-ci-relay", repository_owner_id=None))
    assert (status, reply["field"]) == (403, "repository_owner_id"), reply  # no owner id: the pin cannot hold
    assert s.post(theirs, s.token(audience="another-relay", **immutable))[0] == 401
    assert s.jobs() == []  # nothing refused was recorded
    assert s.post(theirs, s.token(audience="pytorch-cross-repo-ci-relay", **immutable)) == (200, {"status": "recorded"})
    done = s.body(status="completed", conclusion="success")
    assert s.post(done, s.token(audience="crcr", **immutable)) == (200, {"status": "recorded"})
    [job] = s.jobs()
    assert (job["repo"], job["state"], job["conclusion"]) == (L2, "completed", "success")
