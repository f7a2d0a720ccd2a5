"""Structured logs and CloudWatch metrics (Powertools, EMF); a process-wide tally for `crcr local`."""

from __future__ import annotations

import os
import threading
from collections import Counter

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric

NAMESPACE = "crcr"
logger = Logger(service="crcr")
metrics = Metrics(namespace=NAMESPACE, service="crcr")

TOTALS: Counter[str] = Counter()
_totals_lock = threading.Lock()


class PowertoolsMetrics:
    """The Metrics port: plain counts join the handler's EMF blob; dimensioned ones are emitted alone."""

    def count(self, name: str, value: int = 1, **dimensions: str) -> None:
        with _totals_lock:
            TOTALS[name] += value
            for dim, dim_value in dimensions.items():
                TOTALS[f"{name}.{dim}={dim_value}"] += value
        if os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() == "true":
            return  # `crcr local` and tests read the tally; Powertools' flag covers only the shared blob
        if not dimensions:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
            return
        with single_metric(name=name, unit=MetricUnit.Count, value=value, namespace=NAMESPACE) as metric:
            for dim, dim_value in dimensions.items():
                metric.add_dimension(name=dim, value=dim_value)
