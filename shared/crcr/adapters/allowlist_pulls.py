"""The AllowlistPulls port on GitHub: the demotion PR in the repository that holds the allowlist, with a token for that
repository alone (contents:write, pull_requests:write; its endpoints are in docs/contracts.md)."""

from __future__ import annotations

import base64
from urllib.parse import quote

from crcr.adapters.github import GitHubApp
from crcr.app.outbound import GITHUB, Permit, require
from crcr.app.ports.github import GitHubRejected
from crcr.app.ports.levels import PullRef

PULL_PERMISSIONS = {"contents": "write", "pull_requests": "write"}


def _q(text: str) -> str:
    return quote(text, safe="/")


class GitHubAllowlistPulls:
    def __init__(self, github: GitHubApp, repo: str, path: str, base: str) -> None:
        self._github = github
        self._repo = repo
        self._path = path
        self._base = base

    @property
    def repo(self) -> str:
        return self._repo

    @property
    def path(self) -> str:
        return self._path

    @property
    def base(self) -> str:
        return self._base

    def installation_for(self, repo: str) -> int:
        return self._github.installation_for(repo)

    def _auth(self) -> str:
        token = self._github.repo_token(self._github.installation_for(self._repo), self._repo, PULL_PERMISSIONS)
        return f"Bearer {token.token}"

    def _url(self, tail: str) -> str:
        return f"/repos/{_q(self._repo)}/{tail}"

    def find_open(self, branch: str) -> PullRef | None:
        owner = self._repo.split("/", 1)[0]
        resp = self._github.request(
            "GET",
            self._url(f"pulls?state=open&head={quote(f'{owner}:{branch}', safe='')}&base={quote(self._base, safe='')}"),
            self._auth(),
            kind="pulls",
        )
        found = resp.body if isinstance(resp.body, list) else []
        if not found:
            return None
        pull = found[0]
        return PullRef(int(pull["number"]), str(pull.get("body") or ""), str(pull.get("title") or ""))

    def base_sha(self) -> str:
        resp = self._github.request("GET", self._url(f"git/ref/heads/{_q(self._base)}"), self._auth(), kind="git")
        return str(resp.body["object"]["sha"])

    def read_file(self, ref: str) -> tuple[str, str]:
        resp = self._github.request(
            "GET", self._url(f"contents/{_q(self._path)}?ref={quote(ref, safe='')}"), self._auth(), kind="contents"
        )
        return base64.b64decode(resp.body["content"]).decode(), str(resp.body["sha"])

    def prepare_branch(self, branch: str, sha: str, *, permit: Permit) -> None:
        try:
            self._github.request(
                "POST",
                self._url("git/refs"),
                self._auth(),
                {"ref": f"refs/heads/{branch}", "sha": sha},
                kind="git",
                permit=require(permit, GITHUB, "level_pr"),
            )
        except GitHubRejected as exc:
            if exc.status != 422:  # 422: the branch exists (an earlier PR's): start it again at the base
                raise
            self._github.request(
                "PATCH",
                self._url(f"git/refs/heads/{_q(branch)}"),
                self._auth(),
                {"sha": sha, "force": True},
                kind="git",
                permit=require(permit, GITHUB, "level_pr"),
            )

    def write_file(self, branch: str, text: str, blob_sha: str, message: str, *, permit: Permit) -> None:
        body = {
            "message": message,
            "content": base64.b64encode(text.encode()).decode(),
            "sha": blob_sha,
            "branch": branch,
        }
        self._github.request(
            "PUT",
            self._url(f"contents/{_q(self._path)}"),
            self._auth(),
            body,
            kind="contents",
            permit=require(permit, GITHUB, "level_pr"),
        )

    def open_pull(self, branch: str, title: str, body: str, labels: list[str], *, permit: Permit) -> int:
        try:
            resp = self._github.request(
                "POST",
                self._url("pulls"),
                self._auth(),
                {"title": title, "head": branch, "base": self._base, "body": body, "maintainer_can_modify": True},
                kind="pulls",
                permit=require(permit, GITHUB, "level_pr"),
            )
            number = int(resp.body["number"])
        except GitHubRejected as exc:
            # 422 when one is open from the branch already (an earlier run stopped before labelling it): that one.
            existing = self.find_open(branch) if exc.status == 422 else None
            if existing is None:
                raise
            number = existing.number
        if labels:
            self._github.request(
                "POST",
                self._url(f"issues/{number}/labels"),
                self._auth(),
                {"labels": labels},
                kind="labels",
                permit=require(permit, GITHUB, "level_pr"),
            )
        return number

    def update_pull(self, number: int, title: str, body: str, *, permit: Permit) -> None:
        self._github.request(
            "PATCH",
            self._url(f"pulls/{number}"),
            self._auth(),
            {"title": title, "body": body},
            kind="pulls",
            permit=require(permit, GITHUB, "level_pr"),
        )

    def close_pull(self, number: int, comment: str, *, permit: Permit) -> None:
        self._github.request(
            "POST",
            self._url(f"issues/{number}/comments"),
            self._auth(),
            {"body": comment},
            kind="comment",
            permit=require(permit, GITHUB, "level_pr"),
        )
        self._github.request(
            "PATCH",
            self._url(f"pulls/{number}"),
            self._auth(),
            {"state": "closed"},
            kind="pulls",
            permit=require(permit, GITHUB, "level_pr"),
        )
