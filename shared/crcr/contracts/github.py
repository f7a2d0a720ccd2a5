"""Inbound GitHub payloads (webhooks, the App's delivery list): only the fields the relay reads, held to what GitHub
itself sends (40-hex SHAs, bounded refs, ASCII names, ids that fit the tables)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from crcr.domain.ids import MAX_REF_BYTES, SHA_PATTERN, is_ref, is_repo_name

MAX_LABELS = 500  # GitHub allows far fewer on one PR; 500 of 100 characters keep the PR's row under 400 KB
MAX_LABEL_CHARS = 100  # GitHub: 50
_GIT_CHARS = "no control characters, spaces or any of ~ ^ : ? * [ \\"


def _ref(value: str) -> str:
    if not is_ref(value):
        raise ValueError(f"must be a git ref (refs/…) of at most {MAX_REF_BYTES} bytes with {_GIT_CHARS}")
    return value


def _branch(value: str) -> str:
    if not is_ref(value, branch=True):
        raise ValueError(f"must be a branch name of at most {MAX_REF_BYTES} bytes as refs/heads/… with {_GIT_CHARS}")
    return value


def _repo_name(value: str) -> str:
    if not is_repo_name(value):
        raise ValueError("must be owner/name of ASCII letters, digits, '.', '_' and '-'")
    return value


Sha = Annotated[str, Field(pattern=SHA_PATTERN)]
Ref = Annotated[str, AfterValidator(_ref)]
Branch = Annotated[str, AfterValidator(_branch)]
RepoName = Annotated[str, AfterValidator(_repo_name)]
GitHubId = Annotated[int, Field(gt=0, lt=2**63)]
IssueNumber = Annotated[int, Field(gt=0, lt=2**31)]  # GitHub's issue numbers stop at 2**30
ShortText = Annotated[str, Field(max_length=40)]  # timestamps, states, associations
MAX_TITLE_CHARS = 200


def _title(value: object) -> str | None:
    """A title, commit message or name as the HUD pages show it: its first line, cut to 200 characters. Never a
    reason to refuse an event: anything but text is no title."""
    if not isinstance(value, str):
        return None
    return value.strip().split("\n", 1)[0].strip()[:MAX_TITLE_CHARS] or None


Title = Annotated[str | None, BeforeValidator(_title)]


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Account(_In):
    login: str
    type: ShortText | None = None  # User, Bot, Organization


class Repository(_In):
    id: GitHubId | None = None
    full_name: RepoName
    default_branch: Branch | None = None


class ForkRepository(_In):
    """The repository a PR's head or base lives in (a fork's, for PRs from forks): downstreams check it out."""

    full_name: RepoName


class Label(_In):
    name: Annotated[str, Field(max_length=MAX_LABEL_CHARS)]


class GitRef(_In):
    ref: Branch
    sha: Sha
    repo: ForkRepository | None = None  # null when the fork was deleted


class PullRequest(_In):
    number: IssueNumber
    head: GitRef
    base: GitRef
    draft: bool = False
    state: ShortText | None = None
    author_association: ShortText | None = None
    user: Account | None = None
    labels: Annotated[list[Label], Field(max_length=MAX_LABELS)] = []
    updated_at: ShortText | None = None
    changed_files: Annotated[int, Field(ge=0, lt=2**31)] | None = None
    title: Title = None
    merged: bool | None = None


class Installation(_In):
    id: GitHubId


class PullRequestEvent(_In):
    action: str
    number: IssueNumber | None = None
    pull_request: PullRequest
    repository: Repository
    label: Label | None = None
    sender: Account | None = None
    installation: Installation | None = None


class CommitAuthor(_In):
    name: Title = None
    username: Title = None


# The trailer PyTorch's merge bot writes in the commit it pushes to the default branch for a PR it merged (GitHub
# then closes the PR without `merged`): the PR's URL.
RESOLVED_TRAILER = re.compile(
    r"^Pull Request resolved: https://github\.com/([A-Za-z0-9._-]{1,100}/[A-Za-z0-9._-]{1,100})/pull/([1-9][0-9]{0,9})\s*$",
    re.MULTILINE,
)


class PushCommit(_In):
    id: Sha
    timestamp: ShortText | None = None
    message: Title = None
    author: CommitAuthor | None = None
    added: list[str] | None = None
    modified: list[str] | None = None
    removed: list[str] | None = None
    resolves: tuple[str, int] | None = None  # (repository, PR number) the message's merge-bot trailer names

    @model_validator(mode="before")
    @classmethod
    def _trailer(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        message = data.get("message")
        data = {k: v for k, v in data.items() if k != "resolves"}  # derived here only, never taken from the body
        found = RESOLVED_TRAILER.search(message[-20_000:]) if isinstance(message, str) else None  # trailers end it
        if found:
            data["resolves"] = (found.group(1), int(found.group(2)))
        return data


class PushEvent(_In):
    ref: Ref
    after: Sha
    before: Sha | None = None
    commits: list[PushCommit] = []
    head_commit: PushCommit | None = None
    deleted: bool = False
    repository: Repository
    sender: Account | None = None
    installation: Installation | None = None


class CheckRunRef(_In):
    id: GitHubId
    name: Annotated[str, Field(max_length=1000)]
    head_sha: Sha
    external_id: Annotated[str, Field(max_length=1000)] | None = None


class CheckSuiteRef(_In):
    id: GitHubId
    head_sha: Sha


class CheckRunEvent(_In):
    action: str
    check_run: CheckRunRef
    repository: Repository


class CheckSuiteEvent(_In):
    action: str
    check_suite: CheckSuiteRef
    repository: Repository


class IssueRef(_In):
    number: IssueNumber
    pull_request: dict[str, object] | None = None  # present when the issue is a pull request


class IssueComment(_In):
    id: GitHubId
    body: Annotated[str, Field(max_length=65_536)] = ""
    user: Account | None = None
    author_association: ShortText | None = None


class IssueCommentEvent(_In):
    """A comment on an upstream issue or PR: `@<app> rerun …` commands (crcr.domain.commands)."""

    action: str
    issue: IssueRef
    comment: IssueComment
    repository: Repository
    sender: Account | None = None
    installation: Installation | None = None


class HookDeliveryItem(_In):
    """One item of `GET /app/hook/deliveries` (GitHub's hook-delivery-item): an attempt to deliver an event."""

    id: int
    guid: str
    delivered_at: str
    redelivery: bool = False
    status_code: int
    event: str
    action: str | None = None
    repository_id: int | None = None


class AnyEvent(_In):
    """What ingest reads of every event: whose repository it is about and what happened."""

    action: Annotated[str, Field(max_length=100)] | None = None
    repository: Repository | None = None


class Owner(_In):
    id: GitHubId | None = None


class RunRepository(_In):
    """A run's repository (or its head repository, a fork's for a fork's run): who ran it, for the inbound door."""

    id: GitHubId | None = None
    full_name: RepoName
    owner: Owner | None = None


class WorkflowRunRef(_In):
    """`workflow_run` of a downstream's run event: what binds the run to a dispatch and what it became."""

    id: GitHubId
    path: Annotated[str, Field(max_length=1_000)] = ""  # the workflow file, `.github/workflows/ci.yml`
    head_branch: Annotated[str, Field(max_length=MAX_REF_BYTES)] | None = None
    head_repository: RunRepository | None = None
    name: Title = None  # the workflow's name
    display_title: Annotated[str, Field(max_length=4_096)] = ""  # the resolved run-name
    event: ShortText  # repository_dispatch, workflow_dispatch, push, schedule...
    status: ShortText | None = None
    conclusion: ShortText | None = None
    run_attempt: Annotated[int, Field(ge=1, le=1_000)] = 1
    html_url: Annotated[str, Field(max_length=2_048)] = ""


class WorkflowRunEvent(_In):
    """A downstream's `workflow_run` event (requested, in_progress, completed): GitHub's word on a run, signed."""

    action: ShortText
    workflow_run: WorkflowRunRef
    repository: RunRepository
    installation: Installation | None = None
