"""Headless Chromium for the HUD page tests: Debian's `chromium`, installed here when it is missing."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

# As the machine's probe runs it: no sandbox as root, and nothing that reaches for Google's hosts.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """The Chromium binary; `apt-get install -y chromium` first when it is not there (CI starts without it).

    Test workers side by side (pytest-xdist) install it one at a time: the first installs, the others find it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() != 0:
        pytest.fail("the HUD browser test needs Chromium: run `sudo apt-get install -y chromium`")
    with open("/tmp/crcr-tests-chromium.lock", "w") as lock:  # machine-wide: dpkg takes one install at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        return shutil.which("chromium") or _install()


def _install() -> str:
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
    for step in (install, ["apt-get", "update", "-q"], install):
        done = subprocess.run(step, env=env, capture_output=True, text=True, timeout=900, check=False)
        if step is install and done.returncode == 0:
            break
    found = shutil.which("chromium")
    if not found:
        pytest.fail(f"could not install Chromium with apt-get: {done.stderr[-2000:]}")
    return found


@contextmanager
def headless() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser: Browser, url: str, shot: Path, width: int = 1400) -> Page:
    """A HUD page loaded at `width` (its script done), without a script error, its full-page screenshot in `shot`."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]", timeout=15_000)
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert errors == []
    return page
