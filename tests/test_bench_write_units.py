"""bench/write_units.py: the DynamoDB write units the cost page reads are counted from stream records as DynamoDB
bills on-demand writes (the larger image per started KB, and each index entry put, changed or removed)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

from tests.conftest import ROOT


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("write_units", ROOT / "bench" / "write_units.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["write_units"] = module
    spec.loader.exec_module(module)
    return module


wu = load()
STATE = wu.table_shapes(ROOT / "template.yaml")["StateTable"]
RESULTS = wu.table_shapes(ROOT / "template.yaml")["ResultsTable"]


def record(old: dict[str, Any] | None, new: dict[str, Any] | None, name: str = "MODIFY") -> dict[str, Any]:
    data: dict[str, Any] = {"Keys": {"pk": {"S": "DLV#d"}, "sk": {"S": "DSP#r"}}}
    if old is not None:
        data["OldImage"] = old
    if new is not None:
        data["NewImage"] = new
    return {"eventName": name, "dynamodb": data}


ROW = {"pk": {"S": "DLV#d"}, "sk": {"S": "DSP#r"}, "state": {"S": "claimed"}}


def test_a_write_costs_a_unit_per_started_kb_of_the_larger_image() -> None:
    small, big = ROW | {"x": {"S": "a" * 900}}, ROW | {"x": {"S": "a" * 1100}}
    assert wu.record_units(record(None, small, "INSERT"), STATE) == {"table": 1}
    assert wu.record_units(record(small, big), STATE) == {"table": 2}
    assert wu.record_units(record(big, small), STATE) == {"table": 2}  # shrinking bills the larger image
    assert wu.item_size({"ab": {"S": "héllo"}, "n": {"N": "12345"}}) == 2 + 6 + 1 + 4


def test_a_sparse_index_costs_a_put_on_entering_a_delete_on_leaving_both_on_a_key_change() -> None:
    watched = ROW | {"sweep_pk": {"S": "START"}, "sweep_at": {"N": "100"}}
    assert wu.record_units(record(ROW, watched), STATE) == {"table": 1, "sweep": 1}
    assert wu.record_units(record(watched, ROW), STATE) == {"table": 1, "sweep": 1}
    moved = watched | {"sweep_at": {"N": "200"}}
    assert wu.record_units(record(watched, moved), STATE) == {"table": 1, "sweep": 2}
    unwatched = ROW | {"state": {"S": "dispatched"}}
    assert wu.record_units(record(ROW, unwatched), STATE) == {"table": 1}  # never in the index: no index write


def test_an_include_projection_is_written_only_when_a_projected_attribute_changes() -> None:
    job = {"pk": {"S": "DSP#1"}, "sk": {"S": "JOB#a"}, "repo_key": {"S": "o/r"}, "dispatched_at": {"N": "1"}}
    job |= {"head_key": {"S": "p/p#abc"}, "state": {"S": "in_progress"}, "fingerprint": {"S": "f1"}}
    by_repo_only = {k: v for k, v in job.items() if k != "head_key"}
    refingered = by_repo_only | {"fingerprint": {"S": "f2"}}  # not projected into by_repo
    assert wu.record_units(record(by_repo_only, refingered), RESULTS) == {"table": 1}
    assert wu.record_units(record(by_repo_only, by_repo_only | {"state": {"S": "completed"}}), RESULTS) == {
        "table": 1,
        "by_repo": 1,
    }


def test_motos_key_only_insert_before_an_update_is_not_a_write() -> None:
    keys = {"pk": {"S": "DLV#d"}, "sk": {"S": "DSP#r"}}
    first, second = record(None, keys, "INSERT"), record(None, ROW, "INSERT")
    assert wu._writes([first, second], STATE) == [second]
    assert wu._writes([first], STATE) == [first]  # alone, it is what was written
