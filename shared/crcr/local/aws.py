"""The local AWS: moto in server mode, with each DynamoDB request handled whole and moto's slow paths (Query, item
serialization, stream iterators, transactions) made to cost what DynamoDB's do, so a long run stays fast."""

from __future__ import annotations

import base64
import inspect
import threading
from typing import Any

REGION = "us-east-1"
ACCOUNT = "123456789012"


def atomic_dynamodb(app: Any) -> Any:
    """A WSGI wrapper of moto's app that handles each DynamoDB request whole before the next starts. DynamoDB
    evaluates a condition and writes as one step; moto's server checks and writes without a lock, so two racing
    conditional writes (two workers claiming one dispatch, two pacers taking one slot) could both pass there."""
    lock = threading.Lock()

    def atomic(environ: dict[str, Any], start_response: Any) -> Any:
        if not str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith("DynamoDB_"):
            return app(environ, start_response)
        with lock:
            return list(app(environ, start_response))

    return atomic


_PARTITION = threading.local()  # the (table, key) of the key Query this thread is answering, if any


def partition_queries() -> None:
    """moto answers a Query on a table's own key by listing and sorting every item of the table and keeping those
    of the partition, so a Query's cost grows with the table (a callback's Query of its dispatch's jobs: the
    soak's callbacks slowed from 10 to 2 a second by the 8,000th job, moto at a full core). This reads it from the
    one partition the key names, as DynamoDB does, with the same answer; index queries stay as moto does them.
    Idempotent, and safe across threads (the partition is this thread's own)."""
    from moto.dynamodb.models.table import Table  # noqa: PLC0415 - dev dependency, local stack only

    if getattr(Table.query, "_crcr_partition", False):
        return
    slow_query, slow_all_items = Table.query, Table.all_items
    signature = inspect.signature(slow_query)

    def all_items(self: Any) -> list[Any]:
        asked = getattr(_PARTITION, "asked", None)
        if asked is None or asked[0] is not self:
            return slow_all_items(self)
        partition = self.items.get(asked[1])
        if partition is None:
            return []
        if not self.range_key_attr:
            return [partition]
        return sorted(partition.values(), key=lambda item: item.range_key)

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, *args, **kwargs).arguments
        if call.get("index_name") or call.get("hash_key") is None:
            return slow_query(self, *args, **kwargs)
        _PARTITION.asked = (self, call["hash_key"])
        try:
            return slow_query(self, *args, **kwargs)
        finally:
            _PARTITION.asked = None

    query._crcr_partition = True  # type: ignore[attr-defined]
    Table.query, Table.all_items = query, all_items  # type: ignore[method-assign]


def item_maps_without_shape_walk() -> Any:
    """moto writes every DynamoDB answer through its generic shape serializer, attribute by attribute (about 0.3 ms
    each): a Query of 200 job rows took 2 s of CPU, and since each DynamoDB request is handled whole before the next
    (`atomic_dynamodb`), every other caller waited behind it and timed out under the soak's load. An item's map of
    attribute values (Item, Items, Attributes, keys; the streams' images) is written here in one step, with the same
    JSON: binary values base64, everything else as it is. Idempotent; returns moto's own serializer it replaced."""
    from moto.core.serialize import BaseJSONSerializer  # noqa: PLC0415 - dev dependency, local stack only

    walk = BaseJSONSerializer._serialize_type_map
    if getattr(walk, "_crcr_fast", False):
        return walk._crcr_walk  # type: ignore[attr-defined]

    def serialize_map(self: Any, serialized: dict[str, Any], value: Any, shape: Any, key: str) -> None:
        if getattr(shape.value, "name", None) != "AttributeValue" or not isinstance(value, dict):
            walk(self, serialized, value, shape, key)
            return
        serialized[key] = {name: attribute_json(av) for name, av in value.items()}

    serialize_map._crcr_fast = True  # type: ignore[attr-defined]
    serialize_map._crcr_walk = walk  # type: ignore[attr-defined]
    BaseJSONSerializer._serialize_type_map = serialize_map  # type: ignore[method-assign,assignment]
    return walk


def attribute_json(av: Any) -> Any:
    """One attribute value as DynamoDB's JSON writes it: `B` and `BS` base64, `L` and `M` element by element."""
    if not isinstance(av, dict):
        return av
    out: dict[str, Any] = {}
    for kind, v in av.items():
        if kind == "B":
            out[kind] = _b64(v)
        elif kind == "BS":
            out[kind] = [_b64(b) for b in v]
        elif kind == "L":
            out[kind] = [attribute_json(e) for e in v]
        elif kind == "M":
            out[kind] = {k: attribute_json(e) for k, e in v.items()}
        else:
            out[kind] = v
    return out


def _b64(value: str | bytes) -> str:
    return base64.b64encode(value.encode() if isinstance(value, str) else value).decode()


def forget_spent_shard_iterators() -> None:
    """moto keeps every DynamoDB Streams shard iterator it ever handed out (each GetRecords answers a new one), so a
    stack polling its streams grew by one iterator per poll for as long as it ran. An iterator read from is
    forgotten once the next one is handed out: the stream pollers read on from the new one and never come back to
    an old one. Idempotent."""
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend  # noqa: PLC0415 - dev dependency, local only

    if getattr(DynamoDBStreamsBackend.get_records, "_crcr_forgets", False):
        return
    kept_all = DynamoDBStreamsBackend.get_records

    def get_records(self: Any, iterator_arn: str, limit: int) -> Any:
        answer = kept_all(self, iterator_arn, limit)
        if answer.get("NextShardIterator") != iterator_arn:
            self.shard_iterators.pop(iterator_arn, None)
        return answer

    get_records._crcr_forgets = True  # type: ignore[attr-defined]
    DynamoDBStreamsBackend.get_records = get_records  # type: ignore[method-assign]


def transactions_without_table_copies() -> None:
    """moto's TransactWriteItems deep-copies every table it names before it starts, to put the copy back if the
    transaction is cancelled: each transaction cost the whole table (items and every stream record) in time and
    memory, and a cancelled one swapped in a new table whose stream the pollers' iterators never saw again. Here a
    transaction keeps only the items it names, as they were: cancelled, those are put back; written, the stream gets
    one record per item it changed (none while it runs), as DynamoDB's does. Idempotent."""
    import copy as stdlib_copy  # noqa: PLC0415

    from moto.dynamodb import models  # noqa: PLC0415 - dev dependency, local stack only
    from moto.dynamodb.models.dynamo_type import DynamoType  # noqa: PLC0415
    from moto.dynamodb.models.table import Table  # noqa: PLC0415

    backend = models.DynamoDBBackend
    if getattr(backend.transact_write_items, "_crcr_items_only", False):
        return

    class _TablesUncopied:
        """moto's module sees this as `copy`: a table it copies for a rollback is handed back as it is."""

        def __getattr__(self, name: str) -> Any:
            return getattr(stdlib_copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return value if isinstance(value, Table) else stdlib_copy.deepcopy(value, memo)

    setattr(models, "copy", _TablesUncopied())  # noqa: B010 - the module-level name moto looks up
    whole_tables = backend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        touched: list[tuple[Any, Any, Any, Any]] = []  # (table, hash, range, the item before)
        for entry in transact_items:
            op: Any = next(iter(entry.values()), {})
            table = self.tables.get(op.get("TableName")) if isinstance(op, dict) else None
            attrs = (op.get("Key") or op.get("Item") or {}) if table is not None else {}
            if table is None or table.hash_key_attr not in attrs:
                continue  # moto refuses it below, before anything is written
            hash_key = DynamoType(attrs[table.hash_key_attr])
            range_key = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr in attrs else None
            if table.range_key_attr and range_key is None:
                continue
            before = table.get_item(hash_key, range_key)
            touched.append((table, hash_key, range_key, stdlib_copy.deepcopy(before)))
        shards = {id(t): t.stream_shard for t, *_ in touched if t.stream_shard is not None}
        for shard in shards.values():
            shard.add = lambda old, new: None  # no record while it runs
        try:
            whole_tables(self, transact_items)
        except Exception:
            for table, hash_key, range_key, before in reversed(touched):
                table.delete_item(hash_key, range_key)
                if before is not None:
                    table.put_item(before.to_json()["Attributes"])
            raise
        finally:
            for shard in shards.values():
                del shard.add
        for table, hash_key, range_key, before in touched:
            after = table.get_item(hash_key, range_key)
            if table.stream_shard is not None and (before is not None or after is not None):
                table.stream_shard.add(before, after)

    transact_write_items._crcr_items_only = True  # type: ignore[attr-defined]
    backend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def patch_moto() -> None:
    """Every fix above, as `crcr local` (and the bench's and the soak's moto) runs moto; idempotent."""
    partition_queries()
    item_maps_without_shape_walk()
    forget_spent_shard_iterators()
    transactions_without_table_copies()


def moto_server(port: int) -> Any:
    """moto in server mode, with each DynamoDB request handled whole before the next (`atomic_dynamodb`)."""
    from moto.moto_server.werkzeug_app import (  # noqa: PLC0415
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from moto.server import ThreadedMotoServer  # noqa: PLC0415 - dev dependency, local stack only
    from werkzeug.serving import make_server  # noqa: PLC0415

    class Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            patch_moto()
            app = atomic_dynamodb(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    return Server(ip_address="127.0.0.1", port=port, verbose=False)
