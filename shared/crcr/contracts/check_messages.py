"""ChecksQueue's messages: one model per kind, read and written in the one flat layout every release has queued."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)

from crcr.contracts.messages import MAX_ATTEMPT

RunId = Annotated[str, BeforeValidator(str)]  # a number in messages sent before Buildkite

# The queue body's layout, in order, with each key's value when a kind does not carry it: messages queued by earlier
# releases (one model for every kind) hold every key, and what is sent now still holds every key, byte for byte.
WIRE: tuple[tuple[str, Any], ...] = (
    ("schema_version", 1), ("kind", None), ("upstream", None), ("head_sha", None), ("delivery_id", ""), ("repo", ""),
    ("dispatch_id", ""), ("run_id", "0"), ("run_attempt", 0), ("job_name", ""), ("workflow_name", ""),
    ("superseded_by", None), ("reason", ""), ("ciflow", None), ("comment_id", None), ("reaction", None), ("pr", None),
    ("requested_by", "relay"), ("render", None), ("attempt", 0), ("not_before", None), ("slot_at", None),
)  # fmt: skip
_UNSET = dict(WIRE)
JOB_KEYS = ("dispatch_id", "run_id", "run_attempt", "job_name")


class JobKey(BaseModel):
    """A job attempt as the results table keys it (a run alone: `run_id`, the rest left empty)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dispatch_id: str = ""
    run_id: RunId = "0"
    run_attempt: int = 0
    job_name: str = ""


class CheckMessage(BaseModel):
    """What every kind names: the commit whose check runs (or PR) to look at again; never what to write."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, serialize_by_alias=True)

    schema_version: Literal[1] = 1
    upstream: str
    head_sha: str

    @model_validator(mode="before")
    @classmethod
    def _from_wire(cls, data: Any) -> Any:
        """The flat layout into this kind's fields: a job's four keys into `job`, and the keys of other kinds dropped
        while they hold nothing (a key another kind fills is refused, naming it)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "job" in cls.model_fields and "job" not in data and any(k in data for k in JOB_KEYS):
            data["job"] = {k: data.pop(k) for k in JOB_KEYS if k in data}
        mine = {info.alias or name for name, info in cls.model_fields.items()} | set(cls.model_fields)
        for key in [k for k in data if k in _UNSET and k not in mine]:
            if data[key] == _UNSET[key] or (key == "run_id" and str(data[key]) == "0"):
                del data[key]
        return data

    @model_serializer(mode="wrap")
    def _to_wire(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        mine: dict[str, Any] = handler(self)
        mine |= mine.pop("job", None) or {}
        return {key: mine.get(key, unset) for key, unset in WIRE}


class Resent(CheckMessage):
    """A kind that goes back to the queue to wait (paced, busy, backing off): its attempts and the slot it holds."""

    attempt: int = Field(default=0, ge=0, le=MAX_ATTEMPT)
    not_before: float | None = None
    slot_at: float | None = None  # a pacing slot booked for this message's next write


class HeadPass(Resent):
    """A pass over every check run of a commit. `ticket`: the pass booked in the head's row, which alone may run it
    (None: a pass of its own, e.g. one redriven from the dead-letter queue)."""

    kind: Literal["head"] = "head"
    ticket: str | None = Field(default=None, alias="render")
    repo: str = ""  # a pass dead-lettered for a check run GitHub refused: that check run's repository


class JobChanged(CheckMessage):
    """A job changed (a late label's backfill names each job it mirrors): books its commit's pass."""

    kind: Literal["job"] = "job"
    delivery_id: str = ""
    repo: str = ""
    job: JobKey = JobKey()


class DispatchChanged(CheckMessage):
    """A dispatch changed (sent by releases before passes existed): books its commit's pass."""

    kind: Literal["repo"] = "repo"
    delivery_id: str = ""
    repo: str = ""


class HeadSuperseded(Resent):
    """A newer commit was pushed to the PR: this commit's check runs still queued are cancelled, naming it."""

    kind: Literal["cancel"] = "cancel"
    superseded_by: str | None = None
    pr: int | None = None  # the pass reads the PR's head: a commit it went back to meanwhile stays


class RepoSkipped(Resent):
    """A repository the change did not concern (its path filters): its required check, concluded skipped."""

    kind: Literal["skip"] = "skip"
    delivery_id: str = ""
    repo: str = ""
    pr: int | None = None
    reason: str = ""
    ciflow: str | None = None  # of a ciflow/<name> tag push (its check run carries the name)


class CommentRequest(Resent):
    """The PR's comment brought up to date. `ticket`: None asks for a render; otherwise the render booked in the PR's
    row, which alone may write the comment (a burst of requests is merged into it)."""

    kind: Literal["comment"] = "comment"
    pr: int | None = None
    ticket: str | None = Field(default=None, alias="render")


class RerunRequest(Resent):
    """A re-run of a downstream run: the relay's one retry of an infrastructure failure (naming the failed job), or
    one asked for from the Checks tab or a PR comment (naming the run)."""

    kind: Literal["rerun"] = "rerun"
    requested_by: Literal["relay", "checks_tab", "comment"] = "relay"
    delivery_id: str = ""
    repo: str = ""
    pr: int | None = None
    job: JobKey = JobKey()

    @property
    def run_id(self) -> str:
        """The downstream run to re-run."""
        return self.job.run_id


class Reaction(Resent):
    """The answer to a PR comment command: a reaction (`rocket`, `confused`) on the command's comment."""

    kind: Literal["react"] = "react"
    delivery_id: str = ""
    pr: int | None = None
    comment_id: int | None = None
    reaction: str | None = None


class RegressionNotice(Resent):
    """A regression's one notice, on the PR of its first failing commit (`head_sha`), naming its job."""

    kind: Literal["notice"] = "notice"
    repo: str = ""
    pr: int | None = None
    workflow_name: str = ""
    job_name: str = ""


CheckSync = Annotated[
    HeadPass | JobChanged | DispatchChanged | HeadSuperseded | RepoSkipped | CommentRequest | RerunRequest | Reaction
    | RegressionNotice,
    Field(discriminator="kind"),
]  # fmt: skip
CHECK_SYNC: TypeAdapter[CheckSync] = TypeAdapter(CheckSync)
# The kinds that go back to the queue to wait (Resent's).
Waiting = HeadPass | HeadSuperseded | RepoSkipped | CommentRequest | RerunRequest | Reaction | RegressionNotice


def read_check_sync(body: str | bytes) -> CheckSync:
    """A ChecksQueue body as any release sent it, as the model of its kind (ValidationError names what is wrong)."""
    return CHECK_SYNC.validate_json(body)
