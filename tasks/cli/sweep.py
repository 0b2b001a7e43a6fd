"""``perfwatch sweep MODEL``: throughput and step time (latency) along one axis of a model's benchmark
matrix, from the newest successful run of each case, with the best operating point (the knee: highest
throughput within a latency budget) marked. Points from ``tasks.store.queries.sweep_points``; the
computation is ``tasks.analysis.sweep.sweep``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tasks.cli.history import FormatOpt, _db_url, _fail, unknown_model_message
from tasks.cli.render import Format, pyplot, render, save_figure

if TYPE_CHECKING:  # pandas, the store and the analysis are imported where used: `perfwatch --help` stays quick
    import pandas as pd


def sweep_frame(
    model: str, axis: str, latency_budget_ms: float | None = None, version: str | None = None, db_url: str | None = None
) -> pd.DataFrame:
    """The sweep of ``model`` along ``axis`` as a table: series, the axis value (column named after the
    axis), case, run_id, version, median_step_ms, p99_step_ms (ms), p99_low_ms and p99_high_ms (the p99's
    distribution-free 95% interval from the run's measured steps, ``tasks.analysis.percentiles``; None
    where too few steps for that bound), p99_n (measured steps), p99_estimable (whether they support a
    two-sided 95% interval of the p99: 299 steps; where not, p99_step_ms is empty and p99_low_ms is the
    lower bound the steps do support), throughput_eps, within_budget (the p99's upper bound
    within the budget), knee, then throughput_of and p99_of (what those are: a scenario case is judged by its
    scenario's own throughput, a server case by its queries served per second and its per-query p99 from the
    run's serving summary, ``tasks.analysis.sweep``), median_step_low_ms, median_step_high_ms, median_step_n (the
    median's 95% interval and n, ``tasks.cli.figures.median_columns``) and max_qps (a server search's). One row per
    case (its newest successful run, of ``version`` when given).

    Raises:
        ValueError: no successful run of the model (of that version), an unknown axis, a bad budget
            (``tasks.analysis.sweep.sweep``).
        tasks.store.queries.QueryError: the store refused the query.
    """
    import math
    from dataclasses import asdict

    import pandas as pd

    from tasks.analysis.percentiles import min_samples, percentile_ci
    from tasks.analysis.sweep import sweep
    from tasks.cli.figures import median_columns
    from tasks.settings import Settings
    from tasks.store import queries, reads

    df = queries.sweep_points(model, version, db_url)
    if df.empty:
        raise ValueError(
            f"no successful run of model {model!r}"
            + (f" version {version}" if version else "")
            + " in the store to sweep"
        )
    url = db_url or Settings.from_env().database_url  # as sweep_points reads it
    samples = reads.load_samples(url, [int(i) for i in df["run_id"]])

    def p99(r: dict[str, Any]) -> dict[str, Any]:
        if not (xs := samples.get(int(r["run_id"]))):  # thinned (perfwatch db thin): step_quantiles' p99 and n
            point = None if pd.isna(r["p99_step_ms"]) else r["p99_step_ms"]
            n = None if pd.isna(r["n_measured"]) else int(r["n_measured"])
            ok = None if n is None else n >= min_samples(99)
            return {"p99_step_ms": point, "p99_low_ms": None, "p99_high_ms": None, "p99_n": n, "p99_estimable": ok}
        ci = percentile_ci(xs, 99)
        return {
            "p99_step_ms": ci.point,
            "p99_low_ms": ci.low,
            "p99_high_ms": ci.high,
            "p99_n": ci.n,
            "p99_estimable": ci.estimable,
        }

    def known(v: Any) -> bool:
        return v is not None and not (isinstance(v, float) and math.isnan(v))

    def figures(r: dict[str, Any], i: int) -> dict[str, Any]:
        """The figures the sweep judges the case by (``tasks.analysis.sweep``): the scenario's own throughput and,
        for a server case, its per-query p99; the median with its interval and n."""
        out = {**p99(r), **{k: med[k][i] for k in ("median_step_low_ms", "median_step_high_ms", "median_step_n")}}
        out["p99_of"] = "per step" if r["mode"] == "train" else "per batch"
        own = r.get("scenario_throughput_eps")
        if r["mode"] == "train" or own is None or not known(own):  # a train run (or one stored before scenarios)
            return out
        if known(r.get("server_queries")):  # server: what its users got, per query, at its reported point
            out |= {
                "throughput_eps": float(own),
                "throughput_of": "queries/s achieved",
                "p99_step_ms": r.get("server_p99_ms") if known(r.get("server_p99_ms")) else None,
                "p99_low_ms": r.get("server_p99_low_ms") if known(r.get("server_p99_low_ms")) else None,
                "p99_high_ms": r.get("server_p99_high_ms") if known(r.get("server_p99_high_ms")) else None,
                "p99_n": int(r["server_queries"]),
                "p99_estimable": r.get("server_p99_estimable") if known(r.get("server_p99_estimable")) else None,
                "p99_of": "per query",
                "max_qps": r.get("server_max_qps") if known(r.get("server_max_qps")) else None,
            }
            return out
        over = "examples/s over the run" if r["scenario"] == "offline" else "examples/s over all batches"
        return out | {"throughput_eps": float(own), "throughput_of": over}

    rows = df.to_dict(orient="records")
    med = median_columns([r["run_id"] for r in rows], [r["n_measured"] for r in rows], samples)
    points = [{**r, "case": r["case_name"], **figures(r, i)} for i, r in enumerate(rows)]
    rows = [asdict(p) for p in sweep(points, axis, queries.SERIES_COLUMNS, latency_budget_ms)]
    return pd.DataFrame(rows).rename(columns={"value": axis})  # SweepPoint's field order


def knee_lines(df: pd.DataFrame, axis: str, latency_budget_ms: float | None) -> list[str]:
    """One line per series of a ``sweep_frame``: its knee (case, axis value, throughput, p99 with its 95%
    interval and n, or for a run too short for one what its steps support: "not estimable", the lower bound,
    never a point), that the series has runs at one value of ``axis`` only (no knee), or that no case is within
    the budget at 95% (with the lowest p99 upper bound there is, and how many cases were too short to bound
    their p99)."""
    import pandas as pd

    from tasks.analysis.percentiles import min_samples

    def p99_text(k: pd.Series) -> str:
        if not (pd.isna(k.p99_estimable) or k.p99_estimable):  # as PercentileCI.text: the bound, never a point
            low = "" if pd.isna(k.p99_low_ms) else f": p99 >= {k.p99_low_ms:.2f} ms"
            return f"not estimable from {k.p99_n:.0f} steps at 95% (needs {min_samples(99)}){low}"
        if pd.isna(k.p99_step_ms):
            return "—"
        if pd.isna(k.p99_n):
            return f"{k.p99_step_ms:.2f} ms (no samples: no interval)"
        if pd.isna(k.p99_high_ms):
            return f"{k.p99_step_ms:.2f} ms (n={k.p99_n:.0f}: no interval kept, the run's steps were thinned)"
        low = "—" if pd.isna(k.p99_low_ms) else f"{k.p99_low_ms:.2f}"
        return f"{k.p99_step_ms:.2f} ms [{low}, {k.p99_high_ms:.2f}] (95%, n={k.p99_n:.0f})"

    def median_text(k: pd.Series) -> str:
        if "median_step_high_ms" not in k or pd.isna(k.median_step_high_ms) or pd.isna(k.median_step_low_ms):
            n = "" if "median_step_n" not in k or pd.isna(k.median_step_n) else f" (n={k.median_step_n:.0f})"
            return f"{k.median_step_ms:.2f} ms{n}"
        low, high = k.median_step_low_ms, k.median_step_high_ms
        return f"{k.median_step_ms:.2f} ms [{low:.2f}, {high:.2f}] (n={k.median_step_n:.0f})"

    def throughput_text(k: pd.Series) -> str:
        of = k.get("throughput_of") or "examples/s"
        if of == "examples/s at the median step":  # a train case: the one figure every run has
            return f"{k.throughput_eps:.1f} examples/s"
        if of == "queries/s achieved":
            best = k.get("max_qps")
            at = "" if best is None or pd.isna(best) else f" at its max QPS {best:.4g} (issued)"
            return f"{k.throughput_eps:.1f} queries/s achieved{at}"
        return f"{k.throughput_eps:.1f} {of}"

    lines = []
    for series, g in df.groupby("series", sort=True):
        knee = g[g["knee"]]
        if g[axis].nunique() < 2:  # a point, not a curve (tasks.analysis.sweep.sweep marks no knee)
            values = ", ".join(map(str, sorted(set(g[axis]), key=str)))
            lines.append(f"{series}: runs at {axis}={values} only: no knee (a sweep needs two or more values)")
        elif not knee.empty:
            k = knee.iloc[0]
            of = "" if (k.get("p99_of") or "per step") == "per step" else f"{k.p99_of} "
            lines.append(
                f"{series}: knee {k.case} ({axis}={k[axis]}): {throughput_text(k)}, "
                f"median {median_text(k)}, p99 {of}{p99_text(k)}"
            )
        else:
            lowest = g["p99_high_ms"].min()
            short = int(g["p99_high_ms"].isna().sum())
            lines.append(
                f"{series}: no case within the latency budget of {latency_budget_ms} ms at 95% (lowest p99 upper "
                + ("bound —" if pd.isna(lowest) else f"bound {lowest:.2f} ms")
                + (
                    f"; {short} case(s) too short to bound their p99: it needs {min_samples(99)} measured steps"
                    if short
                    else ""
                )
                + ")"
            )
    return lines


def mixed_versions_note(df: pd.DataFrame) -> str | None:
    """What ``perfwatch sweep`` and the model page say when a ``sweep_frame``'s points (the newest successful run
    of each case) come from more than one model version: a curve may join v4 at one batch size to v1 at another;
    None when one version measured them all."""
    versions = sorted({str(v) for v in df["version"]}, key=lambda v: (len(v), v))
    if len(versions) < 2:
        return None
    by = "; ".join(
        f"v{v}: {', '.join(sorted(df.loc[df['version'].astype(str) == v, 'case'].astype(str)))}" for v in versions
    )
    return (
        f"the newest run of each case comes from more than one model version ({by}): a curve may mix versions; "
        "give --version to sweep one"
    )


def too_little_to_sweep(df: pd.DataFrame, axis: str) -> str | None:
    """Why a ``sweep_frame`` is too little data to draw a sweep, or None when it is enough: a sweep needs
    some series (the cases that differ only in ``axis``) with runs at two or more values of ``axis``; one point
    per series is a table, not a curve. The message names the values there are and how to get more."""
    if df.empty:
        return f"too little data for a sweep along {axis}: no successful run"
    widths = df.groupby("series")[axis].nunique()
    if (widths >= 2).any():
        return None
    have = ", ".join(
        f"{s} at {axis}={', '.join(map(str, sorted(set(g[axis]), key=str)))}" for s, g in df.groupby("series")
    )
    return (
        f"too little data for a sweep along {axis}: every series has runs at one {axis} only ({have}); "
        f"run the model's matrix at two or more values of {axis} (config matrix: {axis}: [...]) and sweep again"
    )


def headroom(values: Any, margin: float = 0.15) -> float:
    """The top of an axis from 0 that shows every one of ``values`` (numbers; None and NaN skipped) with
    ``margin`` (a fraction) of room above the highest, so that no marker sits on the edge; 1.0 when none is
    positive."""
    import math

    tops = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    top = max(tops, default=0.0)
    return top * (1 + margin) if top > 0 else 1.0


def plot_sweep(
    df: pd.DataFrame, axis: str, path: str | Path, *, title: str, latency_budget_ms: float | None = None
) -> Path:
    """Draw a ``sweep_frame`` as a PNG/SVG/PDF at ``path`` (matplotlib, Agg): :func:`sweep_figure`, saved.

    Raises:
        ValueError: as :func:`sweep_figure`.
    """
    return save_figure(sweep_figure(df, axis, title=title, latency_budget_ms=latency_budget_ms), path)


def sweep_figure(df: pd.DataFrame, axis: str, *, title: str, latency_budget_ms: float | None = None) -> Any:
    """A ``sweep_frame`` as a matplotlib figure (Agg): throughput (examples/s)
    above, median and p99 step time (ms) below, against ``axis`` (numbers to scale; other values as
    categories; whole numbers such as batch sizes get one tick at each value measured, never a fractional
    tick), one line per series, the knee starred, the latency budget as a red line; the legends list only what
    is drawn (no p99 entry for a sweep without p99, no interval bars where no p99 is bounded, no knee without
    one).

    Raises:
        ValueError: ``df`` is empty, or too little data for a sweep (:func:`too_little_to_sweep`: no series
            has runs at two values of ``axis``); the message says what is missing.
    """
    plt = pyplot()

    if df.empty:
        raise ValueError("no sweep point to plot")
    if why := too_little_to_sweep(df, axis):
        raise ValueError(why)
    values = list(dict.fromkeys(sorted(df[axis], key=lambda v: (isinstance(v, str), v))))
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)

    def xs(col: pd.Series) -> list[float]:
        return list(col) if numeric else [values.index(v) for v in col]

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 7), layout="constrained")
    labelled: set[str] = set()

    def once(label: str, drawn: int) -> str | None:  # a legend entry for what is drawn, once
        if not drawn or label in labelled:
            return None
        labelled.add(label)
        return label

    for series, g in df.groupby("series", sort=True):
        (line,) = top.plot(xs(g[axis]), g["throughput_eps"], marker="o", label=series)
        color = line.get_color()  # the series' colour below; the legend there names the line styles
        median = g[g["median_step_ms"].notna()]
        bottom.plot(
            xs(median[axis]),
            median["median_step_ms"].astype(float),
            marker="o",
            color=color,
            label=once("median (solid)", len(median)),
        )
        p99 = g[g["p99_step_ms"].notna()]
        if not p99.empty:
            bottom.plot(
                xs(p99[axis]),
                p99["p99_step_ms"].astype(float),
                ls="--",
                marker=".",
                color=color,
                label=once("p99 (dashed)", len(p99)),
            )
        bounded = p99[p99["p99_high_ms"].notna() & p99["p99_low_ms"].notna()]
        if not bounded.empty:
            bottom.vlines(
                xs(bounded[axis]),
                bounded["p99_low_ms"].astype(float),
                bounded["p99_high_ms"].astype(float),
                color=color,
                label=once("p99's 95% interval (bars)", len(bounded)),
            )
        knee = g[g["knee"].astype(bool)]
        if knee.empty:
            continue
        for ax, col in (
            (top, "throughput_eps"),
            (bottom, "p99_step_ms" if knee["p99_step_ms"].notna().all() else "median_step_ms"),
        ):
            ax.scatter(
                xs(knee[axis]),
                knee[col].astype(float),
                marker="*",
                s=260,
                color=color,
                edgecolor="black",
                zorder=5,
                label=once("knee", len(knee)) if ax is top else None,
            )
    if latency_budget_ms is not None:
        bottom.axhline(latency_budget_ms, color="red", ls=":", label=f"latency budget {latency_budget_ms} ms")
    if not numeric:
        bottom.set_xticks(range(len(values)), [str(v) for v in values])
    elif all(float(v).is_integer() for v in values):  # batch sizes: a tick at each measured value, none between
        bottom.set_xticks(values, [str(int(v)) for v in values])
        bottom.minorticks_off()
    top.set_ylabel("throughput (examples/s)")
    bottom.set_ylabel("step time (ms)")
    bottom.set_xlabel(axis)
    # from 0 to 15% above the highest value drawn (a p99's upper bound, the budget): no point or star on the edge
    top.set_ylim(0, headroom(df["throughput_eps"]))
    bottom.set_ylim(
        0, headroom([*df["median_step_ms"], *df["p99_step_ms"], *df["p99_high_ms"], latency_budget_ms or 0.0])
    )
    top.set_title(title)
    top.legend(fontsize=8, loc="best")
    bottom.legend(fontsize=8, loc="best")
    return fig


def register(app: typer.Typer) -> None:
    """Add ``sweep`` to ``app``."""

    @app.command("sweep")
    def sweep_cmd(
        model: Annotated[str, typer.Argument(help="Model name in the store.")],
        axis: Annotated[
            str,
            typer.Option(
                help="The swept axis: batch_size, mode, precision, xla, strategy, quantization, scenario, "
                "tflite_threads, deterministic, device or inputs; a series is the cases that agree on every other."
            ),
        ] = "batch_size",
        latency_budget_ms: Annotated[
            float | None,
            typer.Option(
                help="Highest p99 step time (ms) the knee may have, judged on the upper bound of the p99's 95% "
                "interval (a run needs 299 measured steps to have one); default: no budget."
            ),
        ] = None,
        version: Annotated[str | None, typer.Option(help="Only runs of this model version.")] = None,
        plot: Annotated[
            Path | None,
            typer.Option(
                help="Also draw throughput and step time against the axis, knee marked, to this PNG (not drawn, "
                "with a note and exit 0, when every series has one point: a table, not a curve)."
            ),
        ] = None,
        fmt: FormatOpt = Format.table,
    ) -> None:
        """Throughput and step time (latency) along one axis of MODEL's matrix, from the newest successful
        run of each case; the knee (highest throughput within the latency budget) per series."""
        from tasks.store import queries

        try:
            url = _db_url()
            if msg := unknown_model_message(url, model):
                raise _fail(msg)
            df = sweep_frame(model, axis, latency_budget_ms, version, url)
        except (queries.QueryError, ValueError) as e:
            raise _fail(e) from None
        # said first: the table is not a sweep; a plot of one point per series is not drawn, and that is no error
        if why := too_little_to_sweep(df, axis):
            skipped = f"; no plot drawn ({plot} not written): one point per series is a table, not a curve"
            typer.echo(f"note: {why}" + (skipped if plot is not None else ""), err=True)
        from tasks.cli.history import median_cells

        # the table: each median as a cell with its interval and n (csv/json keep the bounds as columns)
        render(median_cells(df) if fmt is Format.table else df, fmt, title=f"{model}: sweep along {axis}")
        if version is None and (mixed := mixed_versions_note(df)):
            typer.echo(f"note: {mixed}", err=True)
        for line in knee_lines(df, axis, latency_budget_ms):
            typer.echo(line, err=True)
        if plot is not None and why is None:
            try:
                out = plot_sweep(
                    df, axis, plot, title=f"{model}: sweep along {axis}", latency_budget_ms=latency_budget_ms
                )
            except (ValueError, OSError) as e:
                raise _fail(e) from None
            typer.echo(f"plot: {out}", err=True)
