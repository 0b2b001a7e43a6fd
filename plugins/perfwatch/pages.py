"""perfwatch's history pages, built from the store (``tasks.store``), newest first, missing values as "—".

* ``/perfwatch/``: the regressions of the last 7 days and the latest runs;
* ``/perfwatch/models/<model>``: the verdict's story of each case's newest run, the model's step-time trend
  (plot and table) and its sweep along batch size;
* ``/perfwatch/runs/<run id>``: one run: its verdict's story first (:func:`verdict_section`), then how to open
  it: its Airflow DAG run and task log, its GX Data Docs and its archived profile (the archive URI, the
  ``tensorboard --logdir`` line and its session name, the xplane files to download, the judged one marked);
* ``/perfwatch/runs/<run id>/archive/<path>``: the files of the run's archive directory (the Data Docs site,
  the profile) from wherever the archive is (a local path, ``s3://``, ...).

The app puts :data:`router` behind Airflow's login (``auth.airflow_user``).
"""

from __future__ import annotations

import datetime as dt
import html
import io
import mimetypes
import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from .urls import airflow_root, plugin_root, quote_segment

if TYPE_CHECKING:
    import pandas as pd
    from fsspec import AbstractFileSystem

router = APIRouter()  #: the history pages and the archive files

LOCAL_DAG_IDS = ("perfwatch_cli", "perfwatch_calibrate", "perfwatch_ingest")
"""dag_ids of runs made outside Airflow (``perfwatch run``, ``perfwatch calibrate``, ``perfwatch ingest``):
they have no Airflow DAG run to link to."""

_STYLE = """<style>body{font-family:system-ui,sans-serif;margin:1.5rem}table{border-collapse:collapse;
font-size:.9rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}th{background:#f3f3f3}
td.text{text-align:left}.regression,.failed{color:#b00020;font-weight:600}.pass{color:#1b5e20}
code,pre{background:#f6f6f6;padding:.1rem .3rem}dt{font-weight:600}dd{margin:0 0 .4rem 1rem}</style>"""

MISSING = "—"  #: how a missing value (None, NaN, NaT) is shown
_HEADERS = {
    "run_id": "run",
    "started_at": "started (UTC)",
    "median_step_ms": "median step (ms)",
    "median_cpu_ms": "median CPU time per step (ms)",
    "median_wait_ms": "median run-queue wait per step (ms)",
    "mean_step_ms": "mean step (ms)",
    "p10_step_ms": "p10 step (ms) [95% interval] n",
    "p90_step_ms": "p90 step (ms) [95% interval] n",
    "baseline_median_ms": "baseline median (ms)",
    "throughput_eps": "throughput (examples/s)",
    "case_name": "case",
    "case_label": "case label",
    "n_measured": "steps measured",
    "finished_at": "finished (UTC)",
    "failed_stage": "failed stage",
    "ci_low": "interval low",
    "ci_high": "interval high",
    "metric": "decided on",
}
#: how the run page names the metric that decided (``comparisons.metric``)
_METRIC_WORDS = {"wall": "wall time per step (our timer)", "cpu": "process CPU time per step (a busy host)"}


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"{_STYLE}</head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def _missing(v: Any) -> bool:
    import pandas as pd

    return v is None or (not isinstance(v, str | bytes | dict | list) and bool(pd.isna(v)))


def _text(v: Any) -> str:
    """A value as page text: ``MISSING`` for None/NaN/NaT, floats with 3 decimals, times as UTC minutes."""
    if _missing(v):
        return MISSING
    if isinstance(v, dt.datetime):  # also pandas Timestamps
        return (v if v.tzinfo is None else v.astimezone(dt.UTC)).strftime("%Y-%m-%d %H:%M")
    if isinstance(v, float):
        return f"{v:,.3f}"
    return str(v)


def _a(href: str, text: str) -> str:
    return f"<a href='{html.escape(href, quote=True)}'>{html.escape(text)}</a>"


def airflow_links(request: Request, run: dict[str, Any]) -> dict[str, str]:
    """Airflow UI links of a stored run (``run_pages`` row): ``dag_run`` (its DAG run page) and ``task_log``
    (the task of the failed stage, else ``archive``, whose log holds the verdict; the stage tasks are
    mapped over the cases, so the link opens the list of the task's mapped instances, one per case).
    Empty for runs made outside Airflow (``LOCAL_DAG_IDS``)."""
    if run["dag_id"] in LOCAL_DAG_IDS:
        return {}
    dag_run = f"{airflow_root(request)}/dags/{quote_segment(run['dag_id'])}/runs/{quote_segment(run['dag_run_id'])}"
    task = (run["failed_stage"] or "archive").replace("-", "_")
    return {"dag_run": dag_run, "task_log": f"{dag_run}/tasks/{quote_segment(task)}/mapped"}


def _links_cell(request: Request, run: dict[str, Any] | None) -> str:
    if run is None:
        return MISSING
    base, out = plugin_root(request), []
    if log_url := airflow_links(request, run).get("task_log"):
        out.append(_a(log_url, "task log"))
    if run["archive_uri"]:
        out.append(_a(f"{base}/runs/{run['run_id']}/archive/gx/index.html", "Data Docs"))
        out.append(_a(f"{base}/runs/{run['run_id']}#profile", "profile"))
    return " · ".join(out) or MISSING


def _table(request: Request, df: pd.DataFrame, *, links: dict[int, dict[str, Any]] | None = None) -> str:
    """An HTML table of ``df`` (one row per run, newest first as given): ``MISSING`` for missing values,
    run ids linked to the run's page, model names to the model's page, verdicts coloured; with ``links``
    (``run_pages`` rows by run id) a last column links each run's task log, Data Docs and profile."""
    if df.empty:
        return "<p>No runs yet.</p>"
    base = plugin_root(request)
    cols = list(df.columns)
    head = "".join(f"<th>{html.escape(_HEADERS.get(c, c))}</th>" for c in cols) + (
        "<th>links</th>" if links is not None else ""
    )
    rows = []
    for rec in df.to_dict("records"):
        cells = []
        for c in cols:
            v, text = rec[c], _text(rec[c])
            if c == "run_id" and not _missing(v):
                cells.append(f"<td>{_a(f'{base}/runs/{int(v)}', str(int(v)))}</td>")
            elif c == "model" and not _missing(v):
                cells.append(f"<td class='text'>{_a(f'{base}/models/{quote_segment(v)}', str(v))}</td>")
            else:
                kind = str(v).split("@")[0] if c in ("verdict", "status") and not _missing(v) else ""
                css = f"{kind} text" if isinstance(v, str) else kind
                cells.append(f"<td class='{html.escape(css.strip())}'>{html.escape(text)}</td>")
        if links is not None:
            run = links.get(int(rec["run_id"])) if not _missing(rec.get("run_id")) else None
            cells.append(f"<td class='text'>{_links_cell(request, run)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _newest_first(df: pd.DataFrame) -> pd.DataFrame:
    """Rows by run id, newest first (the store's ids grow with time)."""
    return df.sort_values("run_id", ascending=False, kind="stable") if not df.empty else df


def _run_rows(df: pd.DataFrame) -> dict[int, dict[str, Any]]:
    from tasks.store.reads import run_pages

    return run_pages([int(i) for i in df["run_id"].dropna()] if not df.empty else [])


@router.get("/", response_class=HTMLResponse)
def index(request: Request) -> HTMLResponse:
    """The regressions of the last 7 days and the latest 50 runs (all models), newest first."""
    from tasks.store import queries

    since = dt.datetime.now(dt.UTC) - dt.timedelta(days=7)
    regs = _newest_first(queries.regressions(since))
    latest = _newest_first(queries.runs(last=50))
    body = (
        "<h2>Regressions, last 7 days</h2>"
        + _table(request, regs, links=_run_rows(regs))
        + "<h2>Latest runs</h2>"
        + _table(request, latest, links=_run_rows(latest))
    )
    return _page("perfwatch", body)


@router.get("/models/{model}", response_class=HTMLResponse)
def model_history(request: Request, model: str) -> HTMLResponse:
    """Step-time trend of one model: plot (oldest to newest) and table (newest first)."""
    from tasks.cli.history import history_frame, spread_cells

    df = history_frame(model)  # p10/p90 with their 95% intervals and the steps they rest on
    if df.empty:
        raise HTTPException(status_code=404, detail=f"no runs of model {model!r} in the store")
    base, e = plugin_root(request), quote_segment(model)
    from tasks.records import VerdictStory, case_title
    from tasks.store.reads import verdict_stories

    newest = df.sort_values("run_id").groupby("case_name", sort=True).tail(1)
    stories = verdict_stories([int(i) for i in newest["run_id"]])
    verdicts = "".join(
        verdict_section(
            stories.get(int(r.run_id)) or VerdictStory(run_id=int(r.run_id)),
            heading=f"{case_title(r.case_name, getattr(r, 'case_label', None))}: run {int(r.run_id)}",
            level=3,
        )
        for r in newest.sort_values("case_name").itertuples()
    )
    body = (
        f"<p>{_a(f'{base}/', 'all models')}</p><h2>Newest verdict per case</h2>{verdicts}"
        f"<img src='{base}/models/{e}/plot.png' "
        f"alt='step time of {html.escape(model)}'>"
        + _table(request, _newest_first(spread_cells(df)), links=_run_rows(df))
    )
    return _page(f"perfwatch: {model}", body + _sweep_section(request, model))


def _sweep_section(request: Request, model: str) -> str:
    """The model's sweep along batch size when its newest successful runs span 2+ batch sizes (``perfwatch
    sweep``, no latency budget): plot and table, knee marked; empty otherwise."""
    from tasks.cli.sweep import sweep_frame

    try:
        df = sweep_frame(model, "batch_size")
    except ValueError:  # no successful run
        return ""
    if df["batch_size"].nunique() < 2:
        return ""
    base, e = plugin_root(request), quote_segment(model)
    return (
        f"<h2>Sweep along batch size (newest successful run per case; knee: highest throughput)</h2>"
        f"<img src='{base}/models/{e}/sweep.png' alt='sweep of {html.escape(model)}'>" + _table(request, df)
    )


@router.get("/models/{model}/sweep.png")
def model_sweep_plot(model: str) -> Response:
    """PNG of the sweep along batch size: throughput and step time per series, knee starred."""
    import tempfile
    from pathlib import Path

    from tasks.cli.sweep import plot_sweep, sweep_frame

    try:
        df = sweep_frame(model, "batch_size")
    except ValueError as err:
        raise HTTPException(status_code=404, detail=str(err)) from None
    with tempfile.TemporaryDirectory() as d:
        path = plot_sweep(df, "batch_size", Path(d) / "sweep.png", title=f"{model}: sweep along batch_size")
        return Response(content=path.read_bytes(), media_type="image/png")


@router.get("/models/{model}/plot.png")
def model_plot(model: str) -> Response:
    """PNG of the step-time trend (median with p10–p90, baseline, versions and environment changes)."""
    import tempfile
    from pathlib import Path

    from tasks.cli.history import plot_history
    from tasks.store import queries

    df = queries.history(model)
    if df.empty:
        raise HTTPException(status_code=404, detail=f"no runs of model {model!r} in the store")
    with tempfile.TemporaryDirectory() as d:
        path = plot_history(df, Path(d) / "plot.png", title=f"{model}: step time")
        data = io.BytesIO(path.read_bytes())
    return Response(content=data.getvalue(), media_type="image/png")


def _stored(run_id: int) -> dict[str, Any]:
    from tasks.store.reads import run_pages

    run = run_pages([run_id]).get(run_id)
    if run is None:
        raise HTTPException(404, f"no run {run_id} in the store")
    return run


def _archive_fs(run: dict[str, Any]) -> tuple[AbstractFileSystem, str]:
    """(fsspec filesystem, path) of a run's archive directory; 404 when the run has none."""
    import fsspec

    if not run["archive_uri"]:
        raise HTTPException(
            404,
            f"run {run['run_id']} has no archive ({run['status']}"
            + (f" at {run['failed_stage']}" if run["failed_stage"] else "")
            + ")",
        )
    fs, path = fsspec.core.url_to_fs(run["archive_uri"])
    return fs, path.rstrip("/")


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: int) -> HTMLResponse:
    """One run: what it measured and how to open it (Airflow DAG run and task log, GX Data Docs, the
    archived profile in TensorBoard or as files)."""
    run = _stored(run_id)
    story = _story(run_id)
    base = plugin_root(request)
    facts = [
        ("model", _a(f"{base}/models/{quote_segment(run['model'])}", run["model"])),
        *(
            (k, html.escape(_text(run[k])))
            for k in (
                "version",
                "case",
                "case_label",
                "status",
                "failed_stage",
                "started_at",
                "finished_at",
                "median_step_ms",
                "median_cpu_ms",
                "median_wait_ms",
                "throughput_eps",
            )
        ),
        ("DAG run", html.escape(f"{run['dag_id']} / {run['dag_run_id']}")),
    ]
    if run["metric"]:  # which per-step measure the verdict's ratio is of
        facts.append(("metric", html.escape(_METRIC_WORDS.get(run["metric"], run["metric"]))))
    af = airflow_links(request, run)
    facts.append(
        (
            "Airflow",
            " · ".join([_a(af["dag_run"], "DAG run"), _a(af["task_log"], "task log")])
            if af
            else f"{MISSING} (run outside Airflow, by {html.escape(run['dag_id'])})",
        )
    )
    body = verdict_section(story) + "<h2>Run</h2><dl>"
    body += "".join(f"<dt>{html.escape(_HEADERS.get(k, k))}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"
    if run["error"]:
        body += f"<h2>Error</h2><pre>{html.escape(run['error'])}</pre>"
    body += "<h2 id='datadocs'>GX Data Docs</h2>"
    if not run["archive_uri"]:
        why = f"no archive: the run failed at {run['failed_stage']}" if run["failed_stage"] else "no archive"
        body += (
            f"<p>{MISSING} ({html.escape(why)})</p><h2 id='profile'>Profile</h2><p>{MISSING} ({html.escape(why)})</p>"
        )
        return _page(f"perfwatch: run {run_id}", body)
    fs, root = _archive_fs(run)
    docs = fs.exists(f"{root}/gx/index.html")
    body += (
        f"<p>{_a(f'{base}/runs/{run_id}/archive/gx/index.html', 'open the Data Docs')} "
        f"(<code>{html.escape(run['archive_uri'])}/gx/index.html</code>)</p>"
        if docs
        else f"<p>{MISSING} (none archived with this run)</p>"
    )
    xplanes = sorted(p.removeprefix(root + "/") for p in fs.glob(f"{root}/plugins/profile/*/*.xplane.pb"))
    parent, name = run["archive_uri"].rstrip("/").rsplit("/", 1)
    body += (
        "<h2 id='profile'>Profile</h2>"
        f"<p>Archived at <code>{html.escape(run['archive_uri'])}</code>. Open it in TensorBoard's Profile "
        f"tab (<code>pip install tensorboard tensorboard-plugin-profile</code>):</p>"
        f"<pre>tensorboard --logdir {html.escape(shlex.quote(parent))}</pre>"
        f"<p>and pick the run <code>{html.escape(name)}</code> (every run of the model is listed there, "
        "newest run id last).</p>"
        + (
            "<ul>"
            + "".join(
                f"<li>{_a(f'{base}/runs/{run_id}/archive/{quote(x)}', x)} {_judged_note(x, story.profile)}</li>"
                for x in xplanes
            )
            + "</ul>"
            if xplanes
            else f"<p>xplane files: {MISSING} (not found in the archive)</p>"
        )
    )
    return _page(f"perfwatch: run {run_id}", body)


def _story(run_id: int) -> Any:
    """The run's ``tasks.records.VerdictStory`` (``tasks.store.reads.verdict_stories``)."""
    from tasks.records import VerdictStory
    from tasks.store.reads import verdict_stories

    return verdict_stories([run_id]).get(run_id) or VerdictStory(run_id=run_id)


def verdict_section(story: Any, heading: str | None = "Verdict", level: int = 2) -> str:
    """The verdict's story of a run page (and of the model page, per case), as every command tells it:
    ``tasks.services.story.story_html`` (verdict, ratio with its interval, regression line, method and pairs,
    baseline, why, the profile judged). The one place the pages render a verdict's story."""
    from tasks.services.story import story_html

    return story_html(story, heading=heading, level=level)


def _judged_note(path: str, judged: list[str]) -> str:
    """Beside an archived xplane file on the run page: whether the parse stage judged it (its newest
    profiling session; the others are earlier tries of the profiled run, kept but not read)."""
    if not judged:
        return ""
    if path in judged:
        return "<strong>(judged: the profile the parse stage read)</strong>"
    return "(an earlier try's profile, not judged)"


@router.get("/runs/{run_id}/archive/{path:path}")
def archive_file(run_id: int, path: str) -> Response:
    """A file of the run's archive directory (the GX Data Docs site under ``gx/``, the profile under
    ``plugins/profile/``), read with fsspec from wherever the archive is. 404 for a path outside the
    directory, a directory, or a missing file."""
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") or "\\" in p for p in parts):
        raise HTTPException(404, f"{path!r} is not a file path inside the run's archive directory")
    fs, root = _archive_fs(_stored(run_id))
    target = f"{root}/{'/'.join(parts)}"
    if not fs.isfile(target):
        raise HTTPException(404, f"no file {path!r} in the archive of run {run_id}")
    media = mimetypes.guess_type(parts[-1])[0] or "application/octet-stream"

    def chunks() -> Iterator[bytes]:
        with fs.open(target, "rb") as fh:
            while chunk := fh.read(1 << 20):
                yield chunk

    return StreamingResponse(chunks(), media_type=media)
