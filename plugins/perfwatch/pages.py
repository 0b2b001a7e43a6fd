"""perfwatch's history pages, built from the store (``tasks.store``), newest first, missing values as "—".

Airflow shows them inside its own UI: the plugin's external view (``PerfwatchPlugin.external_views``, "perfwatch"
in Airflow's navigation bar) frames ``/perfwatch/`` at Airflow's ``/plugin/perfwatch``, and Airflow's URL follows
the page the frame shows (``/plugin/perfwatch/perfwatch/runs/7``), so a page can be linked and reloaded. Each page
has the same header (perfwatch's pages, and Airflow); links to Airflow's own pages (a DAG run, a task log) open
them in Airflow's window, not inside the frame (``perfwatch.js``). Styles, scripts and plotly.js come from the
plugin itself (``assets``): the pages work on a machine without internet.

* ``/perfwatch/``: the regressions of the last 7 days (or why there are none), the models, the latest runs;
* ``/perfwatch/models/<model>``: the verdict's story of each case's newest run (:func:`verdict_section`), a
  model's step-time trend (interactive chart, one panel per case), its runs, version comparisons, its sweep
  along batch size;
* ``/perfwatch/runs/<run id>``: one run and why its verdict is what it is: the verdict's story, the op deltas that
  add up to the change, the findings, the telemetry summary, the step-time distribution of baseline and candidate,
  and how to open it (Airflow DAG run and task log, GX Data Docs, the archived profile in TensorBoard, the
  xplane file the parse stage judged marked);
* ``/perfwatch/compare?a=<run>&b=<run>`` (or ``?model=<m>&a_version=<v>&b_version=<v>[&case=<c>]``): two runs side
  by side: step time, ratio, distributions, op deltas, findings;
* ``/perfwatch/runs/<run id>/archive/<path>``: the files of the run's archive directory (the Data Docs site,
  the profile) from wherever the archive is (a local path, ``s3://``, ...).

The app puts :data:`router` behind Airflow's login (``auth.airflow_user``); each route shows only the runs of
DAGs the user may read (``auth.RunAccess``): the listings, trends, sweeps and comparisons leave the others out,
and a run page, archive file or comparison of a run the user may not see is 404, as for a run not in the store.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import mimetypes
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from . import assets, charts
from .auth import Readable, RunAccess
from .urls import UI_ROUTE, airflow_root, plugin_root, quote_segment

if TYPE_CHECKING:
    import pandas as pd
    from fsspec import AbstractFileSystem

    from tasks.records import Acceptance

router = APIRouter()  #: the history pages and the archive files

LOCAL_DAG_IDS = ("perfwatch_cli", "perfwatch_calibrate", "perfwatch_ingest")
"""dag_ids of runs made outside Airflow (``perfwatch run``, ``perfwatch calibrate``, ``perfwatch ingest``):
they have no Airflow DAG run to link to."""

MISSING = "—"  #: how a missing value (None, NaN, NaT) is shown
_HEADERS = {
    "run_id": "run",
    "started_at": "started (UTC)",
    "median_step_ms": "median step (ms)",
    "median_step_cell": "median step (ms) [95% interval] n",
    "p99_latency_ms": "p99 latency (ms) [95% interval] n",
    "p99_cell": "p99 (ms) [95% interval] n",
    "median_cpu_ms": "median CPU time per step (ms)",
    "median_wait_ms": "median run-queue wait per step (ms)",
    "mean_step_ms": "mean step (ms)",
    "p10_step_ms": "p10 step (ms) [95% interval] n",
    "p90_step_ms": "p90 step (ms) [95% interval] n",
    "p99_step_ms": "p99 step (ms)",
    "baseline_median_ms": "baseline median (ms)",
    "throughput_eps": "throughput",
    "case_name": "case",
    "case_label": "case label",
    "n_measured": "steps measured",
    "finished_at": "finished (UTC)",
    "failed_stage": "failed stage",
    "ci_low": "interval low",
    "ci_high": "interval high",
    "metric": "decided on",
    "batch_size": "batch size",
    "within_budget": "within budget",
}
#: how the run page names the metric that decided (``comparisons.metric``)
_METRIC_WORDS = {"wall": "wall time per step (our timer)", "cpu": "process CPU time per step (a busy host)"}

#: the main columns of each listing (the store's frames have more); what is not in a frame is left out
LATEST_COLUMNS = [
    "run_id",
    "started_at",
    "model",
    "version",
    "case",
    "verdict",
    "reason",
    "median_step_cell",
    "throughput_eps",
    "p99_latency_ms",
]
REGRESSION_COLUMNS = [
    "run_id",
    "started_at",
    "model",
    "version",
    "case_name",
    "ratio",
    "median_step_ms",
    "baseline_median_ms",
]
HISTORY_COLUMNS = [
    "run_id",
    "started_at",
    "case_name",
    "version",
    "verdict",
    "median_step_cell",
    "p10_step_ms",
    "p90_step_ms",
    "p99_latency_ms",
    "ratio",
    "baseline_median_ms",
]
SWEEP_COLUMNS = [
    "series",
    "batch_size",
    "case",
    "run_id",
    "version",
    "median_step_cell",
    "p99_cell",
    "throughput_eps",
    "within_budget",
    "knee",
]
#: cells of a figure with its interval and n (spread_cells, :func:`interval_cells`)
#: figures that wrap at their spaces: with an interval and n, or (throughput) with what the figure measures
SPREAD_COLUMNS = {
    "p10_step_ms",
    "p90_step_ms",
    "median_step_cell",
    "p99_latency_ms",
    "p99_cell",
    "ratio",
    "throughput_eps",
}
TEXT_COLUMNS = {"model", "version", "case", "case_name", "verdict", "reason", "series", "status"}
WIDE_COLUMNS = {"reason"}
#: text columns with a least width of their own in the style sheet (``td.c-model``...): a table laid out for 1280 px
#: wraps its long names and reasons instead of scrolling sideways, and these keep enough width to stay readable
SIZED_COLUMNS = {"model", "version", "verdict", "status"}


def _page(request: Request, title: str, body: str, *, charts: bool = False, status_code: int = 200) -> HTMLResponse:
    """A whole page: the plugin's style sheet and script (and plotly.js when ``charts``), the header (the
    pages, and Airflow: its UI when the page is shown outside Airflow's frame), ``title`` and ``body``."""
    base, root = plugin_root(request), airflow_root(request)
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    framed_url = f"{root}/plugin/{UI_ROUTE}{here}"
    scripts = f"<script src='{assets.url(base, 'perfwatch.js')}'></script>" + (
        f"<script src='{assets.url(base, 'plotly.min.js')}'></script>" if charts else ""
    )
    return HTMLResponse(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title>"
        f"<link rel='stylesheet' href='{assets.url(base, 'perfwatch.css')}'>{scripts}</head>"
        "<body><header class='bar'>"
        f"<a class='brand' href='{base}/'>perfwatch</a><nav><a href='{base}/'>runs</a>"
        f"<a href='{base}/compare'>compare</a></nav>"
        f"<a class='out unframed' href='{html.escape(framed_url, quote=True)}'>open inside Airflow</a>"
        f"<a class='out airflow' href='{root}/'>Airflow</a>"
        f"</header><main><h1>{html.escape(title)}</h1>{body}</main></body></html>",
        status_code=status_code,
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
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.1f}"
    return str(v)


def _a(href: str, text: str, *, airflow: bool = False) -> str:
    """A link; ``airflow``: to a page of Airflow's own UI (opened in Airflow's window, ``perfwatch.js``)."""
    cls = " class='airflow'" if airflow else ""
    return f"<a{cls} href='{html.escape(href, quote=True)}'>{html.escape(text)}</a>"


def _verdict(v: Any) -> str:
    """A verdict (or ``failed@<stage>``, or a status) as a coloured badge."""
    if _missing(v):
        return MISSING
    kind = str(v).split("@")[0]
    text = "@<wbr>".join(html.escape(part) for part in str(v).split("@"))  # may break after the @ in a table
    return f"<span class='verdict v-{html.escape(kind)}'>{text}</span>"


def _ratio_text(ratio: Any, low: Any, high: Any) -> str:
    if _missing(ratio):
        return MISSING
    out = f"×{ratio:.3f}"
    if not _missing(low) and not _missing(high):
        out += f" [{low:.3f}, {high:.3f}]"
    return out


def airflow_links(request: Request, run: dict[str, Any]) -> dict[str, str]:
    """Airflow UI links of a stored run (``run_pages`` row): ``dag_run`` (its DAG run page) and ``task_log``
    (the task of the failed stage, else ``archive``, whose log holds the verdict: ``measure`` for the three
    measuring stages, in the task group of the case's measuring queue, ``tasks.services.airflow_api.airflow_task_id``;
    the stage tasks are mapped over the cases, so the link opens the list of the task's mapped instances, one per
    case). Empty for runs made outside Airflow (``LOCAL_DAG_IDS``)."""
    from tasks.services.airflow_api import airflow_task_id

    if run["dag_id"] in LOCAL_DAG_IDS:
        return {}
    dag_run = f"{airflow_root(request)}/dags/{quote_segment(run['dag_id'])}/runs/{quote_segment(run['dag_run_id'])}"
    task = airflow_task_id(run["failed_stage"] or "archive", run.get("device") or "auto", run.get("hardware"))
    return {"dag_run": dag_run, "task_log": f"{dag_run}/tasks/{quote_segment(task)}/mapped"}


def has_data_docs(run: Mapping[str, Any]) -> bool:
    """Whether a stored run (a ``run_pages`` row) has a GX Data Docs site in its archive (``gx/index.html``, read
    with fsspec wherever the archive is): a run archived without one (no GX results, a site that failed to
    render) gets no link to it. False for a run without an archive or one that cannot be read."""
    if not run.get("archive_uri"):
        return False
    try:
        fs, root = _archive_fs(dict(run))
        return bool(fs.exists(f"{root}/gx/index.html"))
    except (OSError, ValueError, HTTPException):  # an archive that cannot be read: no link to promise
        return False


def _links_cell(request: Request, run: dict[str, Any] | None) -> str:
    """A listing's links of one run: its Airflow task log, its Data Docs (only where the site exists:
    :func:`has_data_docs`) and its archived profile."""
    if run is None:
        return MISSING
    base, out = plugin_root(request), []
    if log_url := airflow_links(request, run).get("task_log"):
        out.append(_a(log_url, "task log", airflow=True))
    if run["archive_uri"]:
        if has_data_docs(run):
            out.append(_a(f"{base}/runs/{run['run_id']}/archive/gx/index.html", "Data Docs"))
        out.append(_a(f"{base}/runs/{run['run_id']}#profile", "profile"))
    return " · ".join(out) or MISSING


def interval_cells(df: pd.DataFrame, samples: Mapping[int, Sequence[float]] | None = None) -> pd.DataFrame:
    """``df`` (a runs, history or sweep frame) with its medians and p99s as cells with their 95% interval and n,
    as the CLI prints them (issue 27: every percentile has its interval and sample size):
    ``median_step_cell`` (``tasks.cli.figures.median_cell``; the bounds from ``median_step_low_ms`` and
    ``median_step_high_ms`` where the frame has them, else from ``samples``, the rows' measured steps),
    ``p99_latency_ms`` (an infer/tflite run's p99, per query for a server run: ``tasks.cli.figures.p99_cell`` of
    its ``latency_*`` / ``server_*`` columns) and, in a sweep frame, ``p99_cell`` (its ``p99_step_ms`` with
    ``p99_low_ms``, ``p99_high_ms``, ``p99_n``; ``per query`` where ``p99_of`` says so)."""
    import pandas as pd

    from tasks.cli.figures import median_cell, median_columns, p99_cell, percentile_cell

    out = df.copy()
    if "median_step_ms" in out.columns:
        if "median_step_low_ms" not in out.columns:
            n = out["n_measured"] if "n_measured" in out.columns else [None] * len(out)
            for name, values in median_columns(list(out["run_id"]), list(n), samples or {}).items():
                out[name] = pd.Series(values, index=out.index, dtype=object)
        counts = out["median_step_n"] if "median_step_n" in out.columns else out["n_measured"]
        out["median_step_cell"] = [
            median_cell(p, lo, hi, k)
            for p, lo, hi, k in zip(
                out["median_step_ms"], out["median_step_low_ms"], out["median_step_high_ms"], counts, strict=True
            )
        ]
    lat = [c for c in out.columns if c.startswith(("latency_", "server_"))]
    if lat:
        out["p99_latency_ms"] = [p99_cell(r) for r in out[lat].to_dict(orient="records")]
    if "p99_n" in out.columns:
        of = out["p99_of"] if "p99_of" in out.columns else [None] * len(out)
        cells = []
        for p, lo, hi, k, what in zip(
            out["p99_step_ms"], out["p99_low_ms"], out["p99_high_ms"], out["p99_n"], of, strict=True
        ):
            cell = percentile_cell(p if not _missing(p) else lo, lo, hi, k, 99)
            cells.append(None if cell is None else cell + (" per query" if what == "per query" else ""))
        out["p99_cell"] = cells
    return out


def _cell(request: Request, col: str, rec: dict[str, Any]) -> str:
    base, v = plugin_root(request), rec[col]
    css = ("text " if col in TEXT_COLUMNS else "") + ("wide" if col in WIDE_COLUMNS else "")
    css += " spread" if col in SPREAD_COLUMNS else ""  # a figure with its interval and n: wraps at its spaces
    css += f" c-{col}" if col in SIZED_COLUMNS else ""  # a least width of its own (perfwatch.css)
    attr = f" class='{css.strip()}'" if css.strip() else ""
    if _missing(v):
        return f"<td{attr}>{MISSING}</td>"
    if col == "run_id":
        return f"<td>{_a(f'{base}/runs/{int(v)}', str(int(v)))}</td>"
    if col in ("started_at", "finished_at"):  # date and time on two lines where the table is tight
        return f"<td class='time'>{html.escape(_text(v))}</td>"
    if col == "model":
        return f"<td{attr}>{_a(f'{base}/models/{quote_segment(v)}', str(v))}</td>"
    if col in ("case", "case_name"):
        label = rec.get("case_label")
        extra = f"<br><span class='muted'>{html.escape(label)}</span>" if isinstance(label, str) and label != v else ""
        return f"<td class='text case'>{html.escape(str(v))}{extra}</td>"
    if col in ("verdict", "status"):
        return f"<td{attr}>{_verdict(v)}</td>"
    if col == "ratio":  # named where it is not the default wall time: a CPU-time ratio reads otherwise
        cpu = " (CPU time)" if rec.get("metric") == "cpu" and not _missing(v) else ""
        return f"<td{attr}>{html.escape(_ratio_text(v, rec.get('ci_low'), rec.get('ci_high')) + cpu)}</td>"
    if col == "knee":
        return f"<td>{'★' if v else ''}</td>"
    if col == "throughput_eps":  # with what it measures: two definitions are two metrics under one name
        return f"<td{attr}>{html.escape(_throughput(v, rec.get('throughput_def'), rec.get('throughput_of')))}</td>"
    return f"<td{attr}>{html.escape(_text(v))}</td>"


def _throughput(value: Any, definition: Any, of: Any = None) -> str:
    """A throughput cell: the figure with what it measures (``tasks.records.throughput_text`` of its
    ``runs.throughput_def``; a sweep point's own ``throughput_of`` where it has one, e.g. ``queries/s
    achieved``); ``MISSING`` without a figure."""
    from tasks.records import throughput_text

    if _missing(value):
        return MISSING
    if isinstance(of, str):
        return f"{float(value):.1f} {of}"
    return throughput_text(float(value), None if _missing(definition) else str(definition))


def _pair(side: Any) -> tuple[float, str | None]:
    """A comparison headline side's throughput and its definition (None where not recorded)."""
    d = side["throughput_def"]
    return float(side["throughput_eps"]), None if _missing(d) else str(d)


def _table(
    request: Request,
    df: pd.DataFrame,
    columns: Sequence[str] | None = None,
    *,
    links: dict[int, dict[str, Any]] | None = None,
    empty: str = "No runs yet.",
) -> str:
    """An HTML table of ``df`` (one row per run, newest first as given) with ``columns`` (default: all; those
    the frame lacks are left out): ``MISSING`` for missing values, run ids linked to the run's page, model names
    to the model's page, cases with their readable label, verdicts as badges, ratios with their interval (and
    ``(CPU time)`` where the row's ``metric`` is ``cpu``); with
    ``links`` (``run_pages`` rows by run id) a last column links each run's task log, Data Docs and profile.
    ``empty``: what an empty frame shows."""
    if df.empty:
        return f"<p class='empty'>{html.escape(empty)}</p>"
    cols = [c for c in (columns or list(df.columns)) if c in df.columns]
    head = "".join(
        f"<th class='{('text' if c in TEXT_COLUMNS else '') + (' wide' if c in WIDE_COLUMNS else '')}'>"
        f"{html.escape(_HEADERS.get(c, c.replace('_', ' ')))}</th>"
        for c in cols
    ) + ("<th class='text'>links</th>" if links is not None else "")
    rows = []
    for rec in df.to_dict("records"):
        cells = [_cell(request, c, rec) for c in cols]
        if links is not None:
            run = links.get(int(rec["run_id"])) if not _missing(rec.get("run_id")) else None
            cells.append(f"<td class='links'>{_links_cell(request, run)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _newest_first(df: pd.DataFrame) -> pd.DataFrame:
    """Rows by run id, newest first (the store's ids grow with time)."""
    return df.sort_values("run_id", ascending=False, kind="stable") if not df.empty else df


def _readable(df: pd.DataFrame, access: RunAccess) -> pd.DataFrame:
    """``df`` (a frame with a ``run_id`` column: runs, regressions, history, sweep) without the rows of runs the
    user may not see (:meth:`RunAccess.readable_runs`)."""
    if df.empty:
        return df
    ok = access.readable_runs(int(i) for i in df["run_id"].dropna())
    return df[[not _missing(i) and int(i) in ok for i in df["run_id"]]]


def _run_rows(df: pd.DataFrame) -> dict[int, dict[str, Any]]:
    from tasks.store.reads import run_pages

    return run_pages([int(i) for i in df["run_id"].dropna()] if not df.empty else [])


def _db() -> str:
    from tasks.store.reads import store_url

    return store_url()


def shown_reason(run: Mapping[str, Any], acceptance: Acceptance | None = None) -> str | None:
    """The reason the pages show for a run (a ``run_pages`` row: run_id, status, verdict, error, reason): for a
    failed run its error's first line (what the run page's Error section starts with, e.g. ``DeviceMissing: case
    ...``); else the verdict's reason as every form shows it (``tasks.services.story.reason_text``: the advice to
    accept the run replaced by its ``acceptance``, ``tasks.store.reads.acceptances``, when it is or was the
    baseline, else naming the run's id; a no-baseline run without a stored reason: ``no baseline yet: ...``). None
    without either."""
    from tasks.records import VerdictStory
    from tasks.services.story import reason_text

    if run.get("status") == "failed":
        error = run.get("error")
        return error.strip().splitlines()[0] if isinstance(error, str) and error.strip() else None
    reason, verdict = run.get("reason"), run.get("verdict")
    if not isinstance(reason, str) or not reason:
        reason = None
    rid = run.get("run_id")
    story = VerdictStory(
        run_id=None if rid is None else int(rid),
        verdict=verdict if isinstance(verdict, str) else None,
        reason=reason,
        accepted=acceptance,
    )
    return reason_text(story)  # a no-baseline run without a reason: "no baseline yet: ..." as every form says


def shown_reasons(runs: Mapping[int, Mapping[str, Any]]) -> dict[int, str]:
    """Run id -> :func:`shown_reason` of each of ``runs`` (``run_pages`` rows by run id); runs without one are
    left out."""
    from tasks.store.reads import acceptances

    accepted = acceptances(list(runs), _db())
    out = {i: shown_reason(r, accepted.get(i)) for i, r in runs.items()}
    return {i: r for i, r in out.items() if r}


def _page_story(story: Any, reason: str | None) -> Any:
    """``story`` (a ``tasks.records.VerdictStory``) with the reason the pages show (:func:`shown_reason`): a failed
    run's error's first line, an accepted run's acceptance instead of the advice to accept it."""
    return story.model_copy(update={"reason": reason})


# --------------------------------------------------------------------------------------------------- index


def regressions_note(n_recent: int, n_regressions: int, newest: Any = None, days: int = 7) -> str | None:
    """What the index says instead of an empty regressions table, or None when there are regressions to
    list: ``No regressions in the last 7 days (12 runs in that time).`` when runs were made in the window
    (``n_recent``) and none regressed; ``No regressions in the last 7 days: no run in that time (the newest run
    started <newest> UTC).`` when none was made in it."""
    if n_regressions:
        return None
    if n_recent:
        return f"No regressions in the last {days} days ({n_recent} run{'s' if n_recent != 1 else ''} in that time)."
    return f"No regressions in the last {days} days: no run in that time" + (
        f" (the newest run started {_text(newest)} UTC)." if newest is not None else "."
    )


@router.get("/", response_class=HTMLResponse)
def index(request: Request, access: Readable) -> HTMLResponse:
    """The regressions of the last 7 days (or why there are none), the models with their newest version
    measured (``tasks.records.newest_version`` of their successful runs) and newest run, and the latest 50 runs
    (all models), newest first; only runs of DAGs the user may read."""
    import pandas as pd

    from tasks.records import newest_version
    from tasks.store import queries

    since = dt.datetime.now(dt.UTC) - dt.timedelta(days=7)
    regs = _newest_first(_readable(queries.regressions(since), access))
    latest = _newest_first(_readable(queries.runs(last=200), access))
    if latest.empty:
        body = (
            "<p class='empty'>No runs yet. Trigger the <code>perfwatch_profile</code> DAG, or run "
            "<code>perfwatch run MODEL</code>.</p>"
        )
        return _page(request, "perfwatch", body)
    recent = int((pd.to_datetime(latest["started_at"], utc=True) >= since).sum())
    note = regressions_note(recent, len(regs), latest["started_at"].max())
    body = "<h2>Regressions, last 7 days</h2>" + (
        f"<p class='empty'>{html.escape(note)}</p>"
        if note
        else _table(request, regs, REGRESSION_COLUMNS, links=_run_rows(regs))
    )
    models = latest.drop_duplicates("model").sort_values("model")
    counts = latest["model"].value_counts()
    measured = latest[latest["status"] == "success"].sort_values("run_id")
    newest_versions = {m: newest_version(list(g["version"])) for m, g in measured.groupby("model")}
    model_rows = "".join(
        f"<tr><td class='text'>{_a(f'{plugin_root(request)}/models/{quote_segment(r.model)}', r.model)}</td>"
        f"<td>{counts[r.model]}</td><td class='text'>{_version_cell(newest_versions.get(r.model))}</td>"
        f"<td>{_a(f'{plugin_root(request)}/runs/{int(r.run_id)}', str(int(r.run_id)))}</td>"
        f"<td class='text'>{_verdict(r.verdict)}</td><td>{html.escape(_text(r.started_at))}</td></tr>"
        for r in models.itertuples()
    )
    body += (
        "<h2>Models</h2><table><thead><tr><th class='text'>model</th><th>runs (latest 200)</th>"
        "<th class='text'>newest version measured</th><th>newest run</th><th class='text'>its verdict</th>"
        "<th>started (UTC)</th>"
        f"</tr></thead><tbody>{model_rows}</tbody></table>"
    )
    from tasks.store.reads import load_samples

    shown = latest.head(50).copy()
    ids = [int(i) for i, n in zip(shown["run_id"], shown["n_measured"], strict=True) if not _missing(n) and n]
    samples = load_samples(_db(), ids) if ids else {}
    shown = interval_cells(shown, samples)  # medians and p99s with interval and n
    rows = _run_rows(shown)
    reasons = shown_reasons(rows)  # a failed run's error; an accepted run's acceptance, not the advice
    shown["reason"] = [reasons.get(int(i)) for i in shown["run_id"]]
    body += "<h2>Latest runs</h2>" + _table(request, shown, LATEST_COLUMNS, links=rows)
    return _page(request, "perfwatch", body)


def _version_cell(version: str | None) -> str:
    """A version as a cell: ``v3`` (``version_label``), ``—`` for none (no successful run)."""
    from tasks.records import version_label

    return html.escape(version_label(version)) if version is not None else MISSING


# ---------------------------------------------------------------------------------------------- model page


@router.get("/models/{model}", response_class=HTMLResponse)
def model_history(request: Request, model: str, access: Readable) -> HTMLResponse:
    """A model's newest version measured (with its newest successful run), its step-time trend (interactive
    chart, one panel per case, oldest to newest), its version comparisons, its runs (newest first) and its sweep
    along batch size; only runs of DAGs the user may read (404 when there are none, as for a model not stored)."""
    from tasks.cli.history import history_frame, spread_cells, with_env_changes
    from tasks.records import case_title, newest_version
    from tasks.store.reads import verdict_stories

    df = _readable(history_frame(model), access)  # p10/p90 with their 95% intervals and the steps they rest on
    if df.empty:
        raise HTTPException(status_code=404, detail=f"no runs of model {model!r} in the store")
    df = with_env_changes(df)
    base = plugin_root(request)
    rows = _run_rows(df)
    reasons = shown_reasons(rows)
    try:
        chart = charts.trend_chart(df, run_href=f"{base}/runs/", reasons=reasons)
    except ValueError as e:
        chart = f"<p class='empty'>{html.escape(str(e))}</p>"
    newest = df.sort_values("run_id").groupby("case_name", sort=True).tail(1)
    stories = verdict_stories([int(i) for i in newest["run_id"]])
    verdicts = "".join(
        verdict_section(
            _page_story(stories.get(int(r.run_id)) or _no_story(int(r.run_id)), reasons.get(int(r.run_id))),
            heading=f"{case_title(r.case_name, getattr(r, 'case_label', None))}: run {int(r.run_id)}",
            level=3,
        )
        for r in newest.sort_values("case_name").itertuples()
    )
    measured = df[df["status"] == "success"].sort_values("run_id")
    newest_v = newest_version(list(measured["version"]))
    if newest_v is not None:
        of = measured[measured["version"].astype(str) == newest_v]
        newest_line = (
            f"<p class='newest-version'>Newest version measured: <b>{_version_cell(newest_v)}</b> (its newest "
            f"successful run: {_a(f'{base}/runs/{int(of.iloc[-1].run_id)}', str(int(of.iloc[-1].run_id)))}, "
            f"{html.escape(_text(of.iloc[-1].started_at))} UTC; cases: "
            f"{html.escape(', '.join(sorted(set(of['case_name']))))})</p>"
        )
    else:
        newest_line = "<p class='newest-version'>Newest version measured: none (no successful run)</p>"
    body = (
        f"{newest_line}<h2>Newest verdict per case</h2>{verdicts}<h2>Trend</h2>"
        "<p class='note'>Median step time per run (ms, profiler off) with the p10–p90 of its measured steps; one "
        "panel per case on its own scale, one line per model version; dashed: the compared baseline's median; "
        "diamonds: runs that served as a baseline; dotted lines: a new version, red dashed: a new environment. "
        "Hover a point for the run, click it to open the run.</p>"
        f"<div class='chart'>{chart}</div>"
        + _ops_section(request, model, access)
        + _versions_section(request, model, df)
        + "<h2>Runs</h2>"
        + _table(
            request, _newest_first(_failed_verdicts(interval_cells(spread_cells(df)))), HISTORY_COLUMNS, links=rows
        )
    )
    return _page(request, f"perfwatch: {model}", body + _sweep_section(request, model, access), charts=True)


def _failed_verdicts(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (a history frame) with each failed run's verdict ``failed@<stage>``, as the index shows it."""
    failed = df["status"] == "failed"
    if not failed.any():
        return df
    out = df.copy()
    out["verdict"] = out["verdict"].astype(object)
    out.loc[failed, "verdict"] = "failed@" + out.loc[failed, "failed_stage"].fillna("unknown stage").astype(str)
    return out


#: the op change points on a model's page (``tasks.services.op_changes.OP_CHANGE_COLUMNS``)
OP_CHANGE_PAGE_COLUMNS = [
    "case_name",
    "op_name",
    "op_type",
    "run_id",
    "prev_version",
    "version",
    "ratio",
    "before_us",
    "after_us",
    "status",
    "confirms_on",
]


def _ops_section(request: Request, model: str, access: RunAccess) -> str:
    """Which op moved over the nights (``perfwatch changes MODEL --ops``): the change points of each case's
    largest ops' time per step, at runs the user may read; empty when no case has an op table."""
    from tasks.services.op_changes import DEFAULT_TOP_OPS, op_change_table

    df, series = op_change_table(_db(), model)
    if not series or not any(s.runs for s in series.values()):
        return ""
    return (
        "<h2>Which op moved</h2><p class='note'>Change points of the time per step (µs: its share of the profiled "
        "window's op self-time times the run's median CPU time per step, or its median step time where a run "
        "lacks CPU time or a GPU carries the steps) of each case's "
        f"{DEFAULT_TOP_OPS} largest ops over its runs (E-divisive means, as the step-time trend); "
        "ratio: after / before with its 95% interval; tentative: fewer runs after it than confirm it "
        f"(<code>perfwatch changes {html.escape(shlex.quote(model))} --ops</code>).</p>"
        + _table(request, _readable(df, access), OP_CHANGE_PAGE_COLUMNS, empty="No op moved.")
    )


def _versions_section(request: Request, model: str, df: pd.DataFrame) -> str:
    """Links comparing each version with the one before it (the newest successful run of each), and a form
    for any two versions."""
    versions = list(dict.fromkeys(str(v) for v in df.loc[df["status"] == "success", "version"]))
    if len(versions) < 2:
        return ""
    base = plugin_root(request)
    links = [
        _a(f"{base}/compare?" + urlencode({"model": model, "a_version": a, "b_version": b}), f"v{a} → v{b}")
        for a, b in zip(versions, versions[1:], strict=False)
    ]
    options = "".join(f"<option>{html.escape(v)}</option>" for v in versions)
    last = "".join(f"<option{' selected' if v == versions[-1] else ''}>{html.escape(v)}</option>" for v in versions)
    return (
        "<h2>Versions</h2><p>Compare the newest successful runs of two versions: " + " · ".join(links) + "</p>"
        f"<form class='inline' method='get' action='{base}/compare'><input type='hidden' name='model' "
        f"value='{html.escape(model, quote=True)}'><label>from<select name='a_version'>{options}</select></label>"
        f"<label>to<select name='b_version'>{last}</select></label><button>compare</button></form>"
    )


def _sweep_section(request: Request, model: str, access: RunAccess) -> str:
    """The model's sweep along batch size when its newest successful runs span 2+ batch sizes (``perfwatch
    sweep``, no latency budget): plot and table, knee marked, and ``perfwatch sweep``'s warning when the points
    come from more than one model version (``tasks.cli.sweep.mixed_versions_note``); empty otherwise."""
    from tasks.cli.sweep import mixed_versions_note, sweep_frame, too_little_to_sweep

    try:
        df = _readable(sweep_frame(model, "batch_size"), access)
    except ValueError:  # no successful run
        return ""
    if too_little_to_sweep(df, "batch_size"):
        return ""
    base, e = plugin_root(request), quote_segment(model)
    mixed = (mixed_versions_note(df) or "").removesuffix("; give --version to sweep one")
    return (
        "<h2>Sweep along batch size (newest successful run per case; knee: highest throughput)</h2>"
        + (
            f"<p class='note warn' id='sweep-versions'>warning: {html.escape(mixed)} "
            f"(<code>perfwatch sweep {html.escape(shlex.quote(model))} --version V</code> sweeps one)</p>"
            if mixed
            else ""
        )
        + f"<img src='{base}/models/{e}/sweep.png' alt='sweep of {html.escape(model)}' style='max-width:100%'>"
        + _table(request, interval_cells(df), SWEEP_COLUMNS)
    )


@router.get("/models/{model}/sweep.png")
def model_sweep_plot(model: str, access: Readable) -> Response:
    """PNG of the sweep along batch size: throughput and step time per series, knee starred; 404 when there is
    too little data for a sweep (the reason as the detail)."""
    import tempfile
    from pathlib import Path

    from tasks.cli.sweep import plot_sweep, sweep_frame, too_little_to_sweep

    try:
        df = _readable(sweep_frame(model, "batch_size"), access)
        if too_little_to_sweep(df, "batch_size"):
            raise ValueError(f"no sweep of model {model!r} to draw")
        with tempfile.TemporaryDirectory() as d:
            path = plot_sweep(df, "batch_size", Path(d) / "sweep.png", title=f"{model}: sweep along batch_size")
            return Response(content=path.read_bytes(), media_type="image/png")
    except ValueError as err:
        raise HTTPException(status_code=404, detail=str(err)) from None


@router.get("/models/{model}/plot.png")
def model_plot(model: str, access: Readable) -> Response:
    """PNG of the step-time trend (``perfwatch history --plot``: one panel per case, lines broken at versions)."""
    import tempfile
    from pathlib import Path

    from tasks.cli.history import plot_history
    from tasks.store import queries

    df = _readable(queries.history(model), access)
    if df.empty:
        raise HTTPException(status_code=404, detail=f"no runs of model {model!r} in the store")
    with tempfile.TemporaryDirectory() as d:
        path = plot_history(df, Path(d) / "plot.png", title=f"{model}: step time")
        data = io.BytesIO(path.read_bytes())
    return Response(content=data.getvalue(), media_type="image/png")


# ------------------------------------------------------------------------------------------------ run page


def _facts(rows: Sequence[tuple[str, str]]) -> str:
    """A definition list of (name, HTML value) rows."""
    return "<dl class='facts'>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _story_section(request: Request, run: dict[str, Any], access: RunAccess) -> str:
    """The verdict's story at the top of the run page (:func:`verdict_section`: the one renderer every command
    uses, ``tasks.services.story``), then links to the baseline run it compared with and to the two side by
    side (``comparisons.baseline_run_id``, ``tasks.store.reads.run_comparison``)."""
    from tasks.store.reads import run_comparison

    base = plugin_root(request)
    story = _page_story(_story(int(run["run_id"])), shown_reasons({int(run["run_id"]): run}).get(int(run["run_id"])))
    kind = (run["verdict"] or ("failed" if run["status"] == "failed" else "none")).split("@")[0]
    out = f"<section class='story s-{html.escape(kind)}'>" + verdict_section(story)
    comp = run_comparison(_db(), run["run_id"]) if run["metric"] or run["verdict"] else None
    if comp is not None and comp["baseline_run_id"] is not None and access.may_see(comp["baseline_run_id"]):
        b = int(comp["baseline_run_id"])
        out += (
            f"<p>{_a(f'{base}/runs/{b}', f'baseline run {b}')} · "
            + _a(f"{base}/compare?" + urlencode({"a": b, "b": run["run_id"]}), "compare side by side")
            + "</p>"
        )
    return out + "</section>"


def _no_story(run_id: int) -> Any:
    """An empty ``tasks.records.VerdictStory`` (a run with no stored verdict: failed, or not compared)."""
    from tasks.records import VerdictStory

    return VerdictStory(run_id=run_id)


def _story(run_id: int) -> Any:
    """The run's ``tasks.records.VerdictStory`` (``tasks.store.reads.verdict_stories``)."""
    from tasks.store.reads import verdict_stories

    return verdict_stories([run_id]).get(run_id) or _no_story(run_id)


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


def _op_deltas_section(comp: dict[str, Any] | None) -> str:
    """The ops whose time per step changed most against the baseline, from the verdict's evidence
    (``evidence["attribution"]``, ``tasks.analysis.attribution.attribute_against_run``: on wall time, each run's op
    shares of its profiled window scaled to its own measured median, so the deltas add up to the change of the two
    runs' medians, as ``perfwatch compare`` gives it), stated with that basis, with a row for all other ops and
    the total, the op categories (which add up to the same total), and where the verdict's figure is another
    measurement (CPU time, a paired gate) a note saying so (:func:`verdict_figure_note`)."""
    head = "<h2 id='ops'>Where the time went: op deltas against the baseline</h2>"
    if comp is None:
        return head + "<p class='empty'>No comparison: this run has no baseline to attribute a change against.</p>"
    att = comp["evidence"].get("attribution")
    if not att:
        return head + "<p class='empty'>No op attribution recorded with this verdict.</p>"
    if not att.get("available"):
        return head + f"<p class='empty'>No op attribution: {html.escape(str(att.get('reason', 'unavailable')))}.</p>"
    ops = list(att.get("top_ops") or [])
    change = float(att["step_time_change_us"])
    undecided = undecided_change_note(comp, change)
    rows = [
        (
            o["op_name"],
            o["op_type"],
            o["category"],
            o["baseline_us_per_step"],
            o["candidate_us_per_step"],
            o["delta_us_per_step"],
            o.get("share_of_change"),
        )
        for o in ops
    ]
    other = verdict_figure_note(comp, att)
    return (
        head
        + (f"<p class='note warn' id='undecided'>{html.escape(undecided)}</p>" if undecided else "")
        + (f"<p class='note' id='verdict-figure'>{html.escape(other)}</p>" if other else "")
        + _deltas_table(
            rows, change, att.get("n_ops"), str(att.get("change_basis") or att.get("step_time_change_source"))
        )
        + _categories_table(att.get("categories") or [], change)
        + (f"<p class='note' id='matching'>{html.escape(m)}</p>" if (m := op_matching_note(att)) else "")
        + "".join(f"<p class='note'>warning: {html.escape(w)}</p>" for w in att.get("warnings") or [])
    )


def op_matching_note(attribution: Mapping[str, Any]) -> str | None:
    """How the two runs' ops were matched, from ``evidence["attribution"]``
    (``tasks.analysis.attribution.attribution_evidence``), in the words of ``perfwatch compare``'s summary: the op
    scopes matched under another name, the ops that appeared or vanished (the other run's table complete), and
    those in one table only because the other is at xprof's cap (``below-cut``); None when every op is in
    both."""
    parts = [
        f"op scope {new!r} of this run is shown under the baseline's {old!r}"
        for new, old in (attribution.get("scope_renames") or {}).items()
    ]
    n_app, n_van, n_cut = (int(attribution.get(k) or 0) for k in ("n_appeared", "n_vanished", "n_below_cut"))
    if n_app or n_van:
        parts.append(f"{n_app} ops appeared, {n_van} vanished")
    if n_cut:
        cuts = [
            f"{side}'s smallest kept op: {us:,.1f} µs/step"
            for side, us in (
                ("the baseline", attribution.get("baseline_cut_us")),
                ("this run", attribution.get("candidate_cut_us")),
            )
            if isinstance(us, float)
        ]
        parts.append(
            f"{n_cut} ops are in one run's op table only because xprof keeps only a profile's largest ops"
            + (f" ({'; '.join(cuts)})" if cuts else "")
            + ": below the cut of the other run's table or gone there, shown as 0 µs/step there (below-cut), not "
            "as appeared or vanished"
        )
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "." if parts else None


def verdict_figure_note(comp: Mapping[str, Any] | None, attribution: Mapping[str, Any]) -> str | None:
    """Beside a run's op deltas (``attribution``: ``evidence["attribution"]``, scaled to two runs' measured wall
    medians): where the verdict's figure (``comp``, a ``run_comparison`` row) is another measurement, one
    sentence saying which and that the op deltas do not split it, e.g. ``The verdict's figure, CPU-time ratio
    ×1.950 (paired-abba), is another measurement than the op deltas: they split the change of the two runs'
    measured wall-time medians, ×1.700.``; None where the verdict's figure is those medians' ratio (to 3
    decimals, on wall time) or the run has no verdict ratio."""
    ratio = (comp or {}).get("ratio")
    if comp is None or not isinstance(ratio, float):
        return None
    from tasks.records import ratio_name

    b, c = attribution.get("baseline_measured_ms"), attribution.get("candidate_measured_ms")
    medians = f"×{c / b:.3f}" if isinstance(b, float) and isinstance(c, float) and b > 0 else None
    if comp.get("metric") != "cpu" and medians == f"×{ratio:.3f}":
        return None
    return (
        f"The verdict's figure, {ratio_name(comp.get('metric'))} ×{ratio:.3f} ({comp.get('method')}), is another "
        "measurement than the op deltas: they split the change of the two runs' measured wall-time medians"
        + (f", {medians}." if medians else ".")
    )


#: verdicts that decided nothing about the change: the op deltas split a change that is not established
UNDECIDED_VERDICTS = ("inconclusive",)


def undecided_change_note(comp: Mapping[str, Any] | None, change_us: float) -> str | None:
    """What the op deltas of an undecided verdict (``UNDECIDED_VERDICTS``; ``comp`` a ``run_comparison`` row)
    must say beside them: the change they add up to (``change_us``, µs per step) is not established, e.g. ``The
    change of +201.0 µs/step is not established: the verdict is inconclusive (ratio 1.080 [0.970, 1.210] ...)``;
    None for a decided verdict (pass, regression, improvement, no-baseline) or no comparison."""
    if comp is None or comp.get("verdict") not in UNDECIDED_VERDICTS:
        return None
    ratio, low, high = comp.get("ratio"), comp.get("ci_low"), comp.get("ci_high")
    interval = (
        f" (ratio {ratio:.3f} [{low:.3f}, {high:.3f}]: the interval is too wide to tell a change from none)"
        if isinstance(ratio, float) and isinstance(low, float) and isinstance(high, float)
        else ""
    )
    return (
        f"The change of {change_us:+,.1f} µs/step these op deltas add up to is not established: the verdict is "
        f"{comp['verdict']}{interval}. They say where the time went between the two measurements, not that the "
        "model got slower or faster."
    )


def _deltas_table(rows: Sequence[tuple[Any, ...]], change_us: float, n_ops: Any, basis: str) -> str:
    """Op rows (name, type, category, baseline, candidate, Δ µs/step, share) plus "all other ops" (what the
    shown rows leave of ``change_us``) and the total, so the Δ column adds up to the change."""
    shown = sum(float(r[5]) for r in rows)
    rest = round(change_us - shown, 1) + 0.0  # + 0.0: no "-0.0" where the rows add up to the change
    body = "".join(
        f"<tr><td class='text'><code>{html.escape(str(n))}</code></td><td class='text'>{html.escape(str(t))}</td>"
        f"<td class='text'>{html.escape(str(c))}</td><td>{b:,.1f}</td><td>{a:,.1f}</td><td>{d:+,.1f}</td>"
        f"<td>{'' if s is None else f'{s:.0%}'}</td></tr>"
        for n, t, c, b, a, d, s in rows
    )
    others = max(0, int(n_ops) - len(rows)) if isinstance(n_ops, int | float) else None
    share = f"{rest / change_us:.0%}" if abs(change_us) > 1e-9 else ""
    body += (
        f"<tr><td class='text' colspan='5'>all other ops{f' ({others})' if others is not None else ''}</td>"
        f"<td>{rest:+,.1f}</td><td>{share}</td></tr>"
        f"<tr><th class='text' colspan='5'>change of the step time</th><th>{change_us:+,.1f}</th><th>100%</th></tr>"
    )
    return (
        f"<p class='note'>µs per step; basis: {html.escape(basis)}.</p><table><thead><tr><th class='text'>op</th>"
        "<th class='text'>type</th><th class='text'>category</th><th>baseline</th><th>candidate</th><th>Δ µs/step</th>"
        f"<th>share of the change</th></tr></thead><tbody>{body}</tbody></table>"
    )


def _categories_table(categories: Sequence[dict[str, Any]], change_us: float) -> str:
    if not categories:
        return ""
    body = "".join(
        f"<tr><td class='text'>{html.escape(str(c['category']))}</td><td>{c['baseline_us_per_step']:,.1f}</td>"
        f"<td>{c['candidate_us_per_step']:,.1f}</td><td>{c['delta_us_per_step']:+,.1f}</td></tr>"
        for c in categories
    )
    return (
        "<table><thead><tr><th class='text'>op category</th><th>baseline</th><th>candidate</th><th>Δ µs/step</th></tr>"
        f"</thead><tbody>{body}<tr><th class='text'>total</th><th></th><th></th><th>{change_us:+,.1f}</th></tr>"
        "</tbody></table>"
    )


def _findings_table(findings: Sequence[dict[str, Any]], *, side: bool = False) -> str:
    if not findings:
        return "<p class='empty'>No findings.</p>"
    body = "".join(
        "<tr>"
        + (f"<td class='text'>{html.escape(str(f.get('side')))}</td>" if side else "")
        + f"<td class='text'>{_verdict(f.get('severity'))}</td>"
        f"<td class='text'><code>{html.escape(str(f.get('code')))}</code></td>"
        f"<td class='text wide'>{html.escape(str(f.get('message') or ''))}</td>"
        f"<td>{html.escape(_text(f.get('value')))}</td><td>{html.escape(_text(f.get('threshold')))}</td></tr>"
        for f in findings
    )
    return (
        "<table><thead><tr>" + ("<th class='text'>side</th>" if side else "") + "<th class='text'>severity</th>"
        "<th class='text'>code</th><th class='text'>finding</th><th>value</th><th>threshold</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


#: the telemetry summary's figures the run page shows, with their names and units
_TELEMETRY = [
    ("samples", "samples"),
    ("utilization_mean_pct", "utilization mean (%)"),
    ("utilization_p95_pct", "utilization p95 (%)"),
    ("memory_peak_bytes", "memory peak (MiB)"),
    ("power_mean_w", "power mean (W)"),
    ("energy_per_example_j", "energy per example (J)"),
    ("sm_clock_mean_mhz", "SM clock mean (MHz)"),
    ("temperature_max_c", "temperature max (°C)"),
    ("throttle_reasons_seen", "throttle reasons"),
]


def _telemetry_section(summary: dict[str, Any] | None) -> str:
    """The device telemetry of the measured steps (``run_tables`` 'telemetry', ``tasks.analysis.telemetry``):
    one column per device."""
    head = "<h2 id='telemetry'>Telemetry of the measured steps</h2>"
    devices = (summary or {}).get("devices") or {}
    if not devices:
        return head + "<p class='empty'>No device telemetry recorded with this run.</p>"
    names = list(devices)

    def value(key: str, d: dict[str, Any]) -> str:
        v = d.get(key)
        if key == "memory_peak_bytes" and isinstance(v, int | float):
            v = v / 2**20
        if isinstance(v, list):
            return html.escape(", ".join(map(str, v)) or MISSING)
        return html.escape(_text(v))

    rows = "".join(
        f"<tr><td class='text'>{html.escape(label)}</td>"
        + "".join(f"<td>{value(k, devices[n])}</td>" for n in names)
        + "</tr>"
        for k, label in _TELEMETRY
    )
    window = summary.get("window_s") if summary else None
    return (
        head
        + (f"<p class='note'>over {window:.1f} s of measured steps</p>" if isinstance(window, int | float) else "")
        + "<table><thead><tr><th class='text'>figure</th>"
        + "".join(f"<th>{html.escape(n)}</th>" for n in names)
        + f"</tr></thead><tbody>{rows}</tbody></table>"
    )


def _distribution_section(run_id: int, baseline_id: int | None, *, title: str = "Step-time distribution") -> str:
    """The ECDF of the measured step times of the baseline run and this run (``step_samples`` phase
    'measured')."""
    from tasks.store.reads import load_samples

    ids = [i for i in (baseline_id, run_id) if i is not None]
    samples = load_samples(_db(), ids)
    series = ([(f"baseline run {baseline_id}", samples.get(baseline_id, []))] if baseline_id is not None else []) + [
        (f"run {run_id}", samples.get(run_id, []))
    ]
    head = f"<h2 id='distribution'>{html.escape(title)}</h2>"
    try:
        chart = charts.ecdf_chart(series)
    except ValueError as e:
        return head + f"<p class='empty'>{html.escape(str(e))}.</p>"
    note = "" if baseline_id is not None else "<p class='note'>No baseline run to draw beside it.</p>"
    return head + note + f"<div class='chart'>{chart}</div>"


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: int, access: Readable) -> HTMLResponse:
    """One run and why its verdict is what it is: the verdict's story, what it measured, the op deltas that add
    up to the change, the step-time distribution of baseline and candidate, the findings, the telemetry, and how
    to open it (Airflow DAG run and task log, GX Data Docs, the archived profile in TensorBoard or as files)."""
    from tasks.store.reads import run_comparison, run_findings, run_tool_tables

    run = _stored(run_id, access)
    base = plugin_root(request)
    body = _story_section(request, run, access)
    facts = [
        ("model", _a(f"{base}/models/{quote_segment(run['model'])}", run["model"])),
        *(
            (_HEADERS.get(k, k), html.escape(_text(run[k])))
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
    af = airflow_links(request, run)
    facts.append(
        (
            "Airflow",
            " · ".join([_a(af["dag_run"], "DAG run", airflow=True), _a(af["task_log"], "task log", airflow=True)])
            if af
            else f"{MISSING} (run outside Airflow, by {html.escape(run['dag_id'])})",
        )
    )
    from tasks.services.story import acceptance_text
    from tasks.store.reads import acceptances

    if (acc := acceptances([run_id], _db()).get(run_id)) is not None:  # who made it a baseline, when, why
        facts.append(("baseline", html.escape(acceptance_text(acc) + (f": {acc.reason}" if acc.reason else ""))))
    body += "<h2>The run</h2>" + _facts(facts)
    if run["error"]:
        body += f"<h2>Error</h2><pre>{html.escape(run['error'])}</pre>"
    db = _db()
    comp = run_comparison(db, run_id)
    with_charts = False
    if run["status"] == "success":
        body += _op_deltas_section(comp)
        baseline = comp["baseline_run_id"] if comp else None  # drawn beside it only for a user who may see it
        body += _distribution_section(run_id, baseline if baseline is not None and access.may_see(baseline) else None)
        with_charts = True
        from .serving import serving_section  # the scenario's own figures: a self-contained block

        body += serving_section(run_tool_tables(db, run_id).get("inputs"))
        body += "<h2 id='findings'>Findings</h2>" + _findings_table(run_findings(db, run_id))
        body += _telemetry_section(run_tool_tables(db, run_id).get("telemetry"))
    body += _open_section(request, run)
    return _page(request, f"perfwatch: run {run_id}", body, charts=with_charts)


#: how the run page says to get ``tensorboard --logdir`` with its Profile tab: perfwatch's environment has both
#: (pyproject: tensorboard, since TensorFlow 2.21 no longer pulls it in; xprof, whose ``profile`` plugin is the
#: Profile tab); elsewhere the same two packages (xprof replaces tensorboard-plugin-profile: not both)
TENSORBOARD_HOW = (
    "perfwatch's environment installs tensorboard and xprof, which provides the Profile tab (<code>eval "
    '"$(make -s env)"</code> puts them on the PATH; on another machine <code>pip install tensorboard xprof</code>)'
)


def _open_section(request: Request, run: dict[str, Any]) -> str:
    """How to open the run's evidence: its GX Data Docs and its archived profile (TensorBoard, xplane files)."""
    base, run_id = plugin_root(request), run["run_id"]
    body = "<h2 id='datadocs'>GX Data Docs</h2>"
    if not run["archive_uri"]:
        why = f"no archive: the run failed at {run['failed_stage']}" if run["failed_stage"] else "no archive"
        return body + (
            f"<p>{MISSING} ({html.escape(why)})</p><h2 id='profile'>Profile</h2><p>{MISSING} ({html.escape(why)})</p>"
        )
    fs, root = _archive_fs(run)
    docs = has_data_docs(run)
    body += (
        f"<p>{_a(f'{base}/runs/{run_id}/archive/gx/index.html', 'open the Data Docs')} "
        f"(<code>{html.escape(run['archive_uri'])}/gx/index.html</code>)</p>"
        if docs
        else f"<p>{MISSING} (none archived with this run)</p>"
    )
    xplanes = sorted(p.removeprefix(root + "/") for p in fs.glob(f"{root}/plugins/profile/*/*.xplane.pb"))
    judged = _story(int(run_id)).profile  # the file(s) the parse stage read (tasks.records.judged_profiles)
    parent, name = run["archive_uri"].rstrip("/").rsplit("/", 1)
    return body + (
        "<h2 id='profile'>Profile (TensorBoard)</h2>"
        f"<p>Archived at <code>{html.escape(run['archive_uri'])}</code>. Open it in TensorBoard's Profile tab: "
        f"{TENSORBOARD_HOW}, then</p>"
        f"<pre>tensorboard --logdir {html.escape(shlex.quote(parent))}</pre>"
        f"<p>and pick the run <code>{html.escape(name)}</code> (every run of the model is listed there, "
        "newest run id last).</p>"
        + (
            "<ul class='plain'>"
            + "".join(
                f"<li>{_a(f'{base}/runs/{run_id}/archive/{quote(x)}', x)} {_judged_note(x, judged)}</li>"
                for x in xplanes
            )
            + "</ul>"
            if xplanes
            else f"<p>xplane files: {MISSING} (not found in the archive)</p>"
        )
    )


# ------------------------------------------------------------------------------------------ comparison page


def _attr(v: Any) -> str:
    return html.escape(str(v if v is not None else ""), quote=True)


def _compare_form(request: Request, a: Any = "", b: Any = "") -> str:
    base = plugin_root(request)
    return (
        f"<form class='inline' method='get' action='{base}/compare'>"
        f"<label>run a (before)<input name='a' inputmode='numeric' value='{_attr(a)}'></label>"
        f"<label>run b (after)<input name='b' inputmode='numeric' value='{_attr(b)}'></label>"
        "<button>compare</button></form>"
        "<p class='note'>Or two versions of a model (their newest successful runs): "
        f"<code>{base}/compare?model=NAME&amp;a_version=1&amp;b_version=2</code>, or the links on a model's page.</p>"
    )


def _int_param(name: str, value: str | None) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise HTTPException(422, f"{name}={value!r}: expected a run id (a whole number)") from None


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    access: Readable,
    a: str | None = None,
    b: str | None = None,
    model: str | None = None,
    a_version: str | None = None,
    b_version: str | None = None,
    case: str | None = None,
) -> HTMLResponse:
    """Two runs side by side (``a`` before, ``b`` after; or the newest successful runs of ``a_version`` and
    ``b_version`` of ``model``, in ``case`` or the newest case of ``b_version``): run facts, the ratio of their
    median step times, their step-time distributions, the op deltas that add up to the change of the medians
    (``tasks.cli.compare``), the op categories and both runs' findings. Without parameters: a form.

    Raises:
        HTTPException: 422 for a run id that is not a number or a half-given version pair; 404 when there is
            nothing to compare (the reason as the detail), or a run the user may not see (as for one not stored).
    """
    from tasks.cli.compare import ComparisonUnavailable, compare_runs, compare_versions

    run_a, run_b = _int_param("a", a), _int_param("b", b)
    if run_a is None and run_b is None and not model:
        return _page(request, "perfwatch: compare two runs", _compare_form(request))
    try:
        if model:
            if not (a_version and b_version):
                raise HTTPException(422, "compare by version needs model, a_version and b_version")
            vc = compare_versions(_db(), model, a_version, b_version, case or None)
        else:
            if run_a is None or run_b is None:
                raise HTTPException(422, "compare needs two runs: a=<run id>&b=<run id>")
            for i in (run_a, run_b):
                if not access.may_see(i):
                    raise ComparisonUnavailable(f"no run {i} in the store")
            vc = compare_runs(_db(), run_a, run_b)
        picked = [int(i) for i in vc.headline["run_id"]]
        if len(access.readable_runs(picked)) < len(set(picked)):  # a version's newest run, of a DAG not readable
            raise ComparisonUnavailable("no runs of those versions to compare that you may see")
    except (ComparisonUnavailable, ValueError) as e:
        body = f"<p class='empty'>{html.escape(str(e))}</p>" + _compare_form(request, a, b)
        return _page(request, "perfwatch: compare two runs", body, status_code=404)
    h = vc.headline.set_index("side")
    fa, fb = h.loc["from"], h.loc["to"]
    ia, ib = int(fa["run_id"]), int(fb["run_id"])
    return _page(request, f"perfwatch: run {ia} vs run {ib}", _comparison_body(request, vc, ia, ib), charts=True)


def _code_spans(text: str) -> str:
    """``text`` escaped, with its `backticked` commands as ``<code>`` (as the CLI writes them)."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _comparison_body(request: Request, vc: Any, ia: int, ib: int) -> str:
    import statistics

    from tasks.store.reads import load_samples, run_pages

    base = plugin_root(request)
    pages = run_pages([ia, ib])
    reasons = shown_reasons(pages)
    samples = load_samples(_db(), [ia, ib])
    h = vc.headline.set_index("side")
    sides = [("a (before)", h.loc["from"], ia), ("b (after)", h.loc["to"], ib)]

    def pct(xs: list[float], q: int) -> str:
        return f"{statistics.quantiles(xs, n=100, method='inclusive')[q - 1]:.3f}" if len(xs) >= 2 else MISSING

    rows = [
        ("run", [_a(f"{base}/runs/{i}", str(i)) for _, _, i in sides]),
        ("model", [html.escape(str(pages.get(i, {}).get("model", MISSING))) for _, _, i in sides]),
        ("version", [html.escape(str(r["version"])) for _, r, _ in sides]),
        (
            "case",
            [
                html.escape(str(r["case"]))
                + (f" ({html.escape(r['case_label'])})" if isinstance(r["case_label"], str) else "")
                for _, r, _ in sides
            ],
        ),
        ("started (UTC)", [html.escape(_text(r["started_at"])) for _, r, _ in sides]),
        ("median step (ms)", [html.escape(_text(r["median_step_ms"])) for _, r, _ in sides]),
        (
            "p10 / p90 step (ms)",
            [f"{pct(samples.get(i, []), 10)} / {pct(samples.get(i, []), 90)}" for _, _, i in sides],
        ),
        ("steps measured", [str(len(samples.get(i, []))) for _, _, i in sides]),
        ("throughput", [html.escape(_throughput(r["throughput_eps"], r["throughput_def"])) for _, r, _ in sides]),
        ("verdict", [_verdict(r["verdict"]) for _, r, _ in sides]),
        ("reason", [html.escape(reasons.get(i) or MISSING) for _, _, i in sides]),
    ]
    table = (
        "<table class='sides'><colgroup><col class='key'><col><col></colgroup><thead><tr><th class='text'></th>"
        + "".join(f"<th class='text'>{html.escape(n)}</th>" for n, _, _ in sides)
        + "</tr></thead><tbody>"
        + "".join(
            f"<tr><th class='text'>{html.escape(k)}</th>" + "".join(f"<td class='text'>{v}</td>" for v in vs) + "</tr>"
            for k, vs in rows
        )
        + "</tbody></table>"
    )
    ma, mb = h.loc["from"]["median_step_ms"], h.loc["to"]["median_step_ms"]
    ratio = mb / ma if ma else float("nan")
    from tasks.cli.compare import verdict_figure
    from tasks.records import ratio_name, throughput_pair_text
    from tasks.services.story import interval_text
    from tasks.store.reads import verdict_stories

    story = verdict_stories([ib], _db()).get(ib)
    figure = verdict_figure(vc, story)  # which figure is the verdict's and why the medians' ratio differs
    verdict = ""
    if story is not None and story.ratio is not None:
        level = f" at {story.confidence:.0%}" if story.confidence is not None else ""
        shown = f"{ratio_name(story.metric)} ×{story.ratio:.3f} {interval_text(story) or ''}{level}".strip()
        against = f" against baseline run {story.baseline_run_id}" if story.baseline_run_id is not None else ""
        verdict = (
            f"<p class='headline verdict-figure'>{html.escape(shown)} {_verdict(story.verdict)}"
            f"<span class='muted'>: the verdict's figure, run {ib} (b){html.escape(against)}, "
            f"{html.escape(story.method_text or '')}</span></p>"
        )
    fa, ta = h.loc["from"], h.loc["to"]
    throughput = (  # one definition or none compared (tasks.records: the CLI's rule too)
        f"<p class='note throughput'>{html.escape(throughput_pair_text(*_pair(fa), *_pair(ta)))}</p>"
        if not (_missing(fa["throughput_eps"]) or _missing(ta["throughput_eps"]))
        else ""
    )
    headline = (
        "<section class='story'>"
        + "".join(f"<p class='note env-warning'><b>{html.escape(w)}</b></p>" for w in vc.warnings)
        + f"<p class='headline'>median step time ×{ratio:.3f} ({ratio - 1:+.1%}), b over a"
        "<span class='muted'>: the ratio of the two runs' median step times (two processes, profiler off)</span></p>"
        + verdict
        + throughput
        + (f"<p class='note' id='figures'>{html.escape(figure['note'])}.</p>" if figure["note"] else "")
        + "".join(f"<p class='note selection'>{_code_spans(line)}</p>" for line in vc.selection)
        + (
            "<p class='note'>Both runs measured byte-identical model files (same sha256): the difference is drift "
            "between the two processes, not a change of the model.</p>"
            if vc.identical_bytes
            else ""
        )
        + "</section>"
    )
    try:
        chart = charts.ecdf_chart([(f"a: run {ia}", samples.get(ia, [])), (f"b: run {ib}", samples.get(ib, []))])
        dist = f"<div class='chart'>{chart}</div>"
    except ValueError as e:
        dist = f"<p class='empty'>{html.escape(str(e))}.</p>"
    att = vc.attribution
    ops = vc.ops
    top = ops.reindex(ops["delta_us_per_step"].abs().sort_values(ascending=False).index).head(12)
    op_rows = [
        (
            r.op_name,
            r.op_type,
            r.category,
            r.baseline_us_per_step,
            r.candidate_us_per_step,
            r.delta_us_per_step,
            r.share_of_change if not _missing(r.share_of_change) else None,
        )
        for r in top.itertuples()
    ]
    deltas = (
        _deltas_table(
            op_rows,
            float(att.step_time_change_us),
            len(ops),
            att.basis,
        )
        if op_rows
        else "<p class='empty'>No op rows in either run's profile.</p>"
    )
    cats = _categories_table([c.model_dump() for c in att.categories], float(att.step_time_change_us))
    findings = [
        {**r, "side": {"from": "a", "to": "b"}.get(r["side"], r["side"])} for r in vc.findings.to_dict("records")
    ]
    return (
        headline
        + table
        + "<h2>Step-time distributions</h2>"
        + dist
        + "<h2>Where the time went: op deltas, a → b</h2>"
        + deltas
        + cats
        + "".join(f"<p class='note'>warning: {html.escape(w)}</p>" for w in att.warnings)
        + "<h2>Findings</h2>"
        + _findings_table(findings, side=True)
        + "<h2>Another comparison</h2>"
        + _compare_form(request, ia, ib)
    )


def _stored(run_id: int, access: RunAccess) -> dict[str, Any]:
    """The ``run_pages`` row of ``run_id``.

    Raises:
        HTTPException: 404 for a run not in the store or one the user may not see (the same answer: a refused
            run's existence is not told).
    """
    from tasks.store.reads import run_pages

    run = run_pages([run_id]).get(run_id)
    if run is None or not access.readable_dags([run["dag_id"]]):
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


@router.get("/runs/{run_id}/archive/{path:path}")
def archive_file(run_id: int, path: str, access: Readable) -> Response:
    """A file of the run's archive directory (the GX Data Docs site under ``gx/``, the profile under
    ``plugins/profile/``), read with fsspec from wherever the archive is. 404 for a path outside the
    directory, a directory, a missing file, or a run the user may not see."""
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") or "\\" in p for p in parts):
        raise HTTPException(404, f"{path!r} is not a file path inside the run's archive directory")
    fs, root = _archive_fs(_stored(run_id, access))
    target = f"{root}/{'/'.join(parts)}"
    if not fs.isfile(target):
        raise HTTPException(404, f"no file {path!r} in the archive of run {run_id}")
    media = mimetypes.guess_type(parts[-1])[0] or "application/octet-stream"

    def chunks() -> Iterator[bytes]:
        with fs.open(target, "rb") as fh:
            while chunk := fh.read(1 << 20):
                yield chunk

    return StreamingResponse(chunks(), media_type=media)
