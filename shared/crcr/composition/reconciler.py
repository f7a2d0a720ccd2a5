"""ReconcilerFunction's dependencies: the App's delivery list and redeliveries, paced."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics
from crcr.composition.base import aws_client, github_app
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.app.reconcile import ReconcileDeps


def build_reconcile_deps(settings: Settings) -> ReconcileDeps:
    """The missed-webhook reconciler: the App's delivery list and redeliveries (its JWT), the webhook's records and
    the reconciler's rows in the state table, and a pacing cell of its own for the App's writes."""

    from crcr.adapters.github import GitHubHookDeliveries  # noqa: PLC0415
    from crcr.adapters.pacer import DynamoPacer  # noqa: PLC0415
    from crcr.adapters.redeliveries import DynamoRedeliveries  # noqa: PLC0415
    from crcr.app.outbound import Outbound  # noqa: PLC0415
    from crcr.app.reconcile import ReconcileDeps  # noqa: PLC0415
    from crcr.domain.pacing import REDELIVERY_RATES  # noqa: PLC0415

    settings.require("state_table", "github_app_id")
    table = str(settings.state_table)
    return ReconcileDeps(
        hooks=GitHubHookDeliveries(github_app(settings), settings.upstream_repo),
        store=DynamoRedeliveries(aws_client("dynamodb"), table),
        pacer=DynamoPacer(aws_client("dynamodb"), table, rates=REDELIVERY_RATES, cell="REDELIVER"),
        metrics=PowertoolsMetrics(),
        clock=SystemClock(),
        sleep=time.sleep,
        # Redeliveries are the relay's own writes (let through in shadow too): no allowlist, no shadow log needed.
        door=Outbound(settings.mode, None, None, PowertoolsMetrics(), SystemClock(), settings.upstream_repo),
        lookback_s=float(settings.reconcile_lookback_s),
        # One POST: connect + read timeout, and room to spare.
        lease_s=settings.github_timeout_s + 15.0,
    )
