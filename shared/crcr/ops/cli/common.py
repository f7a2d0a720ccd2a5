"""What several `crcr` commands share: one line naming an operator's problem, and a count argument."""

from __future__ import annotations

import argparse
import os


def problem(exc: Exception) -> str:
    """One line naming what is missing or wrong."""
    from botocore.exceptions import (  # noqa: PLC0415
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
    )

    from crcr.domain.errors import AllowlistError  # noqa: PLC0415

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        table = os.environ.get("CRCR_RESULTS_TABLE", "")
        message = f"AWS {exc.operation_name}: {error.get('Code', '')}: {error.get('Message', '')}"
        if exc.operation_name == "Query":
            message = f"results table {table}: {error.get('Code', '')}: {error.get('Message', '')}"
        if "NonExistentQueue" in str(error.get("Code", "")):
            message = f"no such queue: {error.get('Message', '')}"
        return " ".join(message.split())
    if isinstance(exc, NoRegionError):
        return "no AWS region: set AWS_REGION or AWS_DEFAULT_REGION"
    if isinstance(exc, NoCredentialsError):
        return "no AWS credentials (the functions' variables, or crcr local's ready line env)"
    if isinstance(exc, EndpointConnectionError):
        return f"AWS unreachable: {exc}"
    if isinstance(exc, AllowlistError):
        return f"allowlist {os.environ.get('CRCR_ALLOWLIST', '')}: {exc.message}"
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return " ".join(str(exc).split()) or type(exc).__name__


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value
