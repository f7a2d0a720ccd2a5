"""`crcr local`'s reading of an event source's FilterCriteria: Lambda's rules for the operators it accepts, and a
clear refusal of any pattern it would misread."""

from __future__ import annotations

import pytest

from crcr.local.filters import STREAM_KEYS, Filter, passes

ROW = {"dynamodb": {"Keys": {"sk": {"S": "DSP#o/r"}}, "NewImage": {"state": {"S": "dispatched"}, "level": {"N": "4"}}}}


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ('{"dynamodb": {"NewImage": {"level": {"N": ["3", "4"]}}}}', True),
        ('{"dynamodb": {"NewImage": {"level": {"N": ["1", "2"]}}}}', False),
        ('{"dynamodb": {"NewImage": {"level": {"N": [4]}}}}', False),  # the record's number is a string
        ('{"dynamodb": {"Keys": {"sk": {"S": [{"prefix": "DSP#"}]}}}}', True),
        ('{"dynamodb": {"Keys": {"sk": {"S": [{"prefix": "PACE#"}]}}}}', False),
        ('{"dynamodb": {"NewImage": {"state": {"S": [{"anything-but": ["sending"]}]}}}}', True),
        ('{"dynamodb": {"NewImage": {"state": {"S": [{"anything-but": "dispatched"}]}}}}', False),
        ('{"dynamodb": {"OldImage": {"state": {"S": [{"anything-but": ["dispatched"]}]}}}}', False),  # no old image
        ('{"dynamodb": {"NewImage": {"reason": [{"exists": false}]}}}', True),
        ('{"dynamodb": {"NewImage": {"state": [{"exists": true}]}}}', True),
        ('{"dynamodb": {"NewImage": {"state": {"S": ["dispatched"]}, "level": {"N": ["3"]}}}}', False),  # all keys
    ],
)
def test_a_pattern_matches_as_lambda_matches(pattern: str, expected: bool) -> None:
    assert Filter(pattern, STREAM_KEYS).matches(ROW) is expected


def test_any_filter_lets_a_record_through_and_none_lets_all_through() -> None:
    miss, hit = Filter('{"dynamodb": {"Keys": {"sk": {"S": ["x"]}}}}'), Filter('{"dynamodb": {"Keys": {}}}')
    assert passes([miss, hit], ROW) and not passes([miss], ROW) and passes([], ROW)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ('{"eventName": ["MODIFY"], "dynamodb": {}}', "filters only on ['dynamodb'], not ['eventName']"),
        ('{"dynamodb": {"NewImage": {"level": {"N": [{"numeric": [">", 2]}]}}}}', "not supported locally"),
        ('{"dynamodb": {"Keys": "DSP#"}}', "must be an object or a list"),
        ("[1]", "must be a JSON object"),
        ("{", "is not JSON"),
    ],
)
def test_a_pattern_the_local_stack_would_misread_is_refused_when_the_template_is_read(
    pattern: str, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        Filter(pattern, STREAM_KEYS)
