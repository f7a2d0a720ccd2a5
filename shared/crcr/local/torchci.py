"""A port of PyTorch's HUD endpoint for relay results (torchci `POST /api/crcr/results`), to judge pushes: line by line
from torchci's `results.ts` and `crcrUtils.ts`, JavaScript's semantics included (docs/decisions.md, 2026-12-08)."""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
CIFLOW_TRUNK_REF_RE = re.compile(r"/ciflow/trunk/(\d+)$")
MAX_FAILED_TESTS = 50
MAX_MESSAGE_LEN = 500
DYNAMO_MAX_PARTITION_KEY_BYTES = 2048
DYNAMO_MAX_ITEM_BYTES = 400 * 1024
API_TOKEN_HEADER = "x-hud-internal-bot"  # noqa: S105 - a header name, not a secret


class _Undefined:
    def __repr__(self) -> str:
        return "undefined"


UNDEFINED: Any = _Undefined()


class JsTypeError(Exception):
    """`Cannot read properties of undefined`: the handler's catch-all answers 500."""


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _get(obj: Any, key: str) -> Any:
    """`obj.key`: TypeError on undefined/null, undefined for a missing key."""
    if obj is UNDEFINED or obj is None:
        raise JsTypeError(f"Cannot read properties of {'undefined' if obj is UNDEFINED else 'null'} (reading '{key}')")
    if isinstance(obj, dict):
        return obj.get(key, UNDEFINED)
    return UNDEFINED  # a property a string or number does not have


def _opt(obj: Any, key: str) -> Any:
    """`obj?.key`"""
    return UNDEFINED if obj is UNDEFINED or obj is None else _get(obj, key)


def _nullish(value: Any) -> bool:
    return value is UNDEFINED or value is None


def _coalesce(*values: Any) -> Any:
    """`a ?? b ?? c`"""
    for value in values[:-1]:
        if not _nullish(value):
            return value
    return values[-1]


def _truthy(value: Any) -> bool:
    if _nullish(value) or value is False:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value != 0 and not math.isnan(value)
    if isinstance(value, str):
        return value != ""
    return True  # objects and arrays, even empty


def js_string(value: Any) -> str:
    """`String(value)` / a template literal."""
    if value is UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, list):
        return ",".join("" if _nullish(v) else js_string(v) for v in value)
    return "[object Object]"


def _js_number(value: Any) -> float:
    """`Number(value)`"""
    if value is None or value is False:
        return 0.0
    if value is True:
        return 1.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            return 0.0
        try:
            return float(text)
        except ValueError:
            return math.nan
    return math.nan


def _is_number(value: Any) -> bool:
    """`typeof value === "number"`"""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _slice_utf16(text: str, end: int) -> str:
    """`text.slice(0, end)`: UTF-16 code units, a surrogate pair may be cut in half (a lone surrogate)."""
    units = text.encode("utf-16-le", "surrogatepass")
    return units[: end * 2].decode("utf-16-le", "surrogatepass")


def extract_pr_context(payload: Any) -> tuple[Any, Any]:
    """(prNumber, headSha): the pull_request shape first, else a push, whose PR only a ciflow/trunk ref names."""
    pr = _opt(payload, "pull_request")
    if _truthy(_opt(pr, "number")) and _truthy(_opt(_opt(pr, "head"), "sha")):
        return _get(pr, "number"), _get(_get(pr, "head"), "sha")
    if _truthy(_opt(payload, "after")):
        ref = _coalesce(_opt(payload, "ref"), "")
        match = CIFLOW_TRUNK_REF_RE.search(ref) if isinstance(ref, str) else None
        return (float(match.group(1)) if match else 0), _get(payload, "after")
    return 0, ""


def _failed_tests_json(detail: Any) -> str:
    capped = []
    for t in detail[:MAX_FAILED_TESTS]:
        entry: dict[str, Any] = {"name": js_string(_coalesce(_get(t, "name"), ""))}
        if _truthy(_get(t, "classname")):
            entry["classname"] = js_string(_get(t, "classname"))
        if _truthy(_get(t, "message")):
            entry["message"] = _slice_utf16(js_string(_get(t, "message")), MAX_MESSAGE_LEN)
        if not _nullish(_get(t, "duration")):
            entry["duration"] = _js_number(_get(t, "duration"))
        capped.append(entry)
    return _json_stringify(capped)


def _json_stringify(value: Any) -> str:
    """JSON.stringify: compact, a whole number without `.0`, NaN as null, lone surrogates escaped."""

    def norm(v: Any) -> Any:
        if isinstance(v, float):
            if math.isnan(v) or math.isinf(v):
                return None
            return int(v) if v.is_integer() and abs(v) < 1e21 else v
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return v

    return json.dumps(norm(value), separators=(",", ":"), ensure_ascii=False)


def extract_dynamo_record(payload: Any) -> dict[str, Any]:
    trusted, untrusted = _get(payload, "trusted"), _get(payload, "untrusted")
    cb = _get(untrusted, "callback_payload")
    wf = _get(cb, "workflow")
    pr_number, head_sha = extract_pr_context(_get(cb, "payload"))
    upstream_repo = _coalesce(_opt(_opt(_opt(cb, "payload"), "repository"), "full_name"), "pytorch/pytorch")

    if not _truthy(_get(wf, "job_name")):
        raise ApiError(400, "Missing required field: workflow.job_name")
    if _nullish(_get(wf, "check_run_id")):
        raise ApiError(400, "Missing required field: workflow.check_run_id")
    job_name = _get(wf, "job_name")
    check_run_id = js_string(_get(wf, "check_run_id"))
    attempt = _js_number(_coalesce(_get(wf, "run_attempt"), 1))
    run_attempt = attempt if _truthy(attempt) else 1
    dynamo_key = "/".join(
        js_string(v)
        for v in (_get(trusted, "verified_repo"), _get(cb, "delivery_id"), _get(wf, "name"), job_name, check_run_id)
    )
    head = head_sha if _truthy(head_sha) else _opt(_opt(cb, "payload"), "head_sha")
    if not _truthy(head):
        head = _get(cb, "delivery_id") if _truthy(_get(cb, "delivery_id")) else ""
    record: dict[str, Any] = {
        "dynamoKey": dynamo_key,
        "status": _get(wf, "status"),
        "downstream_repo": _get(trusted, "verified_repo"),
        "upstream_repo": upstream_repo,
        "pr_number": int(pr_number) if isinstance(pr_number, float) and pr_number.is_integer() else pr_number,
        "pytorch_head_sha": head,  # headSha || payload?.head_sha || delivery_id || ""
        "delivery_id": _get(cb, "delivery_id"),
        "workflow_run_url": _coalesce(_get(wf, "url"), ""),
        "workflow_name": _get(wf, "name"),
        "job_name": job_name,
        "check_run_id": check_run_id,
        "run_id": _coalesce(_get(wf, "run_id"), ""),
        "run_attempt": int(run_attempt) if float(run_attempt).is_integer() else run_attempt,
    }
    if _truthy(_get(trusted, "downstream_repo_level")):
        record["downstream_repo_level"] = _get(trusted, "downstream_repo_level")
    if _truthy(_get(cb, "event_type")):
        record["event_type"] = _get(cb, "event_type")
    metrics = _get(trusted, "ci_metrics")
    if not _nullish(_opt(metrics, "queue_time")):
        record["queue_time"] = _get(metrics, "queue_time")
    if not _nullish(_opt(metrics, "execution_time")):
        record["execution_time"] = _get(metrics, "execution_time")
    if _truthy(_get(wf, "started_at")):
        record["started_at"] = _get(wf, "started_at")
    if _truthy(_get(wf, "artifact_url")):
        record["artifact_url"] = _get(wf, "artifact_url")
    if _get(wf, "status") == "completed":
        record["conclusion"] = _coalesce(_get(wf, "conclusion"), UNDEFINED)
        if _truthy(_get(wf, "completed_at")):
            record["completed_at"] = _get(wf, "completed_at")
        tr = _get(wf, "test_results")
        if _truthy(tr):
            for key, column in (("passed", "passed_tests"), ("failed", "failed_tests"), ("skipped", "skipped_tests")):
                if _is_number(_get(tr, key)):
                    record[column] = _get(tr, key)
            total = _get(tr, "total")
            record["total_tests"] = (
                total
                if _is_number(total)
                else sum(_js_number(_coalesce(_get(tr, k), 0)) for k in ("passed", "failed", "skipped"))
            )
        detail = _get(wf, "failed_tests_detail")
        if _truthy(detail) and isinstance(detail, list):  # wf.failed_tests_detail && Array.isArray(...)
            record["failed_tests_json"] = _failed_tests_json(detail)
    return record


class TorchciHud:
    """The endpoint and its table. `handle` answers as the Next.js route would."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.table: dict[str, dict[str, Any]] = {}
        self.answers: list[int] = []  # the status of every push, in order
        self._lock = threading.Lock()

    def write_to_dynamo(self, record: dict[str, Any]) -> None:
        """UpdateItem SET of every defined field but the key, creating the item when absent, on condition that
        the row is not `completed` yet: a completed row is final (409, which PyTorch's relay reads as duplicate)."""
        key = record["dynamoKey"]
        if not isinstance(key, str) or not key or len(key.encode()) > DYNAMO_MAX_PARTITION_KEY_BYTES:
            raise JsTypeError("ValidationException: the partition key is empty or longer than 2048 bytes")
        with self._lock:
            existing = self.table.get(key)
            if existing is not None and existing.get("status") == "completed":
                raise ApiError(409, "Record already completed")
            item = dict(existing or {"dynamoKey": key})
            item.update({k: v for k, v in record.items() if k != "dynamoKey" and v is not UNDEFINED})
            if len(json.dumps(item).encode()) > DYNAMO_MAX_ITEM_BYTES:
                raise JsTypeError("ValidationException: Item size has exceeded the maximum allowed size")
            self.table[key] = item

    def handle(self, method: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        status, reply = self._handle(method, headers, body)
        with self._lock:
            self.answers.append(status)
        return status, reply

    def _handle(self, method: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        if method != "POST":
            return 405, {"error": "Method not allowed"}
        lowered = {k.lower(): v for k, v in headers.items()}
        token = lowered.get(API_TOKEN_HEADER)
        if not token or token != self.token:
            return 401, {"error": "Unauthorized"}
        if len(body) > MAX_PAYLOAD_BYTES:  # Next's bodyParser sizeLimit, then validatePayloadSize
            return 413, {"error": "Payload exceeds 2MB limit"}
        try:
            doc = json.loads(body, parse_constant=_not_json)  # JSON.parse knows no NaN or Infinity
        except ValueError:
            return 400, {"error": "Invalid JSON"}
        try:
            record = extract_dynamo_record(doc)
            self.write_to_dynamo(record)
        except ApiError as exc:
            return exc.status, {"error": str(exc)}
        except JsTypeError:
            return 500, {"error": "Internal error writing to DynamoDB"}
        return 200, {"ok": True, "status": js_string(record["status"]), "dynamoKey": record["dynamoKey"]}
