"""`crcr follow` and `crcr local --follow`: the functions' structured log lines, as one human line per step a
delivery takes (accepted, planned, each dispatch, each report and its HUD push, check runs and the PR comment, dead
letters and failures)."""

from __future__ import annotations

import json
import threading
import unicodedata
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TextIO

# Characters a terminal acts on or hides (ESC, BEL, CR, bidi overrides, line separators...): shown escaped.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def printable(text: str) -> str:
    """Text as an operator's terminal may show it: every control or format character written as its escape
    (`\\x1b`, `\\u2028`), so a downstream's words can neither move the cursor, ring, recolour nor hide a line."""
    return "".join(
        ch.encode("unicode_escape", "backslashreplace").decode("ascii") if unicodedata.category(ch) in _HIDDEN else ch
        for ch in text
    )


def parse(line: str) -> dict[str, Any] | None:
    """A log record from a line: the JSON object it holds (after any prefix, such as `aws logs tail`'s), or None."""
    start = line.find("{")
    if start < 0:
        return None
    try:
        record = json.loads(line[start:])
    except ValueError:
        return None
    return record if isinstance(record, dict) and "message" in record else None


def delivery_of(record: dict[str, Any]) -> str:
    return str(record.get("delivery_id") or record.get("correlation_id") or "")


def _when(record: dict[str, Any]) -> str:
    stamp = str(record.get("timestamp") or "")
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00").replace(",", ".")).strftime("%H:%M:%S")
    except ValueError:
        return stamp[11:19] if len(stamp) >= 19 else "--:--:--"


def _dispatch(r: dict[str, Any]) -> str:
    outcome = str(r.get("outcome") or "")
    verb = {
        "dispatched": "dispatched to",
        "duplicate": "already dispatched to",
        "superseded": "superseded, not sent to",
        "skipped": "skipped (path filters)",
        "rescheduled": "sending later (retry or pacing) to",
        "dead_lettered": "DEAD-LETTERED",
    }.get(outcome, outcome)
    build = f" build #{r['build_number']}" if r.get("build_number") else ""
    detail = f": {r['detail']}" if r.get("detail") and outcome not in ("dispatched",) else ""
    delay = f" in {float(r['delay_s']):.0f} s" if r.get("delay_s") else ""
    return f"dispatch  {verb} {r.get('target_repo', '')}{build}{delay}{detail}"


HUD_OUTCOMES = {
    "pushed": "HUD push accepted",
    "duplicate": "the HUD has it already (409)",
    "withheld": "the HUD's row is final",
    "rejected": "the HUD REFUSED it (dead-lettered)",
    "off": "no HUD configured",
}


def _reported(r: dict[str, Any]) -> str:
    state = str(r.get("state") or "")
    conclusion = f" {r['conclusion']}" if r.get("conclusion") else ""
    verdict = f", verdict {r['verdict']}" if r.get("verdict") else ""
    hud = HUD_OUTCOMES.get(str(r.get("hud")), "")
    return f"report    {r.get('target_repo', '')} {r.get('job', '')}: {state}{conclusion}{verdict}" + (
        f"; {hud}" if hud else ""
    )


def _checks(r: dict[str, Any]) -> str | None:
    kind, written, outcome = str(r.get("kind") or ""), list(r.get("written") or []), str(r.get("outcome") or "")
    if kind == "rerun":
        return f"rerun     automatic re-run of {r.get('target_repo', '')} run {r.get('run_id', '')}: {outcome}"
    if not written:
        return None  # booked, coalesced, settling: nothing reached GitHub yet
    if kind == "comment":
        return f"comment   PR #{r.get('pr')}: {outcome} ({', '.join(written)})"
    return f"checks    wrote {', '.join(written)}" + (f" ({outcome})" if outcome not in ("", "done") else "")


def _count(value: object) -> int:
    if isinstance(value, list | dict | tuple):
        return len(value)
    return int(value) if isinstance(value, int | float | str) and str(value).isdigit() else 0


FORMATS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "webhook handled": lambda r: f"webhook   {r.get('outcome', '')}" + (f": {r['detail']}" if r.get("detail") else ""),
    "webhook rejected": lambda r: f"webhook   REFUSED {r.get('reason', '')}: {r.get('detail', '')}",
    "planned": lambda r: (
        f"planned   {_count(r.get('dispatched'))} dispatches, {_count(r.get('held'))} held, "
        f"{_count(r.get('skipped'))} skipped"
    ),
    "dispatch handled": _dispatch,
    "callback handled": lambda r: None,  # the report it made is its step (a duplicate or ignored one makes none)
    "callback rejected": lambda r: f"callback  REFUSED {r.get('reason', '')}: {r.get('detail', '')}",
    "reported": _reported,
    "check runs synced": _checks,
    "swept": lambda r: (
        f"sweeper   timed out: {len(r.get('never_started') or [])} never started, "
        f"{len(r.get('never_finished') or [])} never finished"
    ),
}


def human(record: dict[str, Any]) -> str | None:
    """One line for a step, or None for a record that is no step of a delivery (debug noise, cold starts)."""
    message = str(record.get("message") or "")
    fmt = FORMATS.get(message)
    level = str(record.get("level") or "INFO").upper()
    if fmt is None and level not in ("WARNING", "ERROR", "CRITICAL"):
        return None
    generic = f"{level.lower():9} {message}" + (f": {record['detail']}" if record.get("detail") else "")
    try:
        text = fmt(record) if fmt else generic
    except (ValueError, TypeError, AttributeError, KeyError):
        text = generic  # a record whose fields are not what its step writes: shown as it came, never a traceback
    if text is None:
        return None
    delivery = delivery_of(record)[:8] or "-"
    return printable(f"{_when(record)}  {delivery:8}  {text}")


def follow(lines: Iterable[str], out: Callable[[str], None], deliveries: set[str], raw: bool) -> int:
    """Each line a step of the deliveries asked for (all when none): human, or `raw` as it came. Returns steps."""
    shown = 0
    for line in lines:
        record = parse(line)
        if record is None or (deliveries and delivery_of(record) not in deliveries):
            continue
        text = printable(line.rstrip("\n")[line.find("{") :]) if raw else human(record)
        if text is not None:
            out(text)
            shown += 1
    return shown


class HumanStream:
    """A stream for the functions' log handler in `crcr local --follow`: each JSON line written becomes its human
    line (or nothing) on `out`."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._buffer = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._buffer += text
            *lines, self._buffer = self._buffer.split("\n")
            for line in lines:
                record = parse(line)
                shown = human(record) if record is not None else (printable(line) or None)
                if shown is not None:
                    self._out.write(shown + "\n")
            self._out.flush()
        return len(text)

    def flush(self) -> None:
        self._out.flush()
