"""PR comment commands on GitHub: who the commenter is to the upstream (`GET collaborators/{user}/permission`) and
the answer (`POST issues/comments/{id}/reactions`), each with a token for the upstream alone."""

from __future__ import annotations

from urllib.parse import quote

from crcr.adapters.github import COMMENT_PERMISSIONS, GitHubApp
from crcr.app.ports.github import GitHubRejected


class GitHubCommands:
    """The Collaborators and Reactions ports."""

    def __init__(self, github: GitHubApp) -> None:
        self._github = github

    def installation_for(self, upstream: str) -> int:
        return self._github.installation_for(upstream)

    def _auth(self, upstream: str, permissions: dict[str, str]) -> str:
        token = self._github.repo_token(self._github.installation_for(upstream), upstream, permissions)
        return f"Bearer {token.token}"

    def role(self, upstream: str, login: str) -> str | None:
        try:
            resp = self._github.request(
                "GET",
                f"/repos/{quote(upstream, safe='/')}/collaborators/{quote(login, safe='')}/permission",
                self._auth(upstream, {"metadata": "read"}),
                kind="permission",
            )
        except GitHubRejected as exc:
            if exc.status == 404:  # no such user
                return None
            raise
        body = resp.body if isinstance(resp.body, dict) else {}
        role = body.get("role_name") or body.get("permission")
        return str(role) if role else None

    def react(self, upstream: str, comment_id: int, content: str) -> None:
        self._github.request(
            "POST",
            f"/repos/{quote(upstream, safe='/')}/issues/comments/{comment_id}/reactions",
            self._auth(upstream, COMMENT_PERMISSIONS),
            {"content": content},
            kind="reaction",
        )
