"""GitHub as the use cases see it: its errors, which tell them how to react, a repository token, and the runs a
dispatch created."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class RepoToken:
    token: str
    repo_id: int
    full_name: str
    expires_at: float


class GitHubError(Exception):
    """Base of errors the GitHub adapter raises; each tells the use case how to react."""


class GitHubUnavailable(GitHubError):
    """5xx, timeout or connection failure: retry with backoff."""


class GitHubRateLimited(GitHubError):
    def __init__(self, wait_s: float, message: str) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class GitHubRejected(GitHubError):
    """A 4xx that retrying will not fix."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class NotInstalled(GitHubError):
    """The App is not installed on the repository."""


class DispatchRuns(Protocol):
    def find(self, repo: str, dispatch_id: str, since: float) -> str | None:
        """The id of a `repository_dispatch` run of `repo` created since then whose title (its `run-name`) carries
        the dispatch id, or None."""
        ...

    def title(self, repo: str, run_id: str) -> str:
        """A run's title (its resolved `run-name`)."""
        ...
