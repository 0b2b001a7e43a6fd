"""Airflow plugin: perfwatch's history pages in the Airflow UI ("perfwatch" in the nav bar), its
Prometheus metrics, and the Alertmanager webhook that turns a macro alert into a profiling run.

A small FastAPI app mounted by the Airflow API server at ``/perfwatch`` serves

* pages built from the store (``tasks.store``), newest first, missing values as "—":
  ``/perfwatch/`` the regressions of the last 7 days and the latest runs; ``/perfwatch/models/<model>``
  a model's step-time trend (plot and table); ``/perfwatch/runs/<run id>`` one run and how to open it:
  its Airflow DAG run and task log, its GX Data Docs and its archived profile (the archive URI, the
  ``tensorboard --logdir`` line and its session name, the xplane files to download);
  ``/perfwatch/runs/<run id>/archive/<path>`` serves the files of the run's archive directory (the
  Data Docs site, the profile) from wherever the archive is (a local path, ``s3://``, ...).
  ``/perfwatch`` without the trailing slash is redirected to ``/perfwatch/`` (:class:`SlashRedirect`,
  a root middleware: Airflow's UI would otherwise answer that path).
* ``/perfwatch/metrics``: the store in the Prometheus text format (prometheus-client; see
  :class:`StoreCollector` for the metrics, in base units);
* ``/perfwatch/alertmanager`` (POST): Alertmanager's webhook (payload version 4). Every firing alert
  labelled ``perfwatch_model`` (optionally ``perfwatch_version``, ``perfwatch_case``) triggers a run of
  the ``perfwatch_profile`` DAG for that model through Airflow's REST API (:func:`trigger_profile_run`).

Access. The pages and the archive files sit behind Airflow's own authentication (:func:`airflow_user`):
the JWT of Airflow's auth manager as a bearer token (``POST /auth/token``) or the ``_token`` cookie the
Airflow UI sets at login, and the auth manager must allow the user the Airflow website; a browser
without a login is redirected to Airflow's login page (``/api/v2/auth/login?next=...``), an API client
gets 401 (403 for a bad token or a user without access). ``/perfwatch/metrics`` is open by default,
as Prometheus exporters usually are, because Prometheus scrapes without an Airflow login and the metrics
hold only what ``perfwatch runs`` shows (model and case names, timings, verdicts); set
``PERFWATCH_METRICS_TOKEN`` to require it as a bearer token (Prometheus ``scrape_config``
``authorization: {credentials: ...}``). The webhook, which starts work, requires the bearer token
``PERFWATCH_ALERTMANAGER_TOKEN`` (Alertmanager's ``http_config.authorization``); without it set the
webhook is off (503). The store is the one ``PERFWATCH_DATABASE_URL`` names.

``standalone_app()`` serves the same routes under ``/perfwatch`` without Airflow's API server
(``uvicorn --factory plugins.perfwatch_history:standalone_app``, e.g. a metrics endpoint for Prometheus);
its pages accept the tokens of the Airflow deployment whose configuration it reads (same
``[api_auth] jwt_secret``) and answer 401 without one (it has no login page).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import io
import logging
import mimetypes
import os
import re
import secrets
import shlex
from typing import Any
from urllib.parse import quote

from airflow.plugins_manager import AirflowPlugin
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from tasks.services.airflow_api import AirflowApi, AirflowApiError, airflow_token

log = logging.getLogger(__name__)

URL_PREFIX = "/perfwatch"  #: where Airflow's API server mounts the app
LOCAL_DAG_IDS = ("perfwatch_cli", "perfwatch_calibrate", "perfwatch_ingest")
"""dag_ids of runs made outside Airflow (``perfwatch run``, ``perfwatch calibrate``, ``perfwatch ingest``):
they have no Airflow DAG run to link to."""
LOGIN_PATH = "/api/v2/auth/login"  #: Airflow's public login redirect (``?next=`` the page asked for)

pages = APIRouter()  # the history pages and the archive files: behind Airflow's authentication
service = APIRouter()  # /metrics and /alertmanager: their own access rules (module docstring)


# ------------------------------------------------------------------------------------------- access


class LoginRequired(Exception):
    """A browser asked for a page without a valid Airflow login; ``url``: Airflow's login page."""

    def __init__(self, url: str):
        super().__init__(url)
        self.url = url


def _airflow_root(request: Request) -> str:
    """The path of Airflow's API server root as the browser sees it (``""``, or its base-URL subpath):
    the mount's ``root_path`` without ``/perfwatch``."""
    return request.scope.get("root_path", "").removesuffix(URL_PREFIX)


def _bearer_ok(authorization: str | None, expected: str) -> bool:
    """Whether an ``Authorization`` header is ``Bearer <expected>`` (constant-time)."""
    return secrets.compare_digest((authorization or "").encode(), f"Bearer {expected}".encode())


async def airflow_user(request: Request):
    """FastAPI dependency: the Airflow user of the request, authenticated as Airflow's own API and UI do
    (``airflow.api_fastapi.core_api.security.get_user``: a bearer JWT, else the ``_token`` cookie) and
    allowed the Airflow website by the auth manager (``AccessView.WEBSITE``).

    Raises:
        LoginRequired: no valid login and the request is a browser's page load inside Airflow's API server
            (answered with a redirect to Airflow's login page, which comes back here after the login).
        HTTPException: 401 without a token (or an expired one), 403 for an invalid token or a user the
            auth manager does not allow the website.
    """
    from airflow.api_fastapi.app import get_auth_manager, init_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    try:
        manager = get_auth_manager()
    except RuntimeError:  # standalone_app(): not inside Airflow's API server, which initialises it
        manager = init_auth_manager()
    try:
        user = await get_user(request=request, _oauth_token=None, bearer_credentials=await bearer_scheme(request))
    except HTTPException as e:
        browser = request.method == "GET" and "text/html" in request.headers.get("accept", "")
        if browser and request.app.state.login and e.status_code in (401, 403):
            raise LoginRequired(f"{_airflow_root(request)}{LOGIN_PATH}?next={_q(request.url)}") from e
        raise
    if not manager.is_authorized_view(access_view=AccessView.WEBSITE, user=user):
        raise HTTPException(403, f"user {user.get_name()!r} may not see the Airflow website, so not perfwatch's pages")
    return user


def metrics_access(authorization: str | None = Header(default=None)) -> None:
    """FastAPI dependency of ``/metrics``: open unless ``PERFWATCH_METRICS_TOKEN`` is set, then that bearer
    token is required (401 without it)."""
    expected = os.environ.get("PERFWATCH_METRICS_TOKEN")
    if expected and not _bearer_ok(authorization, expected):
        raise HTTPException(
            401, "missing or wrong bearer token (PERFWATCH_METRICS_TOKEN)", headers={"WWW-Authenticate": "Bearer"}
        )


class SlashRedirect:
    """ASGI middleware (an Airflow root middleware): answers ``/perfwatch`` (no trailing slash) with a
    307 redirect to ``/perfwatch/`` (query kept). The mount only matches ``/perfwatch/...``; without this
    Airflow's UI catch-all route would answer ``/perfwatch`` with its own page."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        root = scope.get("root_path", "") if scope["type"] == "http" else ""
        if scope["type"] == "http" and scope["path"].removeprefix(root) == URL_PREFIX:
            query = scope.get("query_string", b"").decode("latin-1")
            await RedirectResponse(f"{root}{URL_PREFIX}/" + (f"?{query}" if query else ""), status_code=307)(
                scope, receive, send
            )
            return
        await self.app(scope, receive, send)


# ------------------------------------------------------------------------------------------- pages

_STYLE = """<style>body{font-family:system-ui,sans-serif;margin:1.5rem}table{border-collapse:collapse;
font-size:.9rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}th{background:#f3f3f3}
td.text{text-align:left}.regression,.failed{color:#b00020;font-weight:600}.pass{color:#1b5e20}
code,pre{background:#f6f6f6;padding:.1rem .3rem}dt{font-weight:600}dd{margin:0 0 .4rem 1rem}</style>"""

MISSING = "—"  #: how a missing value (None, NaN, NaT) is shown
_HEADERS = {
    "run_id": "run",
    "started_at": "started (UTC)",
    "median_step_ms": "median step (ms)",
    "mean_step_ms": "mean step (ms)",
    "p10_step_ms": "p10 step (ms)",
    "p90_step_ms": "p90 step (ms)",
    "baseline_median_ms": "baseline median (ms)",
    "throughput_eps": "throughput (examples/s)",
    "case_name": "case",
    "n_measured": "steps measured",
    "finished_at": "finished (UTC)",
    "failed_stage": "failed stage",
    "ci_low": "interval low",
    "ci_high": "interval high",
}


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


def _q(part: Any) -> str:
    """One URL path segment: every character but unreserved ones percent-encoded."""
    return quote(str(part), safe="")


def _a(href: str, text: str) -> str:
    return f"<a href='{html.escape(href, quote=True)}'>{html.escape(text)}</a>"


def _base(request: Request) -> str:
    """The plugin's own root path as the browser sees it (``/perfwatch`` or ``<subpath>/perfwatch``)."""
    return request.scope.get("root_path", "").rstrip("/")


def airflow_links(request: Request, run: dict[str, Any]) -> dict[str, str]:
    """Airflow UI links of a stored run (``run_pages`` row): ``dag_run`` (its DAG run page) and ``task_log``
    (the task of the failed stage, else ``archive``, whose log holds the verdict; the stage tasks are
    mapped over the cases, so the link opens the list of the task's mapped instances, one per case).
    Empty for runs made outside Airflow (``LOCAL_DAG_IDS``)."""
    if run["dag_id"] in LOCAL_DAG_IDS:
        return {}
    dag_run = f"{_airflow_root(request)}/dags/{_q(run['dag_id'])}/runs/{_q(run['dag_run_id'])}"
    task = (run["failed_stage"] or "archive").replace("-", "_")
    return {"dag_run": dag_run, "task_log": f"{dag_run}/tasks/{_q(task)}/mapped"}


def _links_cell(request: Request, run: dict[str, Any] | None) -> str:
    if run is None:
        return MISSING
    base, out = _base(request), []
    if log_url := airflow_links(request, run).get("task_log"):
        out.append(_a(log_url, "task log"))
    if run["archive_uri"]:
        out.append(_a(f"{base}/runs/{run['run_id']}/archive/gx/index.html", "Data Docs"))
        out.append(_a(f"{base}/runs/{run['run_id']}#profile", "profile"))
    return " · ".join(out) or MISSING


def _table(request: Request, df, *, links: dict[int, dict[str, Any]] | None = None) -> str:
    """An HTML table of ``df`` (one row per run, newest first as given): ``MISSING`` for missing values,
    run ids linked to the run's page, model names to the model's page, verdicts coloured; with ``links``
    (``run_pages`` rows by run id) a last column links each run's task log, Data Docs and profile."""
    if df.empty:
        return "<p>No runs yet.</p>"
    base = _base(request)
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
                cells.append(f"<td class='text'>{_a(f'{base}/models/{_q(v)}', str(v))}</td>")
            else:
                kind = str(v).split("@")[0] if c in ("verdict", "status") and not _missing(v) else ""
                css = f"{kind} text" if isinstance(v, str) else kind
                cells.append(f"<td class='{html.escape(css.strip())}'>{html.escape(text)}</td>")
        if links is not None:
            run = links.get(int(rec["run_id"])) if not _missing(rec.get("run_id")) else None
            cells.append(f"<td class='text'>{_links_cell(request, run)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _newest_first(df):
    """Rows by run id, newest first (the store's ids grow with time)."""
    return df.sort_values("run_id", ascending=False, kind="stable") if not df.empty else df


def _run_rows(df) -> dict[int, dict[str, Any]]:
    from tasks.store.reads import run_pages

    return run_pages([int(i) for i in df["run_id"].dropna()] if not df.empty else [])


@pages.get("/", response_class=HTMLResponse)
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


@pages.get("/models/{model}", response_class=HTMLResponse)
def model_history(request: Request, model: str) -> HTMLResponse:
    """Step-time trend of one model: plot (oldest to newest) and table (newest first)."""
    from tasks.store import queries

    df = queries.history(model)
    if df.empty:
        raise HTTPException(status_code=404, detail=f"no runs of model {model!r} in the store")
    base, e = _base(request), _q(model)
    body = (
        f"<p>{_a(f'{base}/', 'all models')}</p><img src='{base}/models/{e}/plot.png' "
        f"alt='step time of {html.escape(model)}'>" + _table(request, _newest_first(df), links=_run_rows(df))
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
    base, e = _base(request), _q(model)
    return (
        f"<h2>Sweep along batch size (newest successful run per case; knee: highest throughput)</h2>"
        f"<img src='{base}/models/{e}/sweep.png' alt='sweep of {html.escape(model)}'>" + _table(request, df)
    )


@pages.get("/models/{model}/sweep.png")
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


@pages.get("/models/{model}/plot.png")
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


def _archive_fs(run: dict[str, Any]):
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


@pages.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: int) -> HTMLResponse:
    """One run: what it measured and how to open it (Airflow DAG run and task log, GX Data Docs, the
    archived profile in TensorBoard or as files)."""
    run = _stored(run_id)
    base = _base(request)
    facts = [
        ("model", _a(f"{base}/models/{_q(run['model'])}", run["model"])),
        *(
            (k, html.escape(_text(run[k])))
            for k in (
                "version",
                "case",
                "status",
                "verdict",
                "failed_stage",
                "started_at",
                "finished_at",
                "median_step_ms",
                "throughput_eps",
            )
        ),
        ("DAG run", html.escape(f"{run['dag_id']} / {run['dag_run_id']}")),
    ]
    af = airflow_links(request, run)
    facts.append(
        (
            "Airflow",
            " · ".join([_a(af["dag_run"], "DAG run"), _a(af["task_log"], "task log")])
            if af
            else f"{MISSING} (run outside Airflow, by {html.escape(run['dag_id'])})",
        )
    )
    body = "<dl>" + "".join(f"<dt>{html.escape(_HEADERS.get(k, k))}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"
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
            "<ul>" + "".join(f"<li>{_a(f'{base}/runs/{run_id}/archive/{quote(x)}', x)}</li>" for x in xplanes) + "</ul>"
            if xplanes
            else f"<p>xplane files: {MISSING} (not found in the archive)</p>"
        )
    )
    return _page(f"perfwatch: run {run_id}", body)


@pages.get("/runs/{run_id}/archive/{path:path}")
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

    def chunks():
        with fs.open(target, "rb") as fh:
            while chunk := fh.read(1 << 20):
                yield chunk

    return StreamingResponse(chunks(), media_type=media)


# ------------------------------------------------------------------------------------------- /metrics

VERDICTS = ("pass", "regression", "improvement", "inconclusive", "no-baseline", "env-changed")


class StoreCollector:
    """A prometheus-client collector that reads the store at every scrape (``tasks.store.series.metrics_snapshot``).

    Metrics (labels ``model``, ``case``; times in seconds, as Prometheus names them):

    * ``perfwatch_step_time_seconds{quantile="0.5"|"0.9", source}``: median and p90 step time of the newest
      successful run (perfwatch's timer, profiler off; xprof's step time for ``source="external"`` runs);
    * ``perfwatch_baseline_step_time_seconds``: median step time of the active baseline run;
    * ``perfwatch_throughput_examples_per_second``: the newest run's throughput (examples/s);
    * ``perfwatch_latest_verdict{verdict}``: 1 for the newest run's verdict, 0 for the others;
    * ``perfwatch_latest_run_info{version, source}``: 1, the newest run's version;
    * ``perfwatch_last_success_timestamp_seconds``: when the newest successful run finished (Unix time);
    * ``perfwatch_runs_total{status}``, ``perfwatch_regressions_total``: runs stored, by status; runs
      judged a regression;
    * ``perfwatch_newest_data_age_seconds`` (no labels): seconds since the newest run of any model finished;
    * ``perfwatch_store_up`` (no labels): 1 when the store was read, 0 when it could not be (then no other
      metric is given, and the error is logged).

    perfwatch measures training steps; it records no inference latency, so no latency metric is given.
    """

    def __init__(self, db_url: str | None = None):
        self.db_url = db_url

    def describe(self):  # no metrics are read at registration time
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from tasks.store.series import metrics_snapshot

        up = GaugeMetricFamily("perfwatch_store_up", "1 when the perfwatch store could be read at this scrape")
        try:
            snap = metrics_snapshot(self.db_url)
        except Exception as e:  # noqa: BLE001 - any store error is reported as store_up 0
            log.error("perfwatch metrics: cannot read the store: %s: %s", type(e).__name__, e)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        mc = ["model", "case"]
        step = GaugeMetricFamily(
            "perfwatch_step_time_seconds",
            "Step time of the newest successful run (quantile 0.5: median, 0.9: p90)",
            labels=[*mc, "quantile", "source"],
        )
        thr = GaugeMetricFamily(
            "perfwatch_throughput_examples_per_second",
            "Throughput of the newest successful run (examples/s at its median step time)",
            labels=[*mc, "source"],
        )
        verdict = GaugeMetricFamily(
            "perfwatch_latest_verdict", "1 for the verdict of the newest successful run", labels=[*mc, "verdict"]
        )
        info = GaugeMetricFamily(
            "perfwatch_latest_run_info",
            "The newest successful run's model version and source",
            labels=[*mc, "version", "source"],
        )
        last = GaugeMetricFamily(
            "perfwatch_last_success_timestamp_seconds", "When the newest successful run finished (Unix time)", labels=mc
        )
        for r in snap.latest:
            key = [r.model, r.case_name]
            for q, ms in (("0.5", r.median_step_ms), ("0.9", r.p90_step_ms)):
                if ms is not None:
                    step.add_metric([*key, q, r.source], ms / 1000.0)
            if r.throughput_eps is not None:
                thr.add_metric([*key, r.source], r.throughput_eps)
            for v in sorted(set(VERDICTS) | ({r.verdict} if r.verdict else set())):
                verdict.add_metric([*key, v], 1.0 if v == r.verdict else 0.0)
            info.add_metric([*key, r.version or "", r.source], 1.0)
            if r.finished_at is not None:
                last.add_metric(key, r.finished_at.timestamp())
        base = GaugeMetricFamily(
            "perfwatch_baseline_step_time_seconds", "Median step time of the active baseline run", labels=mc
        )
        for (m, c), ms in sorted(snap.baseline_ms.items()):
            base.add_metric([m, c], ms / 1000.0)
        runs = CounterMetricFamily("perfwatch_runs", "Runs stored, by status", labels=[*mc, "status"])
        for (m, c, st), n in sorted(snap.runs_by_status.items()):
            runs.add_metric([m, c, st], n)
        regs = CounterMetricFamily("perfwatch_regressions", "Runs judged a regression", labels=mc)
        for m, c in sorted({(m, c) for m, c, _ in snap.runs_by_status}):
            regs.add_metric([m, c], snap.regressions.get((m, c), 0))
        yield from (step, base, thr, verdict, info, last, runs, regs)
        if snap.newest_finished_at is not None:
            age = GaugeMetricFamily(
                "perfwatch_newest_data_age_seconds", "Seconds since the newest run of any model finished"
            )
            age.add_metric([], (dt.datetime.now(dt.UTC) - snap.newest_finished_at).total_seconds())
            yield age


@service.get("/metrics", dependencies=[Depends(metrics_access)])
def metrics() -> Response:
    """The store's figures in the Prometheus text format (``StoreCollector``); access: :func:`metrics_access`."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector())
    return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


# ------------------------------------------------------------------------------------------- /alertmanager

#: the DAG a webhook alert triggers, and Airflow's API server (the same host by default)
PROFILE_DAG_ID = "perfwatch_profile"
_CASE = re.compile(r"^train-bs(\d{1,5})$")
# any case name ``tasks.records.Case.name`` builds: <mode>-bs<N>[-<axis>...]
_CASE_NAME = re.compile(r"^(train|infer|tflite)-bs\d{1,5}(-[a-z0-9_]+){0,8}$")
_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # the DAG's ``model`` Param
_VERSION = re.compile(r"^(latest|[0-9]+)$")


class Alert(BaseModel):
    """One alert of Alertmanager's webhook payload (fields as Alertmanager documents them)."""

    status: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str = ""  # noqa: N815 - Alertmanager's spelling
    endsAt: str = ""  # noqa: N815
    generatorURL: str = ""  # noqa: N815
    fingerprint: str = ""


class AlertmanagerPayload(BaseModel):
    """Alertmanager's webhook payload, version 4 (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)."""

    version: str
    groupKey: str = ""  # noqa: N815
    truncatedAlerts: int = 0  # noqa: N815
    status: str = ""
    receiver: str = ""
    groupLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonAnnotations: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    externalURL: str = ""  # noqa: N815
    alerts: list[Alert] = Field(default_factory=list)


def profile_request(alert: Alert) -> tuple[dict[str, Any] | None, str | None]:
    """The DAG run an alert asks for: ``({"dag_run_id", "conf", "note"}, None)``, or ``(None, why not)``.

    Labels: ``perfwatch_model`` (required), ``perfwatch_version`` (default ``latest``),
    ``perfwatch_case`` (``train-bs<N>``: the batch size N; another case name, e.g. ``infer-bs16-xla``: that
    case of the model's config matrix, the DAG's Param ``case``; default the DAG's). The DAG run id is made from
    the alert's fingerprint and start, so Alertmanager's repeated notifications of one alert trigger one run.
    """
    labels = alert.labels
    if alert.status != "firing":
        return None, f"alert is {alert.status!r}, not firing"
    model = labels.get("perfwatch_model")
    if not model:
        return None, "no perfwatch_model label"
    if not _MODEL.match(model):
        return None, f"perfwatch_model {model!r} is not a model name the DAG accepts ({_MODEL.pattern})"
    conf: dict[str, Any] = {"model": model, "trigger": "manual"}
    version = labels.get("perfwatch_version", "latest")
    if not _VERSION.match(version):
        return None, f"perfwatch_version {version!r}: expected an integer version or 'latest'"
    conf["version"] = version
    if case := labels.get("perfwatch_case"):
        if m := _CASE.match(case):
            conf["batch_size"] = int(m.group(1))
        elif _CASE_NAME.match(case) and len(case) <= 64:
            conf["case"] = case
        else:
            return None, (
                f"perfwatch_case {case!r}: expected a perfwatch case name, <mode>-bs<N>[-<axis>...] "
                "(train-bs<N> sets the batch size; another name picks that case of the model's config)"
            )
    ident = alert.fingerprint or hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]
    start = re.sub(r"[^0-9A-Za-z]", "", alert.startsAt)[:20]
    name = labels.get("alertname", "alert")
    return {
        "dag_run_id": f"alert__{name}__{ident}__{start}"[:250],
        "conf": conf,
        "note": f"Triggered by Alertmanager alert {name} ({alert.generatorURL or 'no generator URL'})",
    }, None


def _airflow_token(client, base: str) -> str | None:
    """The bearer token for Airflow's API (``tasks.services.airflow_api.airflow_token``): ``PERFWATCH_AIRFLOW_TOKEN``,
    else one from ``POST /auth/token`` with ``PERFWATCH_AIRFLOW_USERNAME`` and ``PERFWATCH_AIRFLOW_PASSWORD``;
    None when neither is set."""
    return airflow_token(client, AirflowApi.from_env(base))


def trigger_profile_run(
    requests: list[dict[str, Any]], *, base_url: str | None = None, timeout_s: float = 30.0
) -> list[dict[str, Any]]:
    """Trigger a ``perfwatch_profile`` DAG run per request through Airflow's REST API
    (``POST /api/v2/dags/perfwatch_profile/dagRuns`` with ``logical_date`` null, the ``conf`` and a note).

    ``base_url``: Airflow's API server (``PERFWATCH_AIRFLOW_API_URL``, default ``http://localhost:8080``).
    A run whose ``dag_run_id`` exists already (HTTP 409: a repeated notification) counts as triggered.

    Returns:
        one dict per request: ``dag_run_id``, ``conf``, ``status`` (``triggered`` or ``exists``).

    Raises:
        AirflowApiError: the token or a trigger was refused, or the API could not be reached.
    """
    import httpx

    base = (base_url or os.environ.get("PERFWATCH_AIRFLOW_API_URL") or "http://localhost:8080").rstrip("/")
    out = []
    try:
        with httpx.Client(timeout=timeout_s) as client:
            token = _airflow_token(client, base)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            for req in requests:
                url = f"{base}/api/v2/dags/{PROFILE_DAG_ID}/dagRuns"
                r = client.post(url, headers=headers, json={"logical_date": None, **req})
                if r.status_code == 409:
                    out.append({**req, "status": "exists"})
                elif r.status_code in (200, 201):
                    out.append({**req, "status": "triggered"})
                else:
                    raise AirflowApiError(f"POST {url}: HTTP {r.status_code}: {r.text[:300]}")
    except httpx.HTTPError as e:
        raise AirflowApiError(f"Airflow's API at {base} could not be reached: {type(e).__name__}: {e}") from e
    return out


@service.post("/alertmanager")
def alertmanager_webhook(
    payload: AlertmanagerPayload, authorization: str | None = Header(default=None)
) -> JSONResponse:
    """Alertmanager's webhook: trigger a profiling DAG run for every firing alert labelled ``perfwatch_model``.

    Responses: 200 ``{"triggered": [...], "skipped": [{"alert", "reason"}]}``; 401 without the right bearer
    token; 400 for a payload version other than 4; 502 when Airflow's API refused a trigger (Alertmanager
    then retries); 503 when ``PERFWATCH_ALERTMANAGER_TOKEN`` is not set (the webhook is off).
    """
    expected = os.environ.get("PERFWATCH_ALERTMANAGER_TOKEN")
    if not expected:
        raise HTTPException(
            503,
            "the Alertmanager webhook is off: set PERFWATCH_ALERTMANAGER_TOKEN and send it "
            "as a bearer token (Alertmanager webhook_config http_config.authorization)",
        )
    if not _bearer_ok(authorization, expected):
        raise HTTPException(401, "missing or wrong bearer token (PERFWATCH_ALERTMANAGER_TOKEN)")
    if payload.version != "4":
        raise HTTPException(400, f"Alertmanager payload version {payload.version!r}: expected '4'")
    wanted, skipped = [], []
    for a in payload.alerts:
        req, why = profile_request(a)
        if req is None:
            skipped.append({"alert": a.labels.get("alertname", ""), "labels": a.labels, "reason": why})
        elif req["dag_run_id"] not in {w["dag_run_id"] for w in wanted}:
            wanted.append(req)
    try:
        triggered = trigger_profile_run(wanted) if wanted else []
    except AirflowApiError as e:
        log.error("perfwatch alertmanager webhook: %s", e)
        return JSONResponse({"error": str(e), "skipped": skipped}, status_code=502)
    return JSONResponse({"triggered": triggered, "skipped": skipped})


def create_app(*, login: bool) -> FastAPI:
    """The plugin's app: the pages (behind :func:`airflow_user`) and the service routes. ``login``: a browser
    without a login is sent to Airflow's login page (inside Airflow's API server, which serves it)."""
    sub = FastAPI(title="perfwatch history", docs_url=None, redoc_url=None)
    sub.state.login = login
    sub.include_router(pages, dependencies=[Depends(airflow_user)])
    sub.include_router(service)
    sub.add_exception_handler(LoginRequired, lambda request, exc: RedirectResponse(exc.url, status_code=307))
    return sub


app = create_app(login=True)  # mounted by Airflow's API server at URL_PREFIX


def standalone_app() -> FastAPI:
    """The plugin's routes under ``/perfwatch`` as Airflow's API server mounts them, without Airflow's API
    server: ``uvicorn --factory plugins.perfwatch_history:standalone_app`` (e.g. a metrics endpoint for
    Prometheus). Its pages take the Airflow deployment's tokens (module docstring) and answer 401 without."""
    root = FastAPI(title="perfwatch", docs_url=None, redoc_url=None)
    root.add_middleware(SlashRedirect)
    root.mount(URL_PREFIX, create_app(login=False))
    return root


class PerfwatchPlugin(AirflowPlugin):
    """Registers the history app (pages, metrics, Alertmanager webhook) at /perfwatch, the redirect of
    /perfwatch to /perfwatch/, and a "perfwatch" entry in the nav bar."""

    name = "perfwatch"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "perfwatch history"}]
    fastapi_root_middlewares = [
        {"middleware": SlashRedirect, "args": [], "kwargs": {}, "name": "perfwatch: /perfwatch -> /perfwatch/"}
    ]
    external_views = [{"name": "perfwatch", "href": "perfwatch/", "destination": "nav", "url_route": "perfwatch"}]
