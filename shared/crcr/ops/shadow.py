"""Operator tool behind `crcr shadow compare`: what a shadow relay decided against what the relay in service did, as
the rows PyTorch's HUD keeps for it: `crcr_workflow_job` exported as JSON lines or CSV with names, a JSON array, or
a DynamoDB export of the HUD's table (`torchci-oot-workflow-job`, read by crcr.ops.export_files)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from crcr.domain.shadow import LiveRow
from crcr.domain.text import control_in
from crcr.ops.export_files import ExportUnreadable, export_line, plain
from crcr.ops.input_file import Caps, Opened, chunks, json_entries, lines, one_line, opened

KEEP = "shadow-compare.json"  # the HUD document `--publish` writes, served at GET /hud/api/crcr/shadow/compare
# Days of a busy upstream's rows; a line (one DynamoDB item is at most 400 KB) far less than the line cap.
CAPS = Caps(total_bytes=256 * 1024 * 1024, entry_bytes=1024 * 1024, entries=500_000)
MAX_TEXT = 200  # a delivery id, a repository, an event type, a SHA
NEEDS = "needs delivery_id, downstream_repo (or verified_repo) and run_id"
READ = ("delivery_id", "downstream_repo", "verified_repo", "run_id", "event_type", "pr_number", "pytorch_head_sha")


class CompareError(Exception):
    """What stopped a comparison, in one line (exit code 2: the operator's input)."""


def read_rows(path: Path) -> list[LiveRow]:
    """The relay in service's rows: each needs `delivery_id`, the downstream (`downstream_repo`, or `verified_repo`
    as PyTorch's HUD table names it) and the run (`run_id`); a row without them, or with a value of the wrong type,
    names its line. Read as a stream (gzip or not) within CAPS."""
    file = opened(chunks(path, CAPS))
    if not file.first:
        raise CompareError(f"{path}: empty: no rows")
    docs: Iterable[tuple[str, Any]] = (
        json_entries(path, CAPS, file) if file.first in (b"[", b"{") else _csv_rows(path, file)
    )
    rows = [_row(f"{path}: {where}", doc) for where, doc in docs]
    if not rows:
        raise CompareError(f"{path}: no rows")
    return rows


def _csv_rows(path: Path, file: Opened) -> Iterator[tuple[str, Any]]:
    texts = (text for _, text in lines(path, file.chunks, CAPS, file.blank_lines))
    reader = csv.DictReader(texts)
    try:
        for n, row in enumerate(reader, 1):
            if n > CAPS.entries:
                raise CompareError(f"{path}: more than {CAPS.entries:,} rows: split it into smaller files")
            yield f"row {n}", row
    except csv.Error as exc:
        raise CompareError(f"{path}: row {reader.line_num}: not CSV ({exc})") from None


def _row(where: str, found: Any) -> LiveRow:
    doc = _exported(where, found) if isinstance(found, dict) and ("Item" in found or "Keys" in found) else found
    if not isinstance(doc, dict):
        raise CompareError(f"{where}: {NEEDS}")
    delivery, repo = doc.get("delivery_id"), doc.get("downstream_repo") or doc.get("verified_repo")
    if not delivery or not repo or doc.get("run_id") in (None, ""):
        raise CompareError(f"{where}: {NEEDS}")
    pr = _whole(where, "pr_number", doc.get("pr_number"), 10**9)
    return LiveRow(
        delivery_id=_text(where, "delivery_id", delivery), repo=_text(where, "downstream_repo", repo),
        run_id=_run_id(where, doc["run_id"]), event_type=_text(where, "event_type", doc.get("event_type")),
        pr=pr or None, head_sha=_text(where, "pytorch_head_sha", doc.get("pytorch_head_sha")),
    )  # fmt: skip


def _text(where: str, name: str, value: Any) -> str:
    """An identifier of a row: one line of text (a terminal sequence in a row is a forged row, never an id)."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise CompareError(f"{where}: {name} must be a string of at most {MAX_TEXT} characters")
    if (bad := control_in(value)) is not None:
        raise CompareError(f"{where}: {name} holds the control character {bad}")
    return value


def _whole(where: str, name: str, value: Any, below: int) -> int | None:
    """A whole number from 0 up to `below` (as JSON, CSV text or DynamoDB's Decimal); None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= len(str(below)):
        value = int(value)
    # Compared before anything else: Decimal("1e999999999") is a number, and turning it into an int is not cheap.
    if isinstance(value, int | Decimal) and not isinstance(value, bool) and 0 <= value < below and value % 1 == 0:
        return int(value)
    raise CompareError(f"{where}: {name} must be a whole number below {below:,}")


def _run_id(where: str, value: Any) -> str:
    if isinstance(value, int | Decimal) and not isinstance(value, bool):
        return str(_whole(where, "run_id", value, 2**63))
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise CompareError(f"{where}: run_id must be a whole number or a string of at most {MAX_TEXT} characters")
    return _text(where, "run_id", value)


def _exported(where: str, doc: dict[str, Any]) -> dict[str, Any]:
    """The fields read of a line of the HUD table's DynamoDB export (a full or an incremental one), as plain values."""
    try:
        line = export_line(doc, where)
        return plain(line.image or {}, READ, f"{where}: {'Item' if 'Item' in doc else 'NewImage'}")
    except ExportUnreadable as exc:
        raise CompareError(str(exc)) from None


def render(report: dict[str, Any], as_json: bool) -> str:
    """The differences per event and the agreement, as a short table; or the report as JSON."""
    if as_json:
        return json.dumps(report, indent=2)
    table = [("delivery", "event", "downstream", "shadow", "in service", "reason")]
    for e in report["events"]:
        # Every cell came from a file or a decision: printed without control characters (no escape sequences).
        what, delivery = one_line(f"#{e['pr']}" if e["pr"] else e["event"] or "?"), one_line(e["delivery_id"])[:13]
        for kind, shadow, live in (("only_shadow", "dispatch", "-"), ("only_in_service", "-", "dispatch")):
            for d in e[kind]:
                table.append((delivery, what, one_line(d["repo"]), shadow, live, one_line(d["reason"])))
        for d in e["both"]:
            if d.get("reason"):
                table.append(
                    (delivery, what, one_line(d["repo"]), "dispatch", f"{d['runs']} runs", one_line(d["reason"]))
                )
    share = report["agreement"]
    summary = (
        f"{report['pairs_agreeing']} of {report['pairs_compared']} (event, downstream) pairs agree"
        + (f": {share:.1%}" if share is not None else "")
        + (
            f"; differences: {', '.join(f'{one_line(k)} {v}' for k, v in report['differences'].items())}"
            if report["differences"]
            else ""
        )
    )
    if len(table) == 1:
        return summary
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]
    return "\n".join([*lines, summary])
