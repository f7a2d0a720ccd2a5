"""SQS's JSON API through the relay's own AWS JSON client (`crcr.adapters.aws_json`): the sends of every function
(events to the planner, dispatches, delayed re-sends, check-run requests, dead letters), at a fraction of
botocore's CPU per call. The crcr CLI's queue operations keep boto3's client."""

from __future__ import annotations

from typing import Any

from crcr.adapters.aws_json import JsonApiClient


class SqsClient(JsonApiClient):
    """The boto3 SQS client's sending methods, same arguments, same answers."""

    service = "sqs"
    target_prefix = "AmazonSQS."

    def send_message(self, **params: Any) -> dict[str, Any]:
        return self.call("SendMessage", params)

    def send_message_batch(self, **params: Any) -> dict[str, Any]:
        return self.call("SendMessageBatch", params)
