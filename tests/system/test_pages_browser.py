"""The history pages in a real browser with the network off (issue 25, "Done when"): headless Chromium
(``tests.helpers.browser``) opens the plugin's routes served by uvicorn on a loopback port (``plugin_pages``, with
a real Airflow JWT as the UI's ``_token`` cookie) over a store made as the product makes it: the seven stages
(``tasks.stages.pipeline.run_case``) with the fake runner (``tests.helpers.fake_runner``: the runner protocol
without TensorFlow, a committed real XSpace parsed by xprof, the real GX suites and Data Docs, the host's
telemetry), ``fill_store``: two versions of a model (v2 1.4x slower) with a paired release gate's regression and
a later unpaired inconclusive run, two cases of different scale, a second model, a run failed in the runner and
one refused by the env-fingerprint stage; spread over four days afterwards (start and end moved together). Beside
it what a fresh user's store holds after ``make demo`` (``fill_demo_like``, stage records from
``tests.helpers.builders`` with the product's methods: runs minutes apart, a 40-character model name, a labelled
case with axes, reasons of 300 characters, an op name without a space, failed runs with long errors).

Each page is screenshotted (PNG under the test's tmp dir and, when ``PERFWATCH_SCREENSHOTS_DIR`` is set, there) and
checked against what the store holds: the verdict's story (verdict, figure, regression line, method, baseline,
why), op deltas that add up to the change, the findings, the telemetry, the ECDF of baseline and candidate, links
to the task log, the Data Docs (opened through the plugin, as a user opens them: its tabs waited on until their
transition ends, the shown table read) and TensorBoard; that its charts were drawn by plotly.js (served by the
plugin: no request failed, none left loopback), and that the main columns fit 1280 px without a horizontal
scroll bar (the index also at the width of Airflow's frame, ``FRAME_PX``).

Also: the plugin registers its external view (Airflow's nav bar entry that frames the pages) with Airflow's
plugins manager, and Airflow's UI lists it as a nav view.

Run on its own it needs Airflow's metadata database (the pages' login reads it): ``make airflow-init`` once; a
shell without ``AIRFLOW_HOME`` then gets the project's, and without it the tests skip saying what to run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.support.wait import WebDriverWait
from sqlalchemy import select

from tasks.records import Case, RunContext
from tasks.stages.archive import archive_run
from tasks.store import Baseline, Run, migrate, session_scope
from tasks.store.writes import record_failure
from tests.helpers import ROOT, fake_runner
from tests.helpers.browser import (
    VISIBLE_TEXTS,
    failed_requests,
    needs_browser,
    no_horizontal_scroll,
    offline_browser,
    plugin_pages,
    shown_tab,
    sign_in,
)
from tests.helpers.builders import records

pytestmark = pytest.mark.slow

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
    verdict: str = "pass",
    comp: dict | None = None,
    seed: int = 0,
) -> int:
    """Archive one run of ``fill_demo_like``: ``records`` (builders) with 300 lognormal measured steps around
    ``median`` ms and the throughput of that median, started now; ``comp`` updates its CompareRecord. The caller
    moves it to its time (``_move``)."""
    import numpy as np

    ctx, pulled, env, warm, run, parse, base_comp = records(tmp, name, version=version, median=median)
    ctx = ctx.model_copy(update={"case": ctx.case.model_copy(update={"model": model, "batch_size": case_bs})})
    pulled = pulled.model_copy(update={"model": model})
    rng = np.random.default_rng(seed)
    steps = (median * rng.lognormal(0, 0.04, 300)).tolist()
    samples_path = Path(run.samples_path)
    samples_path.write_text(json.dumps(json.loads(samples_path.read_text()) | {"measured_step_times_ms": steps}))
    med = float(np.median(steps))
    run = run.model_copy(
        update={"median_step_ms": med, "measured_steps": len(steps), "throughput_eps": case_bs * 1000.0 / med}
    )
    comp_rec = base_comp.model_copy(update={"verdict": verdict, **(comp or {})})
    return archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp_rec).run_id


def _move(url: str, run_id: int, started: dt.datetime) -> None:
    """Move a stored run in time: it started at ``started``, and its end and its acceptance as a baseline move by
    as much (its duration is kept: no run of seconds that "took two days")."""

    def utc(t: dt.datetime) -> dt.datetime:
        return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)

    with session_scope(url) as s:
        run = s.get(Run, run_id)
        assert run is not None
        delta = started - utc(run.started_at)
        run.started_at = started
        if run.finished_at is not None:
            run.finished_at = utc(run.finished_at) + delta
        for b in s.scalars(select(Baseline).where(Baseline.run_id == run_id)):
            b.accepted_at = utc(b.accepted_at) + delta


#: the fake runner's measurement, small enough for seconds a run (a paired gate decides in 32 of 40 pairs)
SMALL = {
    "measured_steps": 40,
    "profiled_steps": 3,
    "warmup_max_steps": 20,
    "paired_blocks": 40,
    "paired_block_steps": 1,
}
#: the fake model store: (model, version, step factor): resnet v2 is 1.4x slower than v1
FAKE_MODELS = (("resnet", 1, 1.0), ("resnet", 2, 1.4), ("bert", 1, 1.0))


@contextlib.contextmanager
def _fake_env(**env: object) -> Iterator[None]:
    """The fake runner's settings (``PERFWATCH_FAKE_*``, module docstring of ``tests.helpers.fake_runner``) for
    the runs made inside."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, str(v))
        yield


def _stages(name: str, model: str, version: str, *, bs: int = 16, trigger: str = "manual", **case: object) -> int:
    """One case through the seven stages (``run_case``, as ``perfwatch run`` and the DAG run them) with the fake
    runner; the stored run's id (a failed run's too: the stages record it, then raise)."""
    from tasks.stages.pipeline import failure_note, run_case

    ctx = RunContext(
        dag_id="perfwatch_profile",
        dag_run_id=f"manual__2026-12-01T{len(name):02d}:00:00+00:00_{name}",
        trigger=trigger,
        case=Case(model=model, version=version, batch_size=bs, **{**SMALL, **case}),
    )
    try:
        state = run_case(ctx)
    except Exception as e:  # noqa: BLE001 - a failure the stages recorded: its run id
        note = failure_note(e)
        assert note is not None and note.run_id is not None, e
        return note.run_id
    assert state.archived is not None
    return state.archived.run_id


def fill_store(url: str, tmp: Path) -> dict[str, int]:
    """The store as the product makes it (module docstring): resnet train-bs16 v1 (no-baseline, the baseline),
    train-bs64 v1 at 30 ms a step (no-baseline), v2 release gates of both (paired ABBA: regressions, ×1.4), then
    an unpaired v2 run of train-bs16 (two processes' medians against one accepted run: inconclusive); bert
    infer-bs8 (no-baseline), a bert run whose runner failed in profile mode, a resnet case asking for a GPU this
    host does not have (refused by env-fingerprint); then ``fill_demo_like``. Runs are spread over the last four
    days (``_move``). Returns run ids by name."""
    migrate(url)
    home = tmp / "home"
    for model, version, factor in FAKE_MODELS:
        fake_runner.write_model(home / "models" / model / str(version) / "model.keras", factor)
    ids: dict[str, int] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFWATCH_HOME", str(home))
        mp.setenv("PERFWATCH_DATABASE_URL", url)
        mp.setenv("PERFWATCH_RUNNER_COMMAND", fake_runner.command())
        for var in ("PERFWATCH_MODEL_STORE", "PERFWATCH_ARCHIVE", "PERFWATCH_WORK", "PERFWATCH_CONFIG"):
            mp.delenv(var, raising=False)
        ids["v1"] = _stages("v1", "resnet", "1")
        with _fake_env(PERFWATCH_FAKE_STEP_MS=30):
            ids["big_v1"] = _stages("big1", "resnet", "1", bs=64)
        with _fake_env(PERFWATCH_FAKE_TAKE_TIME=1):  # steps that take their time: telemetry samples them
            ids["v2_regression"] = _stages("v2", "resnet", "2", trigger="release", telemetry_interval_ms=10)
        with _fake_env(PERFWATCH_FAKE_STEP_MS=30):
            ids["big_v2"] = _stages("big2", "resnet", "2", bs=64, trigger="release")
        with _fake_env(PERFWATCH_FAKE_TAKE_TIME=1):
            ids["v2_inconclusive"] = _stages("v2adhoc", "resnet", "2", telemetry_interval_ms=10)
        ids["bert"] = _stages("bert", "bert", "1", bs=8, mode="infer")
        with _fake_env(PERFWATCH_FAKE_FAIL="profile"):
            ids["failed"] = _stages("bertfail", "bert", "1", bs=8, mode="infer", measured_steps=41)
        ids["failed_device"] = _stages("gpu", "resnet", "1", device="gpu")
    for (_, run_id), days in zip(ids.items(), (4, 3.9, 3, 2.9, 2, 1, 0.5, 0.45), strict=True):
        _move(url, run_id, NOW - dt.timedelta(days=days))
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
        verdict="regression",
        seed=12,
        comp={
            "method": "paired-abba",
            "metric": "cpu",
            "ratio": 1.874,
            "ci_low": 1.704,
            "ci_high": 2.06,
            "baseline_run_ids": [ids["demo_v1"]],
            "evidence": {  # as tasks.analysis.verdict writes a busy host's paired gate decided on CPU time
                "reason": "decided on CPU time: host busy (other processes took 69% of the host's CPU time); "
                f"top op: {LONG_OP} (+6669.6 µs/step, +431%)",
                "metric": "cpu",
                "cpu": {"confidence": 0.99, "tolerance": 0.05},
                "paired": {
                    "spent": {"pairs": 32, "max_pairs": 40},
                    "baseline_version": "1",
                    "confidence": 0.99,
                    "tolerance": 0.05,
                    "sequential": {"design": {"max_pairs": 40, "round_pairs": 16}},
                },
            },
        },
    )
    ctx, pulled, env, warm, run, parse, comp = records(tmp, "l1", version=APP_VERSION, median=61.0)
    case = ctx.case.model_copy(
        update={"model": LONG_MODEL, "precision": "mixed_bfloat16", "xla": True, "label": LONG_LABEL}
    )
    ctx = ctx.model_copy(update={"case": case})
    comp = comp.model_copy(
        update={"verdict": "no-baseline", "baseline_refused": [REFUSED], "evidence": {"reason": NOT_MADE + ADVICE}}
    )
    pulled = pulled.model_copy(update={"model": LONG_MODEL})
    run = run.model_copy(update={"throughput_eps": 16 * 1000.0 / run.median_step_ms})
    ids["long"] = archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id
    for name, stage, error, model in (
        ("f1", "env-fingerprint", DEVICE_MISSING, "demo_mobilenet"),
        ("f2", "pull-model-version", UNKNOWN_MODEL, "nope"),
    ):
        ctx = records(tmp, name)[0]
        case = ctx.case.model_copy(update={"model": model, "device": "gpu" if model != "nope" else "auto"})
        ctx = ctx.model_copy(update={"case": case})
        trace = f'{error}\nTraceback (most recent call last):\n  File "/x/pipeline.py", line 242, in _recorded\n'
        ids[f"failed_{stage}"] = record_failure(url, ctx, stage, trace)
    # made now, moved to when make demo made them (its acceptance of v1 moves with it): minutes apart
    when = {"demo_v1": t0, "demo_v2": t0 - 4 / 1440, "long": 5 / 24}
    for name, rid in ids.items():
        _move(url, rid, NOW - dt.timedelta(days=when.get(name, t0 - 7 / 1440)))
    return ids


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The plugin's pages (``plugin_pages``) over the filled store; yields (base URL, Airflow JWT, run ids,
    screenshot dirs, store URL)."""
    tmp = tmp_path_factory.mktemp("pages")
    url = f"sqlite:///{tmp / 'store.db'}"
    ids = fill_store(url, tmp)
    dirs = [tmp / "screenshots"]
    if os.environ.get("PERFWATCH_SCREENSHOTS_DIR"):
        dirs.append(Path(os.environ["PERFWATCH_SCREENSHOTS_DIR"]))
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    with plugin_pages(url) as (base, token):
        yield base, token, ids, dirs, url


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


def _shoot_window(browser, dirs: list[Path], name: str) -> None:
    """A PNG of what the window shows (pages with a fixed header or footer, GX's), into each of ``dirs``."""
    first = dirs[0] / f"{name}.png"
    assert browser.save_screenshot(str(first))
    for d in dirs[1:]:
        shutil.copy(first, d / first.name)


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


def _story_items(browser) -> dict[str, str]:
    """The run page's verdict story (``tasks.services.story.story_html``) as {label: text}."""
    section = browser.find_element("css selector", "section.verdict-story")
    names = [d.text for d in section.find_elements("tag name", "dt")]
    return dict(zip(names, [" ".join(d.text.split()) for d in section.find_elements("tag name", "dd")], strict=True))


def _check_story(browser, story) -> None:
    """The page's story says what the store's ``VerdictStory`` does, field by field (as every command does)."""
    from tasks.services.story import baseline_text, figure_text, reason_text, threshold_text, verdict_text

    shown = _story_items(browser)
    want = {
        "verdict": verdict_text(story),
        "ratio": figure_text(story),
        "threshold": threshold_text(story),
        "method": story.method_text,
        "baseline": baseline_text(story),
        "why": reason_text(story),
    }
    for label, text in want.items():
        assert text and shown.get(label) == " ".join(text.split()), (label, shown.get(label), text)
    assert shown.get("profile judged", "").endswith(".xplane.pb"), shown


def _check_op_deltas(browser, comp: dict) -> None:
    """The op deltas table: its Δ column (the shown ops and "all other ops") adds up to the change row, which is
    the change the verdict's attribution measured (µs per step)."""
    table = browser.find_element("xpath", "//h2[@id='ops']/following-sibling::table[1]")
    rows = [
        [" ".join(td.text.split()) for td in tr.find_elements("css selector", "td, th")]
        for tr in table.find_elements("css selector", "tbody tr")
    ]
    number = lambda t: float(t.replace(",", ""))  # noqa: E731
    *ops, total = rows
    assert total[0] == "change of the step time" and total[-1] == "100%"
    change = number(total[1])
    assert change == pytest.approx(comp["evidence"]["attribution"]["step_time_change_us"], abs=0.06)
    assert sum(number(r[-2]) for r in ops) == pytest.approx(change, abs=0.1 * len(ops))
    assert len(ops) >= 3 and ops[-1][0].startswith("all other ops")


def _check_run_evidence(browser, db: str, run_id: int) -> None:
    """Findings, telemetry, ECDF and links of a run page, against the store."""
    from tasks.store.reads import run_findings

    findings = run_findings(db, run_id)
    table = browser.find_element("xpath", "//h2[@id='findings']/following-sibling::table[1]")
    codes = [td.text.replace("\n", "") for td in table.find_elements("css selector", "tbody tr td:nth-child(2)")]
    assert findings and codes == [f["code"] for f in findings]
    telemetry = browser.find_element("xpath", "//h2[@id='telemetry']/following-sibling::table[1]").text
    assert "host" in telemetry and "utilization mean (%)" in telemetry and "memory peak (MiB)" in telemetry
    traces = browser.execute_script("return document.getElementById('ecdf').data.map(t => t.name)")
    assert len(traces) == 2 and traces[0].startswith("baseline run ") and traces[1].startswith(f"run {run_id} ")
    links = {a.text: a.get_attribute("href") for a in browser.find_elements("css selector", "main a")}
    assert links["task log"].endswith("/tasks/archive/mapped") and links["DAG run"]
    assert links["open the Data Docs"].endswith(f"/perfwatch/runs/{run_id}/archive/gx/index.html")
    text = browser.find_element("tag name", "body").text
    assert "tensorboard --logdir" in text and "pip install tensorboard xprof" in text
    assert "(judged: the profile the parse stage read)" in text


@needs_browser
def test_pages_in_a_browser_with_the_network_off(served):
    from tasks.store.reads import run_comparison, verdict_stories

    base, token, ids, dirs, db = served
    stories = verdict_stories(list(ids.values()), db)
    regression, inconclusive = stories[ids["v2_regression"]], stories[ids["v2_inconclusive"]]
    assert (regression.verdict, regression.method) == ("regression", "paired-abba")  # the fake's 1.4x, gated
    assert (inconclusive.verdict, inconclusive.method) == ("inconclusive", "history-lookback")
    assert regression.ratio == pytest.approx(1.4, rel=0.05) and regression.confidence == 0.99
    with offline_browser(width=1280, height=900) as browser:
        sign_in(browser, base, token)

        text = _open(browser, f"{base}/perfwatch/")
        assert "Regressions, last 7 days" in text and "Latest runs" in text
        latest = _rows(browser, "Latest runs")
        assert latest[ids["v2_inconclusive"]]["verdict"] == "inconclusive"
        assert latest[ids["v2_inconclusive"]]["reason"].startswith("history-lookback vs 1 baseline runs: median ")
        assert latest[ids["failed"]]["verdict"] == "failed@profiled-run"
        assert latest[ids["failed"]]["reason"].startswith("RunnerError: runner (profile) failed: RuntimeError: fake")
        assert latest[ids["failed_device"]]["reason"].startswith("DeviceMissing: case resnet train-bs16-gpu asks ")
        assert latest[ids["v1"]]["reason"].startswith("no baseline yet: nothing to compare this run with")
        regs = _rows(browser, "Regressions, last 7 days")
        assert regs[ids["v2_regression"]]["ratio"].startswith(f"×{regression.ratio:.3f} [{regression.ci_low:.3f}, ")
        assert "Data Docs" in regs[ids["v2_regression"]]["links"]
        throughputs = {r["throughput"] for r in latest.values() if r["verdict"] != "—"}
        assert len(throughputs) > 5  # measured, not one made-up figure for every run
        # a fresh user's store: long names, labels and reasons, failed runs with their errors as their reasons,
        # an accepted run's reason saying so instead of advising to accept it
        assert LONG_LABEL in text and APP_VERSION in text and LONG_MODEL in text.replace("\n", "")
        assert LONG_OP in text.replace("\n", "")
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

        # make demo's two versions, four minutes apart: an axis of minutes, "v2" and its line apart from v1; the
        # GPU case whose only run failed says so in its panel; every panel has its time labels
        _open(browser, f"{base}/perfwatch/models/demo_mobilenet")
        n, overlaps = _overlapping_labels(browser, "trend")
        assert n >= 1 and overlaps == []
        span = browser.execute_script(
            "var r = document.getElementById('trend').layout.xaxis.range;return (new Date(r[1]) - new Date(r[0])) / 6e4"
        )
        assert span < 60, f"a {span:.0f}-minute axis for runs minutes apart"
        notes = browser.execute_script("return document.getElementById('trend').layout.annotations.map(a => a.text)")
        assert any("no successful run of this case" in t and "failed at env-fingerprint" in t for t in notes), notes
        ticks = browser.execute_script("return document.querySelectorAll('#trend .xaxislayer-above .xtick').length")
        assert ticks >= 4  # the labels of both panels' time axes are drawn
        names = browser.execute_script("return document.getElementById('trend').data.map(t => t.name)")
        assert "v1 median" in names and "v2 median" in names
        single = browser.execute_script(
            "return document.getElementById('trend').data.filter(t => t.name == 'v2 median')"
            ".map(t => t.error_y && t.error_y.array)"
        )
        assert single and single[0] and single[0][0] > 0  # a version's single run: its p10-p90 as an error bar
        _check_layout(browser, "demo model page")
        _shoot(browser, dirs, "model-demo")

        text = _open(browser, f"{base}/perfwatch/models/resnet")
        panels = browser.execute_script("return document.getElementById('trend').data.map(t => t.xaxis)")
        assert set(panels) == {"x", "x2", "x3"}  # one panel per case: train-bs16, train-bs16-gpu (failed), train-bs64
        notes = browser.execute_script("return document.getElementById('trend').layout.annotations.map(a => a.text)")
        assert any("no successful run of this case" in t for t in notes), notes  # the GPU case's panel
        names = browser.execute_script("return document.getElementById('trend').data.map(t => t.name)")
        assert {"v1 median", "v2 median", "regression", "inconclusive", "compared baseline's median"} <= set(names)
        assert "v1 → v2" in text
        _check_layout(browser, "model page")
        _shoot(browser, dirs, "model")

        _open(browser, f"{base}/perfwatch/runs/{ids['v2_regression']}")
        _check_story(browser, regression)
        assert "pairs of at most 36" in _story_items(browser)["method"]  # 40 pairs: 6 processes of 6
        _check_op_deltas(browser, run_comparison(db, ids["v2_regression"]))
        assert not browser.find_elements("id", "undecided")
        _check_run_evidence(browser, db, ids["v2_regression"])
        _check_layout(browser, "regression run page")
        _shoot(browser, dirs, "run-regression")

        _open(browser, f"{base}/perfwatch/runs/{ids['v2_inconclusive']}")
        _check_story(browser, inconclusive)
        _check_op_deltas(browser, run_comparison(db, ids["v2_inconclusive"]))
        undecided = browser.find_element("id", "undecided").text
        assert "is not established: the verdict is inconclusive (ratio" in undecided
        _check_run_evidence(browser, db, ids["v2_inconclusive"])
        _check_layout(browser, "inconclusive run page")
        _shoot(browser, dirs, "run-inconclusive")

        text = _open(browser, f"{base}/perfwatch/runs/{ids['failed_env-fingerprint']}")
        assert f"why\n{DEVICE_MISSING}" in text  # the verdict's story gives the error's first line as the reason
        text = _open(browser, f"{base}/perfwatch/runs/{ids['demo_v1']}")
        assert "accepted as the baseline by make demo on " in text and "if it is sound after all" not in text
        _check_layout(browser, "accepted run page")

        # versions compared as gate answers for them: v2's paired release gate, not the newer unpaired run
        text = _open(browser, f"{base}/perfwatch/compare?model=resnet&a_version=1&b_version=2&case=train-bs16")
        assert f"run {ids['v1']} vs run {ids['v2_regression']}" in text
        assert (
            f"v2: run {ids['v2_regression']}, as perfwatch gate resnet 2 answers: the newest paired ABBA gate of the "
            f"version; the newer run {ids['v2_inconclusive']} (inconclusive, history-lookback) is not a paired gate"
        ) in text
        figure = browser.find_element("css selector", ".verdict-figure").text
        assert figure.startswith(f"step-time ratio ×{regression.ratio:.3f} [{regression.ci_low:.3f}, ")
        assert "the verdict's figure" in figure and "regression" in figure
        assert re.search(r"why x\d\.\d{3} differs from the verdict's \d\.\d{3}: the verdict's paired gate", text)
        assert "median step time ×" in text and "b over a" in text
        assert "change of the step time" in text
        assert browser.find_elements("css selector", "#ecdf.js-plotly-plot")
        widths = browser.execute_script(
            "return Array.from(document.querySelectorAll('table.sides thead th')).map(h => h.offsetWidth)"
        )
        assert len(widths) == 3 and abs(widths[1] - widths[2]) <= 2 and widths[1] > 400, widths  # a and b alike
        started = browser.execute_script(
            "return Array.from(document.querySelectorAll('table.sides tbody tr')).filter(r =>"
            " r.cells[0].textContent == 'started (UTC)').map(r => [r.cells[1].offsetHeight, r.cells[0].offsetHeight])"
        )
        assert started and started[0][0] <= started[0][1] + 1  # the dates on one line, not wrapped
        _check_layout(browser, "comparison page")
        _shoot(browser, dirs, "compare")

        # the regression's Data Docs, opened through the plugin as its run page links them (GX's pages have a fixed
        # footer: shot as the window shows them, a window tall enough for the index's table)
        browser.set_window_size(1280, 1150)
        _open(browser, f"{base}/perfwatch/runs/{ids['v2_regression']}")
        browser.find_element("link text", "open the Data Docs").click()
        assert failed_requests(browser) == []
        results = "#section-1-content-block-2-1-body-table tbody tr"
        suites = "#section-1-content-block-2-2-body-table tbody tr"
        assert shown_tab(browser, "Expectation Suites") == "Expectation-Suites"
        shown = browser.execute_script(VISIBLE_TEXTS, suites)
        assert sorted(shown) == [  # the paired gate's steps have their own suite, and so do its figures beside
            "perfwatch_gated_figures",  # step time (the cold step and memory, at their default tolerances)
            "perfwatch_op_table",
            "perfwatch_step_times",
            "perfwatch_step_times_paired_steps",
            "perfwatch_verdict",
        ]
        assert browser.execute_script(VISIBLE_TEXTS, results) == []
        assert shown_tab(browser, "Validation Results") == "Validation-Results"  # the tab and its table, faded in
        rows = browser.execute_script(VISIBLE_TEXTS, results)
        assert len(rows) == 5 and sum("perfwatch_verdict" in r for r in rows) == 1, rows
        assert browser.execute_script(VISIBLE_TEXTS, suites) == []
        assert browser.execute_script(VISIBLE_TEXTS, "#section-1-content-block-2-1-body-table .fa-times")
        boxes = browser.execute_script(
            "return Array.from(document.querySelectorAll('.fixed-table-body')).filter(b => b.offsetParent)"
            ".map(b => [b.scrollWidth, b.clientWidth])"
        )
        assert boxes and all(w <= c + 1 for w, c in boxes), f"the table runs past its box at 1280 px: {boxes}"
        assert no_horizontal_scroll(browser)
        _shoot_window(browser, dirs, "data-docs-index")
        verdict_row = browser.find_element(
            "xpath", "//table[@id='section-1-content-block-2-1-body-table']//tr[contains(., 'perfwatch_verdict')]/td[1]"
        )
        verdict_row.click()  # a result's row opens its page (GX's row links)
        WebDriverWait(browser, 10).until(lambda b: "/validations/" in b.current_url)
        assert failed_requests(browser) == []
        rows = browser.execute_script(VISIBLE_TEXTS, "table.table tbody tr")
        assert any(
            r.startswith("Values in ratio must always be greater than or equal to those in ci_low.") for r in rows
        )
        failed = [r for r in rows if "1.05" in r]  # the regression line, failed: its observed ratio shown
        assert failed and all("less than or equal to 1.05" in r and "1 unexpected values found" in r for r in failed)
        assert browser.execute_script(VISIBLE_TEXTS, "table.table .fa-times")
        browser.execute_script(
            "arguments[0].scrollIntoView({block: 'center'})",
            browser.find_element(
                "xpath", "//table[contains(@class, 'table')]//tr[contains(., 'less than or equal to 1.05')]"
            ),
        )
        _shoot_window(browser, dirs, "data-docs-validation")


def test_the_plugin_registers_its_nav_view_with_airflow(monkeypatch, tmp_path):
    """Airflow's plugins manager loads the plugin from the plugins folder and its UI lists the external view:
    a nav entry framing the pages (``href`` relative to Airflow's base URL) at ``/plugin/perfwatch``, with an
    icon the plugin serves."""
    monkeypatch.setenv("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
    from airflow import plugins_manager, settings

    # Airflow read the plugins folder, and put it on sys.path, when it was imported (maybe by an earlier test,
    # before the variable was set): as it would have
    monkeypatch.setattr(settings, "PLUGINS_FOLDER", str(ROOT / "plugins"))
    monkeypatch.syspath_prepend(str(ROOT / "plugins"))

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
