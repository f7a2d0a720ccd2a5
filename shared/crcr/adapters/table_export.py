"""A DynamoDB table export in S3, read back as job records for `crcr hud export --from-export`.

AWS writes a full export as `<prefix>/AWSDynamoDB/<exportId>/manifest-summary.json`, `manifest-files.json`
(one JSON line per data file, naming its `dataFileS3Key`) and `data/*.json.gz`, whose lines are
`{"Item": {...}}` in DynamoDB JSON. moto writes only the data file (`data/<uuid>.gz`): without any
manifest, every `.gz` under the prefix is read.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

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
    """Every job item of every export under the prefix (an item appears once per export holding it)."""
    bucket, prefix = parse_s3_url(url)
    try:
        for key in _data_files(s3, bucket, prefix):
            yield from _jobs_in(s3, bucket, key)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ExportUnreadable(f"{error.get('Code', 'error')}: {error.get('Message', exc)}") from exc


def _data_files(s3: Any, bucket: str, prefix: str) -> list[str]:
    keys = [
        obj["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/" if prefix else "")
        for obj in page.get("Contents", [])
    ]
    manifests = sorted(k for k in keys if k.rpartition("/")[2] == FILES_MANIFEST)
    if not manifests:
        files = sorted(k for k in keys if k.endswith(".gz"))
        if not files:
            raise ExportUnreadable(f"no DynamoDB export under it (no {FILES_MANIFEST}, no .gz data file)")
        return files
    present = set(keys)
    files = []
    for manifest in manifests:
        folder = manifest.removesuffix(FILES_MANIFEST)
        if folder + SUMMARY_MANIFEST in present:
            _check_summary(s3, bucket, folder + SUMMARY_MANIFEST)
        for n, line in enumerate(_read(s3, bucket, manifest).decode().splitlines(), 1):
            if line.strip():
                try:
                    files.append(_resolve(manifest, json.loads(line)["dataFileS3Key"]))
                except (ValueError, KeyError, TypeError) as exc:
                    raise ExportUnreadable(f"{manifest} line {n}: no dataFileS3Key") from exc
    return files


def _check_summary(s3: Any, bucket: str, key: str) -> None:
    try:
        summary = json.loads(_read(s3, bucket, key))
    except ValueError as exc:
        raise ExportUnreadable(f"{key}: not JSON") from exc
    output, kind = summary.get("outputFormat", "DYNAMODB_JSON"), summary.get("exportType", "FULL_EXPORT")
    if output != "DYNAMODB_JSON" or kind != "FULL_EXPORT":
        raise ExportUnreadable(f"{key}: a {output} {kind}; export the table in full as DYNAMODB_JSON")


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


def _jobs_in(s3: Any, bucket: str, key: str) -> Iterator[JobRecord]:
    stream = _body(s3, bucket, key)
    n = 0
    try:
        with gzip.open(stream, "rt", encoding="utf-8") as lines:
            for n, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                doc = json.loads(line)
                item = doc.get("Item") if isinstance(doc, dict) else None
                if not isinstance(item, dict):
                    raise ExportUnreadable(f'{key} line {n}: not a full-export line ({{"Item": …}})')
                if is_job_item(item):
                    yield _job(item, f"{key} line {n}")
    except json.JSONDecodeError as exc:
        raise ExportUnreadable(f"{key} line {n}: not JSON ({exc.msg})") from exc
    except (OSError, EOFError, ValueError) as exc:  # not gzip, cut short, or not UTF-8
        raise ExportUnreadable(f"{key}: not a gzip of UTF-8 lines ({exc})") from exc


def _job(item: dict[str, Any], where: str) -> JobRecord:
    try:
        return from_item(item)
    except (KeyError, TypeError, ValueError) as exc:
        raise ExportUnreadable(f"{where}: not a job record ({type(exc).__name__}: {exc})") from exc
