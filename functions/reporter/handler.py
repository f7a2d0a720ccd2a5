"""ReporterFunction: ResultsTable stream -> the HUD pages' documents and the check-run pass of each commit changed,
per batch; then one push to PyTorch's HUD per recorded job change, in order per shard."""

from __future__ import annotations

from typing import Any

from crcr.adapters.observability import logger, metrics
from crcr.adapters.stream import images
from crcr.app.report import ReportDeps, ask_passes, judge, report_change, summarise, track_regressions
from crcr.composition.base import freeze_gc, load_settings
from crcr.composition.reporter import build_report_deps

_deps: ReportDeps | None = None


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any, deps: ReportDeps | None = None) -> dict[str, Any]:
    global _deps
    ready = deps or _deps or (_deps := freeze_gc(build_report_deps(load_settings())))
    # TTL expiries and deletes have no new image: nothing to report.
    received = [(record, old, new) for record in event.get("Records") or [] for old, new in [images(record)] if new]
    try:
        # A failed L3/L4 PR job first gets its verdict on its row; the row's next image reports it.
        changes = [(record, old, new) for record, old, new in received if judge(old, new, ready)]
        summarise([(old, new) for _, old, new in changes], ready)
        ask_passes([(old, new) for _, old, new in changes], ready)
        for job, exc in track_regressions([(old, new) for _, old, new in changes], ready):
            logger.warning(
                "regression tracking failed (advisory: the job's next result looks again)",
                extra={"delivery_id": job.delivery_id, "target_repo": job.repo, "job": job.job_name}
                | {"error": repr(exc)},
            )
    except Exception:
        logger.exception("verdicts or HUD pages not updated; the stream retries the batch")
        return _retry_from(received[0][0])
    for record, old, new in changes:
        logger.set_correlation_id(new.delivery_id)
        try:
            hud = report_change(old, new, ready)
        except Exception:
            # Stream order matters: report this record and everything after it for a retry.
            logger.exception("HUD push failed; the stream retries from this record", extra={"target_repo": new.repo})
            return _retry_from(record)
        if hud is not None:
            logger.info(
                "reported",
                extra={
                    "delivery_id": new.delivery_id,  # the logger's correlation id is per process, not per record
                    "target_repo": new.repo,
                    "job": f"{new.workflow_name}/{new.job_name}",
                    "run_id": new.run_id,
                    "state": new.state,
                    "conclusion": new.conclusion,
                    "verdict": new.verdict,
                    "hud": hud,
                },
            )
    return {"batchItemFailures": []}


def _retry_from(record: dict[str, Any]) -> dict[str, Any]:
    return {"batchItemFailures": [{"itemIdentifier": record["dynamodb"]["SequenceNumber"]}]}
