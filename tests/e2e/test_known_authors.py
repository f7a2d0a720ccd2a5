"""A known failure only from a maintainer, end to end on `crcr local` with the issue search source: an outsider's
DISABLED issue leaves a PR's failure `new`, a maintainer's makes it `known` and the comment, the check run and the
pages say whose issue it is; PyTorch's bot's issue counts without asking GitHub."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest

from tests.conftest import ROOT, Relay, event_body
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.browser import headless, open_page
from tests.e2e.test_callback import oidc  # noqa: F401 - a fixture
from tests.e2e.test_pr_comment import COMMENT_PERMISSIONS
from tests.e2e.test_verdicts_comment import Flow, wait

pytestmark = pytest.mark.e2e
UPSTREAM, PR, L4 = "pytorch/pytorch", 170001, "org-four/L4-Repo"
ALLOWLIST = "L4:\n  - org-four/L4-Repo: [oncall-four]\n"
BASE = "b" * 40
ISSUE = "https://github.com/pytorch/pytorch/issues/{}"
ZWSP = "\u200b"
# The job that fails each test, and who filed the DISABLED issue naming it (login, author_association).
FILED = {
    "matmul": ("test_matmul", 170300, "maintainer", "MEMBER"),
    "conv": ("test_conv", 170301, "outsider", "NONE"),
    "add": ("test_add", 170302, "pytorch-bot[bot]", "NONE"),
}
SHOTS = ROOT / "test-output" / "known-authors"


def test_a_failure_is_known_only_from_a_maintainers_or_the_bots_issue_and_the_pages_say_whose(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
) -> None:
    env = {"CRCR_OIDC_ISSUER": oidc.url, "CRCR_OIDC_AUDIENCE": "crcr", "CRCR_COMMENT_SETTLE_S": "1"}
    relay = relay_factory(allowlist=ALLOWLIST, env=env | {"CRCR_DISABLED_TESTS": f"github-issues:{UPSTREAM}"})
    github = relay.github
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=COMMENT_PERMISSIONS)
    github.add_issue(UPSTREAM, PR)
    github.add_collaborator(UPSTREAM, "maintainer", "write")
    for test, number, author, association in FILED.values():
        github.add_search_issue(UPSTREAM, number, f"DISABLED {test} (__main__.TestLinalg)", "Platforms: ",
                                author=author, association=association)  # fmt: skip
    flow = Flow(relay, oidc)

    # Each job passes on main (the baseline), then fails on the PR with the one test an issue names.
    push = json.loads(event_body("push.main.json"))
    push["after"] = BASE
    push["commits"] = [push["commits"][0] | {"id": BASE, "timestamp": "2026-11-29T10:00:00Z"}]
    push["head_commit"] = push["commits"][0]
    assert relay.post("push", json.dumps(push).encode(), str(uuid.uuid4()))[0] == 202
    relay.wait_dispatches({L4: 1}, settle_s=0)
    for job in FILED:
        flow.report(L4, 0, job, "success")
    pr = json.loads(event_body("pull_request.opened.json"))
    pr["pull_request"]["base"]["sha"] = BASE
    head = pr["pull_request"]["head"]["sha"]
    github.add_commit(UPSTREAM, head)
    assert relay.post("pull_request", json.dumps(pr).encode(), str(uuid.uuid4()))[0] == 202
    relay.wait_dispatches({L4: 2}, settle_s=0)
    for job, (test, *_) in FILED.items():
        detail = [{"name": test, "classname": "test.test_linalg.TestLinalg", "message": "mismatch"}]
        flow.report(L4, 1, job, "failure", failure_kind="test", failed_tests_detail=detail)

    def line(body: str, job: str) -> str:
        """The comment's table row of one of the L4 jobs (its name, then its failing tests when it lists them)."""
        return next((r for r in body.splitlines() if r.startswith((f"| CI / {job} |", f"| CI / {job}<br>"))), "")

    def judged() -> str | None:
        body = flow.last_body() if flow.writes() else ""
        verdicts = [line(body, job) for job in FILED]
        return body if all(v and "not judged" not in v for v in verdicts) else None

    wait(judged, timeout_s=60)
    matmul, conv, add = (line(flow.last_body(), job) for job in FILED)
    assert f"known upstream ([#{ZWSP}170300]({ISSUE.format(170300)}) by @{ZWSP}maintainer)" in matmul
    assert "**new**" in conv and "170301" not in conv  # the outsider's issue counts for nothing
    assert f"known upstream ([#{ZWSP}170302]({ISSUE.format(170302)}) by @{ZWSP}pytorch-bot\\[bot\\])" in add
    assert "@oncall-four" in flow.last_body()  # a new failure: its owners are told, as for any other
    # Only the maintainer cost a question to GitHub: the bot is named in the settings, the outsider's association
    # (NONE) says it cannot have write access.
    asked = [r.path for r in github.requests if r.path.endswith("/permission")]
    assert asked == [f"/repos/{UPSTREAM}/collaborators/maintainer/permission"]
    assert relay.metric("IssueAuthorLookedUp") == 1 and relay.metric("DisabledIssueRefused.reason=association") >= 1

    def summaries() -> dict[str, str] | None:
        runs = [r for r in github.check_runs(UPSTREAM) if r["head_sha"] == head]
        said = {r["name"].rsplit("/", 1)[-1]: str((r.get("output") or {}).get("summary")) for r in runs}
        return said if all("Verdict:" in said.get(job, "") for job in FILED) else None

    wait(lambda: summaries() is not None, timeout_s=60)
    said = summaries() or {}
    assert f"Known upstream: ([#{ZWSP}170300]({ISSUE.format(170300)}) by @{ZWSP}maintainer)" in said["matmul"]
    assert "Verdict: **new**" in said["conv"] and "Known upstream" not in said["conv"]

    with headless() as browser:
        for where in (f"pr/{PR}", f"commit/{head}"):
            page = open_page(browser, f"{relay.url}/hud/{where}", SHOTS / f"{where.split('/')[0]}.png")
            shown = [" ".join(t.split()) for t in page.locator(".known-issue").all_inner_texts()]
            assert sorted(shown) == ["#170300 by @maintainer", "#170302 by @pytorch-bot[bot]"], where
            assert page.locator(f'a[href="{ISSUE.format(170301)}"]').count() == 0, where
