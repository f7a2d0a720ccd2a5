"""Reads template.yaml's own declarations so the local stack is built from what is deployed: moto's CloudFormation skips
AWS::Serverless::* resources, so the queues, tables, buckets, functions and their event sources are read here and
created through the ordinary AWS APIs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crcr.local.filters import STREAM_KEYS, Filter


class _CfnLoader(yaml.SafeLoader):
    pass


def _intrinsic(tag: str, name: str) -> None:
    def construct(loader: _CfnLoader, node: yaml.Node) -> dict[str, Any]:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
            if name == "Fn::GetAtt":
                value = str(value).split(".", 1)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
        return {name: value}

    _CfnLoader.add_constructor(tag, construct)


for _short in ("Ref", "Condition"):
    _intrinsic(f"!{_short}", _short)
for _fn in ("GetAtt", "Sub", "If", "Equals", "Not", "And", "Or", "Join", "Select", "Split", "FindInMap", "Base64"):
    _intrinsic(f"!{_fn}", f"Fn::{_fn}")


def load_template(path: Path) -> dict[str, Any]:
    doc = yaml.load(path.read_text(), Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    if not isinstance(doc, dict) or "Resources" not in doc:
        raise ValueError(f"{path} is not a CloudFormation/SAM template")
    return doc


@dataclass
class SqsSource:
    queue: str  # logical id
    batch_size: int = 10
    report_failures: bool = False


@dataclass
class StreamSource:
    table: str  # logical id of the table whose stream feeds the function
    batch_size: int = 100
    max_retries: int = -1  # -1: until the record expires, as Lambda's default
    report_failures: bool = False
    on_failure_queue: str | None = None  # logical id of the SQS on-failure destination
    filters: list[Filter] = field(default_factory=list)  # FilterCriteria: only matching records are delivered
    parallelization: int = 1  # ParallelizationFactor: batches of one shard handled at once, in order per key


@dataclass
class FunctionDecl:
    logical_id: str
    code_uri: str
    handler: str
    timeout: int
    environment: dict[str, Any]
    http_routes: list[tuple[str, str]] = field(default_factory=list)  # (METHOD, path)
    sqs_sources: list[SqsSource] = field(default_factory=list)
    schedules: list[str] = field(default_factory=list)
    stream_sources: list[StreamSource] = field(default_factory=list)


@dataclass
class Resolver:
    """Resolves the intrinsic functions used in the template against local physical resources."""

    parameters: dict[str, str]
    refs: dict[str, str]  # logical id -> what !Ref returns
    attrs: dict[tuple[str, str], str]  # (logical id, attribute) -> value
    conditions: dict[str, Any]
    region: str = "us-east-1"
    account: str = "123456789012"

    def ref(self, name: str) -> str:
        pseudo = {"AWS::Region": self.region, "AWS::AccountId": self.account, "AWS::StackName": "crcr-local"}
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in self.refs:
            return self.refs[name]
        raise KeyError(f"cannot resolve !Ref {name} locally")

    def condition(self, name: str) -> bool:
        return bool(self.resolve(self.conditions[name]))

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) != 1:
            return {k: self.resolve(v) for k, v in value.items()}
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return self.ref(arg)
        if fn == "Fn::GetAtt":
            logical, attr = arg if isinstance(arg, list) else str(arg).split(".", 1)
            return self.attrs[(logical, attr)]
        if fn == "Fn::Sub":
            text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))
            return re.sub(r"\$\{([^}!]+)\}", lambda m: self._sub_var(m.group(1), extra), text)
        if fn == "Fn::If":
            name, yes, no = arg
            return self.resolve(yes if self.condition(name) else no)
        if fn == "Fn::Equals":
            left, right = self.resolve(arg)
            return str(left) == str(right)
        if fn == "Fn::Not":
            return not self.resolve(arg[0])
        if fn == "Fn::And":
            return all(self.resolve(a) for a in arg)
        if fn == "Fn::Or":
            return any(self.resolve(a) for a in arg)
        if fn == "Condition":
            return self.condition(arg)
        if fn == "Fn::Join":
            sep, parts = arg
            return str(sep).join(str(p) for p in self.resolve(parts))
        if fn == "Fn::Select":
            index, items = arg
            return self.resolve(items)[int(index)]
        return {k: self.resolve(v) for k, v in value.items()}

    def _sub_var(self, name: str, extra: dict[str, Any]) -> str:
        if name in extra:
            return str(extra[name])
        if "." in name and not name.startswith("AWS::"):
            logical, attr = name.split(".", 1)
            return str(self.attrs[(logical, attr)])
        return str(self.ref(name))


def resources_of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        name: res.get("Properties") or {}
        for name, res in template["Resources"].items()
        if isinstance(res, dict) and res.get("Type") == kind
    }


def functions_of(template: dict[str, Any]) -> list[FunctionDecl]:
    glob = (template.get("Globals") or {}).get("Function") or {}
    glob_env = ((glob.get("Environment") or {}).get("Variables")) or {}
    out = []
    for name, props in resources_of(template, "AWS::Serverless::Function").items():
        env = dict(glob_env) | (((props.get("Environment") or {}).get("Variables")) or {})
        decl = FunctionDecl(
            logical_id=name,
            code_uri=str(props.get("CodeUri", "")),
            handler=str(props.get("Handler", "handler.lambda_handler")),
            timeout=int(props.get("Timeout", glob.get("Timeout", 3))),
            environment=env,
        )
        for event in (props.get("Events") or {}).values():
            kind, ev = event.get("Type"), event.get("Properties") or {}
            if kind == "HttpApi":
                decl.http_routes.append((str(ev.get("Method", "ANY")).upper(), str(ev.get("Path", "/"))))
            elif kind == "SQS":
                queue = ev.get("Queue")
                logical = queue["Fn::GetAtt"][0] if isinstance(queue, dict) and "Fn::GetAtt" in queue else str(queue)
                decl.sqs_sources.append(
                    SqsSource(
                        queue=logical,
                        batch_size=int(ev.get("BatchSize", 10)),
                        report_failures="ReportBatchItemFailures" in (ev.get("FunctionResponseTypes") or []),
                    )
                )
            elif kind == "DynamoDB":
                stream = ev.get("Stream") or {}
                on_failure = ((ev.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
                decl.stream_sources.append(
                    StreamSource(
                        table=stream["Fn::GetAtt"][0],
                        batch_size=int(ev.get("BatchSize", 100)),
                        max_retries=int(ev.get("MaximumRetryAttempts", -1)),
                        report_failures="ReportBatchItemFailures" in (ev.get("FunctionResponseTypes") or []),
                        on_failure_queue=on_failure["Fn::GetAtt"][0] if isinstance(on_failure, dict) else None,
                        parallelization=int(ev.get("ParallelizationFactor", 1)),
                        filters=[
                            Filter(str(f["Pattern"]), STREAM_KEYS)
                            for f in (ev.get("FilterCriteria") or {}).get("Filters") or []
                        ],
                    )
                )
            elif kind in ("Schedule", "ScheduleV2"):
                decl.schedules.append(str(ev.get("Schedule") or ev.get("ScheduleExpression") or ""))
        out.append(decl)
    return out
