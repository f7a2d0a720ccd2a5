"""template.yaml's queues, tables and buckets created on `crcr local`'s AWS, as CloudFormation would create them,
and what the functions' `Ref` and `Fn::GetAtt` resolve to."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crcr.local.aws import ACCOUNT, REGION
from crcr.local.template import resources_of


@dataclass
class Created:
    refs: dict[str, str] = field(default_factory=dict)  # logical id -> its `Ref`
    attrs: dict[tuple[str, str], str] = field(default_factory=dict)  # (logical id, attribute) -> its `Fn::GetAtt`
    queue_urls: dict[str, str] = field(default_factory=dict)
    stream_arns: dict[str, str] = field(default_factory=dict)


def physical(logical: str) -> str:
    """A resource's (and a function's) name on the local stack."""
    return f"crcr-local-{logical}"


def table_spec(name: str, props: dict[str, Any]) -> dict[str, Any]:
    """CreateTable's arguments for a template's AWS::DynamoDB::Table, under a physical name."""
    spec: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if "GlobalSecondaryIndexes" in props:
        spec["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    if "StreamSpecification" in props:
        spec["StreamSpecification"] = {"StreamEnabled": True} | props["StreamSpecification"]
    return spec


def create_resources(
    template: dict[str, Any], client: Callable[[str], Any], visibility_timeout_s: int | None
) -> Created:
    """Every queue, table and bucket of the template; `visibility_timeout_s` replaces the template's for the queues
    with a dead-letter queue (CRCR_LOCAL_VISIBILITY_TIMEOUT_S)."""
    created = Created()
    _create_queues(template, client("sqs"), visibility_timeout_s, created)
    _create_tables(template, client("dynamodb"), created)
    _create_buckets(template, client("s3"), created)
    for logical in template["Resources"]:
        created.refs.setdefault(logical, physical(logical))
    return created


def _create_queues(template: dict[str, Any], sqs: Any, visibility_timeout_s: int | None, created: Created) -> None:
    queues = resources_of(template, "AWS::SQS::Queue")
    attrs = created.attrs
    # Dead-letter queues first: the others name them in their redrive policies.
    for logical in sorted(queues, key=lambda q: "RedrivePolicy" in queues[q]):
        props = queues[logical]
        name = physical(logical)
        attributes: dict[str, str] = {
            prop: str(props[prop])
            for prop in ("VisibilityTimeout", "MessageRetentionPeriod", "MaximumMessageSize", "DelaySeconds")
            if prop in props
        }
        if "RedrivePolicy" in props:
            if visibility_timeout_s is not None:
                attributes["VisibilityTimeout"] = str(visibility_timeout_s)
            policy = dict(props["RedrivePolicy"])
            policy["deadLetterTargetArn"] = attrs[(policy["deadLetterTargetArn"]["Fn::GetAtt"][0], "Arn")]
            attributes["RedrivePolicy"] = json.dumps(policy)
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        created.refs[logical] = created.queue_urls[logical] = url
        attrs[(logical, "Arn")] = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
        attrs[(logical, "QueueName")] = name
        attrs[(logical, "QueueUrl")] = url


def _create_tables(template: dict[str, Any], ddb: Any, created: Created) -> None:
    for logical, props in resources_of(template, "AWS::DynamoDB::Table").items():
        name = physical(logical)
        with contextlib.suppress(ddb.exceptions.ResourceInUseException):
            ddb.create_table(**table_spec(name, props))
        if (props.get("PointInTimeRecoverySpecification") or {}).get("PointInTimeRecoveryEnabled"):
            # As CloudFormation would (moto's ignores it): the scheduled export needs it.
            ddb.update_continuous_backups(
                TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
            )
        created.refs[logical] = name
        created.attrs[(logical, "Arn")] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
        stream_arn = ddb.describe_table(TableName=name)["Table"].get("LatestStreamArn")
        if stream_arn:
            created.attrs[(logical, "StreamArn")] = created.stream_arns[logical] = stream_arn


def _create_buckets(template: dict[str, Any], s3: Any, created: Created) -> None:
    for logical in resources_of(template, "AWS::S3::Bucket"):
        name = physical(logical).lower()
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
            s3.create_bucket(Bucket=name)
        created.refs[logical] = name
        created.attrs[(logical, "Arn")] = f"arn:aws:s3:::{name}"
