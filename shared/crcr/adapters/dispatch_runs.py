"""The DispatchRuns port on GitHub: a downstream's `repository_dispatch` runs (`GET /repos/{r}/actions/runs`,
filtered by event and creation time) and one run's title, with an actions:read token for that repository."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

from crcr.adapters.github import GitHubApp

RUNS_PER_PAGE = 100
MAX_PAGES = 3  # 300 dispatch runs created since the event was planned: more than any downstream starts


class GitHubDispatchRuns:
    def __init__(self, github: GitHubApp) -> None:
        self._github = github

    def _auth(self, repo: str) -> str:
        token = self._github.repo_token(self._github.installation_for(repo), repo, {"actions": "read"})
        return f"Bearer {token.token}"

    def find(self, repo: str, dispatch_id: str, since: float) -> str | None:
        created = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        auth = self._auth(repo)
        for page in range(1, MAX_PAGES + 1):
            resp = self._github.request(
                "GET",
                f"/repos/{quote(repo, safe='/')}/actions/runs?event=repository_dispatch"
                f"&created=%3E%3D{quote(created)}&per_page={RUNS_PER_PAGE}&page={page}",
                auth,
                kind="runs",
            )
            runs = (resp.body or {}).get("workflow_runs") or [] if isinstance(resp.body, dict) else []
            for run in runs:
                if dispatch_id in str(run.get("display_title") or ""):
                    return str(run["id"])
            if len(runs) < RUNS_PER_PAGE:
                return None
        return None

    def title(self, repo: str, run_id: str) -> str:
        resp = self._github.request(
            "GET", f"/repos/{quote(repo, safe='/')}/actions/runs/{run_id}", self._auth(repo), kind="run"
        )
        body = resp.body if isinstance(resp.body, dict) else {}
        return str(body.get("display_title") or "")
