"""The pages' static assets, served by the plugin itself so the pages render on a machine without internet
(no CDN): ``/perfwatch/assets/perfwatch.css`` (``static/perfwatch.css`` beside this file) and
``/perfwatch/assets/perfwatch.js`` (``static/perfwatch.js``: links to Airflow's own pages from inside its
frame), ``/perfwatch/assets/icon.svg`` (the nav bar's icon) and ``/perfwatch/assets/plotly.min.js``
(plotly.js as the installed ``plotly`` package bundles it, ``plotly.offline.get_plotlyjs()``, about 4.8 MB,
1.4 MB gzip-compressed).

Each asset is read (and compressed) once per process and sent with an ``ETag`` of its content and
``Cache-Control: public, max-age=86400``, so a browser fetches plotly.js once a day at most. The pages link each
asset by :func:`url`, whose ``?v=`` names what it is: plotly.js by the installed ``plotly`` package's version, the
plugin's own files by their content. After an upgrade a page therefore links a URL its browser has not cached, and
never runs yesterday's plotly.js against today's figure data (plotly.py 6 sends arrays as typed ``bdata``, which
plotly.js 2 draws as empty traces: plotly/plotly.py#5045). The assets hold no data from the store, so they are
served without Airflow's login (as Airflow serves its own ``/static``).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response

router = APIRouter()  #: the assets, open (no login)

STATIC = Path(__file__).with_name("static")  #: the plugin's own files (the style sheet)
CACHE_CONTROL = "public, max-age=86400"


@dataclass(frozen=True)
class Asset:
    """One asset's bytes as sent: ``body`` (identity), ``gzipped`` (``gzip`` level 6), ``media`` type and
    ``etag`` (quoted sha256 prefix of ``body``)."""

    body: bytes
    gzipped: bytes
    media: str
    etag: str


def _asset(body: bytes, media: str) -> Asset:
    return Asset(
        body, gzip.compress(body, compresslevel=6, mtime=0), media, f'"{hashlib.sha256(body).hexdigest()[:20]}"'
    )


@functools.cache
def plotly_js() -> Asset:
    """plotly.js from the installed plotly package (``plotly.offline.get_plotlyjs``), read once per process."""
    from plotly.offline import get_plotlyjs

    return _asset(get_plotlyjs().encode(), "application/javascript; charset=utf-8")


@functools.cache
def style_sheet() -> Asset:
    """``static/perfwatch.css``, read once per process."""
    return _asset((STATIC / "perfwatch.css").read_bytes(), "text/css; charset=utf-8")


@functools.cache
def script() -> Asset:
    """``static/perfwatch.js``, read once per process."""
    return _asset((STATIC / "perfwatch.js").read_bytes(), "application/javascript; charset=utf-8")


@functools.cache
def icon() -> Asset:
    """``static/icon.svg``: the nav bar icon of the external view."""
    return _asset((STATIC / "icon.svg").read_bytes(), "image/svg+xml")


#: name under /assets/ -> its loader
ASSETS = {"plotly.min.js": plotly_js, "perfwatch.css": style_sheet, "perfwatch.js": script, "icon.svg": icon}


@functools.cache
def version(name: str) -> str:
    """What asset ``name`` of :data:`ASSETS` is, as its URL's cache key: ``plotly-<version>`` of the installed
    ``plotly`` package for ``plotly.min.js`` (the bundle it serves, without reading its 4.8 MB), else the first 12
    hex digits of the sha256 of the file's content.

    Raises:
        KeyError: ``name`` is not an asset (names it).
    """
    if name == "plotly.min.js":
        return "plotly-" + importlib.metadata.version("plotly")
    if name not in ASSETS:
        raise KeyError(f"no asset {name!r}; assets: {', '.join(sorted(ASSETS))}")
    return ASSETS[name]().etag.strip('"')[:12]


def url(base: str, name: str) -> str:
    """The URL pages link asset ``name`` by, under the plugin root ``base``: ``<base>/assets/<name>?v=<version>``
    (:func:`version`), e.g. ``/perfwatch/assets/plotly.min.js?v=plotly-6.3.0``.

    Raises:
        KeyError: ``name`` is not an asset.
    """
    return f"{base}/assets/{name}?v={version(name)}"


def _send(request: Request, asset: Asset) -> Response:
    headers = {"ETag": asset.etag, "Cache-Control": CACHE_CONTROL, "Vary": "Accept-Encoding"}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(asset.gzipped, media_type=asset.media, headers={**headers, "Content-Encoding": "gzip"})
    return Response(asset.body, media_type=asset.media, headers=headers)


@router.get("/assets/{name}")
def asset(request: Request, name: str) -> Response:
    """One of :data:`ASSETS`; 404 for any other name."""
    loader = ASSETS.get(name)
    if loader is None:
        raise HTTPException(404, f"no asset {name!r}; assets: {', '.join(sorted(ASSETS))}")
    return _send(request, loader())
