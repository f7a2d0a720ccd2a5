"""PR comment commands on GitHub: who the commenter is to the upstream (`GET collaborators/{user}/permission`) and
the answer (`POST issues/comments/{id}/reactions`), each with a token for the upstream alone."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import quote

from crcr.adapters.github import COMMENT_PERMISSIONS, GitHubApp
from crcr.app.outbound import GITHUB, Permit, require
from crcr.app.ports.github import GitHubRejected

ROLE_MEMORY_S = 600.0  # a person's role is asked again after this (a removed collaborator loses it within it)
ROLES_KEPT = 1024


class GitHubCommands:
    """The Collaborators and Reactions ports. A role GitHub gave is remembered by this instance for ten minutes:
    sixty comments from one person cost one read, not sixty."""

    def __init__(self, github: GitHubApp, clock: Callable[[], float] = time.monotonic) -> None:
        self._github = github
        self._clock = clock
        self._roles: OrderedDict[tuple[str, str], tuple[float, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def installation_for(self, upstream: str) -> int:
        return self._github.installation_for(upstream)

    def _auth(self, upstream: str, permissions: dict[str, str]) -> str:
        token = self._github.repo_token(self._github.installation_for(upstream), upstream, permissions)
        return f"Bearer {token.token}"

    def role(self, upstream: str, login: str) -> str | None:
        key, now = (upstream.lower(), login.lower()), self._clock()
        # One question at a time (comments are rare; two at once would both ask GitHub for the same answer).
        with self._lock:
            kept = self._roles.get(key)
            if kept is not None and now - kept[0] < ROLE_MEMORY_S:
                return kept[1]
            role = self._ask_role(upstream, login)
            self._roles[key] = (now, role)
            self._roles.move_to_end(key)
            while len(self._roles) > ROLES_KEPT:
                self._roles.popitem(last=False)
        return role

    def _ask_role(self, upstream: str, login: str) -> str | None:
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

    def react(self, upstream: str, comment_id: int, content: str, *, permit: Permit) -> None:
        self._github.request(
            "POST",
            f"/repos/{quote(upstream, safe='/')}/issues/comments/{comment_id}/reactions",
            self._auth(upstream, COMMENT_PERMISSIONS),
            {"content": content},
            kind="reaction",
            permit=require(permit, GITHUB, "reaction"),
        )
