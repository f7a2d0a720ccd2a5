"""S3: webhook bodies too large to travel in a queue message, and the HUD's JSON documents."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError


class S3Blobs:
    def __init__(self, client: Any, bucket: str) -> None:
        self._s3 = client
        self._bucket = bucket

    def put(self, key: str, data: bytes) -> None:
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=data, ContentType="application/json")

    def get(self, key: str) -> bytes:
        body: bytes = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        return body


class S3HudDocs:
    """The HUD's JSON documents in S3, replaced only if unchanged since read (If-Match / If-None-Match)."""

    def __init__(self, client: Any, bucket: str, prefix: str = "data/") -> None:
        self._s3 = client
        self._bucket = bucket
        self._prefix = prefix

    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        try:
            got = self._s3.get_object(Bucket=self._bucket, Key=self._prefix + key)
        except self._s3.exceptions.NoSuchKey:
            return None, None
        tag = str(got["ETag"])
        try:
            doc = json.loads(got["Body"].read())
        except ValueError:
            return None, tag  # unreadable: rebuilt from the next change, replacing this version
        return (doc if isinstance(doc, dict) else None), tag

    def read(self, key: str) -> bytes | None:
        try:
            body: bytes = self._s3.get_object(Bucket=self._bucket, Key=self._prefix + key)["Body"].read()
        except self._s3.exceptions.NoSuchKey:
            return None
        return body

    def put(self, key: str, doc: dict[str, Any], tag: str | None) -> bool:
        condition = {"IfMatch": tag} if tag is not None else {"IfNoneMatch": "*"}
        try:
            self._s3.put_object(
                Bucket=self._bucket,
                Key=self._prefix + key,
                Body=json.dumps(doc, separators=(",", ":"), allow_nan=False).encode(),
                ContentType="application/json",
                CacheControl="no-cache",
                **condition,
            )
        except ClientError as exc:
            # 412: changed since read; 409: a concurrent conditional write to the same key won.
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True
