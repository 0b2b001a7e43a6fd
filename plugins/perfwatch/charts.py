"""The pages' interactive charts, drawn by plotly (``plotly.graph_objects``) as HTML fragments without plotly.js:
the page loads plotly.js from the plugin itself (``assets``), so the charts work offline.

* :func:`trend_chart` (:func:`trend_figure`): a model's step time per run, one panel per case (each on its own
  scale), one line per model version (``tasks.cli.history.version_segments``: no line joins two versions),
  p10–p90 band (an error bar for a single run), the compared baseline's median, baseline runs, regressions and
  inconclusive runs, version and environment changes marked; a panel of a case without a successful run says
  so; every panel's own time labels from the runs' span; hover names the run, version and verdict; a click opens
  the run's page.
* :func:`ecdf_chart`: the distribution of measured step times (ECDF) of two or more runs, e.g. baseline and
  candidate.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: the colours of successive versions (plotly's default qualitative palette); a version keeps its colour in
#: every panel
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}
PANEL_PX = 250  #: height of one case's panel (px)
PANEL_GAP_PX = 80  #: between two panels: the upper one's time labels and the lower one's title (px)
#: the markers of the verdicts a reader looks for on a trend, each with its legend entry
VERDICT_MARKERS: dict[str, dict[str, Any]] = {
    "regression": {"symbol": "x", "size": 13, "color": "#d62728"},
    "inconclusive": {"symbol": "circle-open", "size": 15, "color": "#b26b00", "line": {"width": 2.5}},
}


def _html(fig: Any, div_id: str, post_script: str | None = None) -> str:
    import plotly.io as pio

    return str(
        pio.to_html(
            fig,
            include_plotlyjs=False,
            full_html=False,
            div_id=div_id,
            config=CONFIG,
            default_width="100%",
            post_script=post_script,
        )
    )


def _none(v: Any) -> Any:
    import pandas as pd

    return None if v is None or (not isinstance(v, str) and pd.isna(v)) else v


def trend_chart(df: pd.DataFrame, *, run_href: str, reasons: Mapping[int, str] | None = None) -> str:
    """The step-time trend of a history frame (``tasks.store.queries.history`` with
    ``tasks.cli.history.with_env_changes``, oldest first) as an HTML fragment (a ``div`` and its script):
    :func:`trend_figure`; a click on a run opens ``run_href + <run id>``.

    Raises:
        ValueError: no run with a step time.
    """
    click = (
        "var gd=document.getElementById('{plot_id}');gd.on('plotly_click',function(e){var p=e.points[0];"
        "var id=Array.isArray(p.customdata)?p.customdata[0]:p.customdata;if(id!==undefined)"
        f"window.location.href={json.dumps(run_href)}+id;}});"
    )
    return _html(trend_figure(df, reasons=reasons), "trend", click)


LABEL_PX = 11  #: the font size of the version labels (px)
PLOT_PX = 900  #: the plotting area's width the version labels are kept apart on (px; about 1070 at 1280 px)


def trend_figure(df: pd.DataFrame, *, reasons: Mapping[int, str] | None = None) -> Any:
    """The step-time trend of a history frame as a plotly figure.

    One panel per case, each with its own y axis (ms, from 0), over the same time axis chosen from the runs'
    span (``tasks.cli.history.time_window``: runs minutes apart on an axis of minutes); the median step time
    (ms, our timer) per run with its p10–p90 band, one line per run of consecutive runs of one version; the
    compared baseline's median as a dashed step line; a version's single run as its median with its p10–p90 as
    an error bar, and its baseline's median as a dash-shaped marker (a band and a line need two points); runs that
    served as a baseline (``baseline_run_id`` of a comparison) as open diamonds; regressions as red crosses and
    inconclusive runs as open amber circles (:data:`VERDICT_MARKERS`, each in the legend); a case whose runs all
    failed as a panel saying so (no successful run, the newest failure's stage); every panel with its time
    labels (not only the last); version changes as dotted lines labelled with the
    new version (labels too close to sit side by side on a ``PLOT_PX`` wide plot go a row lower:
    ``tasks.cli.history.label_rows``), environment-key changes as red dashed lines. Hover: run id, version,
    verdict (with its reason from ``reasons``, run id -> text), median, p10–p90, start time.

    Raises:
        ValueError: no run with a step time.
    """
    from plotly.subplots import make_subplots

    from tasks.cli.history import label_rows, label_width, time_window, version_segments
    from tasks.records import version_label

    ok = df[df["median_step_ms"].notna()]
    if ok.empty:
        raise ValueError("no successful run with a step time to chart")
    import plotly.graph_objects as go

    cases = sorted(df["case_name"].unique())
    versions = list(dict.fromkeys(str(v) for v in df["version"]))
    colour = {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(versions)}
    titles = []
    for case in cases:
        labels = list(df.loc[df["case_name"] == case, "case_label"].dropna()) if "case_label" in df else []
        label = labels[0] if labels else None
        titles.append(html.escape(case + (f" ({label})" if label and label != case else "")))
    # between panels: the upper one's time labels and the lower one's title (PANEL_GAP_PX of PANEL_PX each)
    fig = make_subplots(
        rows=len(cases),
        cols=1,
        shared_xaxes=True,
        subplot_titles=titles,
        vertical_spacing=PANEL_GAP_PX / (PANEL_PX * len(cases)) if len(cases) > 1 else 0.0,
    )
    left, right = time_window(df["started_at"])
    baselines = {int(b) for b in df["baseline_run_id"].dropna()} if "baseline_run_id" in df else set()
    reasons = reasons or {}
    shown: set[str] = set()

    def legend(name: str) -> dict[str, Any]:
        first = name not in shown
        shown.add(name)
        return {"name": name, "legendgroup": name, "showlegend": first}

    hover = (
        "run %{customdata[0]} · v%{customdata[1]} · %{customdata[2]}<br>median %{y:.3f} ms "
        "(p10–p90 %{customdata[3]})<br>%{x|%Y-%m-%d %H:%M} UTC<br>%{customdata[4]}<extra></extra>"
    )
    for row, case in enumerate(cases, start=1):
        g = df[df["case_name"] == case]
        good = g[g["median_step_ms"].notna()]
        for part in version_segments(good):
            v = str(part["version"].iloc[0])
            x = list(part["started_at"])
            lo, hi = part["p10_step_ms"].astype(float), part["p90_step_ms"].astype(float)
            single = len(part) == 1  # a band and a line need two points: one run gets an error bar and a tick
            if lo.notna().any() and not single:
                fig.add_trace(
                    go.Scatter(
                        x=x + x[::-1],
                        y=list(hi) + list(lo)[::-1],
                        fill="toself",
                        fillcolor=colour[v],
                        opacity=0.18,
                        line={"width": 0},
                        hoverinfo="skip",
                        **legend("p10–p90 of the run's steps"),
                    ),
                    row=row,
                    col=1,
                )
            custom = [
                [
                    int(r.run_id),
                    v,
                    _none(r.verdict) or r.status,
                    f"{r.p10_step_ms:.3f}–{r.p90_step_ms:.3f} ms" if _none(r.p10_step_ms) is not None else "—",
                    html.escape(reasons.get(int(r.run_id), "")),
                ]
                for r in part.itertuples()
            ]
            medians = list(part["median_step_ms"].astype(float))
            bar = (
                {  # the run's p10–p90 as an error bar around its median (no band for one point)
                    "type": "data",
                    "symmetric": False,
                    "array": [h - m for h, m in zip(hi, medians, strict=True)],
                    "arrayminus": [m - lw for lw, m in zip(lo, medians, strict=True)],
                    "color": colour[v],
                    "thickness": 1.5,
                    "width": 6,
                }
                if single and lo.notna().all() and hi.notna().all()
                else None
            )
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=medians,
                    mode="lines+markers",
                    line={"color": colour[v], "width": 2},
                    marker={"size": 7 if not single else 9, "color": colour[v]},
                    error_y=bar,
                    customdata=custom,
                    hovertemplate=hover,
                    **legend(f"v{v} median"),
                ),
                row=row,
                col=1,
            )
            base = part[part["baseline_median_ms"].notna()]
            if not base.empty:
                one = len(base) == 1  # a dashed line of one point draws nothing: a dash-shaped marker
                fig.add_trace(
                    go.Scatter(
                        x=list(base["started_at"]),
                        y=list(base["baseline_median_ms"].astype(float)),
                        mode="markers" if one else "lines",
                        line={"color": colour[v], "dash": "dash", "shape": "hv", "width": 1.5},
                        marker={"symbol": "line-ew-open", "size": 22, "color": colour[v], "line": {"width": 2}},
                        hovertemplate="baseline median %{y:.3f} ms<extra></extra>",
                        **legend("compared baseline's median"),
                    ),
                    row=row,
                    col=1,
                )
        marked = good[good["run_id"].isin(baselines)]
        if not marked.empty:
            fig.add_trace(
                go.Scatter(
                    x=list(marked["started_at"]),
                    y=list(marked["median_step_ms"].astype(float)),
                    mode="markers",
                    marker={"symbol": "diamond-open", "size": 15, "color": "#333", "line": {"width": 2}},
                    hovertemplate="run %{customdata} served as a baseline<extra></extra>",
                    customdata=[int(i) for i in marked["run_id"]],
                    **legend("baseline run"),
                ),
                row=row,
                col=1,
            )
        for verdict, marker in VERDICT_MARKERS.items():  # regressions ✖, inconclusive runs ◯: each in the legend
            these = good[good["verdict"] == verdict]
            if these.empty:
                continue
            fig.add_trace(
                go.Scatter(
                    x=list(these["started_at"]),
                    y=list(these["median_step_ms"].astype(float)),
                    mode="markers",
                    marker=marker,
                    customdata=[int(i) for i in these["run_id"]],
                    hovertemplate=f"run %{{customdata}}: {verdict}<extra></extra>",
                    **legend(verdict),
                ),
                row=row,
                col=1,
            )
        if good.empty:  # only failed runs: the panel says so instead of staying blank
            failed = g[g["status"] == "failed"] if "status" in g else g
            last = failed.sort_values("run_id").iloc[-1] if not failed.empty else None
            what = (
                f" (run {int(last['run_id'])} failed at {last['failed_stage'] or 'an unknown stage'})"
                if last is not None and "failed_stage" in g
                else ""
            )
            fig.add_trace(  # plotly.js draws no axes (and no annotation) for a panel without a trace
                go.Scatter(
                    x=[left, right], y=[0, 1], mode="markers", marker={"opacity": 0}, hoverinfo="skip", showlegend=False
                ),
                row=row,
                col=1,
            )
            fig.add_annotation(
                x=0.5,
                y=0.5,
                xref="x domain" if row == 1 else f"x{row} domain",
                yref="y domain" if row == 1 else f"y{row} domain",
                text=html.escape(f"no successful run of this case{what}: no step time to draw"),
                showarrow=False,
                font={"size": 13, "color": "#5f6b7a"},
            )
            fig.update_yaxes(range=[0, 1], showticklabels=False, showgrid=False, row=row, col=1)
        changes = list(g[g["version_changed"] == 1].itertuples())
        texts = [version_label(str(r.version)) for r in changes]
        at = [(r.started_at - left) / (right - left) * PLOT_PX for r in changes]
        for r, text, level in zip(
            changes, texts, label_rows(at, [label_width(t, LABEL_PX) for t in texts]), strict=True
        ):
            fig.add_vline(x=r.started_at, line={"dash": "dot", "color": "#777", "width": 1}, row=row, col=1)
            fig.add_annotation(
                x=r.started_at,
                y=1,
                yref="y domain" if row == 1 else f"y{row} domain",
                yshift=-(LABEL_PX + 4) * level,
                text=html.escape(text),
                showarrow=False,
                xanchor="left",
                yanchor="top",
                bgcolor="rgba(255,255,255,0.8)",
                font={"size": LABEL_PX, "color": "#555"},
                row=row,
                col=1,
            )
        for r in g[g["env_changed"] == 1].itertuples():
            fig.add_vline(x=r.started_at, line={"dash": "dash", "color": "#d62728", "width": 1}, row=row, col=1)
        top = good[["median_step_ms", "p90_step_ms", "baseline_median_ms"]].astype(float).max().max()
        if not good.empty:
            fig.update_yaxes(range=[0, float(top) * 1.15], title_text="step time (ms)", row=row, col=1)
    # every panel has its time labels (shared axes put them on the last panel only, maybe an empty one)
    fig.update_xaxes(range=[left, right], showgrid=True, showticklabels=True)
    fig.update_xaxes(title_text="run started (UTC)", row=len(cases), col=1)
    height, top_px, bottom_px = PANEL_PX * len(cases) + 150, 40, 110
    fig.update_layout(
        height=height,
        margin={"l": 60, "r": 20, "t": top_px, "b": bottom_px},
        # below the time axis' title: 75 px under the plotting area, in its own (paper) units
        legend={"orientation": "h", "yanchor": "top", "y": -75 / (height - top_px - bottom_px), "x": 0},
        hovermode="closest",
        template="plotly_white",
        font={"size": 12},
    )
    return fig


def ecdf_chart(series: Sequence[tuple[str, Sequence[float]]], *, div_id: str = "ecdf") -> str:
    """An ECDF (fraction of steps at most x) of each ``(name, step times in ms)`` in ``series``, one step line
    each, as an HTML fragment; series without samples are left out. The x axis is step time (ms).

    Raises:
        ValueError: no series has samples.
    """
    import plotly.graph_objects as go

    drawn = [(name, sorted(float(x) for x in xs)) for name, xs in series if xs]
    if not drawn:
        raise ValueError("no measured step times to draw")
    fig = go.Figure()
    for i, (name, xs) in enumerate(drawn):
        n = len(xs)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[(k + 1) / n for k in range(n)],
                mode="lines",
                line={"shape": "hv", "color": PALETTE[i % len(PALETTE)], "width": 2},
                name=f"{name} (n={n})",
                hovertemplate=f"{html.escape(name)}<br>%{{y:.0%}} of steps ≤ %{{x:.3f}} ms<extra></extra>",
            )
        )
    fig.update_layout(
        height=300,
        margin={"l": 60, "r": 20, "t": 20, "b": 45},
        xaxis_title="measured step time (ms, profiler off)",
        yaxis={"title": "fraction of steps ≤ x", "range": [0, 1.02], "tickformat": ".0%"},
        legend={"orientation": "h", "y": -0.3, "x": 0},
        showlegend=True,
        template="plotly_white",
        font={"size": 12},
    )
    return _html(fig, div_id)
