"""GitHub's Actions runs of a downstream, read with an actions:read token of that repository's own installation:
the DispatchRuns and RunFinder ports (a `repository_dispatch` run found by the dispatch id in its title) and the
RunRecords port (a run, and one attempt's jobs)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from crcr.adapters.github import GitHubApp
from crcr.app.outbound import GITHUB, Permit, require
from crcr.app.ports.github import GitHubRejected
from crcr.app.ports.runs import GitHubJob, GitHubRun, RunSearch, Search
from crcr.domain.identity import workflow_ref
from crcr.domain.runs import RELAY_EVENTS, timestamp

RUNS_PER_PAGE = 100
MAX_PAGES = 3  # 300 dispatch runs created since the event was planned: more than any downstream starts
JOBS_PER_PAGE = 100
MAX_JOB_PAGES = 10  # 1,000 jobs: GitHub's matrix allows 256 per job, a run seldom has more than a few hundred


class GitHubDispatchRuns:
    def __init__(self, github: GitHubApp) -> None:
        self._github = github

    def _auth(self, repo: str) -> str:
        token = self._github.repo_token(self._github.installation_for(repo), repo, {"actions": "read"})
        return f"Bearer {token.token}"

    def _runs(self, repo: str, since: float, event: str | None) -> Iterator[dict[str, Any]]:
        """The runs of `repo` created since `since` (of one event, or any), newest first, page by page."""
        created = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        only = f"event={event}&" if event else ""
        auth = self._auth(repo)
        for page in range(1, MAX_PAGES + 1):
            resp = self._github.request(
                "GET",
                f"/repos/{quote(repo, safe='/')}/actions/runs?{only}"
                f"created=%3E%3D{quote(created)}&per_page={RUNS_PER_PAGE}&page={page}",
                auth,
                kind="runs",
            )
            runs = (resp.body or {}).get("workflow_runs") or [] if isinstance(resp.body, dict) else []
            yield from runs
            if len(runs) < RUNS_PER_PAGE:
                return

    def find(self, repo: str, dispatch_id: str, since: float) -> str | None:
        for run in self._runs(repo, since, "repository_dispatch"):
            if dispatch_id in str(run.get("display_title") or ""):
                return str(run["id"])
        return None

    def search(self, repo: str, dispatch_id: str, since: float) -> RunSearch:
        """Every run created since then, of either event the relay dispatches with (repository_dispatch, or an
        allowlist entry's workflow_dispatch): one listing serves both."""
        seen = 0
        for run in self._runs(repo, since, None):
            if run.get("event") not in RELAY_EVENTS:
                continue
            seen += 1
            if dispatch_id in str(run.get("display_title") or ""):
                return RunSearch(Search.FOUND, str(run["id"]))
        return RunSearch(Search.UNTITLED if seen else Search.NO_RUN)

    def title(self, repo: str, run_id: str) -> str:
        resp = self._github.request(
            "GET", f"/repos/{quote(repo, safe='/')}/actions/runs/{run_id}", self._auth(repo), kind="run"
        )
        body = resp.body if isinstance(resp.body, dict) else {}
        return str(body.get("display_title") or "")

    def run(self, repo: str, run_id: str) -> GitHubRun | None:
        try:
            resp = self._github.request(
                "GET", f"/repos/{quote(repo, safe='/')}/actions/runs/{run_id}", self._auth(repo), kind="run"
            )
        except GitHubRejected as exc:
            if exc.status in (404, 410):
                return None
            raise
        body = resp.body if isinstance(resp.body, dict) else {}
        repository, head = _object(body.get("repository")), _object(body.get("head_repository"))
        name = str(repository.get("full_name") or "")
        path, branch = body.get("path"), body.get("head_branch")
        return GitHubRun(
            run_id=str(body.get("id") or run_id),
            attempt=int(body.get("run_attempt") or 1),
            status=str(body.get("status") or ""),
            conclusion=body.get("conclusion") if isinstance(body.get("conclusion"), str) else None,
            url=str(body.get("html_url") or ""),
            workflow_name=str(body.get("name") or ""),
            repo=name,
            repository_id=_id(repository.get("id")),
            owner_id=_id(_object(repository.get("owner")).get("id")),
            workflow=workflow_ref(
                name, path if isinstance(path, str) else None, branch if isinstance(branch, str) else None
            ),
            head_repository_id=_id(head.get("id")),
        )

    def installation_for(self, repo: str) -> int:
        return self._github.installation_for(repo)

    def run_jobs(self, repo: str, run_id: str, attempt: int) -> list[GitHubJob]:
        auth = self._auth(repo)
        jobs: list[GitHubJob] = []
        for page in range(1, MAX_JOB_PAGES + 1):
            resp = self._github.request(
                "GET",
                f"/repos/{quote(repo, safe='/')}/actions/runs/{run_id}/attempts/{attempt}/jobs"
                f"?per_page={JOBS_PER_PAGE}&page={page}",
                auth,
                kind="run_jobs",
            )
            listed = (resp.body or {}).get("jobs") or [] if isinstance(resp.body, dict) else []
            jobs += [job for item in listed if (job := _job(item)) is not None]
            if 'rel="next"' not in resp.headers.get("link", "") or len(listed) < JOBS_PER_PAGE:
                break
        return jobs


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _id(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _job(item: Any) -> GitHubJob | None:
    if not isinstance(item, dict) or not isinstance(item.get("id"), int) or not isinstance(item.get("name"), str):
        return None
    conclusion = item.get("conclusion")
    return GitHubJob(
        id=item["id"],
        name=item["name"][:200],
        status=str(item.get("status") or ""),
        conclusion=conclusion if isinstance(conclusion, str) else None,
        started_at=timestamp(item.get("started_at")),
        completed_at=timestamp(item.get("completed_at")),
        url=str(item.get("html_url") or ""),
    )


class GitHubWorkflows:
    """The Workflows port: `workflow_dispatch` of one workflow file with an actions:write token of the downstream,
    asking for the new run's details (GitHub.com since February 2026)."""

    def __init__(self, github: GitHubApp) -> None:
        self._github = github

    def dispatch_workflow(
        self, repo: str, file: str, ref: str, inputs: dict[str, str], *, permit: Permit
    ) -> str | None:
        """The new run's id, or None when GitHub answered 204 without it (GitHub Enterprise Server before the
        parameter, which it ignores)."""
        token = self._github.repo_token(self._github.installation_for(repo), repo, {"actions": "write"})
        resp = self._github.request(
            "POST",
            f"/repos/{quote(repo, safe='/')}/actions/workflows/{quote(file, safe='')}/dispatches",
            f"Bearer {token.token}",
            {"ref": ref, "inputs": inputs, "return_run_details": True},
            kind="dispatch",
            permit=require(permit, GITHUB, "dispatch", repo),
        )
        body = resp.body if isinstance(resp.body, dict) else {}
        run_id = body.get("workflow_run_id")
        return str(run_id) if isinstance(run_id, int) and not isinstance(run_id, bool) and run_id > 0 else None
