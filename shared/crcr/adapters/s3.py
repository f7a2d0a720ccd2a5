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


class S3PageDocs:
    """The HUD's JSON documents in S3, replaced only if unchanged since read (If-Match / If-None-Match).

    What this instance last wrote is kept with its ETag: the next change of that document writes from
    that copy without reading it again. If another writer changed it meanwhile, S3 refuses the write
    (412), the copy is dropped, and the caller reads and tries again, so the copy only saves the read.
    """

    def __init__(self, client: Any, bucket: str, prefix: str = "data/", keep: int = 256) -> None:
        self._s3 = client
        self._bucket = bucket
        self._prefix = prefix
        self._keep = keep
        self._written: dict[str, tuple[bytes, str]] = {}  # key -> (body, ETag), newest last

    def get(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        if key in self._written:
            body, tag = self._written[key]
            return json.loads(body), tag
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
        body = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
        try:
            written = self._s3.put_object(
                Bucket=self._bucket,
                Key=self._prefix + key,
                Body=body,
                ContentType="application/json",
                CacheControl="no-cache",
                **condition,
            )
        except ClientError as exc:
            # 412: changed since read; 409: a concurrent conditional write to the same key won.
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                self._written.pop(key, None)
                return False
            raise
        self._written.pop(key, None)
        self._written[key] = (body, str(written["ETag"]))
        while len(self._written) > self._keep:
            self._written.pop(next(iter(self._written)))
        return True
