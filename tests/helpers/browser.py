"""Headless Chromium for the page tests, with the network off.

The browser is Debian's ``chromium`` and its driver ``chromium-driver`` (``.ci/run`` installs both), driven
by Selenium (a dev dependency). "Network off" means: every host name resolves to nothing except loopback
(``--host-resolver-rules``) and every proxied request goes to a closed port, so a page that loads a script or a
style sheet from a CDN renders without it, as it would on an offline CI runner. Outside CI, tests that need the
browser skip, saying so, when either binary is absent.

Use::

    with offline_browser(width=1280) as browser:
        browser.get("http://127.0.0.1:8080/perfwatch/")
        browser.save_screenshot(str(tmp_path / "index.png"))
        assert no_horizontal_scroll(browser)
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    (CHROMIUM is None or CHROMEDRIVER is None) and os.environ.get("CI") != "true",
    reason="headless Chromium is not installed (apt-get install chromium chromium-driver; .ci/run installs them)",
)


@contextlib.contextmanager
def offline_browser(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless Chromium (a Selenium ``webdriver.Chrome``) whose only reachable host is 127.0.0.1.

    ``width`` x ``height`` is the window in CSS px. Raises ``RuntimeError`` naming the missing binary when
    Chromium or its driver is not installed (tests mark themselves ``needs_browser`` to skip instead)."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        raise RuntimeError("headless Chromium needs the chromium and chromium-driver packages on PATH")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
        "--proxy-server=127.0.0.1:9",
        "--proxy-bypass-list=127.0.0.1;localhost",
        "--no-first-run",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def no_horizontal_scroll(driver: Any) -> bool:
    """True when the page's content is no wider than the window (the main columns need no horizontal scroll)."""
    return bool(driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1"))


def failed_requests(driver: Any) -> list[str]:
    """The URLs of resources the page tried to load and could not (the Resource Timing entries with no bytes):
    a CDN asset on an offline machine shows up here."""
    return list(
        driver.execute_script(
            "return performance.getEntriesByType('resource')"
            ".filter(e => e.transferSize === 0 && e.decodedBodySize === 0 && !e.name.startsWith('data:'))"
            ".map(e => e.name)"
        )
    )
