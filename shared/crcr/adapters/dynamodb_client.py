"""DynamoDB's JSON API through the relay's own AWS JSON client (`crcr.adapters.aws_json`): the table calls of
every function. The client signs and sends the request as given and hands back the answer as parsed, as the
boto3 client's methods take and return them; DynamoDB's answers carry a CRC32 of their body, which is checked.
"""

from __future__ import annotations

from typing import Any

from crcr.adapters.aws_json import JsonApiClient, call_observers

__all__ = ["DynamoClient", "call_observers"]


class DynamoClient(JsonApiClient):
    """The boto3 DynamoDB client's low-level methods the relay uses, same arguments, same answers."""

    service = "dynamodb"
    target_prefix = "DynamoDB_20120810."

    # -- the boto3 client's methods -------------------------------------------------------------------
    def get_item(self, **params: Any) -> dict[str, Any]:
        return self.call("GetItem", params)

    def put_item(self, **params: Any) -> dict[str, Any]:
        return self.call("PutItem", params)

    def update_item(self, **params: Any) -> dict[str, Any]:
        return self.call("UpdateItem", params)

    def delete_item(self, **params: Any) -> dict[str, Any]:
        return self.call("DeleteItem", params)

    def query(self, **params: Any) -> dict[str, Any]:
        return self.call("Query", params)

    def scan(self, **params: Any) -> dict[str, Any]:
        return self.call("Scan", params)

    def batch_get_item(self, **params: Any) -> dict[str, Any]:
        return self.call("BatchGetItem", params)

    def batch_write_item(self, **params: Any) -> dict[str, Any]:
        return self.call("BatchWriteItem", params)

    def transact_write_items(self, **params: Any) -> dict[str, Any]:
        return self.call("TransactWriteItems", params)
