"""The golden stream's events, sent as GitHub, the downstreams' runs and Buildkite's agents send them."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from crcr.contracts.check_messages import WIRE
from tests.conftest import Relay, event_body, http
from tests.doubles.buildkite_double import BuildkiteDouble
from tests.doubles.buildkite_oidc import BuildkiteOidc
from tests.doubles.oidc_issuer import OidcIssuer
from tests.golden.capture import private_client

UPSTREAM = "pytorch/pytorch"
L1, L2, L3, L4 = "org-one/l1-repo", "org-two/l2-repo", "org-three/l3-repo", "org-four/L4-Repo"
NIGHTLY, SHADOW, BK_REPO = "org-six/nightly", "org-seven/shadow", "vllm-project/vllm"
IDS = {L1: 5000, L2: 5001, L3: 5002, L4: 5003, NIGHTLY: 5060, SHADOW: 5070, BK_REPO: 4242}
PR, DOCS_PR = 170001, 170002
# The PRs a comment may go on: the stream's two, and the two that landed the failing pushes (regression notices).
ISSUES = (PR, DOCS_PR, 170102, 170103)
BK_JOB = "0184990a-477b-4fa8-9968-496074483cee"


def sha(n: int) -> str:
    """The n-th commit pushed to main."""
    return hashlib.sha1(f"golden commit {n}".encode()).hexdigest()


class Stream:
    def __init__(self, relay: Relay, oidc: OidcIssuer, agent: BuildkiteOidc, buildkite: BuildkiteDouble) -> None:
        self.relay, self.github, self.oidc, self.agent, self.buildkite = relay, relay.github, oidc, agent, buildkite
        self.volatile_bodies: set[str] = set()  # digests of webhooks carrying an id the GitHub double handed out

    # -- GitHub's webhooks -----------------------------------------------------------------------------------------
    def webhook(self, event: str, doc: dict[str, Any], delivery: str, volatile: bool = False) -> None:
        body = json.dumps(doc).encode()
        if volatile:
            self.volatile_bodies.add(hashlib.sha256(body).hexdigest())
        status, reply = self.relay.post(event, body, delivery)
        assert status == 202, (event, delivery, reply)

    def pull_request(
        self, delivery: str, action: str, head: str, number: int = PR, label: str | None = None, **changes: Any
    ) -> None:
        doc = json.loads(event_body("pull_request.opened.json"))
        doc["action"], doc["number"] = action, number
        if label:
            doc["label"] = {"name": label}
        doc["pull_request"] |= {"number": number, "head": doc["pull_request"]["head"] | {"sha": head}} | changes
        self.webhook("pull_request", doc, delivery)

    def push(self, n: int) -> None:
        """The n-th push to main, landed by PR #170100+n, touching torch/."""
        doc = json.loads(event_body("push.main.json"))
        commit = doc["commits"][0] | {
            "id": sha(n),
            "message": f"Change {n} (#{170100 + n})",
            "timestamp": f"2026-11-30T10:{n:02d}:00Z",
            "author": {"name": f"Dev {n}", "email": f"dev{n}@example.com", "username": f"dev{n}"},
            "modified": [f"torch/change_{n}.py"],
        }
        doc |= {"before": sha(n - 1), "after": sha(n), "commits": [commit], "head_commit": commit}
        self.github.add_commit(UPSTREAM, sha(n), branch="main")
        self.webhook("push", doc, f"golden-push-{n}")

    def check_run_rerequested(self, name: str, head: str) -> None:
        """A maintainer's re-run of one of the relay's check runs, from the Checks tab."""
        [run] = [r for r in self.github.check_runs(UPSTREAM) if r["name"] == name and r["head_sha"] == head]
        doc = {
            "action": "rerequested",
            "check_run": {key: run[key] for key in ("id", "name", "head_sha", "external_id", "status", "conclusion")},
            "repository": {"id": 65600975, "full_name": UPSTREAM, "default_branch": "main"},
            "sender": {"login": "a-maintainer"},
        }
        self.webhook("check_run", doc, "golden-check-run-rerequested", volatile=True)

    def command(self, text: str) -> None:
        """A maintainer's comment on the PR, addressed to the App."""
        made = self.github.add_comment(UPSTREAM, PR, text, user="maintainer")
        user = {"login": "maintainer", "type": "User"}
        doc = {
            "action": "created",
            "issue": {"number": PR, "pull_request": {"url": f"https://api.github.com/repos/{UPSTREAM}/pulls/{PR}"}},
            "comment": {"id": made["id"], "body": made["body"], "user": user, "author_association": "MEMBER"},
            "repository": {"id": 65600975, "full_name": UPSTREAM, "default_branch": "main"},
            "sender": user,
        }
        self.webhook("issue_comment", doc, "golden-comment-command", volatile=True)

    # -- the downstreams' callbacks -----------------------------------------------------------------------------------
    def report(self, repo: str, body: dict[str, Any], run_id: int, attempt: int, event_name: str) -> None:
        """A body posted to /callback with the token of the downstream's run."""
        token = self.oidc.token(
            repository=repo,
            repository_id=IDS[repo],
            run_id=run_id,
            run_attempt=attempt,
            job_workflow_ref=f"{repo}/.github/workflows/ci.yml@refs/heads/main",
            event_name=event_name,
        )
        self._post(body, token)

    def _post(self, body: dict[str, Any], token: str) -> None:
        headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
        status, reply = http("POST", f"{self.relay.url}/callback", json.dumps(body).encode(), headers)
        assert status == 200, (body, reply)

    def job(
        self,
        repo: str,
        delivery: str,
        name: str,
        conclusion: str | None,
        run_id: int = 777,
        attempt: int = 1,
        **extra: Any,
    ) -> None:
        """Our body: a job of the run the delivery's dispatch started (in progress when `conclusion` is None)."""
        [sent] = [d for d in self.github.dispatches(repo) if d["client_payload"]["delivery_id"] == delivery]
        state = {"status": "in_progress"} if conclusion is None else {"status": "completed", "conclusion": conclusion}
        body = {
            "schema_version": 1,
            "ticket": sent["client_payload"]["ticket"],
            "workflow_name": "CI",
            "job_name": name,
            "run_id": run_id,
            "run_attempt": attempt,
            "url": f"https://github.com/{repo}/actions/runs/{run_id}",
        }
        self.report(repo, body | state | extra, run_id, attempt, "repository_dispatch")

    def pytorch_body(self, repo: str, delivery: str, conclusion: str) -> None:
        """PyTorch's callback action's body: no ticket, bound through the ledger by its delivery id."""
        url = f"https://github.com/{repo}/actions/runs/888"
        workflow = {"status": "completed", "conclusion": conclusion, "name": "OOT CI", "job_name": "pytorch-job",
                    "url": url, "run_id": "888", "run_attempt": 1}  # fmt: skip
        payload = {"pull_request": {"number": 1, "head": {"sha": "0" * 40}}}  # an echo the relay never reads
        body = {"schema_version": "1", "delivery_id": delivery, "payload": payload, "workflow": workflow}
        self.report(repo, body, 888, 1, "repository_dispatch")

    def nightly(self, head: str, conclusion: str, run_id: int) -> None:
        """A scheduled run's body: no ticket, the upstream commit it tested."""
        body = {
            "schema_version": 1,
            "scheduled": True,
            "head_sha": head,
            "status": "completed",
            "conclusion": conclusion,
            "workflow_name": "nightly",
            "job_name": "full-suite",
            "run_id": run_id,
            "run_attempt": 1,
            "url": f"https://github.com/{NIGHTLY}/actions/runs/{run_id}",
        }
        self.report(NIGHTLY, body, run_id, 1, "schedule")

    def buildkite_job(self, delivery: str, conclusion: str) -> None:
        """The build the relay created for the delivery reports, with its agent's token."""
        [build] = [b for b in self.buildkite.builds("vllm", "ci") if b["env"]["CRCR_DELIVERY_ID"] == delivery]
        body = {
            "schema_version": 1,
            "ticket": build["env"]["CRCR_TICKET"],
            "status": "completed",
            "conclusion": conclusion,
            "workflow_name": "ci",
            "job_name": "test",
            "run_id": build["id"],
            "run_attempt": 1,
            "url": build["web_url"],
        }
        self._post(body, self.agent.mint(build_number=build["number"], build_id=build["id"], job_id=BK_JOB))

    # -- what no event brings ----------------------------------------------------------------------------------------
    def checks_message(self, **fields: Any) -> None:
        """A message the previous version put on ChecksQueue (sent on a client of the test's own: not captured)."""
        given = {"upstream": UPSTREAM} | fields  # the previous version's one flat model: every key, in its order
        body = json.dumps({key: given.get(key, unset) for key, unset in WIRE}, separators=(",", ":"))
        sqs = private_client(self.relay.stack, "sqs")
        sqs.send_message(QueueUrl=self.relay.stack.queue_urls["ChecksQueue"], MessageBody=body)

    def sweep(self) -> None:
        """EventBridge's schedule, once: the stack's own timer is set to a day."""
        self.relay.stack.invoke("SweeperFunction", {"source": "aws.events", "detail-type": "Scheduled Event"})
