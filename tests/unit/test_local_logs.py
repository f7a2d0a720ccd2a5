"""crcr local runs the functions in threads of one process: each log line names the function that wrote it."""

from __future__ import annotations

import io
import json
import logging
import threading
from typing import Any

from aws_lambda_powertools import Logger

from crcr.local.logs import per_thread_log_keys
from crcr.local.stack import Context


def run_two_functions(logger: Logger) -> list[dict[str, Any]]:
    """Two handlers in two threads, interleaved as pollers interleave them: A enters, B enters, A logs, B logs."""
    a_in, b_in, a_logged = threading.Event(), threading.Event(), threading.Event()

    @logger.inject_lambda_context(clear_state=True)
    def reporter(event: dict[str, Any], context: Any) -> None:
        a_in.set()
        b_in.wait(5)
        logger.set_correlation_id("delivery-a")
        logger.info("reporter handled")
        a_logged.set()

    @logger.inject_lambda_context(clear_state=True)
    def dispatcher(event: dict[str, Any], context: Any) -> None:
        b_in.set()
        a_logged.wait(5)
        logger.info("dispatcher handled")

    threads = [
        threading.Thread(target=reporter, args=({}, Context("crcr-local-ReporterFunction", 60))),
        threading.Thread(target=lambda: (a_in.wait(5), dispatcher({}, Context("crcr-local-DispatchFunction", 60)))),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    stream = logger.registered_handler.stream  # type: ignore[attr-defined]
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_thread_logs_with_its_own_functions_keys() -> None:
    logger = Logger(service="crcr-test-threads", level="INFO", logger_handler=logging.StreamHandler(io.StringIO()))
    per_thread_log_keys(logger)
    per_thread_log_keys(logger)  # idempotent
    lines = {line["message"]: line for line in run_two_functions(logger)}
    assert lines["reporter handled"]["function_name"] == "crcr-local-ReporterFunction"
    assert lines["dispatcher handled"]["function_name"] == "crcr-local-DispatchFunction"
    assert lines["reporter handled"]["correlation_id"] == "delivery-a"
    assert "correlation_id" not in lines["dispatcher handled"]  # another thread's id is not this one's
    assert all(line["service"] == "crcr-test-threads" for line in lines.values())


def test_without_it_a_line_names_another_function() -> None:
    """What crcr local printed before: Powertools keeps one set of keys per process, as fits Lambda."""
    logger = Logger(service="crcr-test-shared", level="INFO", logger_handler=logging.StreamHandler(io.StringIO()))
    lines = {line["message"]: line for line in run_two_functions(logger)}
    assert lines["reporter handled"]["function_name"] == "crcr-local-DispatchFunction"
