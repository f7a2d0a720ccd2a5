"""HUD injection: what a downstream reports (its workflow and job names) reaches the HUD pages as inert text, in
headless Chromium on `crcr local`: no element, no script, no handler of its making."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser

from tests.conftest import Relay, http
from tests.doubles.oidc_issuer import OidcIssuer
from tests.e2e.browser import headless
from tests.e2e.test_callback import oidc  # noqa: F401 - a fixture
from tests.e2e.test_check_runs import L4, start

pytestmark = pytest.mark.e2e
JOB = '<img src=x onerror="window.__crcrPwned=1">[click](https://evil.example) @everyone'
WORKFLOW = "<script>window.__crcrPwned=2</script>**CI** <a href=javascript:window.__crcrPwned=3>x</a>"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with headless() as b:
        yield b


def data(relay: Relay, key: str) -> dict[str, Any]:
    status, doc = http("GET", f"{relay.url}/hud/data/{key}")
    return doc if status == 200 else {}


def test_a_downstreams_names_reach_the_hud_pages_as_text_only(
    relay_factory: Callable[..., Relay],
    oidc: OidcIssuer,  # noqa: F811
    browser: Browser,
) -> None:
    s = start(relay_factory, oidc)
    body = s.body(L4, workflow_name=WORKFLOW, job_name=JOB, status="completed", conclusion="failure")
    assert s.post(body, s.token(L4)) == (200, {"status": "recorded"})
    deadline = time.time() + 30
    while not data(s.relay, f"commit/{s.head_sha}").get("jobs") and time.time() < deadline:
        time.sleep(0.3)

    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{s.relay.url}/hud/commit/{s.head_sha}")
    page.wait_for_selector("body[data-ready=true]", timeout=15_000)
    section = page.locator(f'section[data-repo="{L4}"]')
    cells = section.locator("tbody tr").first.locator("td").all_inner_texts()
    assert cells[:2] == [WORKFLOW, JOB]  # shown exactly as sent, as text
    assert section.locator("img, script").count() == 0
    assert page.locator('a[href^="javascript:"], a[href*="evil.example"]').count() == 0
    assert page.evaluate("() => window.__crcrPwned") is None and dialogs == []
