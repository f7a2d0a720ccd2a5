"""crcr's AWS cost per million upstream events, from `make bench`'s measured call counts and CPU times.

    .venv/bin/python docs/cost_model.py [--results bench/results.json]   # or: make cost
    .venv/bin/python docs/cost_model.py --check                           # docs/cost.md is up to date

With --results it reads the bench's JSON through `figures_from_bench` (the one place that knows the bench's
keys), keeps what it read in docs/cost_inputs.json, and writes docs/cost.md and the summary in
docs/operations.md. Without --results it recomputes them from docs/cost_inputs.json (after a change of a price,
an assumption or a memory size in template.yaml). --check writes nothing and exits 1 when either document
differs from what it would write.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cost.md"
INPUTS = ROOT / "docs" / "cost_inputs.json"
OPERATIONS = ROOT / "docs" / "operations.md"
TEMPLATE = ROOT / "template.yaml"
CHECKS_FLOW = "check runs and the PR comment"
REGRESSIONS_FLOW = "regression tracking (push results, branch log)"
SUMMARY_START, SUMMARY_END = "<!-- cost-summary:start -->", "<!-- cost-summary:end -->"

REPOSITORIES = (10, 100)  # downstream repositories every upstream event is dispatched to
EVENTS = 1_000_000

# ----------------------------------------------------------------------------------------------- prices
# Public on-demand prices in us-east-1 (N. Virginia), first tier, before any free tier; read 2026-12-01.
PRICES_READ_ON = "2026-12-01"
LAMBDA_GB_SECOND_USD = 0.0000166667  # x86_64, first 6 billion GB-s a month
LAMBDA_GB_SECOND_ARM_USD = 0.0000133334  # arm64 (Graviton), first 7.5 billion GB-s a month
LAMBDA_REQUEST_USD = 0.20 / 1e6
SQS_REQUEST_USD = 0.40 / 1e6  # standard queue; every 64 KB chunk of a payload is one request
DYNAMODB_RRU_USD = 0.125 / 1e6  # on-demand read request unit, Standard table class (since 2024-11-01)
DYNAMODB_WRU_USD = 0.625 / 1e6  # on-demand write request unit
S3_PUT_USD = 0.005 / 1000  # S3 Standard: PUT, COPY, POST, LIST
S3_GET_USD = 0.0004 / 1000  # S3 Standard: GET, SELECT and all other requests
HTTP_API_REQUEST_USD = 1.00 / 1e6  # API Gateway HTTP API, first 300 million a month, per 512 KB
PRICE_SOURCES = {
    "Lambda": "https://aws.amazon.com/lambda/pricing/",
    "SQS": "https://aws.amazon.com/sqs/pricing/",
    "DynamoDB": "https://aws.amazon.com/dynamodb/pricing/on-demand/",
    "S3": "https://aws.amazon.com/s3/pricing/",
    "API Gateway": "https://aws.amazon.com/api-gateway/pricing/",
}

# ------------------------------------------------------------------------------------------ assumptions
# What the bench does not measure. Each is named in docs/cost.md with its reason.
JOBS_PER_DISPATCH = 2  # bench sections 6 and 8 run two jobs per repository
CALLBACKS_PER_JOB = 2  # `in_progress`, then `completed` (the action's pattern)
CHANGES_PER_CALLBACK = 1  # each recorded callback is one results-table change the reporter handles
REPORTING_SHARE = 1.0  # repositories at L2+ (L1 ones never report): all of them, the upper bound
CHECKS_SHARE = 1.0  # repositories at L3/L4 with check runs and the PR comment: all of them, the upper bound
PUSH_SHARE = 0.25  # upstream events that are pushes to the default branch: the bench's reporter sequence's share
AWS_CALL_MS = 10.0  # an in-region DynamoDB, SQS or S3 call from Lambda (the bench's moto is on loopback)
GITHUB_CALL_MS = 300.0  # a GitHub REST round trip (the bench's GitHub is an in-process double)
RRU_PER_READ = 1.0  # a strongly consistent read of an item up to 4 KB (a Query of a few small items alike)
WRU_PER_WRITE = 2.0  # a write the bench has no units for (the reporter's verdicts): an item up to 1 KB plus one
# index entry; the dispatch, callback and check-run flows' units are measured from the tables' streams
# A TransactWriteItems call: the relay's (the webhook's delivery and body claims; a job's HUD-row key and its
# dispatch's count of jobs) write two items up to 1 KB, each billed twice in a transaction: 4 units, of which the
# tables' streams count the first 2 (one per item written), so each call adds 2 to the measured units.
TRANSACT_WRU_EXTRA = 2.0
TRANSACT_WRU = 4.0  # the same call where the bench has no units for the flow
FULL_CPU_MB = 1769  # Lambda gives a function one vCPU at 1,769 MB, and CPU in proportion to memory below it
RUNTIME_MB = 30  # what Lambda's Python runtime itself holds beyond the bench's interpreter (assumed)
MEMORY_HEADROOM = 2.0  # a function's memory: at least twice its measured peak RSS plus the runtime's
MEMORY_SIZES = (128, 256, 512, 1024, 1769)
# The functions the bench measures a cold start for, by their handler's folder (bench section 5).
ROLES = {
    "webhook": "WebhookFunction", "planner": "PlannerFunction", "dispatch": "DispatchFunction",
    "callback": "CallbackFunction", "reporter": "ReporterFunction", "checks": "ChecksFunction",
    "jwks": "JwksFunction", "hud": "HudFunction", "sweeper": "SweeperFunction", "reconciler": "ReconcilerFunction",
    "levels": "LevelFunction", "runs": "RunsFunction", "export": "ExportFunction", "dispatched": "DispatchedFunction",
}  # fmt: skip
RECEIVES_PER_SQS_INVOCATION = 1.0  # Lambda's poller's ReceiveMessage that returned the batch (empty polls: fixed)

SQS_OPS = ("SendMessage", "SendMessageBatch", "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility")
DYNAMODB_READS = ("GetItem", "Query", "Scan", "BatchGetItem")
DYNAMODB_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem")
S3_GETS = ("GetObject", "HeadObject")
S3_PUTS = ("PutObject", "CopyObject", "ListObjects", "ListObjectsV2")
NOT_BILLED_PER_CALL = ("secretsmanager.GetSecretValue",)  # cached by each instance; see "Not in the table"


class BenchKeyMissing(KeyError):
    """The bench's JSON lacks a key the model reads: the bench changed, so `figures_from_bench` must."""


# ---------------------------------------------------------------------------------------------- figures
@dataclass(frozen=True)
class Flow:
    """What one unit of work costs, as measured: AWS calls by `service.Operation`, the relay's CPU (ms), GitHub
    requests, Lambda invocations by function, and DynamoDB write request units (None: not measured, so its writes
    count WRU_PER_WRITE each)."""

    aws_calls: dict[str, float]
    cpu_ms: float
    github_requests: float = 0.0
    invocations: dict[str, float] = field(default_factory=dict)
    write_units: float | None = None


@dataclass(frozen=True)
class Figures:
    source: dict[str, Any]  # the bench run: timestamp, commit, dirty
    measured_targets: int  # repositories the dispatch figures were measured at
    dispatch: Flow  # per dispatch: webhook, planner and dispatcher together
    invocations_per_event: dict[str, float]  # the webhook's and the planner's, per upstream event
    callback: Flow  # per recorded callback
    reporter: Flow  # per recorded change
    reporter_verified: bool
    check_writes_per_dispatch: float  # upstream check-run writes per L3/L4 repository per commit (per_job)
    check_paced_per_dispatch: float  # check-run messages re-queued to wait for the budget
    comment_writes_per_event: float
    webhook_ack_ms: float
    keys_read: list[str]
    checks: Flow  # ChecksFunction per L3/L4 dispatch: check runs and the PR comment (bench section 8)
    checks_sqs_records: float  # ChecksQueue messages it handled per L3/L4 dispatch (the rest came from the stream)
    peak_rss_mb: dict[str, float]  # by function: the bench's interpreter after import and the first build
    # GitHub's record of the runs (bench section 12): a non-relay run event dropped at the door, a run reconciled.
    runs: dict[str, Any] | None = None
    # Regression tracking (bench section 13): what it adds per branch job result in the reporter, the branch log the
    # planner writes per push, and GitHub's comparisons.
    regressions: Flow | None = None
    branch_log: Flow | None = None
    compare: dict[str, Any] | None = None


def dig(results: dict[str, Any], path: str) -> Any:
    """`results["a"]["b"]` for "a.b", or BenchKeyMissing naming the path."""
    value: Any = results
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise BenchKeyMissing(f"bench results have no {path!r} (looked for {part!r}): update figures_from_bench")
        value = value[part]
    return value


def figures_from_bench(results: dict[str, Any]) -> Figures:
    """The one mapping from `make bench`'s JSON to the model's figures: adapt it here when the bench's keys change."""
    read: list[str] = []

    def get(path: str) -> Any:
        read.append(path)
        return dig(results, path)

    # Sections 2 + 3: the throughput run (webhook -> planner -> dispatch) on one stack, cold event included.
    targets = int(get("throughput.targets"))
    events = int(get("throughput.events"))
    dispatched = int(get("throughput.dispatches_received"))
    lifetime_dispatches = (events + 1) * targets  # `invocations` counts the whole stack, the cold event too
    invocations = get("throughput.invocations")
    # Write units: the state table's in the throughput run (at L1), plus what a dispatch at L2+ adds (its start watch
    # in the sweep index), from section 10's warm runs at L1 and L4.
    start_watch = float(get("dispatch.warm_L4.warm.write_units_per_dispatch")) - float(
        get("dispatch.warm.warm.write_units_per_dispatch")
    )
    dispatch = Flow(
        aws_calls=dict(get("throughput.aws_calls_per_dispatch")),
        cpu_ms=1000 * float(get("throughput.cpu_s_during_window.relay_process")) / max(1, dispatched),
        github_requests=float(get("github_requests.warm.per_event_target.total")),
        invocations={"DispatchFunction": invocations.get("DispatchFunction", 0) / lifetime_dispatches},
        write_units=float(get("throughput.write_units_per_dispatch")) + max(0.0, start_watch),
    )
    per_event = {name: invocations.get(name, 0) / (events + 1) for name in ("WebhookFunction", "PlannerFunction")}
    # Section 4: callbacks that record a new job; the relay's CPU over the warm window.
    callbacks = int(get("callback_latency.warm_window.callbacks"))
    # The reporter runs in the same process during that window (the results stream): its S3 calls are counted in
    # its own row, and the callback function has no S3 access (template.yaml), so they are left out here.
    recorded = get("callback_latency.recorded.aws_calls.per_callback")
    callback = Flow(
        aws_calls={op: float(n) for op, n in recorded.items() if not op.startswith("s3.")},
        cpu_ms=1000 * float(get("callback_latency.warm_window.cpu_s.relay_process")) / max(1, callbacks),
        invocations={"CallbackFunction": 1.0},
        write_units=float(get("callback_latency.write_units.both")) / CALLBACKS_PER_JOB,  # a job's two callbacks
    )
    # Section 7: the reporter with the HUD summaries on, plus its health refresh at the stream's own pace.
    calls = {k: float(v) for k, v in get("reporter.on.aws_calls_per_change").items() if k != "total"}
    health = float(get("reporter.health_adds.aws_calls_per_change_at_stream_pace"))
    calls["dynamodb.Query"] = calls.get("dynamodb.Query", 0.0) + health
    records = float(get("reporter.on.records_delivered")) / max(1, int(get("reporter.on.batches")))
    reporter = Flow(
        aws_calls=calls,
        cpu_ms=float(get("reporter.on.cpu_ms_per_change")),
        invocations={"ReporterFunction": 1 / records},
    )
    # Sections 6 and 8: upstream writes (GitHub's, not AWS's), for the checks writer's time.
    per_job = get("check_run_writes.per_job")
    check_dispatches = max(1, int(per_job["events"]) * int(per_job["repositories_per_event"]))
    paced = float(get("check_run_writes.per_job.relay_metrics").get("CheckRunPaced", 0))
    sizes = get("ingest_latency.isolated")
    largest = max((k for k in sizes if k.isdigit()), key=int)
    # Section 8 (comment on): ChecksFunction's records, calls, CPU and write units per L4 dispatch; its GitHub
    # writes (check runs and the comment) per dispatch.
    flow = get("pr_comment.per_event.on.checks_function")
    on = get("pr_comment.per_event.on")
    records = float(flow["records_per_dispatch"])
    check_calls = {op: float(n) * records for op, n in flow["aws_calls_per_record"].items()}
    # The reporter's asks for a commit's check-run pass (one write each; its messages are the records counted below).
    asks = float(flow.get("reporter_asks_per_dispatch", 0.0))  # 0 in results from before passes (sends, not calls)
    check_calls["dynamodb.UpdateItem"] = check_calls.get("dynamodb.UpdateItem", 0.0) + asks
    read += ["pr_comment.per_event.on.checks_function.reporter_asks_per_dispatch"] if asks else []
    checks = Flow(
        aws_calls=check_calls,
        cpu_ms=float(flow["cpu_ms_per_record"]) * records,
        github_requests=float(on["writes_per_event"]) / max(1, int(on["repositories_per_event"])),
        invocations={"ChecksFunction": float(flow["invocations_per_dispatch"])},
        write_units=float(flow["write_units_per_dispatch"]),
    )
    # Section 13: tracking on minus off, per branch job result; the planner's branch log per push.
    on, off = get("regressions.on.aws_calls"), get("regressions.off.aws_calls")
    regressions = Flow(
        aws_calls={op: float(on.get(op, 0)) - float(off.get(op, 0)) for op in set(on) | set(off) if op != "total"},
        cpu_ms=float(get("regressions.cpu_ms_per_branch_result_added")),
        invocations={"ReporterFunction": 0.0},  # the same invocations as without tracking
        write_units=float(get("regressions.write_units_per_branch_result_added")),
    )
    branch_log = Flow(
        aws_calls={op: float(n) for op, n in get("regressions.branch_log_aws_calls_per_push").items()},
        cpu_ms=0.0,
        invocations={"PlannerFunction": 0.0},
        write_units=float(get("regressions.branch_log_write_units_per_push")),
    )
    compare = {k: get(f"regressions.{k}") for k in ("regressions_opened", "ranges_over_missed_pushes", "compare_calls")}
    compare["pushes_missed"] = get("regressions.sequence.pushes_missed")
    compare["pushes"] = get("regressions.sequence.pushes")
    cold = get("cold_start.source.functions")
    rss = {ROLES[role]: float(row["rss_init_median_mb"]) for role, row in cold.items() if "rss_init_median_mb" in row}
    return Figures(
        source={
            "timestamp": get("timestamp"),
            "commit": get("git.commit"),
            "dirty": bool(get("git.dirty")),
        },
        measured_targets=targets,
        dispatch=dispatch,
        invocations_per_event=per_event,
        callback=callback,
        reporter=reporter,
        reporter_verified=bool(get("reporter.all_verified")),
        check_writes_per_dispatch=float(get("check_run_writes.per_job.writes_per_repository_per_commit")),
        check_paced_per_dispatch=paced / check_dispatches,
        comment_writes_per_event=float(get("pr_comment.per_event.on.comment_writes_per_event")),
        webhook_ack_ms=float(get(f"ingest_latency.isolated.{largest}.mean_ms")),
        keys_read=sorted(set(read)),
        checks=checks,
        checks_sqs_records=float(flow["records_by_source_per_dispatch"].get("aws:sqs", 0.0)),
        peak_rss_mb=rss,
        runs=get("runs"),
        regressions=regressions,
        branch_log=branch_log,
        compare=compare,
    )


def figures_from_inputs(doc: dict[str, Any]) -> Figures:
    flows = {k: Flow(**doc[k]) for k in ("dispatch", "callback", "reporter", "checks", "regressions", "branch_log")
             if doc.get(k) is not None}  # fmt: skip
    return Figures(**{**doc, **flows})


# ------------------------------------------------------------------------------------------------ model
@dataclass
class Usage:
    """Billable quantities per upstream event, and Lambda seconds by function."""

    lambda_requests: float = 0.0
    lambda_gb_s: float = 0.0
    sqs: float = 0.0
    rru: float = 0.0
    wru: float = 0.0
    s3_get: float = 0.0
    s3_put: float = 0.0
    http_api: float = 0.0
    other_calls: dict[str, float] = field(default_factory=dict)

    def add(self, other: Usage) -> None:
        for name in ("lambda_requests", "lambda_gb_s", "sqs", "rru", "wru", "s3_get", "s3_put", "http_api"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for op, n in other.other_calls.items():
            self.other_calls[op] = self.other_calls.get(op, 0.0) + n

    def costs(self, architecture: str = "arm64") -> dict[str, float]:
        return {
            "Lambda requests": self.lambda_requests * LAMBDA_REQUEST_USD,
            "Lambda GB-seconds": self.lambda_gb_s * gb_second_usd(architecture),
            "SQS requests": self.sqs * SQS_REQUEST_USD,
            "DynamoDB read request units": self.rru * DYNAMODB_RRU_USD,
            "DynamoDB write request units": self.wru * DYNAMODB_WRU_USD,
            "S3 GET requests": self.s3_get * S3_GET_USD,
            "S3 PUT requests": self.s3_put * S3_PUT_USD,
            "API Gateway requests": self.http_api * HTTP_API_REQUEST_USD,
        }

    def quantities(self) -> dict[str, float]:
        return dict(
            zip(
                self.costs(),
                (self.lambda_requests, self.lambda_gb_s, self.sqs, self.rru, self.wru, self.s3_get, self.s3_put,
                 self.http_api),
                strict=True,
            )
        )  # fmt: skip


def gb_second_usd(architecture: str) -> float:
    return LAMBDA_GB_SECOND_ARM_USD if architecture == "arm64" else LAMBDA_GB_SECOND_USD


def _template() -> dict[str, Any]:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    return dict(yaml.load(TEMPLATE.read_text(encoding="utf-8"), Loader=Loader))  # noqa: S506


def architecture() -> str:
    """The functions' architecture in template.yaml (Globals)."""
    [arch] = _template()["Globals"]["Function"].get("Architectures", ["x86_64"])
    return str(arch)


def memory_gb() -> dict[str, float]:
    """Each function's MemorySize from template.yaml (the Globals' unless it sets its own), in GB."""
    template = _template()
    default = template["Globals"]["Function"]["MemorySize"]
    return {
        name: resource["Properties"].get("MemorySize", default) / 1024
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def calls_usage(calls: dict[str, float], units: float, write_units: float | None = None) -> Usage:
    """The AWS calls of `units` units of work, as billable quantities; DynamoDB's writes at `write_units` per unit
    when measured, else at WRU_PER_WRITE each."""
    usage = Usage()
    if write_units is not None:
        usage.wru += write_units * units
    for op, per_unit in calls.items():
        n = per_unit * units
        service, _, name = op.partition(".")
        if service == "sqs" and name in SQS_OPS:
            usage.sqs += n
        elif service == "dynamodb" and name in DYNAMODB_READS:
            usage.rru += n * RRU_PER_READ
        elif service == "dynamodb" and name in DYNAMODB_WRITES:
            usage.wru += 0.0 if write_units is not None else n * WRU_PER_WRITE
        elif op == "dynamodb.TransactWriteItems":
            usage.wru += n * (TRANSACT_WRU_EXTRA if write_units is not None else TRANSACT_WRU)
        elif service == "s3" and name in S3_GETS:
            usage.s3_get += n
        elif service == "s3" and name in S3_PUTS:
            usage.s3_put += n
        elif op not in NOT_BILLED_PER_CALL:
            usage.other_calls[op] = usage.other_calls.get(op, 0.0) + n
    return usage


def billed_ms(flow: Flow, memory_gb_: float) -> float:
    """A unit's billed milliseconds: the measured CPU, stretched where the memory buys less than a whole vCPU, plus
    every call's round trip one after another (an upper bound: a dispatch batch's records run side by side)."""
    stretch = max(1.0, FULL_CPU_MB / (memory_gb_ * 1024))
    return flow.cpu_ms * stretch + sum(flow.aws_calls.values()) * AWS_CALL_MS + flow.github_requests * GITHUB_CALL_MS


def lambda_usage(flow: Flow, units: float, memory: dict[str, float]) -> Usage:
    """Invocations, and GB-seconds in the flow's first function's memory."""
    usage = Usage()
    usage.lambda_requests = sum(flow.invocations.values()) * units
    function = next(iter(flow.invocations), "DispatchFunction")
    usage.lambda_gb_s = units * billed_ms(flow, memory[function]) / 1000 * memory[function]
    return usage


def sqs_receives(flow: Flow, units: float, functions: tuple[str, ...]) -> float:
    return sum(flow.invocations.get(f, 0.0) for f in functions) * units * RECEIVES_PER_SQS_INVOCATION


def per_event(figures: Figures, repositories: int, memory: dict[str, float]) -> dict[str, Usage]:
    """Usage per upstream event by flow, with every downstream repository dispatched to."""
    flows: dict[str, Usage] = {}
    dispatches = repositories
    ingest = calls_usage(figures.dispatch.aws_calls, dispatches, figures.dispatch.write_units)
    ingest.add(lambda_usage(figures.dispatch, dispatches, memory))
    front = figures.invocations_per_event
    ingest.lambda_requests += sum(front.values())
    ingest.sqs += sqs_receives(figures.dispatch, dispatches, ("DispatchFunction",)) + front.get("PlannerFunction", 0)
    ingest.http_api += 1
    flows["webhook, planner, dispatch"] = ingest

    callbacks = dispatches * REPORTING_SHARE * JOBS_PER_DISPATCH * CALLBACKS_PER_JOB
    callback = calls_usage(figures.callback.aws_calls, callbacks, figures.callback.write_units)
    callback.add(lambda_usage(figures.callback, callbacks, memory))
    callback.http_api += callbacks
    flows["callbacks"] = callback

    changes = callbacks * CHANGES_PER_CALLBACK
    report = calls_usage(figures.reporter.aws_calls, changes)
    report.add(lambda_usage(figures.reporter, changes, memory))
    flows["reporter (HUD documents, verdicts, health)"] = report

    checked = dispatches * CHECKS_SHARE
    check = calls_usage(figures.checks.aws_calls, checked, figures.checks.write_units)
    check.add(lambda_usage(figures.checks, checked, memory))
    # Each ChecksQueue message was sent once (by the reporter, the planner, or a re-queue the function's own calls
    # above count) and deleted once; each invocation's batch came from one receive. Stream records cost nothing.
    own_sends = sum(n for op, n in figures.checks.aws_calls.items() if op.startswith("sqs.Send"))
    check.sqs += checked * (max(0.0, figures.checks_sqs_records - own_sends) + figures.checks_sqs_records)
    check.sqs += sqs_receives(figures.checks, checked, ("ChecksFunction",))
    flows[CHECKS_FLOW] = check
    if figures.regressions is not None and figures.branch_log is not None:
        results = PUSH_SHARE * dispatches * REPORTING_SHARE * JOBS_PER_DISPATCH  # a push's branch job results
        tracking = calls_usage(figures.regressions.aws_calls, results, figures.regressions.write_units)
        tracking.add(lambda_usage(figures.regressions, results, memory))
        tracking.add(calls_usage(figures.branch_log.aws_calls, PUSH_SHARE, figures.branch_log.write_units))
        tracking.add(lambda_usage(figures.branch_log, PUSH_SHARE, memory))
        flows[REGRESSIONS_FLOW] = tracking
    return flows


def total(flows: dict[str, Usage]) -> Usage:
    usage = Usage()
    for flow in flows.values():
        usage.add(flow)
    return usage


# --------------------------------------------------------------------------------------------- document
def usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.005 or value == 0 else "<$0.01"


def amount(value: float) -> str:
    if value >= 1e9:
        return f"{value / 1e9:,.2f} billion"
    if value >= 1e6:
        return f"{value / 1e6:,.1f} million"
    return f"{value:,.0f}"


def model(figures: Figures) -> dict[int, dict[str, Usage]]:
    memory = memory_gb()
    return {n: per_event(figures, n, memory) for n in REPOSITORIES}


def levers(figures: Figures) -> list[tuple[str, str, dict[int, float]]]:
    """The total per million events as configured and with each lever undone: (name, architecture, by size)."""
    sized, flat = memory_gb(), dict.fromkeys(memory_gb(), 0.5)
    arch = architecture()
    other = "x86_64" if arch == "arm64" else "arm64"

    def totals(memory: dict[str, float], at: str) -> dict[int, float]:
        return {n: sum(total(per_event(figures, n, memory)).costs(at).values()) * EVENTS for n in REPOSITORIES}

    return [
        (f"as configured: {arch}, memory sized per function", arch, totals(sized, arch)),
        (f"{other}, memory sized per function", other, totals(sized, other)),
        (f"{arch}, 512 MB for every function", arch, totals(flat, arch)),
        (
            f"{other if arch == 'arm64' else arch}, 512 MB for every function (before 2026-12-04)",
            other,
            totals(flat, other),
        ),
    ]


def render(figures: Figures) -> tuple[str, str]:
    """docs/cost.md, and the summary paragraph for docs/operations.md."""
    results = model(figures)
    totals = {n: total(flows) for n, flows in results.items()}
    arch = architecture()
    lines = [
        "# Cost model: AWS per million upstream events",
        "",
        "<!-- Generated by docs/cost_model.py from docs/cost_inputs.json; do not edit. "
        "`make bench`, then `make cost`. -->",
        "",
        wrap(
            "What the relay spends in AWS for **one million upstream events** (webhook deliveries it acts on: a pull "
            "request opened or pushed to, a push), each dispatched to every one of 10 or 100 downstream repositories, "
            f"at public us-east-1 on-demand prices before any free tier, with the functions on {arch} and each one's "
            "memory from `template.yaml` ([sized](#memory) from its measured peak RSS and billed time). The call "
            "counts, write units and CPU times are `make "
            f"bench`'s (run {figures.source['timestamp']}, commit `{str(figures.source['commit'])[:12]}`"
            f"{', with uncommitted changes' if figures.source['dirty'] else ''}); what the bench does not measure is "
            "an [assumption](#assumptions), named below with its reason. Where a choice was needed, the figure is an "
            "upper bound. GitHub's side (requests, its hourly write budget) is in "
            "[bench/README.md](../bench/README.md)."
        ),
        "",
        "## Per million upstream events",
        "",
        "| | "
        + " | ".join(f"{n} repositories" for n in REPOSITORIES)
        + " | "
        + " | ".join(f"cost at {n}" for n in REPOSITORIES)
        + " |",
        "|---|" + "---:|" * (2 * len(REPOSITORIES)),
    ]
    costs = {n: totals[n].costs(arch) for n in REPOSITORIES}
    for row in costs[REPOSITORIES[0]]:
        quantity = [amount(totals[n].quantities()[row] * EVENTS) for n in REPOSITORIES]
        money = [usd(costs[n][row] * EVENTS) for n in REPOSITORIES]
        lines.append(f"| {row} | " + " | ".join(quantity + money) + " |")
    lines.append(
        "| **total** | | | " + " | ".join(f"**{usd(sum(costs[n].values()) * EVENTS)}**" for n in REPOSITORIES) + " |"
    )
    lines += [
        "",
        "## By flow",
        "",
        "| flow | " + " | ".join(f"cost at {n}" for n in REPOSITORIES) + " | largest item |",
    ]
    lines.append("|---|" + "---:|" * len(REPOSITORIES) + "---|")
    for name in results[REPOSITORIES[0]]:
        flow_costs = [sum(results[n][name].costs(arch).values()) * EVENTS for n in REPOSITORIES]
        top = max(results[REPOSITORIES[-1]][name].costs(arch).items(), key=lambda kv: kv[1])[0]
        lines.append(f"| {name} | " + " | ".join(usd(c) for c in flow_costs) + f" | {top} |")
    lines += levers_section(figures) + memory_section(figures)
    lines += measured_section(figures) + assumptions_section(figures) + prices_section() + not_modelled_section()
    other = {op: n for op, n in totals[REPOSITORIES[-1]].other_calls.items() if n}
    if other:
        lines += ["", "Calls the model has no price for (per event at 100 repositories; not in the totals): "]
        lines += [", ".join(f"`{op}` {n:.2f}" for op, n in sorted(other.items())) + "."]
    doc = "\n".join(lines) + "\n"
    small, large = (sum(costs[n].values()) * EVENTS for n in REPOSITORIES)
    top_row, top_cost = max(costs[REPOSITORIES[-1]].items(), key=lambda kv: kv[1])
    checks_large = sum(results[REPOSITORIES[-1]][CHECKS_FLOW].costs(arch).values()) * EVENTS
    summary = (
        f"{usd(small)} per million upstream events at {REPOSITORIES[0]} downstream repositories and {usd(large)} at "
        f"{REPOSITORIES[-1]} (that is {usd(small / EVENTS * 1000)} and {usd(large / EVENTS * 1000)} per thousand "
        f"events), on {arch} with each function's memory sized; the largest item at {REPOSITORIES[-1]} is {top_row} "
        f"({usd(top_cost * EVENTS)}). The check-run and comment writer's share ({usd(checks_large)} at "
        f"{REPOSITORIES[-1]}) is measured (bench section 8), every L3/L4 repository counted as having it."
    )
    return doc, summary


def levers_section(f: Figures) -> list[str]:
    rows = levers(f)
    base = rows[0][2]
    out = [
        "",
        "## Levers",
        "",
        "| setting | " + " | ".join(f"total at {n}" for n in REPOSITORIES) + " | against configured |",
    ]
    out.append("|---|" + "---:|" * len(REPOSITORIES) + "---|")
    for name, _, by_size in rows:
        diff = ", ".join(
            f"{'+' if by_size[n] >= base[n] else '-'}{usd(abs(by_size[n] - base[n]))}" for n in REPOSITORIES
        )
        out.append(f"| {name} | " + " | ".join(usd(by_size[n]) for n in REPOSITORIES) + f" | {diff} |")
    out += [
        "",
        wrap(
            "Each row is the same measured work priced another way: arm64 bills a fifth less per GB-second at the same "
            "request price; below 1,769 MB a function gets that share of a vCPU, so its CPU time stretches while its "
            "waits (AWS calls, GitHub) do not, and a smaller memory bills fewer GB-seconds as long as the waits are "
            "most of a call. The DynamoDB write units are the bench's own count from the tables' streams."
        ),
    ]
    return out


def memory_section(f: Figures) -> list[str]:
    memory = memory_gb()
    flows = {"WebhookFunction": None, "PlannerFunction": None, "DispatchFunction": f.dispatch,
             "CallbackFunction": f.callback, "ReporterFunction": f.reporter, "ChecksFunction": f.checks}  # fmt: skip
    out = [
        "",
        "## Memory",
        "",
        "| function | peak RSS, MB (bench) | smallest size with headroom | MemorySize | billed ms per unit there "
        "| at 512 MB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in sorted(set(memory) & set(f.peak_rss_mb) | set(flows) & set(memory)):
        rss = f.peak_rss_mb.get(name)
        need = next((m for m in MEMORY_SIZES if rss is not None and m >= MEMORY_HEADROOM * (rss + RUNTIME_MB)), None)
        flow = flows.get(name)
        here = f"{billed_ms(flow, memory[name]):.0f}" if flow else "-"
        flat = f"{billed_ms(flow, 0.5):.0f}" if flow else "-"
        out.append(
            f"| {name.removesuffix('Function')} | {rss if rss is not None else '-'} | {need or '-'} | "
            f"{memory[name] * 1024:.0f} | {here} | {flat} |"
        )
    out += [
        "",
        wrap(
            "Peak RSS is the bench's interpreter after the handler's import and its first build (boto3 clients, the "
            f"App's key, settings; section 5), plus {RUNTIME_MB} MB for Lambda's runtime; each function gets at least "
            f"{MEMORY_HEADROOM:g} times that, for a batch's payloads and the heap's growth. Above that floor a smaller "
            "size costs less: the billed time is mostly waiting on AWS and GitHub, which memory does not speed up. "
            "LevelFunction keeps 512 MB: it reads every job of the level windows, which grows with the downstreams, "
            "not with a batch."
        ),
    ]
    return out


def measured_section(f: Figures) -> list[str]:
    def calls(flow: Flow) -> str:
        return ", ".join(f"`{op}` {n:.2f}" for op, n in sorted(flow.aws_calls.items()) if n)

    def units(flow: Flow) -> str:
        return f"{flow.write_units:.2f}" if flow.write_units is not None else "not measured"

    verified = "" if f.reporter_verified else (
        " **The bench's own check of the reporter's documents failed on this run** (`reporter.all_verified` is"
        " false: bench/README.md section 7 says not to rely on such figures); they are used as measured."
    )  # fmt: skip
    return [
        "",
        "## Measured by `make bench`",
        "",
        "| unit | AWS calls per unit (in the relay process; polling left out) | DynamoDB write units | relay CPU ms "
        "per unit | other |",
        "|---|---|---:|---:|---|",
        f"| dispatch, measured at {f.measured_targets} repositories | {calls(f.dispatch)} | {units(f.dispatch)} | "
        f"{f.dispatch.cpu_ms:.1f} | "
        f"{f.dispatch.github_requests:.2f} GitHub requests; DispatchFunction invocations "
        f"{f.dispatch.invocations.get('DispatchFunction', 0):.2f}, per event webhook "
        f"{f.invocations_per_event.get('WebhookFunction', 0):.2f} and planner "
        f"{f.invocations_per_event.get('PlannerFunction', 0):.2f}; webhook acknowledged in "
        f"{f.webhook_ack_ms:.1f} ms (mean, local) |",
        f"| recorded callback | {calls(f.callback)} | {units(f.callback)} | {f.callback.cpu_ms:.1f} | one "
        "CallbackFunction invocation |",
        f"| recorded change (reporter, HUD documents on) | {calls(f.reporter)} | {units(f.reporter)} | "
        f"{f.reporter.cpu_ms:.1f} | {1 / f.reporter.invocations['ReporterFunction']:.1f} records per invocation |",
        f"| L3/L4 dispatch: ChecksFunction (check runs and the PR comment) | {calls(f.checks)} | {units(f.checks)} | "
        f"{f.checks.cpu_ms:.1f} | {f.checks.github_requests:.2f} upstream writes; "
        f"{f.checks.invocations.get('ChecksFunction', 0):.2f} invocations, {f.checks_sqs_records:.2f} ChecksQueue "
        f"messages; with `per_job` check runs {f.check_writes_per_dispatch:.2f} writes per repository and commit |",
        *runs_rows(f),
        *regression_rows(f),
        "",
        wrap(
            "The dispatch row is everything the webhook, the planner and the dispatcher did in the throughput run, "
            "divided by its dispatches: the webhook's and the planner's calls per event are spread over "
            f"{f.measured_targets} dispatches, and the model multiplies the row by the repositories, so at 100 it "
            "counts those per-event calls ten times over (an overstatement of a few calls per event). The callback "
            "row leaves out the S3 calls the reporter made in the same window (the reporter's row has them). The "
            "relay's CPU is the whole bench process (handlers, the local HTTP server and pollers, the GitHub double): "
            "an upper bound of the functions' own. Duplicate callbacks (a retried report) cost one write fewer and "
            "are not counted apart. The check-run row is bench section 8 with the comment on (2 jobs per repository, "
            "each `in_progress` then `completed`, one failing): the AWS calls and CPU of the threads that ran "
            "ChecksFunction (its invoking thread and batch workers) with the reporter's asks for a commit's pass (one "
            "write each), and the write units of the flow's rows (check runs and the commits' pass rows, the comment's "
            "row, the upstream installation's pacing cell and the downstreams' shares of it), at least one per write "
            "ChecksFunction asked for, refused ones included. Write units are counted from the tables' streams as "
            f"DynamoDB bills them (bench/write_units.py); the dispatch's include a start watch at L2+.{verified}"
        ),
        "",
        wrap(
            "Bench keys read (`figures_from_bench` in `docs/cost_model.py`): "
            + ", ".join(f"`{k}`" for k in f.keys_read)
            + "."
        ),
    ]


def runs_rows(f: Figures) -> list[str]:
    """Bench section 12: what GitHub's record of the runs costs (not in the per-event totals: a downstream's own
    traffic, and one jobs listing per completed attempt on its own installation)."""
    if not f.runs:
        return []
    job, run, done = f.runs["dropped_workflow_job"], f.runs["dropped_workflow_run"], f.runs["reconciled_run"]
    return [
        f"| downstream run or job event not the relay's (dropped at the door) | {job['aws_calls']:.2f} "
        f"(`workflow_job`), {run['aws_calls']:.2f} (`workflow_run` of a push) | 0 | {job['cpu_ms']:.2f}, "
        f"{run['cpu_ms']:.2f} | one WebhookFunction invocation, nothing written, no GitHub call |",
        f"| completed run reconciled ({done['jobs_per_run']} jobs, no report) | {done['aws_calls_per_run']:.1f} "
        f"in all | not measured | {done['cpu_ms_per_run']:.0f} | {done['jobs_listings_per_run']:.0f} jobs listing, "
        f"{done['github_requests_per_run']:.0f} GitHub requests on the downstream's installation; from GitHub's "
        "`completed` to every job recorded, pushed to the HUD and on its pages |",
    ]


def regression_rows(f: Figures) -> list[str]:
    """Bench section 13: regression tracking, tracking on minus off on the same stream (in the per-event totals as
    its own flow, for the pushes' share of the events)."""
    if f.regressions is None or f.branch_log is None or f.compare is None:
        return []
    added, log, c = f.regressions, f.branch_log, f.compare
    calls = ", ".join(f"`{op}` {n:+.2f}" for op, n in sorted(added.aws_calls.items()) if abs(n) >= 0.005)
    log_calls = ", ".join(f"`{op}` {n:.2f}" for op, n in sorted(log.aws_calls.items()))
    return [
        f"| branch job result (a push's or a nightly's), regression tracking on minus off | {calls} | "
        f"{added.write_units:.2f} | {added.cpu_ms:+.1f} | the same reporter invocations; GitHub compare calls: "
        f"{c['compare_calls']} for {c['regressions_opened']} regressions opened, one per new range over a push the "
        f"relay never saw ({c['ranges_over_missed_pushes']} such range"
        f"{'' if c['ranges_over_missed_pushes'] == 1 else 's'}; {c['pushes_missed']} of {c['pushes']} pushes missed), "
        "none otherwise |",
        f"| push to the default branch: the planner's branch log | {log_calls} | {log.write_units:.2f} | - | two "
        "small items per commit pushed |",
    ]


def assumptions_section(f: Figures) -> list[str]:
    memory = memory_gb()
    counted = ("WebhookFunction", "PlannerFunction", "DispatchFunction", "CallbackFunction", "ReporterFunction",
               "ChecksFunction")  # fmt: skip
    sizes = ", ".join(f"{name.removesuffix('Function')} {memory[name] * 1024:.0f} MB" for name in counted)
    rows = [
        ("jobs per dispatch", JOBS_PER_DISPATCH, "as in bench sections 6 and 8"),
        ("callbacks per job", CALLBACKS_PER_JOB, "`in_progress`, then `completed`"),
        ("recorded changes per callback", CHANGES_PER_CALLBACK, "each callback records one change"),
        ("share of repositories that report (L2+)", REPORTING_SHARE, "all: the upper bound (L1 never reports)"),
        ("share with check runs and the comment (L3/L4)", CHECKS_SHARE, "all: the upper bound"),
        ("share of upstream events that are pushes to the default branch", PUSH_SHARE,
         "as the bench's reporter sequence; PR events outnumber a busy trunk's pushes, so an upper bound for "
         "regression tracking (nightly results come on top, one per job a night)"),
        ("ms per AWS call", AWS_CALL_MS, "in-region DynamoDB/SQS/S3; the bench's moto answers on loopback"),
        ("ms per GitHub request", GITHUB_CALL_MS, "not measured: the bench's GitHub is a local double"),
        ("read request units per read", RRU_PER_READ, "items up to 4 KB read strongly consistent; sizes not measured"),
        ("write request units per write the bench has no units for", WRU_PER_WRITE,
         "the reporter's verdicts: an item up to 1 KB plus one index entry"),
        ("write request units a transaction adds to the streams' count", TRANSACT_WRU_EXTRA,
         "two items up to 1 KB, each billed twice in a transaction (4 units; the streams count 2)"),
        ("memory that buys one vCPU", f"{FULL_CPU_MB} MB", "Lambda's documentation; below it CPU time stretches"),
        ("Lambda runtime beyond the bench's interpreter", f"{RUNTIME_MB} MB", "not measured: the bench has no Lambda"),
        ("SQS receives per SQS-triggered invocation", RECEIVES_PER_SQS_INVOCATION,
         "the poll that returned the batch; empty polls are a fixed cost"),
        ("reporter records per invocation", f"{1 / f.reporter.invocations['ReporterFunction']:.1f}",
         "as measured (stream batches of 10); changes arriving one by one cost more invocations and document writes"),
    ]  # fmt: skip
    out = ["", "## Assumptions", "", "| assumption | value | why |", "|---|---:|---|"]
    out += [f"| {name} | {value} | {why} |" for name, value, why in rows]
    out += [
        "",
        wrap(
            "Lambda's billed time is the measured CPU (stretched where the memory buys less than a vCPU) plus each AWS "
            f"call and GitHub request one after another, in the function's memory from `template.yaml` ({sizes}); a "
            "dispatch batch's records run side by side (10 "
            "threads), so the dispatcher's real GB-seconds are lower. HTTP API requests are one per webhook and one "
            "per callback (each under 512 KB); SQS payloads are under 64 KB (bodies over 200 KiB go through S3)."
        ),
    ]
    return out


def prices_section() -> list[str]:
    rows = [
        ("`LAMBDA_GB_SECOND_USD`", f"${LAMBDA_GB_SECOND_USD:.10f}", "x86_64, first 6 billion GB-s a month", "Lambda"),
        (
            "`LAMBDA_GB_SECOND_ARM_USD`",
            f"${LAMBDA_GB_SECOND_ARM_USD:.10f}",
            "arm64, first 7.5 billion GB-s a month",
            "Lambda",
        ),
        ("`LAMBDA_REQUEST_USD`", "$0.20 per million", "requests (invocations)", "Lambda"),
        ("`SQS_REQUEST_USD`", "$0.40 per million", "standard queue; a 64 KB chunk is a request", "SQS"),
        ("`DYNAMODB_RRU_USD`", "$0.125 per million", "on-demand, Standard table class", "DynamoDB"),
        ("`DYNAMODB_WRU_USD`", "$0.625 per million", "on-demand, Standard table class", "DynamoDB"),
        ("`S3_GET_USD`", "$0.40 per million", "S3 Standard GET", "S3"),
        ("`S3_PUT_USD`", "$5.00 per million", "S3 Standard PUT, COPY, POST, LIST", "S3"),
        ("`HTTP_API_REQUEST_USD`", "$1.00 per million", "HTTP API, first 300 million a month", "API Gateway"),
    ]
    out = ["", f"## Prices (us-east-1, on-demand, read {PRICES_READ_ON})", ""]
    out += ["| constant | price | unit | source |", "|---|---|---|---|"]
    out += [f"| {c} | {p} | {u} | <{PRICE_SOURCES[s]}> |" for c, p, u, s in rows]
    return out


def not_modelled_section() -> list[str]:
    return [
        "",
        "## Not in the table",
        "",
        "- Fixed monthly costs, whatever the traffic: Lambda's pollers long-polling each SQS queue (a few hundred",
        "  thousand empty receives a month per queue), the sweeper every minute (43,200 invocations a month) and",
        "  the reconciler every 5 minutes (8,640).",
        "- Secrets Manager reads (each warm instance reads the secret once per `CRCR_SECRETS_MAX_AGE_S`, 300 s),",
        "  the JWKS and HUD page requests (the PR and repository pages are composed when read: a PR page at most",
        "  31 S3 GETs, a repository page one Query and one BatchGetItem of its 100 newest rows, about 60 read units),",
        "  OIDC key-set fetches (cached 5 minutes), retries after failures.",
        "- CloudWatch Logs ingestion, embedded metrics, alarms and X-Ray traces (`Tracing: Active`), storage",
        "  (DynamoDB items and indexes, S3 documents and bodies), point-in-time recovery and data transfer.",
        "",
        "## Recomputing",
        "",
        "`make bench` writes `bench/results.json`; `make cost` (`.venv/bin/python docs/cost_model.py --results",
        "bench/results.json`) keeps the figures it reads in `docs/cost_inputs.json` and rewrites this page and the",
        "summary in [operations.md](operations.md#cost). After a change of a price, an assumption or a memory size,",
        "`.venv/bin/python docs/cost_model.py` recomputes from the kept figures; `--check` (run by",
        "`tests/test_cost_model.py`) fails when this page is not what the script and its inputs give.",
    ]


def with_summary(operations: str, summary: str) -> str:
    start, end = operations.index(SUMMARY_START), operations.index(SUMMARY_END)
    return operations[: start + len(SUMMARY_START)] + "\n" + summary + "\n" + operations[end:]


def wrap(text: str, width: int = 116) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, help="make bench's JSON (bench/results.json)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a document is stale")
    parser.add_argument("--inputs", type=Path, default=INPUTS, help=argparse.SUPPRESS)
    parser.add_argument("--doc", type=Path, default=DOC, help=argparse.SUPPRESS)
    parser.add_argument("--operations", type=Path, default=OPERATIONS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.results:
        if not args.results.is_file():
            print(f"cost_model: no {args.results}: run `make bench` first", file=sys.stderr)
            return 2
        try:
            figures = figures_from_bench(json.loads(args.results.read_text(encoding="utf-8")))
        except BenchKeyMissing as exc:
            print(f"cost_model: {exc.args[0]}", file=sys.stderr)
            return 2
    else:
        figures = figures_from_inputs(json.loads(args.inputs.read_text(encoding="utf-8")))
    inputs = json.dumps(asdict(figures), indent=2, sort_keys=True) + "\n"
    doc, summary = render(figures)
    operations = with_summary(args.operations.read_text(encoding="utf-8"), wrap(summary))
    wanted = {args.doc: doc, args.operations: operations}
    if args.results:
        wanted[args.inputs] = inputs
    if args.check:
        stale = [str(p) for p, text in wanted.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
        if stale:
            print(f"cost_model: stale: {', '.join(stale)}; run `make cost` (or docs/cost_model.py)", file=sys.stderr)
            return 1
        return 0
    for path, text in wanted.items():
        path.write_text(text, encoding="utf-8")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
