"""Upstream pull requests in the state table: the newest head, base and labels of each, and the heads released to each
downstream."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import LEDGER_TTL_S, applied, conditional_failed, key, pr_pk
from crcr.app.ports.pulls import HeadRecord, PrInfo
from crcr.domain.ids import repo_key


class DynamoPullRequests:
    """The PullRequestLog and PrInfos ports: each PR's head (`HEAD`), the heads released to each downstream
    (`RELEASED#…`) and the default-branch commit that landed it (`MERGED`)."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def record_pr_head(
        self,
        upstream: str,
        pr: int,
        head_sha: str,
        updated_at: str,
        labels: tuple[str, ...] = (),
        base_sha: str = "",
        closed: bool = False,
    ) -> HeadRecord:
        """Keep the newest head and labels; webhooks can arrive out of order, so compare GitHub's updated_at."""
        try:
            old = self._ddb.put_item(
                TableName=self._table,
                Item=to_dynamo(
                    {
                        "pk": pr_pk(upstream, pr),
                        "sk": "HEAD",
                        "head_sha": head_sha,
                        "updated_at": updated_at,
                        "labels": labels,
                        "base_sha": base_sha,
                        "closed": closed,
                    }
                ),
                ConditionExpression="attribute_not_exists(pk) OR updated_at <= :u",
                ExpressionAttributeValues=to_dynamo({":u": updated_at}),
                ReturnValues="ALL_OLD",
            ).get("Attributes")
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            return HeadRecord(newest=False)
        previous = from_dynamo(old)["head_sha"] if old else None
        return HeadRecord(newest=True, replaced=previous if previous != head_sha else None)

    def pr_info(self, upstream: str, pr: int) -> PrInfo | None:
        stored = self._ddb.get_item(
            TableName=self._table, Key=key(pr_pk(upstream, pr), "HEAD"), ConsistentRead=True
        ).get("Item")
        if not stored:
            return None
        item = from_dynamo(stored)
        return PrInfo(
            head_sha=item["head_sha"],
            base_sha=item.get("base_sha", ""),
            labels=tuple(item.get("labels", ())),
            closed=bool(item.get("closed", False)),
        )

    def mark_merged(self, upstream: str, pr: int, sha: str, now: float) -> None:
        self._ddb.put_item(
            TableName=self._table,
            Item=to_dynamo(
                {
                    "pk": pr_pk(upstream, pr),
                    "sk": "MERGED",
                    "sha": sha,
                    "at": now,
                    "expires_at": int(now) + LEDGER_TTL_S,
                }
            ),
        )

    def merged_commit(self, upstream: str, pr: int) -> str | None:
        item = self._ddb.get_item(
            TableName=self._table, Key=key(pr_pk(upstream, pr), "MERGED"), ConsistentRead=True
        ).get("Item")
        return str(from_dynamo(item)["sha"]) if item else None

    def mark_released(self, upstream: str, pr: int, head_sha: str, repo: str, delivery_id: str, now: float) -> bool:
        return applied(
            self._ddb.put_item,
            TableName=self._table,
            Item=to_dynamo(
                {
                    "pk": pr_pk(upstream, pr),
                    "sk": f"RELEASED#{head_sha}#{repo_key(repo)}",
                    "delivery_id": delivery_id,
                    "released_at": now,
                    "expires_at": int(now) + LEDGER_TTL_S,
                }
            ),
            # A retried planner run of the same delivery must release again (its send may have failed).
            ConditionExpression="attribute_not_exists(pk) OR delivery_id = :d",
            ExpressionAttributeValues=to_dynamo({":d": delivery_id}),
        )
