"""`make bench`: runs the sections on the harness, writes their figures as JSON and prints a one-screen summary."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import callbacks
import checkbudget
import checks
import coldstart
import dispatch
import ingest
import pages
import regressions
import reporter
import runs
import summary
from harness import ROOT, AppKey, AwsCalls, Bench, OutputCapture, git_info, log_summary, run_start

# Every section, in the order `make bench` runs them: (name, what it measures, its function, only with --full).
SECTIONS = [
    ("ingest", "1. ingest acknowledgement latency", ingest.ingest_section, False),
    ("throughput", "2+3. GitHub requests per dispatch and throughput", ingest.throughput_section, False),
    ("callbacks", "4. callbacks and the issuer's key set", callbacks.callbacks_section, False),
    ("checkruns", "6. upstream check-run writes per event, per_job against per_repo", checks.checkruns_section, False),
    ("checkbudget", "9. check-run writes an hour on a simulated day", checkbudget.checkbudget_section, True),
    ("comment", "8. the PR comment's and ChecksFunction's cost", checks.comment_section, False),
    ("reporter", "7. reporter cost per recorded change", reporter.reporter_section, False),
    ("dispatch", "10. the dispatcher's cost per warm dispatch", dispatch.dispatch_section, False),
    ("pages", "11. HUD pages at PyTorch's scale", pages.pages_section, False),
    ("regressions", "13. regression tracking per branch result, compare calls", regressions.regressions_section, False),
    ("runs", "12. GitHub's record of runs: events dropped at the door, a run reconciled", runs.runs_section, False),
    ("inbound", "14. the inbound door on a callback and a run event, and at the baseline", runs.inbound_section, False),
    ("coldstart", "5. cold starts of each function", coldstart.coldstart_section, False),
]
NAMES = [name for name, _, _, _ in SECTIONS]


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    parser.add_argument("--only", default=",".join(NAMES), help=f"sections to run, of {','.join(NAMES)}")
    parser.add_argument("--skip", default="", help="sections to leave out")
    parser.add_argument("--full", action="store_true", help="also section 9 and section 10's backlog (make bench-full)")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for dispatches to land")
    for module in (ingest, callbacks, checks, reporter, checkbudget, dispatch, pages, regressions, runs, coldstart):
        module.add_arguments(parser)
    return parser


def main() -> int:
    args = arguments().parse_args()
    chosen = [n for n in args.only.split(",") if n and n not in args.skip.split(",")]
    if unknown := set(chosen) - set(NAMES):
        raise SystemExit(f"no section {', '.join(sorted(unknown))}; the sections: {', '.join(NAMES)}")
    started = time.perf_counter()
    config = vars(args) | {"out": str(args.out), "event": "examples/events/pull_request.opened.json"}
    results: dict[str, Any] = run_start() | {"config": config}
    phases: dict[str, float] = {}
    with OutputCapture() as out:
        bench = Bench(AppKey.generate(), AwsCalls().install(), out)
        for name, title, section, full_only in SECTIONS:
            if name in chosen and (args.full or not full_only):
                out.say(title)
                t = time.perf_counter()
                results |= section(bench, args)
                phases[name] = round(time.perf_counter() - t, 1)
        relay_lines = out.lines_between(0)
    results["relay_output"] = log_summary(relay_lines)
    if relay_lines:
        results["relay_output"]["file"] = str(out.path)  # kept for a look; a temporary file
    else:
        out.path.unlink(missing_ok=True)
    results["phase_seconds"] = phases
    # Others commit while the bench runs: then the sections measured different code.
    results["git"]["commit_at_end"] = git_info()["commit"]
    results["git"]["commit_changed_during_run"] = results["git"]["commit_at_end"] != results["git"]["commit"]
    results["duration_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    summary.print_summary(results)
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
