"""The items' codec: boto3's serializer with the table's number strings, sorted sets and errors that name the field."""

from __future__ import annotations

from decimal import Decimal

import pytest

from crcr.adapters.item_codec import from_dynamo, num, to_dynamo, to_dynamo_value


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (1765000000.123456789, "1765000000.123457"),  # six decimals, as num() always wrote them
        (1765.5, "1765.5"),
        (1000.0, "1000.0"),  # a float keeps its ".0", as str(num(x)) did
        (1000, "1000"),
        (0.1 + 0.2, "0.3"),
        (2**63, "9223372036854775808"),
    ],
)
def test_a_number_is_stored_as_the_string_num_wrote(value: float, stored: str) -> None:
    assert to_dynamo_value(value) == {"N": stored}
    assert to_dynamo_value(value) == {"N": str(num(value))}


def test_values_of_every_kind_the_adapters_write() -> None:
    assert to_dynamo({"s": "", "t": True, "none": None, "labels": ("a", "b"), "tats": [1.5, 2]}) == {
        "s": {"S": ""},
        "t": {"BOOL": True},
        "none": {"NULL": True},
        "labels": {"L": [{"S": "a"}, {"S": "b"}]},
        "tats": {"L": [{"N": "1.5"}, {"N": "2"}]},
    }


def test_a_set_is_written_in_sorted_order_whatever_the_hash_seed() -> None:
    assert to_dynamo_value(frozenset({"org/b @ann", "org/a @bob", "org/c @cy"})) == {
        "SS": ["org/a @bob", "org/b @ann", "org/c @cy"]
    }
    assert to_dynamo_value({3, 1, 2}) == {"NS": ["1", "2", "3"]}


def test_an_empty_set_is_refused_not_written_as_a_number_set() -> None:
    with pytest.raises(ValueError, match="no empty set"):
        to_dynamo_value(frozenset())


def test_items_read_back_as_plain_values() -> None:
    item = {"n": {"N": "1765.50"}, "ss": {"SS": ["b", "a"]}, "null": {"NULL": True}, "l": {"L": [{"S": "x"}]}}
    assert from_dynamo(item) == {"n": Decimal("1765.50"), "ss": {"a", "b"}, "null": None, "l": ["x"]}


@pytest.mark.parametrize("value", [{"N": "not a number"}, {"L": [{"N": "Infinity"}]}, {}, "plain text", {"X": "1"}])
def test_a_value_that_is_not_dynamodb_json_names_its_attribute(value: object) -> None:
    with pytest.raises(ValueError, match=r"^run_id is not a DynamoDB attribute value"):
        from_dynamo({"ok": {"S": "x"}, "run_id": value})
