"""The scheduled export's ports on DynamoDB: exports of the results table started into the exports bucket
(TableExports), and the export marks, where the last one ended (state table `EXPORT#<table>`, `LAST`; ExportMarks)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import applied, key


class DynamoTableExports:
    """The TableExports port: `ExportTableToPointInTime` as DYNAMODB_JSON into the bucket."""

    def __init__(self, client: Any, table: str, bucket: str, root: str = "exports") -> None:
        self._ddb = client
        self._table = table
        self._bucket = bucket
        self._root = root.strip("/")
        self._arn: str | None = None

    def _table_arn(self) -> str:
        if self._arn is None:
            self._arn = str(self._ddb.describe_table(TableName=self._table)["Table"]["TableArn"])
        return self._arn

    def _start(self, prefix: str, **how: Any) -> str:
        got = self._ddb.export_table_to_point_in_time(
            TableArn=self._table_arn(),
            S3Bucket=self._bucket,
            S3Prefix=f"{self._root}/{prefix}",
            ExportFormat="DYNAMODB_JSON",
            **how,
        )
        return str(got["ExportDescription"]["ExportArn"])

    def start_full(self, prefix: str, at: float) -> str:
        return self._start(prefix, ExportTime=datetime.fromtimestamp(at, UTC), ExportType="FULL_EXPORT")

    def start_incremental(self, prefix: str, start: float, end: float) -> str:
        spec = {
            "ExportFromTime": datetime.fromtimestamp(start, UTC),
            "ExportToTime": datetime.fromtimestamp(end, UTC),
            "ExportViewType": "NEW_AND_OLD_IMAGES",
        }
        return self._start(prefix, ExportType="INCREMENTAL_EXPORT", IncrementalExportSpecification=spec)


class DynamoExportMarks:
    """The ExportMarks port: one item, advanced only forwards (two runs at once: the later end stays)."""

    def __init__(self, client: Any, table: str, results_table: str) -> None:
        self._ddb = client
        self._table = table
        self._key = key(f"EXPORT#{results_table}", "LAST")

    def last(self) -> float | None:
        item = self._ddb.get_item(TableName=self._table, Key=self._key, ConsistentRead=True).get("Item")
        return float(from_dynamo(item)["to"]) if item else None

    def advance(self, to: float) -> bool:
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=self._key,
            UpdateExpression="SET #to = :to",
            ConditionExpression="attribute_not_exists(#to) OR #to < :to",
            ExpressionAttributeNames={"#to": "to"},
            ExpressionAttributeValues=to_dynamo({":to": to}),
        )
