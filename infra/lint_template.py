"""Template lint for `make template-lint`: cfn-lint on the SAM-translated template, plus the queue rules.

cfn-lint does not look inside AWS::Serverless::* resources, so the template is first translated to plain
CloudFormation with samtranslator (offline: bundled managed-policy map, dummy code locations) and linted
again. Then the reliability rules of the design (every consumed queue: visibility timeout >= 6 x the
consumer's timeout, a DLQ with maxReceiveCount, partial batch responses), the alarm/log coverage, and
the environment-variable shapes `crcr local` can resolve are checked on the result.

Run with the tools virtualenv: .tools-venv/bin/python infra/lint_template.py [template.yaml]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import boto3
from cfnlint.api import ManualArgs, lint
from cfnlint.decode.decode import decode
from cfnlint.version import __version__ as cfnlint_version
from samtranslator.model.exceptions import InvalidDocumentException
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

VISIBILITY_FACTOR = 6
SQS_DEFAULT_VISIBILITY = 30
SQS_DEFAULT_RETENTION = 345_600
LAMBDA_DEFAULT_TIMEOUT = 3
# Env values `crcr local` resolves itself: ${Name}, ${Name.Attr}, ${AWS::Region}.
SUB_REF = re.compile(r"\$\{([^}]*)\}")
SUB_OK = re.compile(r"^(AWS::Region|[A-Za-z0-9]+(\.[A-Za-z0-9]+)?)$")
GETATT_OK = {"Arn", "QueueName"}
ENV_IF_ALLOWED = {"CRCR_CALLBACK_URL"}
# API Gateway's default steady-state limit for all APIs of an account in a Region (requests/s).
ACCOUNT_RATE_LIMIT = 10_000


class Report:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def ok(self, what: str) -> None:
        print(f"  ok    {what}")

    def fail(self, what: str) -> None:
        print(f"  FAIL  {what}")
        self.failures.append(what)

    def check(self, cond: bool, what: str) -> None:
        (self.ok if cond else self.fail)(what)


def load(path: Path) -> dict[str, Any]:
    template, errors = decode(str(path))
    if errors or template is None:
        for match in errors or []:
            print(f"  {match}")
        sys.exit(f"{path}: cannot be parsed")
    # Drop cfn-lint's position-carrying node types: the translator wants plain dicts and strings.
    return json.loads(json.dumps(template))


def translate(sam: dict[str, Any], region: str) -> dict[str, Any]:
    fragment = json.loads(json.dumps(sam))
    for resource in fragment.get("Resources", {}).values():
        props = resource.get("Properties", {})
        # sam build/package replace local paths with S3 locations; the translator insists on those.
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str) and not props[key].startswith("s3://"):
                props[key] = f"s3://bucket/{props[key].strip('/') or 'root'}.zip"
    try:
        # A session with a region but no credentials: nothing here calls AWS. Managed policies come from
        # samtranslator's bundled map; the empty fallback map means "never ask IAM".
        translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=region))
        return translator.translate(fragment, parameter_values={}, get_managed_policy_map=lambda: {})
    except InvalidDocumentException as exc:
        for cause in exc.causes:
            print(f"  E  samtranslator: {cause.message}")
        sys.exit("template.yaml: SAM translation failed")


def cfn_lint(cfn: dict[str, Any], regions: list[str], report: Report) -> None:
    matches = lint(json.dumps(cfn, indent=1), config=ManualArgs(regions=regions))
    for match in matches:
        path = "/".join(str(p) for p in getattr(match, "path", []) or [])
        report.fail(f"cfn-lint {match.rule.id}: {match.message} [{path}]")
    if not matches:
        where = f"{len(cfn['Resources'])} resources, regions {','.join(regions)}"
        report.ok(f"cfn-lint {cfnlint_version} on the translated template ({where}): no errors or warnings")


def _getatt_target(value: Any, attr: str) -> str | None:
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        if isinstance(target, str):
            target = target.split(".", 1)
        if len(target) == 2 and target[1] == attr:
            return str(target[0])
    return None


def _ref(value: Any) -> str | None:
    return value["Ref"] if isinstance(value, dict) and isinstance(value.get("Ref"), str) else None


def _int(value: Any, default: int) -> int | None:
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return None  # an intrinsic: not checkable statically


def check_queues(cfn: dict[str, Any], report: Report) -> None:
    resources: dict[str, Any] = cfn["Resources"]
    queues = {name for name, r in resources.items() if r["Type"] == "AWS::SQS::Queue"}
    dlqs: set[str] = set()
    for name in sorted(queues):
        redrive = resources[name].get("Properties", {}).get("RedrivePolicy")
        if isinstance(redrive, dict):
            target = _getatt_target(redrive.get("deadLetterTargetArn"), "Arn")
            if target:
                dlqs.add(target)
    # A stream consumer's on-failure destination is a dead-letter queue too.
    for esm in resources.values():
        if esm["Type"] == "AWS::Lambda::EventSourceMapping":
            on_failure = (esm["Properties"].get("DestinationConfig") or {}).get("OnFailure") or {}
            target = _getatt_target(on_failure.get("Destination"), "Arn")
            if target:
                dlqs.add(target)

    print("SQS consumers (design §8):")
    consumed = set()
    for _, esm in sorted(resources.items()):
        if esm["Type"] != "AWS::Lambda::EventSourceMapping":
            continue
        props = esm["Properties"]
        queue = _getatt_target(props.get("EventSourceArn"), "Arn")
        if queue not in queues:
            continue
        consumed.add(queue)
        fn = _ref(props.get("FunctionName"))
        fn_props = resources.get(fn or "", {}).get("Properties", {})
        timeout = _int(fn_props.get("Timeout"), LAMBDA_DEFAULT_TIMEOUT)
        q_props = resources[queue].get("Properties", {})
        visibility = _int(q_props.get("VisibilityTimeout"), SQS_DEFAULT_VISIBILITY)
        label = f"{queue} -> {fn}"
        if timeout is None or visibility is None:
            report.fail(f"{label}: timeout/visibility are not literals, cannot check")
        else:
            report.check(
                visibility >= VISIBILITY_FACTOR * timeout,
                f"{label}: VisibilityTimeout {visibility}s >= {VISIBILITY_FACTOR} x function Timeout {timeout}s"
                f" (= {VISIBILITY_FACTOR * timeout}s)",
            )
        redrive = q_props.get("RedrivePolicy") or {}
        dlq = _getatt_target(redrive.get("deadLetterTargetArn"), "Arn")
        receives = _int(redrive.get("maxReceiveCount"), 0)
        report.check(
            dlq in queues and bool(receives) and receives is not None and receives >= 1,
            f"{label}: RedrivePolicy to DLQ {dlq} with maxReceiveCount {redrive.get('maxReceiveCount')}",
        )
        if dlq in queues:
            src_ret = _int(q_props.get("MessageRetentionPeriod"), SQS_DEFAULT_RETENTION)
            dlq_ret = _int(resources[dlq].get("Properties", {}).get("MessageRetentionPeriod"), SQS_DEFAULT_RETENTION)
            # A message keeps its original enqueue time in the DLQ: a shorter DLQ retention drops it early.
            report.check(
                src_ret is not None and dlq_ret is not None and dlq_ret > src_ret,
                f"{label}: DLQ {dlq} retention {dlq_ret}s > source retention {src_ret}s",
            )
        types = props.get("FunctionResponseTypes") or []
        report.check(
            "ReportBatchItemFailures" in types, f"{label}: FunctionResponseTypes {types} has ReportBatchItemFailures"
        )

    for name in sorted(queues - dlqs):
        report.check(name in consumed, f"queue {name} has a consumer in this template")
        redrive = resources[name].get("Properties", {}).get("RedrivePolicy")
        report.check(isinstance(redrive, dict), f"queue {name} has a DLQ")
    for name in sorted(dlqs):
        report.check(name not in consumed, f"DLQ {name} is not consumed automatically (redrive is a decision)")


def _alarm_dimension(alarm: dict[str, Any]) -> tuple[str, str, str | None]:
    props = alarm.get("Properties", {})
    dims = props.get("Dimensions") or []
    target = None
    for dim in dims:
        value = dim.get("Value")
        target = _ref(value) or _getatt_target(value, "QueueName") or target
    return props.get("Namespace", ""), props.get("MetricName", ""), target


def check_observability(cfn: dict[str, Any], report: Report) -> None:
    resources: dict[str, Any] = cfn["Resources"]
    print("Logs and alarms (design §2: every function's failures are visible):")
    alarms = {_alarm_dimension(r) for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"}
    log_groups = {
        json.dumps(r.get("Properties", {}).get("LogGroupName"), sort_keys=True)
        for r in resources.values()
        if r["Type"] == "AWS::Logs::LogGroup"
    }
    for fn in sorted(n for n, r in resources.items() if r["Type"] == "AWS::Lambda::Function"):
        want = json.dumps({"Fn::Sub": f"/aws/lambda/${{{fn}}}"}, sort_keys=True)
        report.check(want in log_groups, f"{fn}: explicit log group /aws/lambda/${{{fn}}}")
        for metric in ("Errors", "Throttles"):
            report.check(("AWS/Lambda", metric, fn) in alarms, f"{fn}: alarm on AWS/Lambda {metric}")
    for r in resources.values():
        props = r.get("Properties", {})
        if r["Type"] == "AWS::Lambda::EventSourceMapping" and _getatt_target(props.get("EventSourceArn"), "StreamArn"):
            # A stream is read in order: a failing batch holds its shard, and only the iterator's age shows it.
            fn = _ref(props.get("FunctionName"))
            report.check(("AWS/Lambda", "IteratorAge", fn) in alarms, f"{fn}: alarm on AWS/Lambda IteratorAge")
    dlqs = set()
    for source, r in resources.items():
        if r["Type"] == "AWS::SQS::Queue":
            redrive = r.get("Properties", {}).get("RedrivePolicy") or {}
            target = _getatt_target(redrive.get("deadLetterTargetArn"), "Arn")
            if target:
                dlqs.add(target)
                report.check(
                    ("AWS/SQS", "ApproximateAgeOfOldestMessage", source) in alarms,
                    f"{source}: alarm on ApproximateAgeOfOldestMessage",
                )
    for dlq in sorted(dlqs):
        report.check(
            ("AWS/SQS", "ApproximateNumberOfMessagesVisible", dlq) in alarms,
            f"{dlq}: alarm on ApproximateNumberOfMessagesVisible",
        )


def check_throttles(cfn: dict[str, Any], report: Report) -> None:
    """Every HTTP API route has a token bucket of its own, so a flood of one never spends another's; GitHub's
    webhook route has the largest; their sum stays under the account's regional limit that all APIs share."""
    resources: dict[str, Any] = cfn["Resources"]
    print("HTTP API throttles (one budget per route):")
    for api_name, api in sorted(resources.items()):
        if api["Type"] != "AWS::ApiGatewayV2::Api":
            continue
        paths = (api.get("Properties", {}).get("Body") or {}).get("paths") or {}
        routes = {f"{method.upper()} {path}" for path, methods in paths.items() for method in methods}
        stages = [
            r["Properties"]
            for r in resources.values()
            if r["Type"] == "AWS::ApiGatewayV2::Stage" and _ref(r["Properties"].get("ApiId")) == api_name
        ]
        for stage in stages:
            settings = stage.get("RouteSettings") or {}
            budgets: dict[str, int] = {}
            for route in sorted(routes):
                mine = settings.get(route) or {}
                rate, burst = _int(mine.get("ThrottlingRateLimit"), 0), _int(mine.get("ThrottlingBurstLimit"), 0)
                has_both = bool(rate) and bool(burst)
                report.check(has_both, f"{api_name} {route}: its own throttle (rate {rate}/s, burst {burst})")
                budgets[route] = rate or 0
            webhook = budgets.get("POST /webhook", 0)
            report.check(
                all(webhook >= b for b in budgets.values()), f"{api_name}: POST /webhook has the largest budget"
            )
            total = sum(budgets.values())
            report.check(
                total <= ACCOUNT_RATE_LIMIT,
                f"{api_name}: route budgets sum to {total}/s <= the account's {ACCOUNT_RATE_LIMIT}/s",
            )


def _env_value_ok(value: Any, allow_if: bool) -> bool:
    if isinstance(value, (str, int, float, bool)):
        return True
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((fn, arg),) = value.items()
    if fn == "Ref":
        return isinstance(arg, str)
    if fn == "Fn::GetAtt":
        parts = arg.split(".", 1) if isinstance(arg, str) else arg
        return len(parts) == 2 and parts[1] in GETATT_OK
    if fn == "Fn::Sub":
        return isinstance(arg, str) and all(SUB_OK.match(ref) for ref in SUB_REF.findall(arg))
    if fn == "Fn::If" and allow_if:
        return isinstance(arg, list) and len(arg) == 3 and all(_env_value_ok(v, False) for v in arg[1:])
    return False


def check_env_shapes(sam: dict[str, Any], report: Report) -> None:
    print("Environment values `crcr local` must resolve (!Ref, !GetAtt .Arn/.QueueName, simple !Sub):")
    sources = {"Globals": sam.get("Globals", {}).get("Function", {})}
    for name, r in sam.get("Resources", {}).items():
        if r.get("Type") == "AWS::Serverless::Function":
            sources[name] = r.get("Properties", {})
    for where, props in sources.items():
        variables = (props.get("Environment") or {}).get("Variables") or {}
        bad = [k for k, v in variables.items() if not _env_value_ok(v, k in ENV_IF_ALLOWED)]
        report.check(not bad, f"{where}: {len(variables)} variables" + (f", unsupported: {bad}" if bad else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template", nargs="?", default="template.yaml", type=Path)
    parser.add_argument("--regions", default="us-east-1", help="comma-separated regions for cfn-lint")
    args = parser.parse_args()

    sam = load(args.template)
    regions = args.regions.split(",")
    cfn = translate(sam, regions[0])
    report = Report()
    counts = f"{len(sam['Resources'])} SAM resources to {len(cfn['Resources'])} CloudFormation resources"
    print(f"{args.template}: translated {counts}")
    cfn_lint(cfn, regions, report)
    check_queues(cfn, report)
    check_observability(cfn, report)
    check_throttles(cfn, report)
    check_env_shapes(sam, report)
    if report.failures:
        print(f"template lint: {len(report.failures)} problem(s)")
        return 1
    print("template lint: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
