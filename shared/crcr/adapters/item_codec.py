"""DynamoDB attribute values to and from plain Python values, through boto3's own TypeSerializer/TypeDeserializer."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Set
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer


@functools.cache
def _serializer() -> TypeSerializer:
    # Imported on first use, as the composition root imports boto3: importing the adapters does not load boto3.
    from boto3.dynamodb.types import TypeSerializer  # noqa: PLC0415

    return TypeSerializer()


@functools.cache
def _deserializer() -> TypeDeserializer:
    from boto3.dynamodb.types import TypeDeserializer  # noqa: PLC0415

    return TypeDeserializer()


def num(value: float) -> Decimal:
    """A number at the table's precision (six decimals), as every float attribute is stored."""
    return Decimal(str(round(value, 6)))


class _Sorted(Set[Any]):
    """A set that iterates in sorted order: its members are written in the order they always were."""

    def __init__(self, members: Iterable[Any]) -> None:
        self._members = sorted(members)

    def __contains__(self, member: object) -> bool:
        return member in self._members

    def __iter__(self) -> Iterator[Any]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)


def _prepared(value: Any) -> Any:
    """What TypeSerializer takes for `value`: floats refused there become `num` decimals, tuples lists."""
    if isinstance(value, float):
        return num(value)
    if isinstance(value, list | tuple):
        return [_prepared(v) for v in value]
    if isinstance(value, dict):
        return {k: _prepared(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        if not value:
            raise ValueError("DynamoDB holds no empty set: remove the attribute instead")
        return _Sorted(_prepared(v) for v in value)
    return value


def to_dynamo_value(value: Any) -> dict[str, Any]:
    """One attribute value: str, int, float (stored as `num`), bool, None, bytes, a list or tuple, a dict, a set."""
    return dict(_serializer().serialize(_prepared(value)))


def to_dynamo(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """An item, a key or ExpressionAttributeValues from plain values (names -> values)."""
    return {name: to_dynamo_value(value) for name, value in values.items()}


def from_dynamo(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item's plain values: numbers as Decimal (the caller says int or float), sets as sets, NULL as None. A value
    that is not a DynamoDB attribute value is a ValueError naming the attribute."""
    plain: dict[str, Any] = {}
    reader = _deserializer()
    for name, value in item.items():
        try:
            plain[name] = _finite(reader.deserialize(value))
        except (TypeError, AttributeError, KeyError, IndexError, ArithmeticError) as exc:
            raise ValueError(f"{name} is not a DynamoDB attribute value ({type(exc).__name__})") from exc
    return plain


def _finite(value: Any) -> Any:
    """The value, unless it holds a number DynamoDB never stores: TypeDeserializer reads `{"N": "junk"}` as NaN."""
    if isinstance(value, Decimal) and not value.is_finite():
        raise ArithmeticError(f"{value} is not a number DynamoDB stores")
    if isinstance(value, list | set):
        for member in value:
            _finite(member)
    elif isinstance(value, dict):
        for member in value.values():
            _finite(member)
    return value
