"""The pages link their assets by versioned URLs: after a plotly upgrade a browser that cached yesterday's
plotly.js for a day (``Cache-Control: max-age=86400``) is sent to a URL it has not cached, so it never draws
plotly.py 6's typed ``bdata`` arrays with an older plotly.js (empty traces, plotly/plotly.py#5045)."""

from __future__ import annotations

import importlib.metadata
import re

from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.requests import Request

from plugins.perfwatch import assets, pages


def request() -> Request:
    return Request(
        {"type": "http", "path": "/perfwatch/", "root_path": "/perfwatch", "headers": [], "query_string": b""}
    )


def plotly_src(html: str) -> str:
    (src,) = re.findall(r"<script src='([^']*plotly[^']*)'>", html)
    return src


def test_a_chart_page_links_plotly_js_by_the_installed_plotly_version():
    src = plotly_src(pages._page(request(), "t", "", charts=True).body.decode())
    assert src == f"/perfwatch/assets/plotly.min.js?v=plotly-{importlib.metadata.version('plotly')}"


def test_an_upgrade_of_plotly_changes_the_url(monkeypatch):
    before = plotly_src(pages._page(request(), "t", "", charts=True).body.decode())
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "99.0.0" if d == "plotly" else real(d))
    assets.version.cache_clear()
    try:
        after = plotly_src(pages._page(request(), "t", "", charts=True).body.decode())
    finally:
        monkeypatch.undo()
        assets.version.cache_clear()
    assert after.endswith("?v=plotly-99.0.0") and after != before


def test_the_versioned_urls_serve_their_assets():
    app = FastAPI()
    app.include_router(assets.router)
    client = TestClient(app)
    html = pages._page(request(), "t", "", charts=True).body.decode()
    links = re.findall(r"(?:src|href)='/perfwatch(/assets/[^']+)'", html)
    assert {link.split("?")[0] for link in links} == {
        "/assets/perfwatch.js",
        "/assets/plotly.min.js",
        "/assets/perfwatch.css",
    }
    for link in links:
        name = link.split("?")[0].removeprefix("/assets/")
        got = client.get(link)
        assert got.status_code == 200 and got.content == assets.ASSETS[name]().body
        assert "?v=" in link
