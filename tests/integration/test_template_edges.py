"""The stack's edge limits as template.yaml declares them: a request rate cap in front of every function, and a
callback function that can write nothing in the state table but rate-limit counters and ledger start marks."""

from __future__ import annotations

import re

from crcr.local.template import load_template, resources_of
from tests.conftest import ROOT

TEMPLATE = load_template(ROOT / "template.yaml")


def test_the_http_api_is_throttled_before_any_function_runs() -> None:
    [api] = resources_of(TEMPLATE, "AWS::Serverless::HttpApi").values()
    limits = api["DefaultRouteSettings"]
    assert 0 < limits["ThrottlingRateLimit"] <= 100 and 0 < limits["ThrottlingBurstLimit"] <= 200


def test_the_callback_function_may_write_only_rate_limit_ledger_and_hud_key_rows_of_the_state_table() -> None:
    """And the rows its quotas keep: refused reports per hour (REFUSED#), remembered commit lookups (SHA#), and each
    dispatch's count of jobs beside its HUD keys (HUD#, written in one transaction with the key)."""
    policies = resources_of(TEMPLATE, "AWS::Serverless::Function")["CallbackFunction"]["Policies"]
    statements = [s for p in policies if isinstance(p, dict) for s in p.get("Statement", [])]
    [update] = [s for s in statements if s.get("Action") == "dynamodb:UpdateItem"]
    leading = ["RATE#*", "DLV#*", "HUD#*", "REFUSED#*"]
    assert update["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": leading}}
    [put] = [s for s in statements if s.get("Action") == "dynamodb:PutItem"]
    assert put["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["HUD#*", "SHA#*"]}}
    assert put["Resource"] == {"Fn::GetAtt": ["StateTable", "Arn"]}
    state_writes = [p for p in policies if isinstance(p, dict) and "DynamoDBCrudPolicy" in p]
    assert all(p["DynamoDBCrudPolicy"]["TableName"] != {"Ref": "StateTable"} for p in state_writes)


def test_the_reporter_may_keep_who_may_disable_a_test_and_the_stack_takes_the_issue_search_source() -> None:
    """The search source's answers on issue authors are `AUTHOR#` rows the reporter writes; the stack parameter that
    names the source admits `github-issues:owner/repo` (CloudFormation refuses a value outside AllowedPattern)."""
    policies = resources_of(TEMPLATE, "AWS::Serverless::Function")["ReporterFunction"]["Policies"]
    statements = [s for p in policies if isinstance(p, dict) for s in p.get("Statement", [])]
    [write] = [s for s in statements if s.get("Resource") == {"Fn::GetAtt": ["StateTable", "Arn"]}]
    assert "AUTHOR#*" in write["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
    pattern = re.compile(TEMPLATE["Parameters"]["DisabledTests"]["AllowedPattern"])
    assert pattern.fullmatch("github-issues:pytorch/pytorch") and pattern.fullmatch("s3://config/disabled.json")
    assert not pattern.fullmatch("github-issues:pytorch")
