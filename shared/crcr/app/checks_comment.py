"""ChecksQueue's `comment`: the PR comment shares the queue and the installation's budget (crcr.app.comment)."""

from __future__ import annotations

from crcr.app.checks_outcome import SyncOutcome
from crcr.app.comment import CommentDeps, sync_comment
from crcr.app.ports import Metrics
from crcr.contracts.check_messages import CommentRequest


def comment(message: CommentRequest, deps: CommentDeps | None, metrics: Metrics) -> SyncOutcome:
    if deps is None:
        metrics.count("PrCommentSkipped", reason="off")
        return SyncOutcome(detail="comment off")
    result = sync_comment(message, deps)
    return SyncOutcome(result.written, result.detail, result.delay_s)
