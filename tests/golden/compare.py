"""A capture put in its normal form (tests/golden/normalise.py), written as the golden file, and a readable diff."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import replace
from typing import Any

from tests.golden.normalise import Numbering, Rules, Volatile, canonical, shape, trim

# Queue bodies, check-run bodies and pushes of one step may come in any order (the relay runs side by side).
STEP_SECTIONS = ("github", "buildkite", "torchci", "queues")
# How many differing lines a failure prints before it says how many more there are, after the places they are at.
DIFF_LINES = 80
PLACES = 20
# An object this large (compact JSON) written more than once (the event each dispatch carries, echoed in its queue
# message, its shadow decision) is kept once, under `payloads`, and named by its digest where it was.
SHARED_BYTES = 1024


def rate_windows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A rate limit's counters are cut into windows by the wall clock: how many windows a run's calls fell into
    varies, so each counter is one item with the hits of all its windows."""
    kept: dict[str, dict[str, Any]] = {}
    others = []
    for item in sorted(items, key=lambda i: (i["pk"].get("S", ""), i["sk"].get("S", ""))):
        pk = item["pk"].get("S", "")
        if not pk.startswith("RATE#"):
            others.append(item)
            continue
        if pk not in kept:
            kept[pk] = dict(item) | {"sk": {"S": Volatile("window", "", numbered=False)}}
        else:
            total = int(kept[pk]["hits"]["N"]) + int(item["hits"]["N"])
            kept[pk]["hits"] = {"N": str(total)}
    return others + list(kept.values())


def pass_counts(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """How many passes went over a commit's check runs depends on how the table's stream batched the dispatches of
    one event (one batch or two), not on what they wrote."""
    return [
        item | {"version": {"N": Volatile("passes", "", numbered=False)}}
        if item["pk"].get("S", "").startswith("CHECK#") and item["sk"].get("S") == "SYNC" and "version" in item
        else item
        for item in items
    ]


def head_passes(sends: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """How many times a step booked a pass over a commit's check runs depends on its timing, not on what the passes
    write: a booking after the pass ran books again (the step's callbacks took longer than the settle time), a pass
    that met another writer's lease goes back a second later. A step's head passes are kept once per commit, their
    ticket, due time and delay alike."""
    kept: list[dict[str, Any]] = []
    for send in sends:
        body = json.loads(send["body"]) if send["queue"] == "ChecksQueue" else None
        if isinstance(body, dict) and body.get("kind") == "head":
            body |= {"render": "<ticket>", "not_before": "<due>"}
            alike = send | {"body": json.dumps(body, sort_keys=True), "delay_s": "<delay>"}
            if alike not in kept:
                kept.append(alike)
        else:
            kept.append(send)
    return kept


def dynamo_sets(value: Any) -> Any:
    """DynamoDB string and number sets have no order: they are listed sorted."""
    if isinstance(value, dict):
        return {k: sorted(v, key=str) if k in ("SS", "NS") else dynamo_sets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [dynamo_sets(v) for v in value]
    return value


def normal_form(captured: dict[str, Any], rules: Rules) -> dict[str, Any]:
    """Each step's writes, both tables and the HUD bucket, volatile values as placeholders numbered in order of
    first appearance (steps first, then tables, then documents), every list the relay's concurrency orders sorted."""
    steps = []
    for step in captured["steps"]:
        sections = step | {"queues": head_passes(step["queues"])}
        shaped = {section: canonical(shape(sections[section], rules)) for section in STEP_SECTIONS}
        steps.append({"step": step["step"]} | shaped)
    tables = {
        name: canonical([shape(dynamo_sets(item), rules) for item in pass_counts(rate_windows(items))])
        for name, items in captured["tables"].items()
    }
    coarse = replace(rules, coarse_times=True)
    documents = canonical(
        [{"key": shape(k, coarse), "doc": shape(v, coarse)} for k, v in captured["hud_bucket"].items()]
    )
    numbering = Numbering()
    form = {
        "dead_letters": captured["dead_letters"],
        "steps": trim(numbering.render(steps)),
        "tables": trim(numbering.render(tables)),
        "hud_bucket": trim(numbering.render(documents)),
    }
    return shared_payloads(form)


def shared_payloads(form: dict[str, Any]) -> dict[str, Any]:
    """Large objects written more than once kept once: the file stays small enough to review, and a change inside
    one still shows (its digest changes where it is named, and `payloads` shows what changed in it)."""
    counts: dict[str, int] = {}
    _count(form, counts)
    shared = {key for key, n in counts.items() if n > 1}
    payloads: dict[str, Any] = {}
    return _replace(form, shared, payloads) | {"payloads": payloads}


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _count(value: Any, counts: dict[str, int]) -> None:
    if isinstance(value, dict):
        text = _compact(value)
        if len(text) >= SHARED_BYTES:
            counts[text] = counts.get(text, 0) + 1
            if counts[text] > 1:
                return  # what is inside was counted with the first
        for v in value.values():
            _count(v, counts)
    elif isinstance(value, list):
        for v in value:
            _count(v, counts)


def _replace(value: Any, shared: set[str], payloads: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        text = _compact(value)
        if text in shared:
            name = "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
            payloads[name] = {k: _replace(v, shared - {text}, payloads) for k, v in value.items()}
            return {"payload": name}
        return {k: _replace(v, shared, payloads) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, shared, payloads) for v in value]
    return value


def as_text(form: dict[str, Any]) -> str:
    return json.dumps(form, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def flatten(value: Any, path: str = "") -> list[str]:
    """One line per leaf, with its path (a step named, an item by its keys), for a diff a person can read."""
    if isinstance(value, dict):
        if not value:
            return [f"{path} = {{}}"]
        return [line for k in sorted(value) for line in flatten(value[k], f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        if not value:
            return [f"{path} = []"]
        return [line for i, v in enumerate(value) for line in flatten(v, f"{path}[{_label(v, i)}]")]
    return [f"{path} = {json.dumps(value, ensure_ascii=False)}"]


def _label(value: Any, index: int) -> str:
    if isinstance(value, dict):
        if "step" in value:
            return json.dumps(value["step"])
        if isinstance(value.get("pk"), dict) and isinstance(value.get("sk"), dict):
            return f"{value['pk'].get('S')} {value['sk'].get('S')}"
        if "key" in value and isinstance(value["key"], str):
            return value["key"]
    return str(index)


def readable_diff(expected: str, got: str) -> str:
    """Where the two differ (paths with what is in brackets folded, counted), then the differing lines with a couple
    of lines of context each, at most DIFF_LINES of them."""
    before, after = flatten(json.loads(expected)), flatten(json.loads(got))
    lines = list(difflib.unified_diff(before, after, "golden", "this run", n=2, lineterm=""))
    changed = [line for line in lines[2:] if line[:1] in "+-"]
    places: dict[str, int] = {}
    for line in changed:
        place = re.sub(r"\[[^\]]*\]", "[…]", line[1:].partition(" = ")[0])
        places[place] = places.get(place, 0) + 1
    summary = [f"{len(changed)} lines differ, at:"] + [
        f"  {n:4d}  {place}" for place, n in sorted(places.items(), key=lambda kv: -kv[1])[:PLACES]
    ]
    shown = lines[: DIFF_LINES + 2]
    more = len([line for line in lines[DIFF_LINES + 2 :] if line[:1] in "+-"])
    return "\n".join(summary + [""] + shown + ([f"... and {more} more differing lines"] if more else []))
