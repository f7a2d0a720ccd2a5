"""HudFunction's dependencies: crcr's page documents, the pages composed when read, the shadow decisions."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crcr.composition.base import aws_client, results_store
from crcr.settings import Settings

if TYPE_CHECKING:
    from crcr.adapters.s3 import S3PageDocs


def build_page_reader(settings: Settings) -> S3PageDocs | None:
    """The HUD pages' documents, read-only; None (every page empty) when the stack has no HUD bucket."""
    if not settings.hud_bucket:
        return None
    from crcr.adapters.s3 import S3PageDocs  # noqa: PLC0415

    return S3PageDocs(aws_client("s3"), settings.hud_bucket)


def build_pages(
    settings: Settings,
) -> tuple[S3PageDocs | None, Callable[[str], dict[str, Any] | None] | None, Callable[[], dict[str, Any]] | None]:
    """The HUD pages' documents, what composes the PR and repository pages when read (their commits' documents, the
    results table's newest rows of the repository), and what reads a shadow relay's newest decisions."""
    shadow = None
    if settings.state_table:
        from crcr.adapters.shadow import DynamoShadow  # noqa: PLC0415
        from crcr.app.shadow import shadow_page  # noqa: PLC0415

        log = DynamoShadow(aws_client("dynamodb"), str(settings.state_table))
        shadow = functools.partial(shadow_page, log, settings.upstream_repo, settings.mode)
    docs = build_page_reader(settings)
    if docs is None:
        return None, None, shadow
    from crcr.app.page_compose import composer  # noqa: PLC0415

    return docs, composer(docs, results_store(settings) if settings.results_table else None), shadow
