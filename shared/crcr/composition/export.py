"""ExportFunction's dependencies: DynamoDB's exports of the results table into the exports bucket."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics
from crcr.composition.base import aws_client
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.app.scheduled_export import ExportDeps


def build_export_deps(settings: Settings) -> ExportDeps:
    """The results table's scheduled export: DynamoDB's exports into the exports bucket, the last one's end kept in
    the state table."""
    from crcr.adapters.scheduled_export import DynamoExportMarks, DynamoTableExports  # noqa: PLC0415
    from crcr.app.scheduled_export import ExportDeps  # noqa: PLC0415

    settings.require("results_table", "state_table", "exports_bucket")
    ddb = aws_client("dynamodb")
    return ExportDeps(
        exports=DynamoTableExports(ddb, str(settings.results_table), str(settings.exports_bucket)),
        marks=DynamoExportMarks(ddb, str(settings.state_table), str(settings.results_table)),
        metrics=PowertoolsMetrics(),
        clock=SystemClock(),
    )
