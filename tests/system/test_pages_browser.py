"""The history pages in a real browser with the network off (issue 25, "Done when"): headless Chromium
(``tests.helpers.browser``) opens the plugin's routes served by uvicorn on a loopback port (``standalone_app``,
with a real Airflow JWT as the UI's ``_token`` cookie) over a store filled with builders: two versions of a
model with a regression and an inconclusive run (host busy), two cases of different scale, a second model and a
failed run, and what a fresh user's store holds after ``make demo`` (``fill_demo_like``: runs minutes apart, a
40-character model name, a labelled case with axes, reasons of 300 characters, an op name without a space, failed
runs with long errors). Each page is screenshotted (PNG under the test's tmp dir and, when
``PERFWATCH_SCREENSHOTS_DIR`` is set, there) and checked: its verdicts, reasons and ratios are shown (a failed
run's reason: its error's first line; an accepted run's: its acceptance, not the advice to accept it), its charts
were drawn by plotly.js (served by the plugin: no request failed, none left loopback), and the main columns fit
1280 px without a horizontal scroll bar (the index also at the width of Airflow's frame, ``FRAME_PX``).

Also: the plugin registers its external view (Airflow's nav bar entry that frames the pages) with Airflow's
plugins manager, and Airflow's UI lists it as a nav view.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tasks.analysis.attribution import attribute_against_run
from tasks.stages.archive import archive_run
from tasks.store import migrate, reads
from tasks.store.writes import record_failure
from tests.helpers import ROOT
from tests.helpers.browser import failed_requests, needs_browser, no_horizontal_scroll, offline_browser
from tests.helpers.builders import BASE_OPS, CAND_OPS, INPUT_BOUND, records
from tests.system.test_metrics import free_port

pytestmark = pytest.mark.slow

BUSY = "host busy (other processes took 71% of the host's CPU time): the interval is too wide to decide"
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
#: what ``make demo``'s store holds (a fresh user's report): a long model name, a case with axes and a long label,
#: a keras.applications version, a reason of 300+ characters with the advice to accept the run as the baseline
#: (then accepted by ``make demo``), an op name with no space in it, failed runs with their errors
LONG_MODEL = "efficientnet_v2_large_imagenet21k_finetuned_cifar100"
LONG_LABEL = "slow image pipeline: TFRecord shards decoded and augmented on the fly, no prefetch"
APP_VERSION = "keras3.15.1-1a2b3c4d"
REFUSED = "host busy: other processes took 47% of the host's CPU time (bound 25%; 1-min load 3.0 -> 3.1 on 2 CPUs)"
NOT_MADE = f"not made the case's baseline automatically, although no-baseline would make it one: {REFUSED}"
ADVICE = " (if it is sound after all: perfwatch baseline accept RUN_ID --by NAME --reason WHY)"
LONG_OP = "gradient_tape/mobilenetv2_0.75_96_1/block_1_expand_BN_1/batchnorm/mul_1/Mul"
DEVICE_MISSING = (
    "DeviceMissing: case demo_mobilenet train-bs16-gpu asks for device gpu; this host has none visible "
    "(CUDA_VISIBLE_DEVICES=<unset>, NVML sees [CPU])"
)
UNKNOWN_MODEL = (
    "UnknownModelError: unknown model 'nope': no directory /home/someone/projects/perfwatch/.perfwatch/models/nope; "
    "models there: demo_mobilenet, zoo_cnn, zoo_rnn, zoo_text, zoo_infer, zoo_dict, zoo_savedmodel"
)


def _run(
    url: str,
    tmp: Path,
    name: str,
    *,
    model: str,
    version: str,
    case_bs: int,
    median: float,
    days_ago: float,
    verdict: str = "pass",
    comp: dict | None = None,
    ops=BASE_OPS,
    findings=(),
    telemetry: dict | None = None,
    seed: int = 0,
) -> int:
    """Archive one run: ``records`` (builders) with 300 lognormal measured steps around ``median`` ms, started
    ``days_ago`` days before now; ``comp`` updates its CompareRecord."""
    ctx, pulled, env, warm, run, parse, base_comp = records(
        tmp, name, version=version, ops=ops, findings=findings, median=median
    )
    ctx = ctx.model_copy(
        update={
            "started_at": NOW - dt.timedelta(days=days_ago),
            "case": ctx.case.model_copy(update={"model": model, "batch_size": case_bs}),
        }
    )
    pulled = pulled.model_copy(update={"model": model})
    rng = np.random.default_rng(seed)
    steps = (median * rng.lognormal(0, 0.04, 300)).tolist()
    samples_path = Path(run.samples_path)
    samples = json.loads(samples_path.read_text()) | {"measured_step_times_ms": steps}
    if telemetry is not None:
        samples["telemetry"] = telemetry
    samples_path.write_text(json.dumps(samples))
    run = run.model_copy(update={"median_step_ms": float(np.median(steps)), "measured_steps": len(steps)})
    comp_rec = base_comp.model_copy(update={"verdict": verdict, **(comp or {})})
    return archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp_rec).run_id


def _telemetry() -> dict:
    rows = [
        {
            "device": "gpu0",
            "t_s": i * 0.1,
            "step": i,
            "utilization_pct": 80.0 + i % 5,
            "memory_bytes": 2_000_000_000,
            "power_w": 210.0,
            "sm_clock_mhz": 1410.0,
            "temperature_c": 61.0,
            "throttle_reasons": 0,
        }
        for i in range(20)
    ]
    return {"samples": rows, "window_s": 2.0, "steps": 100, "gpus": [{"device": "gpu0"}], "interval_ms": 100}


def fill_store(url: str, tmp: Path) -> dict[str, int]:
    """resnet train-bs16: v1 first run (no-baseline), v1 pass, v2 regression (×1.4, op attribution computed
    as baseline-compare does), v2 inconclusive (host busy); resnet train-bs64 at 300 ms: v1, v2; bert: one run
    and a failed one. Returns run ids by name."""
    migrate(url)
    ids: dict[str, int] = {}
    ids["v1_first"] = _run(
        url, tmp, "n1", model="resnet", version="1", case_bs=16, median=10.0, days_ago=4, verdict="no-baseline", seed=1
    )
    ids["big_v1"] = _run(
        url,
        tmp,
        "b1",
        model="resnet",
        version="1",
        case_bs=64,
        median=300.0,
        days_ago=3.9,
        verdict="no-baseline",
        seed=2,
    )
    ids["v1_pass"] = _run(
        url,
        tmp,
        "n2",
        model="resnet",
        version="1",
        case_bs=16,
        median=10.1,
        days_ago=3,
        comp={
            "method": "mann-whitney",
            "metric": "wall",
            "baseline_run_ids": [ids["v1_first"]],
            "ratio": 1.01,
            "ci_low": 0.99,
            "ci_high": 1.03,
            "evidence": {"reason": "the interval [0.990, 1.030] lies below the 1.05 threshold"},
        },
        seed=3,
    )
    base_ops = reads.run_ops(url, ids["v1_pass"])
    parsed = {"op_stats": CAND_OPS}
    attribution = attribute_against_run(
        base_ops, ids["v1_pass"], parsed, 5, 14.0, ratio=1.4, ratio_source="mann-whitney"
    )
    ids["v2_regression"] = _run(
        url,
        tmp,
        "n3",
        model="resnet",
        version="2",
        case_bs=16,
        median=14.0,
        days_ago=2,
        verdict="regression",
        ops=CAND_OPS,
        findings=[INPUT_BOUND],
        telemetry=_telemetry(),
        seed=4,
        comp={
            "method": "mann-whitney",
            "metric": "wall",
            "baseline_run_ids": [ids["v1_pass"]],
            "ratio": 1.4,
            "ci_low": 1.36,
            "ci_high": 1.44,
            "evidence": {
                "reason": "the interval [1.360, 1.440] lies above the 1.05 threshold",
                "attribution": attribution,
            },
        },
    )
    ids["big_v2"] = _run(
        url,
        tmp,
        "b2",
        model="resnet",
        version="2",
        case_bs=64,
        median=303.0,
        days_ago=1.9,
        comp={
            "method": "mann-whitney",
            "metric": "wall",
            "baseline_run_ids": [ids["big_v1"]],
            "ratio": 1.01,
            "ci_low": 0.99,
            "ci_high": 1.03,
        },
        seed=5,
    )
    ids["v2_inconclusive"] = _run(
        url,
        tmp,
        "n4",
        model="resnet",
        version="2",
        case_bs=16,
        median=10.8,
        days_ago=1,
        verdict="inconclusive",
        ops=CAND_OPS,
        seed=6,
        comp={
            "method": "paired-abba",
            "metric": "cpu",
            "ratio": 1.08,
            "ci_low": 0.97,
            "ci_high": 1.21,
            "evidence": {"reason": BUSY, "paired": {"spent": {"pairs": 48, "max_pairs": 64}}},
        },
    )
    ids["bert"] = _run(
        url, tmp, "n5", model="bert", version="1", case_bs=8, median=40.0, days_ago=0.5, verdict="no-baseline", seed=7
    )
    ctx = records(tmp, "n6")[0]
    ctx = ctx.model_copy(
        update={"started_at": NOW - dt.timedelta(hours=2), "case": ctx.case.model_copy(update={"model": "bert"})}
    )
    ids["failed"] = record_failure(url, ctx, "warm-up", "RunnerError: out of memory")
    ids.update(fill_demo_like(url, tmp))
    return ids


def fill_demo_like(url: str, tmp: Path) -> dict[str, int]:
    """What a fresh user's store looks like after ``make demo`` and a few tries (module constants): demo_mobilenet
    v1 (not made the baseline on a busy host, its reason advising to accept it; then accepted by ``make demo``)
    and v2 four minutes later (a regression whose reason names an op); a run of a model with a long name, a
    keras.applications version and a labelled case with axes; failed runs at env-fingerprint (DeviceMissing) and
    at pull-model-version (an unknown model, a long path), with their tracebacks as stored."""
    from tasks.cli.baseline import accept_run

    ids: dict[str, int] = {}
    t0 = 0.2  # days ago: the demo's runs are minutes apart (v1, v2 4 minutes later, the failed runs 3 after that)
    ids["demo_v1"] = _run(
        url,
        tmp,
        "d1",
        model="demo_mobilenet",
        version="1",
        case_bs=16,
        median=105.6,
        days_ago=t0,
        verdict="no-baseline",
        comp={"baseline_refused": [REFUSED], "evidence": {"reason": NOT_MADE + ADVICE}},
        seed=11,
    )
    accept_run(url, ids["demo_v1"], "make demo", "the demo's version 1, accepted explicitly: " + NOT_MADE)
    ids["demo_v2"] = _run(
        url,
        tmp,
        "d2",
        model="demo_mobilenet",
        version="2",
        case_bs=16,
        median=274.0,
        days_ago=t0 - 4 / 1440,
        verdict="regression",
        seed=12,
        comp={
            "method": "paired-abba",
            "metric": "cpu",
            "ratio": 1.874,
            "ci_low": 1.704,
            "ci_high": 2.06,
            "baseline_run_ids": [ids["demo_v1"]],
            "evidence": {
                "reason": "decided on CPU time: host busy (other processes took 69% of the host's CPU time); "
                f"top op: {LONG_OP} (+6669.6 µs/step, +431%)",
                "paired": {"spent": {"pairs": 32, "max_pairs": 40}},
            },
        },
    )
    ctx, pulled, env, warm, run, parse, comp = records(tmp, "l1", version=APP_VERSION, median=61.0)
    case = ctx.case.model_copy(
        update={"model": LONG_MODEL, "precision": "mixed_bfloat16", "xla": True, "label": LONG_LABEL}
    )
    ctx = ctx.model_copy(update={"case": case, "started_at": NOW - dt.timedelta(hours=5)})
    comp = comp.model_copy(
        update={"verdict": "no-baseline", "baseline_refused": [REFUSED], "evidence": {"reason": NOT_MADE + ADVICE}}
    )
    pulled = pulled.model_copy(update={"model": LONG_MODEL})
    ids["long"] = archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id
    for name, stage, error, model in (
        ("f1", "env-fingerprint", DEVICE_MISSING, "demo_mobilenet"),
        ("f2", "pull-model-version", UNKNOWN_MODEL, "nope"),
    ):
        ctx = records(tmp, name)[0]
        case = ctx.case.model_copy(update={"model": model, "device": "gpu" if model != "nope" else "auto"})
        ctx = ctx.model_copy(update={"case": case, "started_at": NOW - dt.timedelta(days=t0 - 7 / 1440)})
        trace = f'{error}\nTraceback (most recent call last):\n  File "/x/pipeline.py", line 242, in _recorded\n'
        ids[f"failed_{stage}"] = record_failure(url, ctx, stage, trace)
    return ids


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The plugin's app (``standalone_app``) on a loopback port over the filled store; yields (base URL,
    Airflow JWT, run ids, screenshot dirs)."""
    import uvicorn

    tmp = tmp_path_factory.mktemp("pages")
    url = f"sqlite:///{tmp / 'store.db'}"
    ids = fill_store(url, tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFWATCH_DATABASE_URL", url)
        mp.setenv(
            "AIRFLOW__CORE__AUTH_MANAGER",
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        )
        mp.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "pages-test-secret")
        from airflow.api_fastapi.app import init_auth_manager
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        from plugins.perfwatch.app import standalone_app

        token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer", role="VIEWER"))
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(standalone_app(), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.time() + 20
        while not server.started:
            assert time.time() < deadline, "uvicorn did not start in 20 s"
            time.sleep(0.05)
        dirs = [tmp / "screenshots"]
        if os.environ.get("PERFWATCH_SCREENSHOTS_DIR"):
            dirs.append(Path(os.environ["PERFWATCH_SCREENSHOTS_DIR"]))
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        try:
            yield f"http://127.0.0.1:{port}", token, ids, dirs
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def _shoot(browser, dirs: list[Path], name: str) -> None:
    """A full-page PNG of the current page, 1280 px wide (Chromium's DevTools screenshot beyond the viewport),
    into each of ``dirs``."""
    import base64

    height = browser.execute_script("return document.documentElement.scrollHeight")
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": 1280, "height": height, "scale": 1},
        },
    )
    first = dirs[0] / f"{name}.png"
    first.write_bytes(base64.b64decode(shot["data"]))
    for d in dirs[1:]:
        shutil.copy(first, d / first.name)
    assert first.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _open(browser, url: str) -> str:
    """Load ``url`` and wait for its charts (plotly adds ``js-plotly-plot`` to a drawn chart); the page's text."""
    browser.get(url)
    deadline = time.time() + 15
    expected = browser.execute_script("return document.querySelectorAll('.plotly-graph-div').length")
    while browser.execute_script("return document.querySelectorAll('.js-plotly-plot').length") < expected:
        assert time.time() < deadline, f"{url}: plotly did not draw its {expected} chart(s) in 15 s"
        time.sleep(0.1)
    return browser.find_element("tag name", "body").text


#: the width of Airflow 3.3's plugin frame in a 1280 px window (its navigation bar takes 72 px): what the pages
#: get inside Airflow's UI (``tests/unit/plugins/test_plugin.py::test_the_pages_inside_airflows_ui``)
FRAME_PX = 1208


def _rows(browser, heading: str) -> dict[int, dict[str, str]]:
    """The rows of the table after the ``<h2>`` ``heading``, by run id: {column header: cell text}."""
    table = browser.find_element("xpath", f"//h2[normalize-space()='{heading}']/following-sibling::table[1]")
    heads = [h.text.replace("\n", " ") for h in table.find_elements("css selector", "thead th")]
    out = {}
    for tr in table.find_elements("css selector", "tbody tr"):
        cells = [" ".join(td.text.split()) for td in tr.find_elements("tag name", "td")]
        out[int(cells[0])] = dict(zip(heads, cells, strict=True))
    return out


def _check_layout(browser, url: str, *, frame: bool = False) -> None:
    """No failed request, nothing off loopback, no sideways scroll at 1280 px; ``frame``: nor at the width of
    Airflow's frame (the window narrowed to ``FRAME_PX``, then back)."""
    assert failed_requests(browser) == [], url
    outside = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => !n.startsWith('http://127.0.0.1'))"
    )
    assert outside == [], f"{url} asked for resources off the plugin: {outside}"
    assert no_horizontal_scroll(browser), f"{url} scrolls sideways at 1280 px: {_widest(browser)}"
    if frame:
        size = browser.get_window_size()
        inner = browser.execute_script("return window.innerWidth")
        browser.set_window_size(size["width"] - (inner - FRAME_PX), size["height"])
        try:
            assert browser.execute_script("return window.innerWidth") == FRAME_PX
            assert no_horizontal_scroll(browser), f"{url} scrolls sideways in Airflow's frame: {_widest(browser)}"
        finally:
            browser.set_window_size(size["width"], size["height"])


def _widest(browser) -> list:
    """The page's scroll width and its widest tables (for a failure's message)."""
    return browser.execute_script(
        "return [document.documentElement.scrollWidth].concat(Array.from(document.querySelectorAll('table'))"
        ".map(t => t.offsetWidth + ': ' + Array.from(t.querySelectorAll('thead th')).map(h => h.textContent"
        " + ' ' + h.offsetWidth).join(', ')))"
    )


def _overlapping_labels(browser, chart: str) -> list:
    """The version labels of a plotly chart (annotations reading ``v<n>``) whose boxes overlap on the page."""
    return browser.execute_script(
        "var a = Array.from(document.querySelectorAll('#' + arguments[0] + ' g.annotation'))"
        ".filter(g => /^v\\d+$/.test(g.textContent.trim()))"
        ".map(g => [g.textContent.trim(), g.getBoundingClientRect()]);"
        "var out = []; for (var i = 0; i < a.length; i++) for (var j = i + 1; j < a.length; j++) {"
        "var p = a[i][1], q = a[j][1];"
        "if (p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom)"
        " out.push([a[i][0], a[j][0]]); } return [a.length, out];",
        chart,
    )


@needs_browser
def test_pages_in_a_browser_with_the_network_off(served):
    base, token, ids, dirs = served
    with offline_browser(width=1280, height=900) as browser:
        browser.get(f"{base}/perfwatch/assets/perfwatch.css")  # the cookie's origin, without a login
        browser.add_cookie({"name": "_token", "value": token, "path": "/"})

        text = _open(browser, f"{base}/perfwatch/")
        assert "Regressions, last 7 days" in text and "Latest runs" in text
        assert BUSY in text and "inconclusive" in text and "×1.400 [1.360, 1.440]" in text
        assert "failed@warm-up" in text
        # a fresh user's store: long names, labels and reasons, failed runs with their errors as their reasons,
        # an accepted run's reason saying so instead of advising to accept it
        assert LONG_LABEL in text and APP_VERSION in text and LONG_MODEL in text.replace("\n", "")
        assert LONG_OP in text.replace("\n", "")
        latest = _rows(browser, "Latest runs")
        assert latest[ids["failed"]]["reason"] == "RunnerError: out of memory"
        assert latest[ids["failed_env-fingerprint"]]["reason"] == DEVICE_MISSING
        assert latest[ids["failed_pull-model-version"]]["reason"] == UNKNOWN_MODEL
        accepted = latest[ids["demo_v1"]]["reason"]
        assert accepted.startswith(NOT_MADE + " (accepted as the baseline by make demo on ")
        assert "if it is sound after all" not in accepted
        assert latest[ids["long"]]["reason"].endswith(
            f"perfwatch baseline accept {ids['long']} --by NAME --reason WHY)"
        )
        _check_layout(browser, "index", frame=True)
        _shoot(browser, dirs, "index")

        # make demo's two versions, four minutes apart: an axis of minutes, "v2" and its line apart from v1
        _open(browser, f"{base}/perfwatch/models/demo_mobilenet")
        n, overlaps = _overlapping_labels(browser, "trend")
        assert n >= 1 and overlaps == []
        span = browser.execute_script(
            "var r = document.getElementById('trend').layout.xaxis.range;return (new Date(r[1]) - new Date(r[0])) / 6e4"
        )
        assert span < 60, f"a {span:.0f}-minute axis for runs minutes apart"
        _check_layout(browser, "demo model page")
        _shoot(browser, dirs, "model-demo")

        text = _open(browser, f"{base}/perfwatch/models/resnet")
        charts = browser.find_elements("css selector", "#trend.js-plotly-plot")
        assert len(charts) == 1
        panels = browser.execute_script("return document.getElementById('trend').data.map(t => t.xaxis)")
        assert {"x", "x2"} <= set(panels)  # one panel per case (train-bs16, train-bs64)
        names = browser.execute_script("return document.getElementById('trend').data.map(t => t.name)")
        assert "v1 median" in names and "v2 median" in names
        assert "v1 → v2" in text
        _check_layout(browser, "model page")
        _shoot(browser, dirs, "model")

        text = _open(browser, f"{base}/perfwatch/runs/{ids['v2_regression']}")
        assert "regression" in text and "the interval [1.360, 1.440] lies above the 1.05 threshold" in text
        assert "step-time ratio 1.400 [1.360, 1.440]" in text
        assert "Where the time went" in text and "all other ops" in text and "change of the step time" in text
        assert "input_bound" in text and "utilization mean (%)" in text
        assert browser.find_elements("css selector", "#ecdf.js-plotly-plot")
        assert "task log" in text and "open the Data Docs" not in text and "tensorboard --logdir" in text
        assert "pip install tensorboard xprof" in text and "tensorboard-plugin-profile" not in text
        _check_layout(browser, "regression run page")
        _shoot(browser, dirs, "run-regression")

        text = _open(browser, f"{base}/perfwatch/runs/{ids['failed_env-fingerprint']}")
        assert f"why\n{DEVICE_MISSING}" in text  # the verdict's story gives the error's first line as the reason
        text = _open(browser, f"{base}/perfwatch/runs/{ids['demo_v1']}")
        assert "accepted as the baseline by make demo on " in text and "if it is sound after all" not in text
        _check_layout(browser, "accepted run page")

        text = _open(browser, f"{base}/perfwatch/runs/{ids['v2_inconclusive']}")
        assert "inconclusive" in text and BUSY in text
        assert "CPU-time ratio 1.080 [0.970, 1.210]" in text and "48 pairs of at most 64" in text
        _check_layout(browser, "inconclusive run page")
        _shoot(browser, dirs, "run-inconclusive")

        text = _open(browser, f"{base}/perfwatch/compare?model=resnet&a_version=1&b_version=2&case=train-bs16")
        assert f"run {ids['v1_pass']} vs run {ids['v2_inconclusive']}" in text
        text = _open(browser, f"{base}/perfwatch/compare?a={ids['v1_pass']}&b={ids['v2_regression']}")
        assert "median step time ×" in text and "b over a" in text
        assert "conv" in text and "change of the step time" in text
        assert browser.find_elements("css selector", "#ecdf.js-plotly-plot")
        _check_layout(browser, "comparison page")
        _shoot(browser, dirs, "compare")


def test_the_plugin_registers_its_nav_view_with_airflow(monkeypatch, tmp_path):
    """Airflow's plugins manager loads the plugin from the plugins folder and its UI lists the external view:
    a nav entry framing the pages (``href`` relative to Airflow's base URL) at ``/plugin/perfwatch``, with an
    icon the plugin serves."""
    monkeypatch.setenv("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
    from airflow import plugins_manager

    for f in (plugins_manager._get_plugins, plugins_manager._get_ui_plugins):
        f.cache_clear()
    try:
        views, _ = plugins_manager._get_ui_plugins()
    finally:
        for f in (plugins_manager._get_plugins, plugins_manager._get_ui_plugins):
            f.cache_clear()
    ours = [v for v in views if v["name"] == "perfwatch"]
    assert ours == [
        {
            "name": "perfwatch",
            "href": "perfwatch/",
            "destination": "nav",
            "url_route": "perfwatch",
            "icon": "perfwatch/assets/icon.svg",
        }
    ]
    from fastapi.testclient import TestClient

    from plugins.perfwatch.app import standalone_app

    client = TestClient(standalone_app())
    icon = client.get("/" + ours[0]["icon"])  # the UI's <base href> is Airflow's root
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    js = client.get("/perfwatch/assets/plotly.min.js", headers={"Accept-Encoding": "gzip"})
    assert js.status_code == 200 and "max-age" in js.headers["cache-control"] and len(js.content) > 3_000_000
    assert (
        client.get("/perfwatch/assets/plotly.min.js", headers={"If-None-Match": js.headers["etag"]}).status_code == 304
    )
    assert client.get("/perfwatch/assets/nope.js").status_code == 404
