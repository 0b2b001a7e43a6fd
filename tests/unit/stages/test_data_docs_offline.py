"""GX Data Docs render fully without internet: the assets GX's templates load from CDNs are vendored (the exact
files GX pins) and served from the site itself.

The fast tests check the vendored copies against GX's own templates (every CDN URL they write is covered; the
two files GX pins with Subresource Integrity hashes are byte for byte those files) and the rewrite on a small
fake site. The slow test builds the Data Docs of real validations (perfwatch's three suites, one of them
failing), archives them with a run and opens them through the plugin's archive route, as a user opens them
(``tests.helpers.browser.plugin_pages``), in headless Chromium with the network off: no request fails, the
index's tables (drawn by bootstrap-table from the page's JSON) list the results and suites, each tab's table is
read once its fade has ended (``shown_tab``: a screenshot taken mid-fade showed the suites under the Validation
Results tab) and fits its box at 1280 px, the result page's expectation rows are laid out by Bootstrap with Font
Awesome's status icons, and screenshots are saved (``tmp_path``, and ``PERFWATCH_SCREENSHOTS_DIR`` when set).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

from tasks.stages import data_docs_offline
from tests.helpers.browser import (
    VISIBLE_TEXTS,
    failed_requests,
    needs_browser,
    offline_browser,
    plugin_pages,
    shown_tab,
    sign_in,
)

_GX = importlib.util.find_spec("great_expectations")  # found, not imported (that takes seconds)
assert _GX is not None and _GX.submodule_search_locations
GX_TEMPLATES = Path(_GX.submodule_search_locations[0]) / "render" / "view" / "templates"
_ASSET_URL = re.compile(r"""(?:src|href)=["'](https://[^"']+\.(?:js|css)|https://cdn\.jsdelivr\.net/npm/[^"']+)["']""")


def test_every_cdn_asset_of_gxs_templates_is_vendored_or_deliberately_left_out():
    used = {m for t in GX_TEMPLATES.glob("*.j2") for m in _ASSET_URL.findall(t.read_text())}
    vendored = {a.url for a in data_docs_offline.ASSETS}
    vega = {u for u in used if re.match(r"https://cdn\.jsdelivr\.net/npm/vega(-lite|-embed)?@\d+$", u)}
    assert len(vega) == 3  # left out, stripped from pages without a chart (see the module's docstring)
    assert used - vega == vendored  # a GX upgrade that changes a URL fails here, naming it
    for a in data_docs_offline.ASSETS:
        assert (data_docs_offline.ASSETS_DIR / a.path).stat().st_size > 100, a.path
        licence = next((data_docs_offline.ASSETS_DIR / a.path.split("/")[0]).glob("LICENSE*"), None)
        assert licence is not None or "header" in a.license, a.path


def test_vendored_files_are_the_ones_gx_pins():
    """GX's script tags for Popper and Bootstrap carry sha384 integrity hashes: the copies match them."""
    imports = (GX_TEMPLATES / "js_script_imports.j2").read_text()
    pinned = dict(re.findall(r'src="([^"]+)" integrity="sha384-([^"]+)"', imports))
    assert len(pinned) == 2
    for a in data_docs_offline.ASSETS:
        if a.url in pinned:
            digest = hashlib.sha384((data_docs_offline.ASSETS_DIR / a.path).read_bytes()).digest()
            assert base64.b64encode(digest).decode() == pinned.pop(a.url), a.path
    assert pinned == {}


def test_make_offline_rewrites_links_relative_to_each_page(tmp_path):
    jquery = "https://code.jquery.com/jquery-3.7.1.min.js"
    logo = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=20261201T1"
    head = (
        f'<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>\n<script src="{jquery}" integrity="sha384-x" '
        f'crossorigin="anonymous"></script><img src="{logo}"><a href="https://greatexpectations.io">GX</a>'
    )
    (tmp_path / "index.html").write_text(head)
    page = tmp_path / "validations" / "s" / "r" / "t" / "p.html"
    page.parent.mkdir(parents=True)
    page.write_text(head + "<script>vegaEmbed('#c', spec)</script>")
    (tmp_path / "static" / "styles").mkdir(parents=True)
    (tmp_path / "static" / "styles" / "x.css").write_text(f"a {{background: url('{logo}')}}")
    remote = data_docs_offline.make_offline(tmp_path)
    index = (tmp_path / "index.html").read_text()
    assert '<script src="static/vendor/jquery-3.7.1/jquery.min.js"></script>' in index  # integrity dropped
    assert '<img src="static/images/logo-long.png">' in index and "vega" not in index
    assert 'href="https://greatexpectations.io"' in index  # a link loads nothing: kept
    text = page.read_text()
    assert 'src="../../../../static/vendor/jquery-3.7.1/jquery.min.js"' in text
    assert remote == ["validations/s/r/t/p.html: https://cdn.jsdelivr.net/npm/vega@5"]  # it draws a chart
    assert "url('../images/logo-long.png')" in (tmp_path / "static" / "styles" / "x.css").read_text()
    assert (tmp_path / "static" / "vendor" / "fontawesome-free-6.6.0" / "webfonts" / "fa-solid-900.woff2").is_file()
    assert data_docs_offline.make_offline(tmp_path) == remote and page.read_text() == text  # idempotent
    with pytest.raises(FileNotFoundError, match="no index.html"):
        data_docs_offline.make_offline(tmp_path / "static")


def test_make_offline_links_perfwatchs_fit_style_sheet_after_gxs_styles(tmp_path):
    """GX's index table ran past the right edge at 1280 px (run names without spaces): every page links
    perfwatch's own style sheet last in its head, relative to the page, once however often it runs."""
    head = "<html><head><style>gx</style></head><body>x</body></html>"
    (tmp_path / "index.html").write_text(head)
    page = tmp_path / "validations" / "s" / "p.html"
    page.parent.mkdir(parents=True)
    page.write_text(head)
    data_docs_offline.make_offline(tmp_path)
    data_docs_offline.make_offline(tmp_path)
    link = '<link rel="stylesheet" href="{}static/vendor/perfwatch/fit.css"></head>'
    assert (tmp_path / "index.html").read_text().count("fit.css") == 1
    assert link.format("") in (tmp_path / "index.html").read_text()
    assert link.format("../../") in page.read_text() and page.read_text().index("<style>gx") < page.read_text().index(
        "fit.css"
    )
    css = (tmp_path / "static" / "vendor" / data_docs_offline.FIT_CSS).read_text()
    assert ".bootstrap-table .fixed-table-container .table td { overflow-wrap: anywhere;" in css


def _shot(browser, tmp_path: Path, name: str) -> None:
    browser.save_screenshot(str(tmp_path / name))
    if os.environ.get("PERFWATCH_SCREENSHOTS_DIR"):
        out = Path(os.environ["PERFWATCH_SCREENSHOTS_DIR"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / name, out / name)


@pytest.mark.slow
@needs_browser
def test_data_docs_of_real_validations_render_offline(tmp_path):
    import pandas as pd

    from tasks.stages import expectations as gx
    from tasks.stages.archive import archive_run
    from tasks.store import migrate
    from tests.helpers.builders import make_records

    outcomes = {
        "step_times": gx.validate_step_times([10.0, 10.1, 10.2, 9.9, 10.05], min_rows=5),
        "verdict": gx.validate_verdict(1.2, 1.15, 1.25, tolerance=0.05),  # a regression: the threshold fails
        "op_stats": gx.validate_op_table(
            pd.DataFrame([["MatMul", "MatMul", 120.0, 4], ["Conv2D", "Conv2D", 300.0, 2]], columns=list(gx.OP_COLUMNS))
        ),
    }
    title = "resnet v2 train-bs32, DAG run perfwatch_profile/manual__2026-12-01T22:00:00+00:00"
    index = gx.render_data_docs(outcomes, tmp_path / "gx", title=title)
    site = index.parent
    assert data_docs_offline.remote_resources(site) == []
    verdict_page = next(site.glob("validations/perfwatch_verdict/*/*/verdict.html")).relative_to(site)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    migrate(url)
    records = make_records(tmp_path, dag_run_id="r1", model="resnet", verdict="regression")
    run_id = archive_run(url, str(tmp_path / "archive"), *records, extra_dirs={"gx": str(site)}).run_id

    with plugin_pages(url) as (base, token), offline_browser(width=1280, height=1000) as browser:
        sign_in(browser, base, token)
        docs = f"{base}/perfwatch/runs/{run_id}/archive/gx"  # where the run page links them
        browser.get(f"{docs}/index.html")
        assert failed_requests(browser) == []
        results = "#section-1-content-block-2-1-body-table tbody tr"
        suites = "#section-1-content-block-2-2-body-table tbody tr"
        # bootstrap-table drew the index's two tables from the page's JSON: one row per result, per suite
        shown = browser.execute_script(VISIBLE_TEXTS, results)
        assert len(shown) == 3 and sum("perfwatch_verdict" in r for r in shown) == 1, shown
        assert browser.execute_script(VISIBLE_TEXTS, suites) == []
        assert shown_tab(browser, "Expectation Suites") == "Expectation-Suites"  # Bootstrap's tabs (its JS ran)
        shown = browser.execute_script(VISIBLE_TEXTS, suites)
        assert sorted(shown) == ["perfwatch_op_table", "perfwatch_step_times", "perfwatch_verdict"]
        assert browser.execute_script(VISIBLE_TEXTS, results) == []
        assert shown_tab(browser, "Validation Results") == "Validation-Results"  # faded in: its table shown
        assert len(browser.execute_script(VISIBLE_TEXTS, results)) == 3
        assert browser.execute_script(VISIBLE_TEXTS, suites) == []
        boxes = browser.execute_script(  # the shown table fits its scroll box (perfwatch's fit.css)
            "return Array.from(document.querySelectorAll('.fixed-table-body')).filter(b => b.offsetParent)"
            ".map(b => [b.scrollWidth, b.clientWidth])"
        )
        assert boxes and all(w <= c + 1 for w, c in boxes), boxes
        # Bootstrap 4's utilities apply (pl-5 = 3rem) and the filter controls exist (the extension ran)
        padding = "return getComputedStyle(document.querySelector('.container-fluid')).paddingLeft"
        assert browser.execute_script(padding) == "48px"
        assert browser.execute_script("return document.querySelectorAll('.filter-control').length") >= 3
        _shot(browser, tmp_path, "data-docs-offline-index.png")

        browser.get(f"{docs}/{verdict_page.as_posix()}")
        assert failed_requests(browser) == []
        rows = browser.execute_script(VISIBLE_TEXTS, "table.table tbody tr")  # the expectation rows, laid out
        assert "Values in ratio must always be greater than or equal to those in ci_low.\n\t\n0% unexpected" in rows
        threshold = [r for r in rows if r.startswith("If (ci_low > 1.0 AND host_busy == False)")]
        assert threshold and "less than or equal to 1.05" in threshold[0] and "1.25" in threshold[0], rows
        assert browser.execute_script(VISIBLE_TEXTS, "table.table .fa-times")  # the failed threshold's icon ...
        icon_font = "return getComputedStyle(document.querySelector('.fa-times'), '::before').fontFamily"
        assert "Font Awesome 6 Free" in browser.execute_script(icon_font)
        assert browser.execute_script("return document.fonts.check('900 16px \"Font Awesome 6 Free\"')")
        _shot(browser, tmp_path, "data-docs-offline-validation.png")
