"""Headless Chromium for the page tests, with the network off.

The browser is Debian's ``chromium`` and its driver ``chromium-driver`` (``.ci/run`` installs both), driven
by Selenium (a dev dependency). "Network off" means: every host name resolves to nothing except loopback
(``--host-resolver-rules``) and every proxied request goes to a closed port, so a page that loads a script or a
style sheet from a CDN renders without it, as it would on an offline CI runner. Outside CI, tests that need the
browser skip, saying so, when either binary is absent.

Use::

    with plugin_pages(store_url) as (base, token), offline_browser(width=1280) as browser:
        sign_in(browser, base, token)
        browser.get(f"{base}/perfwatch/")
        browser.save_screenshot(str(tmp_path / "index.png"))
        assert no_horizontal_scroll(browser)

:func:`plugin_pages` serves the plugin's routes (``plugins.perfwatch.app.standalone_app``, as Airflow's API server
mounts them) on a loopback port over a store, with a real Airflow JWT for the pages' login; it needs Airflow's
metadata database migrated (the login checks revoked tokens there) and skips, saying what to run, when it is not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import ROOT

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


#: the project's Airflow home as ``make airflow-init`` makes it (the Makefile's ``AIRFLOW_HOME``)
PROJECT_AIRFLOW_HOME = ROOT / ".airflow"
AIRFLOW_NOT_READY = (
    "Airflow's metadata database {conn} is not migrated (no revoked_token table, which the pages' login reads): "
    'run `make airflow-init` and `eval "$(make -s env)"` in this shell (or run the tests with `make test`), '
    "then run this test again"
)


def airflow_metadata_ready() -> str | None:
    """None when Airflow's metadata database has the ``revoked_token`` table the pages' login checks a token
    against; else why not and what to run (:data:`AIRFLOW_NOT_READY`). Before Airflow is first imported, a
    shell without ``AIRFLOW_HOME`` gets the project's (``make airflow-init``'s, when it was run), as the
    Makefile's targets set it, so that the test file also runs on its own."""
    if "airflow" not in sys.modules and not os.environ.get("AIRFLOW_HOME"):
        if (PROJECT_AIRFLOW_HOME / ".initialised").is_file():
            os.environ["AIRFLOW_HOME"] = str(PROJECT_AIRFLOW_HOME)
    from airflow import settings
    from sqlalchemy import inspect

    if settings.engine is None or not inspect(settings.engine).has_table("revoked_token"):
        return AIRFLOW_NOT_READY.format(conn=settings.SQL_ALCHEMY_CONN)
    return None


@contextlib.contextmanager
def plugin_pages(
    db_url: str, secret: str = "perfwatch-pages-test-secret-of-64-bytes-for-airflows-hs512-jwts"
) -> Iterator[tuple[str, str]]:
    """The plugin's routes (``standalone_app``) served by uvicorn on a loopback port over the store at
    ``db_url``, with Airflow's simple auth manager and JWT ``secret``; yields (base URL, a viewer's JWT for the
    UI's ``_token`` cookie). Skips the test when Airflow's metadata database is not migrated
    (:func:`airflow_metadata_ready` says what to run)."""
    if why := airflow_metadata_ready():
        pytest.skip(why)
    import socket

    with socket.socket() as sock:  # a free loopback port
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFWATCH_DATABASE_URL", db_url)
        mp.setenv(
            "AIRFLOW__CORE__AUTH_MANAGER",
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        )
        mp.setenv("AIRFLOW__API_AUTH__JWT_SECRET", secret)
        from airflow.api_fastapi.app import init_auth_manager
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        from plugins.perfwatch.app import standalone_app

        token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer", role="VIEWER"))
        with serving(standalone_app(), port) as base:
            yield base, token


@contextlib.contextmanager
def serving(app: Any, port: int, **config: Any) -> Iterator[str]:
    """Serve the ASGI ``app`` with uvicorn on ``127.0.0.1:port`` in a daemon thread (``config``: more
    ``uvicorn.Config`` options, e.g. ``lifespan="off"``); yields its base URL once it listens, stops it after.

    Raises:
        AssertionError: uvicorn did not start within 20 s."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        assert time.time() < deadline, "uvicorn did not start in 20 s"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def sign_in(driver: Any, base: str, token: str) -> None:
    """Give ``driver`` the UI's ``_token`` cookie for ``base`` (a plugin asset sets the origin, no login)."""
    driver.get(f"{base}/perfwatch/assets/perfwatch.css")
    driver.add_cookie({"name": "_token", "value": token, "path": "/"})


#: the texts of the elements matching a selector that the reader sees (a box, not hidden, not transparent)
VISIBLE_TEXTS = """
return Array.from(document.querySelectorAll(arguments[0])).filter(e => {
  const r = e.getBoundingClientRect();
  for (let n = e; n instanceof Element; n = n.parentElement) {
    const s = getComputedStyle(n);
    if (s.display === 'none' || s.visibility === 'hidden' || parseFloat(s.opacity) < 1) return false;
  }
  return r.width > 0 && r.height > 0;
}).map(e => e.innerText.trim());
"""


def shown_tab(driver: Any, link_text: str, timeout: float = 5.0) -> str:
    """Click the Bootstrap tab ``link_text`` and wait until its transition has ended: its pane is the only one
    shown (``.active.show``, fully opaque; Bootstrap's ``.fade`` runs 0.15 s) and the others are hidden. Returns
    the pane's id. A screenshot taken before that shows the old pane under the new tab (the audit's)."""
    from selenium.webdriver.support.wait import WebDriverWait

    link = driver.find_element("link text", link_text)
    link.click()
    pane = link.get_attribute("href").rsplit("#", 1)[1]
    done = (
        "const p = document.getElementById(arguments[0]);"
        "const others = Array.from(p.parentElement.querySelectorAll(':scope > .tab-pane')).filter(o => o !== p);"
        "return p.classList.contains('active') && p.classList.contains('show') &&"
        " getComputedStyle(p).opacity === '1' && others.every(o => getComputedStyle(o).display === 'none');"
    )
    WebDriverWait(driver, timeout).until(lambda d: d.execute_script(done, pane))
    return str(pane)
