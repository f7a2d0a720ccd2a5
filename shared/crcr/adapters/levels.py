"""Levels in the state table, partition `LEVELS`: each repository's level history (`HISTORY#<repo>`: when it first
reached L2) and the open demotions (`DEMOTION#<repo>`: a handful, read whole; a reader on the check-run path keeps
them for a minute)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import key, query_all
from crcr.app.ports.levels import Demotion
from crcr.domain.ids import repo_key

PK = "LEVELS"


class DynamoLevels:
    """The LevelHistory and Demotions ports."""

    def __init__(self, client: Any, table: str, first_l2_job: Callable[[str], float | None] | None = None) -> None:
        self._ddb = client
        self._table = table
        # A repository seen for the first time: when its earliest job still kept was recorded at L2 or above (the
        # relay may take over from another one), else now.
        self._first_l2_job = first_l2_job

    def l2_since(self, levels: list[tuple[str, int]], now: float) -> dict[str, float]:
        found: dict[str, float] = {}
        for repo, level in levels:
            slug = repo_key(repo)
            values: dict[str, Any] = {":level": level, ":now": now, ":repo": repo}
            update = "SET repo = :repo, #lvl = :level, level_since = if_not_exists(level_since, :now)"
            if level >= 2:
                first = self._first_l2_job(repo) if self._first_l2_job else None
                values[":l2"] = min(now, first) if first is not None else now
                update += ", l2_since = if_not_exists(l2_since, :l2)"
            item = self._ddb.update_item(
                TableName=self._table,
                Key=key(PK, f"HISTORY#{slug}"),
                UpdateExpression=update,
                ExpressionAttributeNames={"#lvl": "level"},
                ExpressionAttributeValues=to_dynamo(values),
                ReturnValues="ALL_NEW",
            )["Attributes"]
            if "l2_since" in item:
                found[slug] = float(from_dynamo(item)["l2_since"])
        return found

    def dedupe_states(self) -> dict[str, tuple[str, float]]:
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p AND begins_with(sk, :h)",
            ExpressionAttributeValues=to_dynamo({":p": PK, ":h": "HISTORY#"}),
            ProjectionExpression="sk, dedupe, dedupe_at",
        )
        return {
            item["sk"].removeprefix("HISTORY#"): (item["dedupe"], float(item["dedupe_at"]))
            for item in map(from_dynamo, items)
            if "dedupe" in item
        }

    def set_dedupe(self, repo: str, state: str, now: float) -> None:
        self._ddb.update_item(
            TableName=self._table,
            Key=key(PK, f"HISTORY#{repo_key(repo)}"),
            UpdateExpression="SET dedupe = :d, dedupe_at = :now",
            ExpressionAttributeValues=to_dynamo({":d": state, ":now": now}),
        )

    def open_demotions(self) -> dict[str, Demotion]:
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p AND begins_with(sk, :d)",
            ExpressionAttributeValues=to_dynamo({":p": PK, ":d": "DEMOTION#"}),
            ConsistentRead=True,
        )
        return {
            item["sk"].removeprefix("DEMOTION#"): Demotion(item["repo"], int(item["pr"]), float(item["since"]))
            for item in map(from_dynamo, items)
        }

    def set_demotion(self, repo: str, pr: int, since: float) -> None:
        self._ddb.update_item(
            TableName=self._table,
            Key=key(PK, f"DEMOTION#{repo_key(repo)}"),
            UpdateExpression="SET repo = :repo, pr = :pr, since = if_not_exists(since, :since)",
            ExpressionAttributeValues=to_dynamo({":repo": repo, ":pr": pr, ":since": since}),
        )

    def clear_demotion(self, repo: str, closed_at: float | None = None) -> None:
        self._ddb.delete_item(TableName=self._table, Key=key(PK, f"DEMOTION#{repo_key(repo)}"))
        if closed_at is not None:
            closed = {
                "pk": PK,
                "sk": f"CLOSED#{repo_key(repo)}",
                "at": closed_at,
                "expires_at": int(closed_at) + 7 * 86_400,
            }
            self._ddb.put_item(TableName=self._table, Item=to_dynamo(closed))

    def cooling(self, now: float, within: float) -> set[str]:
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p AND begins_with(sk, :c)",
            ExpressionAttributeValues=to_dynamo({":p": PK, ":c": "CLOSED#"}),
            ConsistentRead=True,
        )
        return {i["sk"].removeprefix("CLOSED#") for i in map(from_dynamo, items) if now - float(i["at"]) < within}


class CachedDemotions:
    """Open demotions as the check-run writer reads them: read whole at most once a minute."""

    def __init__(self, source: DynamoLevels, clock: Callable[[], float], ttl_s: float = 60.0) -> None:
        self._source = source
        self._clock = clock
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Demotion]] | None = None

    def since(self, repo: str) -> float | None:
        with self._lock:
            now = self._clock()
            if self._cached is None or now - self._cached[0] >= self._ttl_s:
                self._cached = (now, self._source.open_demotions())
            found = self._cached[1].get(repo_key(repo))
        return found.since if found is not None else None
