"""Airflow plugin: perfwatch's history pages in the Airflow UI ("perfwatch" in the nav bar).

A small FastAPI app mounted by the Airflow API server at ``/perfwatch`` serves read-only pages built
from the named SQL queries (``tasks.store.queries``): the latest runs and the regressions of the last
7 days, and per model its step-time trend with a plot. It reads the store named by
``PERFWATCH_DATABASE_URL``. Airflow does not put its own auth in front of plugin apps, so the
pages expose only what ``perfwatch runs`` shows: model names, timings and verdicts.
"""

from __future__ import annotations

import datetime as dt
import html
import io

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse, Response

app = FastAPI(title="perfwatch history", docs_url=None, redoc_url=None)

_STYLE = """<style>body{font-family:system-ui,sans-serif;margin:1.5rem}table{border-collapse:collapse;
font-size:.9rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}th{background:#f3f3f3}
.regression{color:#b00020;font-weight:600}.pass{color:#1b5e20}</style>"""


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                        f"{_STYLE}</head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def _table(df, link_models: bool = False) -> str:
    if df.empty:
        return "<p>No runs yet.</p>"
    df = df.copy()
    text = df.to_html(index=False, escape=True, na_rep="—", float_format=lambda v: f"{v:,.3f}")
    if link_models and "model" in df:
        for m in sorted(set(df["model"])):
            e = html.escape(str(m))
            text = text.replace(f"<td>{e}</td>", f"<td><a href='models/{e}'>{e}</a></td>")
    return text.replace("<td>regression</td>", "<td class='regression'>regression</td>").replace(
        "<td>pass</td>", "<td class='pass'>pass</td>")


@app.get("/", response_class=HTMLResponse)
def index() -> HTMLResponse:
    """Latest 50 runs (all models) and the regressions of the last 7 days."""
    from tasks.store import queries

    since = dt.datetime.now(dt.UTC) - dt.timedelta(days=7)
    body = ("<h2>Regressions, last 7 days</h2>" + _table(queries.regressions(since), link_models=True)
            + "<h2>Latest runs</h2>" + _table(queries.runs(last=50), link_models=True))
    return _page("perfwatch", body)


@app.get("/models/{model}", response_class=HTMLResponse)
def model_history(model: str) -> HTMLResponse:
    """Step-time trend of one model: plot and table (oldest first)."""
    from tasks.store import queries

    df = queries.history(model)
    if df.empty:
        raise HTTPException(status_code=404, detail=f"no runs of model {model!r} in the store")
    e = html.escape(model)
    body = f"<p><a href='../'>all models</a></p><img src='{e}/plot.png' alt='step time of {e}'>" + _table(df)
    return _page(f"perfwatch: {model}", body)


@app.get("/models/{model}/plot.png")
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


class PerfwatchPlugin(AirflowPlugin):
    """Registers the history app at /perfwatch and a "perfwatch" entry in the nav bar."""

    name = "perfwatch"
    fastapi_apps = [{"app": app, "url_prefix": "/perfwatch", "name": "perfwatch history"}]
    external_views = [{"name": "perfwatch", "href": "perfwatch/", "destination": "nav", "url_route": "perfwatch"}]
