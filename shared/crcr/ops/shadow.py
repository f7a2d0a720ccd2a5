"""Operator tool behind `crcr shadow compare`: what a shadow relay decided against what the relay in service did, as
the rows PyTorch's HUD keeps for it: `crcr_workflow_job` exported as JSON lines or CSV with names, a JSON array, or
a DynamoDB export of the HUD's table (`torchci-oot-workflow-job`: `{"Item": …}` lines in DynamoDB JSON, gzipped)."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from crcr.domain.shadow import LiveRow

KEEP = "shadow-compare.json"  # the HUD document `--publish` writes, served at GET /hud/api/crcr/shadow/compare


class CompareError(Exception):
    """What stopped a comparison, in one line (exit code 2: the operator's input)."""


def read_rows(path: Path) -> list[LiveRow]:
    """The relay in service's rows: each needs `delivery_id`, the downstream (`downstream_repo`, or `verified_repo`
    as PyTorch's HUD table names it) and the run (`run_id`); a row without them names the line."""
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8")
    except OSError as exc:
        raise CompareError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CompareError(f"{path}: not UTF-8 text ({exc.reason})") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        docs: Iterable[Any] = json.loads(stripped)
    elif stripped.startswith("{"):
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        docs = csv.DictReader(io.StringIO(text))
    rows = []
    for n, found in enumerate(docs, 1):
        doc = _plain(found["Item"]) if isinstance(found, dict) and isinstance(found.get("Item"), dict) else found
        repo = doc.get("downstream_repo") or doc.get("verified_repo") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not doc.get("delivery_id") or not repo or doc.get("run_id") in (None, ""):
            raise CompareError(f"{path}: row {n} needs delivery_id, downstream_repo (or verified_repo) and run_id")
        pr = str(doc.get("pr_number") or "0")
        rows.append(
            LiveRow(
                delivery_id=str(doc["delivery_id"]), repo=str(repo), run_id=str(doc["run_id"]),
                event_type=str(doc.get("event_type") or ""), pr=int(pr) if pr.isdigit() and int(pr) else None,
                head_sha=str(doc.get("pytorch_head_sha") or ""),
            )
        )  # fmt: skip
    return rows


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB JSON item (`{"name": {"S": …}}`) as plain values."""
    from boto3.dynamodb.types import TypeDeserializer  # noqa: PLC0415 - only for a table export

    reader = TypeDeserializer()
    return {k: reader.deserialize(v) for k, v in item.items()}


def render(report: dict[str, Any], as_json: bool) -> str:
    """The differences per event and the agreement, as a short table; or the report as JSON."""
    if as_json:
        return json.dumps(report, indent=2)
    table = [("delivery", "event", "downstream", "shadow", "in service", "reason")]
    for e in report["events"]:
        what = f"#{e['pr']}" if e["pr"] else e["event"] or "?"
        for kind, shadow, live in (("only_shadow", "dispatch", "-"), ("only_in_service", "-", "dispatch")):
            for d in e[kind]:
                table.append((e["delivery_id"][:13], what, d["repo"], shadow, live, d["reason"]))
        for d in e["both"]:
            if d.get("reason"):
                table.append((e["delivery_id"][:13], what, d["repo"], "dispatch", f"{d['runs']} runs", d["reason"]))
    share = report["agreement"]
    summary = (
        f"{report['pairs_agreeing']} of {report['pairs_compared']} (event, downstream) pairs agree"
        + (f": {share:.1%}" if share is not None else "")
        + (
            f"; differences: {', '.join(f'{k} {v}' for k, v in report['differences'].items())}"
            if report["differences"]
            else ""
        )
    )
    if len(table) == 1:
        return summary
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]
    return "\n".join([*lines, summary])
