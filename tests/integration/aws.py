"""moto in server mode for the adapter tests: one server per test module, reached over HTTP with boto3, with the
template's own DynamoDB tables."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from crcr.local.pollers import StreamReader
from crcr.local.resources import table_spec
from crcr.local.stack import free_port
from crcr.local.template import StreamSource, functions_of, load_template, resources_of
from tests.conftest import ROOT, http


def read_all(reader: StreamReader) -> list[dict[str, Any]]:
    """Every record written since the last read, shard by shard, as the pollers see them (unchanged writes left out)."""
    records: list[dict[str, Any]] = []
    for shard in reader.shards():
        while page := reader.read(shard, 1000):
            records += page
    return records


@contextlib.contextmanager
def moto_server() -> Iterator[dict[str, str]]:
    """A fresh moto server; yields the keyword arguments for `boto3.client` to reach it."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    http("POST", f"{url}/moto-api/reset")  # moto's backends are the process's: start from an empty account
    try:
        yield {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "t", "aws_secret_access_key": "t"}
    finally:
        server.stop()


def create_tables(ddb: Any, **physical: str) -> None:
    """The template's tables under physical names: `create_tables(ddb, StateTable="state")`."""
    tables = resources_of(load_template(ROOT / "template.yaml"), "AWS::DynamoDB::Table")
    for logical, name in physical.items():
        ddb.create_table(**table_spec(name, tables[logical]))


@contextlib.contextmanager
def dynamodb(**physical: str) -> Iterator[Any]:
    """A boto3 DynamoDB client on a fresh moto server holding the template's tables named in `physical`."""
    with dynamodb_and_streams(**physical) as (client, _):
        yield client


@contextlib.contextmanager
def dynamodb_and_streams(**physical: str) -> Iterator[tuple[Any, Any]]:
    """`dynamodb`, and boto3's DynamoDB Streams client on the same server (the tables' streams, as Lambda reads
    them)."""
    with moto_server() as reach:
        ddb = boto3.client("dynamodb", **reach)
        create_tables(ddb, **physical)
        yield ddb, boto3.client("dynamodbstreams", **reach)


def dispatched_stream_source() -> StreamSource:
    """DispatchedFunction's event source on the state table's stream, as template.yaml declares it (with its filter)."""
    [fn] = [f for f in functions_of(load_template(ROOT / "template.yaml")) if f.logical_id == "DispatchedFunction"]
    [source] = [s for s in fn.stream_sources if s.table == "StateTable"]
    return source


def checks_handler(module_name: str, function: str = "checks") -> Callable[..., dict[str, Any]]:
    """functions/<function>/handler.py (ChecksFunction's, or DispatchedFunction's: "dispatched") loaded afresh under
    `module_name` (its cached deps are the module's own)."""
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "functions" / function / "handler.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handler: Callable[..., dict[str, Any]] = module.lambda_handler
    return handler
