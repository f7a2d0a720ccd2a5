"""The PR comment's row in the state table: what was posted, and the render booked to write it next."""

from __future__ import annotations

from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import COMMENT_TTL_S, applied, book, comment_key
from crcr.app.ports.comment import CommentRow
from crcr.domain.comment import Posted


class DynamoPrComment:
    """The CommentStore port."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def get_comment(self, upstream: str, pr: int) -> CommentRow:
        stored = self._ddb.get_item(TableName=self._table, Key=comment_key(upstream, pr), ConsistentRead=True).get(
            "Item"
        )
        if not stored:
            return CommentRow()
        item = from_dynamo(stored)

        def number(name: str) -> float | None:
            value = item.get(name)
            return float(value) if value is not None else None

        comment_id = number("comment_id")
        posted = Posted(
            comment_id=int(comment_id) if comment_id is not None else None,
            body_hash=item.get("body_hash", ""),
            mentioned=frozenset(item.get("mentioned", ())),
            live=frozenset(item.get("live", ())),
            history=tuple(item.get("history", ())),
        )
        return CommentRow(
            posted=posted,
            searched=bool(item.get("searched", False)),
            pending=item.get("pending"),
            pending_since=number("pending_since"),
            due_at=number("due_at"),
            lock_until=number("lock_until") or 0.0,
            version=int(item.get("version", 0)),
        )

    def book_render(self, upstream: str, pr: int, ticket: str, now: float, due_at: float, stale_before: float) -> str:
        return book(self._ddb, self._table, comment_key(upstream, pr), ticket, now, due_at, stale_before, COMMENT_TTL_S)

    def lock_comment(self, upstream: str, pr: int, ticket: str, version: int, now: float, lease_s: float) -> int | None:
        ok = applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=comment_key(upstream, pr),
            UpdateExpression="SET version = :n, lock_until = :l, pending_since = :now REMOVE due_at",
            ConditionExpression=(
                "version = :v AND pending = :t AND (attribute_not_exists(lock_until) OR lock_until < :now)"
            ),
            ExpressionAttributeValues=to_dynamo(
                {":n": version + 1, ":v": version, ":t": ticket, ":l": now + lease_s, ":now": now}
            ),
        )
        return version + 1 if ok else None

    def release_comment(self, upstream: str, pr: int, locked: int, now: float, posted: Posted | None = None) -> bool:
        values: dict[str, Any] = {":v": locked, ":n": locked + 1}
        sets = ["version = :n"]
        removes = ["lock_until"]
        if posted is not None:
            sets += ["searched = :yes", "body_hash = :h", "history = :hist", "expires_at = :exp"]
            values |= {":yes": True, ":h": posted.body_hash, ":hist": posted.history, ":exp": int(now) + COMMENT_TTL_S}
            if posted.comment_id is not None:
                sets.append("comment_id = :id")
                values[":id"] = posted.comment_id
            else:
                removes.append("comment_id")
            for name, names in (("mentioned", posted.mentioned), ("live", posted.live)):
                if names:  # a string set cannot be empty
                    sets.append(f"{name} = :{name}")
                    values[f":{name}"] = names
                else:
                    removes.append(name)
        return applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=comment_key(upstream, pr),
            UpdateExpression=f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
            ConditionExpression="version = :v",
            ExpressionAttributeValues=to_dynamo(values),
        )

    def end_render(self, upstream: str, pr: int, ticket: str, now: float, keep: bool = False) -> float | None:
        key = comment_key(upstream, pr)
        for _ in range(3):
            if not keep and applied(
                self._ddb.update_item,
                TableName=self._table,
                Key=key,
                UpdateExpression="REMOVE pending, pending_since",
                ConditionExpression="pending = :t AND attribute_not_exists(due_at)",
                ExpressionAttributeValues=to_dynamo({":t": ticket}),
            ):
                return None
            row = self.get_comment(upstream, pr)
            if row.pending != ticket:
                return None  # another render took the booking over
            if row.due_at is not None:
                return row.due_at  # asked for again meanwhile: the same render runs once more
            if keep:
                return now
        return now  # contended: run again rather than leave a change unshown

    def drop_render(self, upstream: str, pr: int, ticket: str) -> None:
        applied(
            self._ddb.update_item,
            TableName=self._table,
            Key=comment_key(upstream, pr),
            UpdateExpression="REMOVE pending, pending_since, due_at",
            ConditionExpression="pending = :t",
            ExpressionAttributeValues=to_dynamo({":t": ticket}),
        )
