"""GitHub's answers on who may disable a test, kept in the state table for every reporter instance (`AUTHOR#` rows)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from crcr.adapters.table import DAY, query_all
from crcr.app.disable_authors import AuthorAnswer
from crcr.domain.ids import repo_key

_TO = TypeSerializer()
_FROM = TypeDeserializer()


class DynamoAuthorAnswers:
    """The AuthorAnswers port: one row per upstream and author (`AUTHOR#<upstream>`, the login in lower case), read
    together with one Query; rows go a day after their answer (the use case stops trusting one after an hour)."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def answers(self, upstream: str) -> dict[str, AuthorAnswer]:
        rows = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": _TO.serialize(_pk(upstream))},
        )
        found = {}
        for row in rows:
            item = {k: _FROM.deserialize(v) for k, v in row.items()}
            found[str(item["sk"])] = AuthorAnswer(bool(item["may_disable"]), float(item["checked_at"]))
        return found

    def remember(self, upstream: str, login: str, answer: AuthorAnswer) -> None:
        item = {
            "pk": _pk(upstream),
            "sk": login.lower(),
            "may_disable": answer.may_disable,
            "checked_at": Decimal(str(round(answer.checked_at, 3))),
            "expires_at": int(answer.checked_at) + DAY,
        }
        self._ddb.put_item(TableName=self._table, Item={k: _TO.serialize(v) for k, v in item.items()})


def _pk(upstream: str) -> str:
    return f"AUTHOR#{repo_key(upstream)}"
