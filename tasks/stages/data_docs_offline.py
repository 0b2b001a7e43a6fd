"""GX Data Docs that render without internet: the CDN assets of GX's page templates, served from the site itself.

Great Expectations 1.x's page templates (``great_expectations/render/view/templates/``: ``page.j2``,
``index_page.j2``, ``js_script_imports.j2``) load Bootstrap 4, jQuery, Popper, bootstrap-table (and its
filter-control extension), bootstrap-datepicker, Font Awesome and a dark theme from public CDNs (unpkg,
cdnjs, jsDelivr, code.jquery.com, the Bootstrap CDN), and the navbar's logo from GX's S3 bucket. GX ships
no local copies: its ``static/`` directory (copied into every site) holds only its fonts, images and own
style sheet, and its site builder has no option for local assets. On a machine without internet the index's
tables (drawn by bootstrap-table from JSON in the page) stay empty and the result pages lose their layout and
status icons.

None of these assets is in a package the project declares at the versions GX's markup is written for
(Flower, which the Celery provider pulls in, ships jQuery 3.6.4 and Bootstrap 5.3.8: GX's pages use
Bootstrap 4's classes and ``data-toggle`` attributes). So the files are vendored, byte for byte as
the npm registry serves the versions GX pins, with their licences, under ``data_docs_assets/``
(``ASSETS`` below names each one's source and licence; ~1.1 MB). :func:`make_offline` runs after GX has
built a site: it copies them into ``<site>/static/vendor/`` (so the site stays self-contained: it is
archived and served whole) and rewrites each page's CDN URLs to relative links to those copies.

One style sheet is perfwatch's own (:data:`FIT_CSS`, ``data_docs_assets/perfwatch/fit.css``): linked into every
page after GX's styles, it lets the index's tables wrap their cells, so that they fit their column at 1280 px
(GX's run names have no spaces: the Validation Results table ran past the right edge of its scroll box).

Left out: Vega, Vega-Lite and vega-embed (GX draws charts with them only for distribution expectations,
which perfwatch's suites do not use); their script tags are removed from pages that draw no chart, and a
page that draws one keeps them and is reported by :func:`make_offline` (its chart would not render
offline). Font Awesome's brands and v4-compatibility fonts are left out too (GX's pages use solid icons:
``fa-check-circle``, ``fa-times``...). Links a reader may click (GX's documentation, its newsletter) stay as
they are: they load nothing.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ASSETS", "ASSETS_DIR", "FIT_CSS", "VENDOR_DIR", "Asset", "make_offline", "remote_resources"]

ASSETS_DIR = Path(__file__).with_name("data_docs_assets")  #: the vendored files (package data)
VENDOR_DIR = "static/vendor"  #: where :func:`make_offline` puts them, relative to the site's root
FIT_CSS = "perfwatch/fit.css"  #: perfwatch's own style sheet (module docstring), relative to ``ASSETS_DIR``


@dataclass(frozen=True)
class Asset:
    """One CDN file of GX's templates and its vendored copy.

    Attributes:
        url: the URL exactly as GX 1.x's templates write it.
        path: the copy, relative to ``ASSETS_DIR`` (and to ``<site>/static/vendor/`` once copied).
        source: the npm package and version it was copied from, and its path in that package.
        license: the package's licence (its text is beside the copy).
    """

    url: str
    path: str
    source: str
    license: str


_BT = "bootstrap-table"
ASSETS: tuple[Asset, ...] = (
    Asset(
        "https://code.jquery.com/jquery-3.7.1.min.js",
        "jquery-3.7.1/jquery.min.js",
        "jquery@3.7.1 dist/jquery.min.js",
        "MIT",
    ),
    Asset(
        "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js",
        "popper.js-1.12.9/umd/popper.min.js",
        "popper.js@1.12.9 dist/umd/popper.min.js",
        "MIT (stated in the file's header and package.json; the package has no LICENSE file)",
    ),
    Asset(
        "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css",
        "bootstrap-4.3.1/css/bootstrap.min.css",
        "bootstrap@4.3.1 dist/css/bootstrap.min.css",
        "MIT",
    ),
    Asset(
        "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js",
        "bootstrap-4.3.1/js/bootstrap.min.js",
        "bootstrap@4.3.1 dist/js/bootstrap.min.js",
        "MIT",
    ),
    Asset(
        f"https://unpkg.com/{_BT}@1.19.1/dist/bootstrap-table.min.css",
        f"{_BT}-1.19.1/bootstrap-table.min.css",
        f"{_BT}@1.19.1 dist/bootstrap-table.min.css",
        "MIT",
    ),
    Asset(
        f"https://unpkg.com/{_BT}@1.19.1/dist/bootstrap-table.min.js",
        f"{_BT}-1.19.1/bootstrap-table.min.js",
        f"{_BT}@1.19.1 dist/bootstrap-table.min.js",
        "MIT",
    ),
    Asset(
        f"https://unpkg.com/{_BT}@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
        f"{_BT}-1.19.1/extensions/filter-control/bootstrap-table-filter-control.min.js",
        f"{_BT}@1.19.1 dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
        "MIT",
    ),
    Asset(  # the index's link (GX pins 1.19.0 for the extension's style sheet)
        f"https://unpkg.com/{_BT}@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
        f"{_BT}-1.19.0/extensions/filter-control/bootstrap-table-filter-control.min.css",
        f"{_BT}@1.19.0 dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
        "MIT",
    ),
    Asset(  # the result and suite pages' link
        f"https://unpkg.com/{_BT}@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css",
        f"{_BT}-1.19.0/extensions/filter-control/bootstrap-table-filter-control.css",
        f"{_BT}@1.19.0 dist/extensions/filter-control/bootstrap-table-filter-control.css",
        "MIT",
    ),
    Asset(
        "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css",
        "bootstrap-datepicker-1.9.0/css/bootstrap-datepicker.min.css",
        "bootstrap-datepicker@1.9.0 dist/css/bootstrap-datepicker.min.css",
        "Apache-2.0",
    ),
    Asset(
        "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js",
        "bootstrap-datepicker-1.9.0/js/bootstrap-datepicker.min.js",
        "bootstrap-datepicker@1.9.0 dist/js/bootstrap-datepicker.min.js",
        "Apache-2.0",
    ),
    Asset(  # its url(../webfonts/...) fonts are beside it: fa-solid-900.woff2, fa-regular-400.woff2
        "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css",
        "fontawesome-free-6.6.0/css/all.min.css",
        "@fortawesome/fontawesome-free@6.6.0 css/all.min.css, webfonts/fa-solid-900.woff2, fa-regular-400.woff2",
        "CSS: MIT; fonts: SIL OFL 1.1; icons: CC BY 4.0",
    ),
    Asset(  # the minified build of the file GX links (same rules): the pages' look under prefers-color-scheme: dark
        "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css",
        "bootstrap-dark-1.1.0/css/bootstrap-prefers-dark.min.css",
        "@forevolve/bootstrap-dark@1.1.0 dist/css/bootstrap-prefers-dark.min.css",
        "MIT",
    ),
)

#: GX's navbar logo (an image on GX's S3 bucket, with a cache-busting ``?d=<time>``) -> its copy in GX's static/.
_GX_IMAGES = re.compile(
    r"https://great-expectations-web-assets\.s3\.us-east-2\.amazonaws\.com/(logo-long\.png|full_logo_dark\.png)"
    r"(?:\?[^\"')\s]*)?"
)
_GX_IMAGE_COPIES = {"logo-long.png": "static/images/logo-long.png", "full_logo_dark.png": "static/images/logo-long.png"}
_VEGA_TAG = re.compile(r'<script src="https://cdn\.jsdelivr\.net/npm/vega(?:-lite|-embed)?@\d+"></script>\s*')
_TAG = re.compile(r"<(?:script|link)\b[^>]*>")
_SRI_ATTR = re.compile(r'\s+(?:integrity|crossorigin)="[^"]*"')
#: what a page loads by itself: script/img/iframe src, a <link> (style sheet, icon) href, a CSS url()
_LOADS = re.compile(
    r"""<(?:script|img|iframe|source)\b[^>]*?\ssrc=["'](https?://[^"']+)"""
    r"""|<link\b[^>]*?\shref=["'](https?://[^"']+)"""
    r"""|url\(\s*["']?(https?://[^"')]+)"""
)


def _rel(site: Path, page: Path, target: str) -> str:
    """``target`` (relative to the site's root) as a link from ``page``, POSIX separators."""
    return Path(os.path.relpath(site / target, page.parent)).as_posix()


def _gx_image(site: Path, page: Path, m: re.Match[str]) -> str:
    """A link from ``page`` to the copy in GX's ``static/images/`` of the remote GX image ``m`` names."""
    return _rel(site, page, _GX_IMAGE_COPIES[m.group(1)])


def _without_sri(tag: re.Match[str]) -> str:
    """A <script>/<link> tag of a vendored copy without ``integrity``/``crossorigin``; other tags unchanged."""
    text = tag.group(0)
    return _SRI_ATTR.sub("", text) if f"{VENDOR_DIR}/" in text else text


def make_offline(site_dir: str | Path) -> list[str]:
    """Make a built GX Data Docs site render without internet; return what its pages still load remotely.

    Copies the vendored assets (``ASSETS``, with their licence files) into ``<site>/static/vendor/``, then in
    every ``*.html`` of the site and every ``*.css`` under ``<site>/static/styles/``: replaces each ``ASSETS``
    URL with a relative link to its copy (dropping the tag's ``integrity``/``crossorigin``: a page opened from
    a file has no origin to check them against; the tests check the copies' hashes instead), points GX's
    remote navbar logo at the copy in GX's own ``static/images/``, removes the Vega script tags from pages
    that draw no chart, and links perfwatch's :data:`FIT_CSS` at the end of each page's ``<head>`` (after GX's
    styles, so its rules win). Idempotent (a second call changes nothing).

    Args:
        site_dir: the site's root, the directory holding ``index.html``.

    Returns:
        Sorted ``"<page relative to the site>: <URL>"`` for every resource a page would still fetch from the
        network (script/img/iframe ``src``, ``<link href>``, CSS ``url()``); empty for every page GX 1.24
        builds from perfwatch's suites. A page that draws a Vega chart lists Vega's three scripts.

    Raises:
        FileNotFoundError: ``site_dir`` has no ``index.html`` (not a built site), or a vendored file is
            missing from the installed package (names it).
    """
    site = Path(site_dir)
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"site_dir: {site} has no index.html (not a built GX Data Docs site)")
    vendor = site / VENDOR_DIR
    for asset in ASSETS:
        src = ASSETS_DIR / asset.path
        if not src.is_file():
            raise FileNotFoundError(f"vendored Data Docs asset {src} ({asset.source}) is missing")
    shutil.copytree(ASSETS_DIR, vendor, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    pages = sorted(site.rglob("*.html")) + sorted((site / "static" / "styles").glob("*.css"))
    for page in pages:
        text = original = page.read_text(encoding="utf-8")
        for asset in ASSETS:
            text = text.replace(asset.url, _rel(site, page, f"{VENDOR_DIR}/{asset.path}"))
        text = _GX_IMAGES.sub(functools.partial(_gx_image, site, page), text)
        if page.suffix == ".html":
            text = _TAG.sub(_without_sri, text)
            if "vegaEmbed(" not in text:
                text = _VEGA_TAG.sub("", text)
            fit = f'<link rel="stylesheet" href="{_rel(site, page, f"{VENDOR_DIR}/{FIT_CSS}")}">'
            if fit not in text and "</head>" in text:
                text = text.replace("</head>", f"{fit}</head>", 1)
        if text != original:
            page.write_text(text, encoding="utf-8")
    return remote_resources(site)


def remote_resources(site_dir: str | Path) -> list[str]:
    """What the pages of a Data Docs site would fetch from the network: sorted ``"<page>: <URL>"`` for every
    script/img/iframe ``src``, ``<link href>`` and CSS ``url()`` with an ``http(s)://`` URL in the site's
    ``*.html`` files and ``static/styles/*.css`` (links a reader clicks, ``<a href>``, load nothing and are
    not listed)."""
    site = Path(site_dir)
    out = set()
    for page in sorted(site.rglob("*.html")) + sorted((site / "static" / "styles").glob("*.css")):
        for m in _LOADS.finditer(page.read_text(encoding="utf-8")):
            out.add(f"{page.relative_to(site).as_posix()}: {next(g for g in m.groups() if g)}")
    return sorted(out)
