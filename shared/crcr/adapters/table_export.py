"""DynamoDB table exports in S3, read back as job records for `crcr hud export --from-export`.

AWS writes an export as `<prefix>/AWSDynamoDB/<exportId>/manifest-summary.json`, `manifest-files.json` (one JSON
line per data file, naming its `dataFileS3Key`) and `data/*.json.gz` in DynamoDB JSON: a full export's lines are
`{"Item": {...}}`, an incremental export's `{"Metadata": {"WriteTimestampMicros": …}, "Keys": {...}, "NewImage":
{...}, "OldImage": {...}}`, with no `NewImage` for an item deleted in its window. moto writes only the data file
(`data/<uuid>.gz`, full-export lines) and no manifest: then every `.gz` under the prefix is read, each at the time
S3 took it. Under one prefix, any number of full and incremental exports: the newest image of each item wins, and a
deletion newer than every image removes it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.item_codec import from_dynamo
from crcr.adapters.job_items import from_item, is_job_item
from crcr.app.ports.jobs import JobRecord

EXPORT_FOLDER = "AWSDynamoDB/"
FILES_MANIFEST = "manifest-files.json"
SUMMARY_MANIFEST = "manifest-summary.json"


class ExportUnreadable(Exception):
    """The export cannot be read as a full DYNAMODB_JSON table export; the message names why and where."""


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/prefix` → (bucket, prefix without surrounding slashes)."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not url.startswith("s3://") or not bucket:
        raise ExportUnreadable("expected s3://bucket/prefix")
    return bucket, prefix.strip("/")


def export_jobs(s3: Any, url: str) -> Iterator[JobRecord]:
    """Every job item of the exports under the prefix, each once: its newest image, unless deleted after it."""
    bucket, prefix = parse_s3_url(url)
    newest: dict[tuple[str, str], tuple[float, int, JobRecord | None]] = {}
    try:
        for key, at in _data_files(s3, bucket, prefix):
            for when, item_key, job in _changes_in(s3, bucket, key, at):
                seen = newest.get(item_key)
                rank = (when, job.version if job is not None else 1 << 62)  # a deletion at the same time wins
                if seen is None or rank > seen[:2]:
                    newest[item_key] = (*rank, job)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ExportUnreadable(f"{error.get('Code', 'error')}: {error.get('Message', exc)}") from exc
    yield from (job for _, _, job in newest.values() if job is not None)


def _data_files(s3: Any, bucket: str, prefix: str) -> list[tuple[str, float]]:
    """Each data file with the time its export reads the table at: a full export's `exportTime`, an incremental
    one's `exportToTime` (lines carry their own write time too), or, for an export folder with no manifest (moto's),
    each `.gz` at the time S3 took it."""
    objects = [
        obj
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/" if prefix else "")
        for obj in page.get("Contents", [])
    ]
    folders: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        key = obj["Key"]
        at = key.find(EXPORT_FOLDER)
        folder = key[: key.find("/", at + len(EXPORT_FOLDER)) + 1] if at >= 0 else ""
        folders.setdefault(folder, []).append(obj)
    files: list[tuple[str, float]] = []
    for folder, held in sorted(folders.items()):
        names = {obj["Key"] for obj in held}
        manifest = folder + FILES_MANIFEST
        if folder and manifest in names:
            summary = folder + SUMMARY_MANIFEST
            at = _check_summary(s3, bucket, summary) if summary in names else 0.0
            files += _listed(s3, bucket, manifest, at)
        else:
            files += sorted((o["Key"], o["LastModified"].timestamp()) for o in held if o["Key"].endswith(".gz"))
    if not files and not any(k.rpartition("/")[2] == FILES_MANIFEST for k in (o["Key"] for o in objects)):
        raise ExportUnreadable(f"no DynamoDB export under it (no {FILES_MANIFEST}, no .gz data file)")
    return files


def _listed(s3: Any, bucket: str, manifest: str, at: float) -> list[tuple[str, float]]:
    files = []
    for n, line in enumerate(_read(s3, bucket, manifest).decode().splitlines(), 1):
        if line.strip():
            try:
                files.append((_resolve(manifest, json.loads(line)["dataFileS3Key"]), at))
            except (ValueError, KeyError, TypeError) as exc:
                raise ExportUnreadable(f"{manifest} line {n}: no dataFileS3Key") from exc
    return files


def _check_summary(s3: Any, bucket: str, key: str) -> float:
    """The export's time, from its summary; a format this cannot read names itself."""
    try:
        summary = json.loads(_read(s3, bucket, key))
    except ValueError as exc:
        raise ExportUnreadable(f"{key}: not JSON") from exc
    output, kind = summary.get("outputFormat", "DYNAMODB_JSON"), summary.get("exportType", "FULL_EXPORT")
    if output != "DYNAMODB_JSON" or kind not in ("FULL_EXPORT", "INCREMENTAL_EXPORT"):
        raise ExportUnreadable(f"{key}: a {output} {kind}; export the table as DYNAMODB_JSON")
    moment = summary.get("exportToTime" if kind == "INCREMENTAL_EXPORT" else "exportTime") or summary.get("endTime")
    try:
        return datetime.fromisoformat(str(moment).replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise ExportUnreadable(f"{key}: no export time") from exc


def _resolve(manifest: str, data_key: str) -> str:
    """`dataFileS3Key` may count from the bucket's root or from the export prefix: either way the file
    lies in the tree of the manifest's own `AWSDynamoDB/` folder."""
    base = manifest[: manifest.rfind(EXPORT_FOLDER)] if EXPORT_FOLDER in manifest else ""
    at = data_key.find(EXPORT_FOLDER)
    return base + data_key[at:] if at >= 0 else data_key


def _body(s3: Any, bucket: str, key: str) -> Any:
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"]
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ExportUnreadable(f"{key}: {error.get('Code', 'error')}: {error.get('Message', exc)}") from exc


def _read(s3: Any, bucket: str, key: str) -> bytes:
    data: bytes = _body(s3, bucket, key).read()
    return data


def _changes_in(s3: Any, bucket: str, key: str, at: float) -> Iterator[tuple[float, tuple[str, str], JobRecord | None]]:
    """(when, the item's key, its job record or None for a deletion) for each job item of one data file."""
    stream = _body(s3, bucket, key)
    n = 0
    try:
        with gzip.open(stream, "rt", encoding="utf-8") as lines:
            for n, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                doc = json.loads(line)
                if not isinstance(doc, dict) or not isinstance(doc.get("Item") or doc.get("Keys"), dict):
                    raise ExportUnreadable(f'{key} line {n}: not an export line ({{"Item": …}} or {{"Keys": …}})')
                item = doc.get("Item") or doc.get("NewImage")
                keys = doc.get("Keys") or item
                if not isinstance(keys, dict) or not is_job_item(keys):
                    continue
                written = from_dynamo(doc.get("Metadata") or {}).get("WriteTimestampMicros")
                when = int(written) / 1e6 if written else at
                stored = from_dynamo({"pk": keys["pk"], "sk": keys["sk"]})
                item_key = (str(stored["pk"]), str(stored["sk"]))
                yield when, item_key, _job(item, f"{key} line {n}") if isinstance(item, dict) else None
    except json.JSONDecodeError as exc:
        raise ExportUnreadable(f"{key} line {n}: not JSON ({exc.msg})") from exc
    except (OSError, EOFError, ValueError) as exc:  # not gzip, cut short, or not UTF-8
        raise ExportUnreadable(f"{key}: not a gzip of UTF-8 lines ({exc})") from exc


def _job(item: dict[str, Any], where: str) -> JobRecord:
    try:
        return from_item(item)
    except (KeyError, TypeError, ValueError) as exc:
        raise ExportUnreadable(f"{where}: not a job record ({type(exc).__name__}: {exc})") from exc
