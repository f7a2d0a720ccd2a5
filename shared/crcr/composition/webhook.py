"""WebhookFunction's dependencies: the signature's secrets, the deliveries, the events queue (no JWT or YAML)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from crcr.adapters.clock import SystemClock
from crcr.adapters.observability import PowertoolsMetrics, logger
from crcr.composition.base import aws_client, github_app, secret_doc
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.adapters.allowlist_source import CachedAllowlist
    from crcr.app.ingest import IngestDeps
    from crcr.domain.allowlist import Allowlist


# API Gateway accepts 10 MB; GitHub caps webhook payloads at 25 MB. SQS messages stop at 256 KiB.
MAX_WEBHOOK_BYTES = 10 * 1024 * 1024


INLINE_BODY_BYTES = 200 * 1024


def _webhook_secret_source(settings: Settings) -> Callable[[bool], tuple[bytes, ...]] | None:
    """The webhook secrets (current, then previous) read again through the CRCR_SECRETS_ARN cache, so rotating the
    secret needs no redeploy; None when both are fixed in the environment. A forced read (a signature that did not
    match) happens at most once per 10 s; a failed read keeps the secrets last read."""
    live = {name for name in ("webhook_secret", "webhook_previous_secret") if settings.from_secret(name)}
    if not (settings.secrets_arn and live):
        return None
    fixed = {name: getattr(settings, name) for name in ("webhook_secret", "webhook_previous_secret")}
    last: list[tuple[bytes, ...]] = [_webhook_secrets(fixed)]
    quiet_until = [float("-inf")]

    def read(force: bool) -> tuple[bytes, ...]:
        now = time.monotonic()
        if force and now < quiet_until[0]:
            return last[0]
        if force:
            quiet_until[0] = now + 10.0
        try:
            doc = secret_doc(settings, force=force)
        except Exception:
            logger.exception("reading the webhook secret failed; keeping the last one read")
            return last[0]
        values = {name: (doc.get(name) if name in live else fixed[name]) for name in fixed}
        last[0] = _webhook_secrets(values) or last[0]
        return last[0]

    return read


def _webhook_secrets(values: Mapping[str, Any]) -> tuple[bytes, ...]:
    found = (values.get("webhook_secret"), values.get("webhook_previous_secret"))
    texts = [v.get_secret_value() if isinstance(v, SecretStr) else v for v in found]
    return tuple(str(text).encode() for text in texts if text)


def build_ingest_deps(settings: Settings) -> IngestDeps:
    from crcr.adapters.deliveries import DynamoDeliveries  # noqa: PLC0415
    from crcr.adapters.runs import DynamoRuns  # noqa: PLC0415
    from crcr.adapters.s3 import S3Blobs  # noqa: PLC0415
    from crcr.adapters.sqs import SqsEventQueue, SqsRunQueue  # noqa: PLC0415
    from crcr.app.ingest import IngestDeps  # noqa: PLC0415

    settings.require("state_table", "events_queue_url", "bodies_bucket")
    return IngestDeps(
        secrets=_webhook_secrets(
            {
                "webhook_secret": settings.secret("webhook_secret"),
                "webhook_previous_secret": settings.webhook_previous_secret,
            }
        ),
        secret_source=_webhook_secret_source(settings),
        upstream=settings.upstream_repo,
        deliveries=DynamoDeliveries(aws_client("dynamodb"), str(settings.state_table)),
        events=SqsEventQueue(aws_client("sqs"), str(settings.events_queue_url)),
        blobs=S3Blobs(aws_client("s3"), str(settings.bodies_bucket)),
        metrics=PowertoolsMetrics(),
        clock=SystemClock(),
        max_body_bytes=MAX_WEBHOOK_BYTES,
        inline_body_bytes=INLINE_BODY_BYTES,
        runs=SqsRunQueue(aws_client("sqs"), settings.runs_queue_url) if settings.runs_queue_url else None,
        run_settle_s=settings.run_report_settle_s,
        bound_runs=DynamoRuns(aws_client("dynamodb"), str(settings.state_table)) if settings.runs_queue_url else None,
        allowlist=_AllowlistOnFirstUse(settings) if settings.allowlist else None,
    )


class _AllowlistOnFirstUse:
    """The allowlist loaded when first asked for: the webhook reads it for a downstream's run event only, so its cold
    start for upstream events does not pay for YAML and the allowlist's source."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._loaded: CachedAllowlist | None = None

    def current(self) -> Allowlist:
        if self._loaded is None:
            from crcr.adapters.allowlist_source import CachedAllowlist, fetcher_for  # noqa: PLC0415

            source = str(self._settings.allowlist)
            fetch = fetcher_for(source, lambda: aws_client("s3"), lambda: github_app(self._settings))
            self._loaded = CachedAllowlist(
                fetch, PowertoolsMetrics(), SystemClock().now, self._settings.allowlist_refresh_s, on_error=logger.error
            )
        return self._loaded.current()
