"""crcr local's moto writes items' attribute maps in one step (`item_maps_without_shape_walk`): every answer that
carries items is the same JSON as moto's own shape-by-shape serializer writes, for every attribute type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moto.core.serialize import BaseJSONSerializer

from crcr.local.aws import item_maps_without_shape_walk

# Every kind of attribute value, nested where DynamoDB allows it, binary ones with bytes no text encoding keeps.
EVERY_KIND = {
    "s": {"S": "text é ✓"},
    "empty": {"S": ""},
    "n": {"N": "12.50"},
    "b": {"B": b"\x00\xff\x80raw"},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2.5"]},
    "bs": {"BS": [b"\x01", b"\xfe"]},
    "yes": {"BOOL": True},
    "no": {"BOOL": False},
    "null": {"NULL": True},
    "l": {"L": [{"S": "x"}, {"N": "3"}, {"M": {"q": {"B": b"\x02"}}}, {"L": []}]},
    "m": {"M": {"inner": {"M": {}}, "list": {"L": [{"BOOL": False}]}, "bin": {"BS": [b"z"]}}},
}


def test_item_answers_are_the_json_moto_writes_for_every_attribute_type(ddb: tuple[Any, Any]) -> None:
    walk = item_maps_without_shape_walk()  # moto's own serializer, replaced
    assert item_maps_without_shape_walk() is walk  # idempotent: replaced once
    fast = BaseJSONSerializer._serialize_type_map
    client, streams = ddb
    client.create_table(
        TableName="kinds",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": t} for a, t in (("pk", "S"), ("g", "S"))],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_g",
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    for n in range(5):
        client.put_item(TableName="kinds", Item={"pk": {"S": f"p{n}"}, "g": {"S": "group"}} | EVERY_KIND)
    arn = client.describe_table(TableName="kinds")["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    key = {"pk": {"S": "p1"}}
    group = {":g": {"S": "group"}}
    new_b = {":b": EVERY_KIND["b"]}
    one_get = [{"Get": {"TableName": "kinds", "Key": key}}]

    def records() -> list[dict[str, Any]]:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
        answer = streams.get_records(ShardIterator=it["ShardIterator"])
        return [
            {k: v for k, v in r["dynamodb"].items() if k != "ApproximateCreationDateTime"} for r in answer["Records"]
        ]

    asks: dict[str, Callable[[], Any]] = {
        "GetItem": lambda: client.get_item(TableName="kinds", Key=key)["Item"],
        "Query on an index": lambda: client.query(
            TableName="kinds", IndexName="by_g", KeyConditionExpression="g = :g", ExpressionAttributeValues=group
        )["Items"],
        "Scan, one page": lambda: client.scan(TableName="kinds", Limit=2)["Items"],
        "BatchGetItem": lambda: client.batch_get_item(RequestItems={"kinds": {"Keys": [key]}})["Responses"],
        "TransactGetItems": lambda: client.transact_get_items(TransactItems=one_get)["Responses"],
        "UpdateItem ALL_NEW": lambda: client.update_item(
            TableName="kinds", Key=key, UpdateExpression="SET b = :b", ExpressionAttributeValues=new_b,
            ReturnValues="ALL_NEW",
        )["Attributes"],
        "GetRecords": records,
    }  # fmt: skip
    try:
        for name, ask in asks.items():
            BaseJSONSerializer._serialize_type_map = walk  # type: ignore[method-assign]
            by_moto = ask()
            BaseJSONSerializer._serialize_type_map = fast  # type: ignore[method-assign]
            assert ask() == by_moto, name
    finally:
        BaseJSONSerializer._serialize_type_map = fast  # type: ignore[method-assign]
    assert (
        by_moto
        and client.get_item(TableName="kinds", Key=key)["Item"] == {"pk": key["pk"], "g": {"S": "group"}} | EVERY_KIND
    )
