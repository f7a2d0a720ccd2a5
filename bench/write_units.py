"""DynamoDB write request units of what the relay wrote, from the tables' streams, as AWS bills on-demand tables."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[str, ...]
    projected: frozenset[str] | None  # the attributes an entry holds; None: the item's every one (ALL)


@dataclass(frozen=True)
class TableShape:
    keys: tuple[str, ...]
    indexes: tuple[Index, ...]


def shape_of(props: dict[str, Any]) -> TableShape:
    """A table's keys and global secondary indexes, from its template.yaml resource's properties."""
    keys, indexes = tuple(k["AttributeName"] for k in props["KeySchema"]), []
    for gsi in props.get("GlobalSecondaryIndexes") or []:
        index_keys, projection = tuple(k["AttributeName"] for k in gsi["KeySchema"]), gsi.get("Projection") or {}
        kept = frozenset((*index_keys, *keys, *(projection.get("NonKeyAttributes") or ())))
        whole = projection.get("ProjectionType", "ALL") == "ALL"
        indexes.append(Index(gsi["IndexName"], index_keys, None if whole else kept))
    return TableShape(keys, tuple(indexes))


def value_size(value: dict[str, Any]) -> int:
    (kind, v), *_ = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        digits = v.lstrip("-").replace(".", "").lstrip("0") or "0"
        return math.ceil(len(digits) / 2) + 1
    if kind == "B":
        return len(v) if isinstance(v, bytes) else math.ceil(len(v) * 3 / 4)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: x}) for x in v)
    if kind == "L":
        return 3 + sum(value_size(x) + 1 for x in v)
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(x) + 1 for k, x in v.items())
    return 0


def item_size(image: dict[str, Any] | None) -> int:
    return sum(len(name.encode()) + value_size(value) for name, value in (image or {}).items())


def units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def _entry(image: dict[str, Any] | None, index: Index) -> dict[str, Any] | None:
    """The index entry an item makes (None when it lacks an index key: a sparse index leaves it out)."""
    if image is None or any(k not in image for k in index.keys):
        return None
    return image if index.projected is None else {k: v for k, v in image.items() if k in index.projected}


def record_units(record: dict[str, Any], shape: TableShape) -> dict[str, int]:
    """Write units of one stream record: the table's, and each index's it touched (by index name)."""
    data = record.get("dynamodb") or {}
    old, new = data.get("OldImage"), data.get("NewImage")
    out = {"table": units(max(item_size(old), item_size(new)))}
    for index in shape.indexes:
        before, after = _entry(old, index), _entry(new, index)
        if before is not None and after is not None and any(before.get(k) != after.get(k) for k in index.keys):
            out[index.name] = units(item_size(before)) + units(item_size(after))  # moved: a delete and a put
        elif before != after:  # put, changed or removed
            out[index.name] = units(item_size(after if after is not None else before))
    return out


def read_all(reader: Any, *, unchanged: bool = False) -> list[dict[str, Any]]:
    """Every record of a table's stream since the last read, shard by shard; with `unchanged`, the writes that changed
    nothing too, which the reader's `read` leaves out (as Lambda sees none) and DynamoDB bills."""
    page_of = reader._next if unchanged else reader.read
    records: list[dict[str, Any]] = []
    for shard in reader.shards():
        while page := page_of(shard, 1000):
            records += page
    return records


class StreamUnits:
    """A table's stream from its start; `take()`: the write units since the last take, by kind of row and by where."""

    def __init__(self, reader: Any, shape: TableShape, row_of: Any = None) -> None:
        self._reader = reader
        self._shape = shape
        self._row_of = row_of or _prefix

    def take(self) -> dict[str, Any]:
        writes: Counter[str] = Counter()
        spent: Counter[str] = Counter()
        by_row: Counter[str] = Counter()
        for record in _writes(read_all(self._reader, unchanged=True), self._shape):
            data = record.get("dynamodb") or {}
            row = self._row_of(data.get("NewImage") or data.get("OldImage") or {})
            got = record_units(record, self._shape)
            writes[row] += 1
            spent.update(got)
            by_row[row] += sum(got.values())
        return {
            "writes": dict(writes),
            "write_units": sum(spent.values()),
            "by_destination": dict(spent),
            "by_row": dict(by_row),
        }


def _prefix(image: dict[str, Any]) -> str:
    """The kind of row: its partition key's prefix (`DSP`, `PACE`, `CHECK`, ...)."""
    return str((image.get("pk") or {}).get("S", "?")).split("#", 1)[0]


def _writes(records: list[dict[str, Any]], shape: TableShape) -> list[dict[str, Any]]:
    """The records of the writes: moto records an UpdateItem that creates an item as two INSERTs, the first (the key
    alone, which the relay never writes) left out."""
    out = []
    for i, record in enumerate(records):
        data = record.get("dynamodb") or {}
        following = (records[i + 1].get("dynamodb") or {}).get("Keys") if i + 1 < len(records) else None
        key_alone = record.get("eventName") == "INSERT" and set(data.get("NewImage") or {}) == set(shape.keys)
        if not (key_alone and following == data.get("Keys")):
            out.append(record)
    return out


def table_shapes(template_path: Any) -> dict[str, TableShape]:
    """Every table of a template.yaml by logical id."""
    from crcr.local.template import load_template, resources_of  # noqa: PLC0415

    return {
        name: shape_of(props)
        for name, props in resources_of(load_template(template_path), "AWS::DynamoDB::Table").items()
    }
