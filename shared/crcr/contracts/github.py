"""Inbound GitHub webhook payloads: only the fields the relay reads, unknown fields ignored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Account(_In):
    login: str


class Repository(_In):
    id: int | None = None
    full_name: str
    default_branch: str | None = None


class Label(_In):
    name: str


class GitRef(_In):
    ref: str
    sha: str


class PullRequest(_In):
    number: int
    head: GitRef
    base: GitRef
    draft: bool = False
    state: str | None = None
    author_association: str | None = None
    user: Account | None = None
    labels: list[Label] = []
    updated_at: str | None = None


class Installation(_In):
    id: int


class PullRequestEvent(_In):
    action: str
    number: int | None = None
    pull_request: PullRequest
    repository: Repository
    label: Label | None = None
    sender: Account | None = None
    installation: Installation | None = None


class PushCommit(_In):
    id: str
    timestamp: str | None = None


class PushEvent(_In):
    ref: str
    after: str
    before: str | None = None
    commits: list[PushCommit] = []
    head_commit: PushCommit | None = None
    deleted: bool = False
    repository: Repository
    sender: Account | None = None
    installation: Installation | None = None


class CheckRunRef(_In):
    id: int
    name: str
    head_sha: str
    external_id: str | None = None


class CheckSuiteRef(_In):
    id: int
    head_sha: str


class CheckRunEvent(_In):
    action: str
    check_run: CheckRunRef
    repository: Repository


class CheckSuiteEvent(_In):
    action: str
    check_suite: CheckSuiteRef
    repository: Repository


class AnyEvent(_In):
    """What ingest reads of every event: whose repository it is about and what happened."""

    action: str | None = None
    repository: Repository | None = None
