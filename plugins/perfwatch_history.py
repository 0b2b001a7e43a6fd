"""Airflow plugin: perfwatch's history pages in the Airflow UI ("perfwatch" in the nav bar), its
Prometheus metrics, and the Alertmanager webhook that turns a macro alert into a profiling run.

A small FastAPI app mounted by the Airflow API server at ``/perfwatch`` serves

* read-only pages built from the named SQL queries (``tasks.store.queries``): the latest runs and the
  regressions of the last 7 days, and per model its step-time trend with a plot;
* ``/perfwatch/metrics``: the store in the Prometheus text format (prometheus-client; see
  :class:`StoreCollector` for the metrics, in base units);
* ``/perfwatch/alertmanager`` (POST): Alertmanager's webhook (payload version 4). Every firing alert
  labelled ``perfwatch_model`` (optionally ``perfwatch_version``, ``perfwatch_case``) triggers a run of
  the ``perfwatch_profile`` DAG for that model through Airflow's REST API (:func:`trigger_profile_run`).

It reads the store named by ``PERFWATCH_DATABASE_URL``. Airflow does not put its own auth in front of
plugin apps, so the pages and metrics expose only what ``perfwatch runs`` shows (model names, timings,
verdicts), and the webhook, which starts work, requires the bearer token ``PERFWATCH_ALERTMANAGER_TOKEN``
(Alertmanager's ``http_config.authorization``); without it set the webhook is off (503).
``standalone_app()`` serves the same routes under ``/perfwatch`` without Airflow
(``uvicorn --factory plugins.perfwatch_history:standalone_app``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import io
import logging
import os
import re
import secrets
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI, Header, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

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
        step = GaugeMetricFamily("perfwatch_step_time_seconds", "Step time of the newest successful run "
                                 "(quantile 0.5: median, 0.9: p90)", labels=[*mc, "quantile", "source"])
        thr = GaugeMetricFamily("perfwatch_throughput_examples_per_second",
                                "Throughput of the newest successful run (examples/s at its median step time)",
                                labels=[*mc, "source"])
        verdict = GaugeMetricFamily("perfwatch_latest_verdict", "1 for the verdict of the newest successful run",
                                    labels=[*mc, "verdict"])
        info = GaugeMetricFamily("perfwatch_latest_run_info", "The newest successful run's model version and source",
                                 labels=[*mc, "version", "source"])
        last = GaugeMetricFamily("perfwatch_last_success_timestamp_seconds",
                                 "When the newest successful run finished (Unix time)", labels=mc)
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
        base = GaugeMetricFamily("perfwatch_baseline_step_time_seconds",
                                 "Median step time of the active baseline run", labels=mc)
        for (m, c), ms in sorted(snap.baseline_ms.items()):
            base.add_metric([m, c], ms / 1000.0)
        runs = CounterMetricFamily("perfwatch_runs", "Runs stored, by status", labels=[*mc, "status"])
        for (m, c, st), n in sorted(snap.runs_by_status.items()):
            runs.add_metric([m, c, st], n)
        regs = CounterMetricFamily("perfwatch_regressions", "Runs judged a regression", labels=mc)
        for (m, c) in sorted({(m, c) for m, c, _ in snap.runs_by_status}):
            regs.add_metric([m, c], snap.regressions.get((m, c), 0))
        yield from (step, base, thr, verdict, info, last, runs, regs)
        if snap.newest_finished_at is not None:
            age = GaugeMetricFamily("perfwatch_newest_data_age_seconds",
                                    "Seconds since the newest run of any model finished")
            age.add_metric([], (dt.datetime.now(dt.UTC) - snap.newest_finished_at).total_seconds())
            yield age


@app.get("/metrics")
def metrics() -> Response:
    """The store's figures in the Prometheus text format (``StoreCollector``)."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector())
    return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


# ------------------------------------------------------------------------------------------- /alertmanager

#: the DAG a webhook alert triggers, and Airflow's API server (the same host by default)
PROFILE_DAG_ID = "perfwatch_profile"
_CASE = re.compile(r"^train-bs(\d{1,5})$")
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
    ``perfwatch_case`` (``train-bs<N>``: the batch size N; default the DAG's). The DAG run id is made from
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
        m = _CASE.match(case)
        if not m:
            return None, f"perfwatch_case {case!r}: expected train-bs<N> (the batch size of a perfwatch case)"
        conf["batch_size"] = int(m.group(1))
    ident = alert.fingerprint or hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]
    start = re.sub(r"[^0-9A-Za-z]", "", alert.startsAt)[:20]
    name = labels.get("alertname", "alert")
    return {"dag_run_id": f"alert__{name}__{ident}__{start}"[:250], "conf": conf,
            "note": f"Triggered by Alertmanager alert {name} ({alert.generatorURL or 'no generator URL'})"}, None


class AirflowApiError(RuntimeError):
    """Airflow's API refused or could not be reached; the message says which call and why."""


def _airflow_token(client, base: str) -> str | None:
    """The bearer token for Airflow's API: ``PERFWATCH_AIRFLOW_TOKEN``, else one from ``POST /auth/token``
    with ``PERFWATCH_AIRFLOW_USERNAME`` and ``PERFWATCH_AIRFLOW_PASSWORD`` (Airflow 3's simple auth manager;
    FAB and other auth managers serve the same endpoint); None when neither is set."""
    if token := os.environ.get("PERFWATCH_AIRFLOW_TOKEN"):
        return token
    user, password = os.environ.get("PERFWATCH_AIRFLOW_USERNAME"), os.environ.get("PERFWATCH_AIRFLOW_PASSWORD")
    if not user:
        return None
    r = client.post(f"{base}/auth/token", json={"username": user, "password": password or ""})
    if r.status_code not in (200, 201):
        raise AirflowApiError(f"POST {base}/auth/token as {user!r}: HTTP {r.status_code}: {r.text[:300]}")
    return r.json()["access_token"]


def trigger_profile_run(requests: list[dict[str, Any]], *, base_url: str | None = None,
                        timeout_s: float = 30.0) -> list[dict[str, Any]]:
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


@app.post("/alertmanager")
def alertmanager_webhook(payload: AlertmanagerPayload,
                         authorization: str | None = Header(default=None)) -> JSONResponse:
    """Alertmanager's webhook: trigger a profiling DAG run for every firing alert labelled ``perfwatch_model``.

    Responses: 200 ``{"triggered": [...], "skipped": [{"alert", "reason"}]}``; 401 without the right bearer
    token; 400 for a payload version other than 4; 502 when Airflow's API refused a trigger (Alertmanager
    then retries); 503 when ``PERFWATCH_ALERTMANAGER_TOKEN`` is not set (the webhook is off).
    """
    expected = os.environ.get("PERFWATCH_ALERTMANAGER_TOKEN")
    if not expected:
        raise HTTPException(503, "the Alertmanager webhook is off: set PERFWATCH_ALERTMANAGER_TOKEN and send it "
                                 "as a bearer token (Alertmanager webhook_config http_config.authorization)")
    if not secrets.compare_digest(authorization or "", f"Bearer {expected}"):
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


def standalone_app() -> FastAPI:
    """The plugin's routes under ``/perfwatch`` as Airflow's API server mounts them, without Airflow:
    ``uvicorn --factory plugins.perfwatch_history:standalone_app`` (e.g. a metrics endpoint for Prometheus)."""
    root = FastAPI(title="perfwatch", docs_url=None, redoc_url=None)
    root.mount("/perfwatch", app)
    return root


class PerfwatchPlugin(AirflowPlugin):
    """Registers the history app (pages, metrics, Alertmanager webhook) at /perfwatch and a "perfwatch"
    entry in the nav bar."""

    name = "perfwatch"
    fastapi_apps = [{"app": app, "url_prefix": "/perfwatch", "name": "perfwatch history"}]
    external_views = [{"name": "perfwatch", "href": "perfwatch/", "destination": "nav", "url_route": "perfwatch"}]
