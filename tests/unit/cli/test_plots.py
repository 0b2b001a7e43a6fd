"""CLI plots that tell the truth (issue 25): ``history --plot`` has one panel per case on its own scale, never
joins two versions with one line, takes its time axis from the runs' span (runs minutes apart: minutes; a single
run: an hour, not years) and keeps version labels apart; ``sweep --plot`` ticks batch sizes at
the measured values and says when there is too little data for a sweep instead of drawing one point."""

from __future__ import annotations

import matplotlib.dates as mdates
import pandas as pd
import pytest

from tasks.cli.history import history_figure, label_rows, time_window, version_segments
from tasks.cli.sweep import sweep_figure, too_little_to_sweep
from tests.helpers.builders import add_run

T0 = pd.Timestamp("2026-03-01T02:00Z")


def history(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    """A history frame (the columns ``plot_history`` reads): one run a day per (case, version, median ms)."""
    out, last = [], {}
    for i, (case, version, median) in enumerate(rows):
        changed = int(case in last and last[case] != version)
        last[case] = version
        out.append(
            {
                "run_id": i + 1,
                "started_at": T0 + pd.Timedelta(days=i),
                "case_name": case,
                "case_label": None,
                "version": version,
                "status": "success",
                "verdict": "pass",
                "median_step_ms": median,
                "p10_step_ms": median * 0.95,
                "p90_step_ms": median * 1.05,
                "baseline_median_ms": None,
                "env_key": "k",
                "fingerprint_id": "f",
                "version_changed": changed,
                "env_changed": 0,
            }
        )
    return pd.DataFrame(out)


def test_history_plot_has_a_panel_per_case_and_never_joins_two_versions():
    df = history(
        [("fast", "1", 1.4), ("fast", "1", 1.5), ("slow", "1", 300.0), ("fast", "2", 2.9), ("slow", "2", 310.0)]
    )
    fig = history_figure(df, title="t")
    axes = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert [ax.get_title(loc="left") for ax in axes] == ["fast", "slow"]
    fast, slow = axes
    assert fast.get_ylim()[1] < 5 and slow.get_ylim()[1] > 300  # each case on its own scale
    version_at = {mdates.date2num(t): v for t, v in zip(df["started_at"], df["version"], strict=True)}
    for ax in axes:
        medians = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        assert len(medians) == 2  # one line per version
        for ln in medians:
            xs = mdates.date2num(ln.get_xdata())
            assert len({version_at[x] for x in xs}) == 1, "a line joins two versions"


def test_a_one_run_history_plot_spans_an_hour_not_years():
    fig = history_figure(history([("fast", "1", 1.4)]), title="one run")
    left, right = fig.axes[0].get_xlim()
    assert right - left == pytest.approx(1 / 24)  # days (matplotlib's date unit): half an hour each side
    lo, hi = time_window(pd.Series([T0, T0 + pd.Timedelta(days=100)]))
    assert (lo, hi) == (T0 - pd.Timedelta(days=5), T0 + pd.Timedelta(days=105))


def minutes_apart(versions: list[tuple[str, float]]) -> pd.DataFrame:
    """A history frame of one case whose runs started ``minutes`` after the first, as ``make demo`` makes them:
    (version, minutes) per run, oldest first."""
    df = history([("train-bs16", v, 60.0 if v == "1" else 100.0) for v, _ in versions])
    df["started_at"] = [T0 + pd.Timedelta(minutes=m) for _, m in versions]
    return df


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize(
    "runs",
    [
        [("1", 0), ("2", 4)],  # make demo: v1, then v2 four minutes later
        [("1", 0), ("2", 0.5), ("3", 1), ("3", 3 * 24 * 60)],  # three versions within a minute, then days later
    ],
)
def test_runs_minutes_apart_get_an_axis_of_their_span_and_version_labels_that_do_not_overlap(runs):
    """``make demo``'s runs are minutes apart: the time axis is their span padded by 5% a side (not 12 hours of
    padding that squeezed them into one spot), and the version labels ("v1", "v2") never sit on each other."""
    df = minutes_apart(runs)
    span_days = (df["started_at"].max() - df["started_at"].min()) / pd.Timedelta(days=1)
    fig = history_figure(df, title="t")
    ax = fig.axes[0]
    left, right = ax.get_xlim()
    assert right - left == pytest.approx(span_days * 1.1, rel=0.01)  # proportional to the runs' span
    fig.canvas.draw()
    labels = [t for t in ax.texts if t.get_text().startswith("v")]
    assert sorted(t.get_text() for t in labels) == sorted({f"v{v}" for v, _ in runs})
    boxes = [t.get_window_extent() for t in labels]
    clashes = [
        (labels[i].get_text(), labels[j].get_text())
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if _overlap(boxes[i], boxes[j])
    ]
    assert clashes == []
    axes_box = ax.get_window_extent()
    assert all(axes_box.y0 <= b.y0 and b.y1 <= axes_box.y1 for b in boxes)  # inside the panel


def test_the_model_pages_chart_has_the_same_axis_and_labels_that_do_not_overlap():
    """The model page's plotly chart (``plugins.perfwatch.charts.trend_figure``): the same time axis, and version
    labels close in time shifted a row lower (boxes on a ``PLOT_PX`` wide plot)."""
    from plugins.perfwatch.charts import LABEL_PX, PLOT_PX, trend_figure
    from tasks.cli.history import label_width

    df = minutes_apart([("1", 0), ("2", 0.5), ("3", 1), ("3", 3 * 24 * 60)])
    df["baseline_run_id"] = None
    df["fingerprint_changed"] = 0
    fig = trend_figure(df)
    lo, hi = (pd.Timestamp(x) for x in fig.layout.xaxis.range)
    span = df["started_at"].max() - df["started_at"].min()
    assert (hi - lo) / span == pytest.approx(1.1)
    notes = [a for a in fig.layout.annotations if a.text in ("v2", "v3")]
    assert len(notes) == 2
    boxes = []
    for a in notes:
        x = (pd.Timestamp(a.x) - lo) / (hi - lo) * PLOT_PX
        y = -(a.yshift or 0)
        boxes.append((x, x + label_width(a.text, LABEL_PX), y, y + LABEL_PX))
    (ax0, ax1, ay0, ay1), (bx0, bx1, by0, by1) = boxes
    assert not (ax0 < bx1 and bx0 < ax1 and ay0 < by1 and by0 < ay1)


def test_label_rows_puts_a_label_a_row_lower_only_when_it_would_overlap():
    assert label_rows([0, 100, 200], [50, 50, 50]) == [0, 0, 0]
    assert label_rows([0, 10, 20, 100], [50, 50, 50, 50]) == [0, 1, 2, 0]
    assert label_rows([20, 0, 10], [50, 50, 50]) == [2, 0, 1]  # in order of position, whatever the input order
    assert label_rows([], []) == []


def test_version_segments_split_where_the_version_changes():
    df = history([("a", "1", 1.0), ("a", "1", 1.0), ("a", "2", 2.0), ("a", "1", 1.0)])
    assert [list(g["run_id"]) for g in version_segments(df)] == [[1, 2], [3], [4]]
    assert version_segments(df.iloc[:0]) == []


def sweep(batch_sizes: list[int], series: str = "all") -> pd.DataFrame:
    rows = [
        {
            "series": series,
            "batch_size": b,
            "case": f"train-bs{b}",
            "throughput_eps": 100.0 * b,
            "median_step_ms": 1.0 + b / 10,
            "p99_step_ms": 1.2 + b / 10,
            "p99_low_ms": 1.1 + b / 10,
            "p99_high_ms": 1.3 + b / 10,
            "knee": b == max(batch_sizes),
        }
        for b in batch_sizes
    ]
    return pd.DataFrame(rows)


def test_a_sweep_ticks_batch_sizes_at_the_measured_values():
    fig = sweep_figure(sweep([8, 16, 64]), "batch_size", title="t")
    bottom = fig.axes[1]
    assert list(bottom.get_xticks()) == [8, 16, 64]
    assert [t.get_text() for t in bottom.get_xticklabels()] == ["8", "16", "64"]


def test_a_sweeps_axes_leave_room_above_the_highest_point():
    """The step-time axis was capped at the data's maximum (all points 1.0 ms: drawn on the top edge, their stars
    cut): each axis runs from 0 to above the highest thing drawn on it, p99 bounds and the budget included."""
    flat = sweep([4, 8]).assign(median_step_ms=1.0, p99_step_ms=1.0, p99_low_ms=1.0, p99_high_ms=1.0)
    top, bottom = sweep_figure(flat, "batch_size", title="t").axes[:2]
    assert top.get_ylim()[0] == 0 and top.get_ylim()[1] >= 1.1 * flat["throughput_eps"].max()
    assert bottom.get_ylim()[0] == 0 and bottom.get_ylim()[1] >= 1.1
    budget = sweep_figure(flat, "batch_size", title="t", latency_budget_ms=5.0).axes[1]
    assert budget.get_ylim()[1] >= 5.5


def test_one_batch_size_is_too_little_data_for_a_sweep():
    one = sweep([16])
    why = too_little_to_sweep(one, "batch_size")
    assert why is not None and "too little data for a sweep along batch_size" in why and "batch_size=16" in why
    with pytest.raises(ValueError, match="too little data for a sweep"):
        sweep_figure(one, "batch_size", title="t")
    assert too_little_to_sweep(pd.concat([one, sweep([8, 32], "precision=x")]), "batch_size") is None


def test_sweep_plot_command_says_too_little_data(cli, db_url, tmp_path):
    """Issue 35 item 8: the README's `perfwatch sweep demo_mobilenet --latency-budget-ms 50 --plot sweep.png` exited 1
    right after `make demo` (one batch size). One point per series is an answer, not an error: the table, the note
    first (no plot drawn, and why), exit 0; no one-point plot is written."""
    add_run(db_url, tmp_path, "r1", model="demo", batch_size=16)
    res = cli("sweep", "demo", "--latency-budget-ms", "50", "--plot", tmp_path / "sweep.png")
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("note: too little data for a sweep along batch_size: every series has runs at one")
    assert f"no plot drawn ({tmp_path / 'sweep.png'} not written): one point per series" in res.stderr
    assert "all: runs at batch_size=16 only: no knee" in res.stderr and "train-bs16" in res.stdout
    assert "plot:" not in res.stderr
    assert not (tmp_path / "sweep.png").exists()
    res = cli("sweep", "demo")
    assert res.exit_code == 0 and "note: too little data for a sweep" in res.stderr


def test_the_model_pages_chart_labels_every_panel_and_draws_single_runs_failed_cases_and_undecided_runs():
    """The audit's model page: the time labels sat on the last (empty) panel only; a case whose only run failed was
    a blank panel; a version with one run drew no line (a one-point line), no band and no baseline; inconclusive
    runs had no marker of their own. Now every panel has time labels, the failed case's panel says why it is
    empty, a single run is a marker with its p10–p90 as an error bar and its baseline a dash marker, and
    inconclusive runs have a legend entry like regressions."""
    from plugins.perfwatch.charts import trend_figure

    df = history([("train-bs16", "1", 100.0), ("train-bs16", "2", 270.0), ("train-bs16", "2", 280.0)])
    df.loc[1, ["verdict", "baseline_median_ms", "baseline_run_id"]] = ["inconclusive", 100.0, 1]
    df.loc[2, "verdict"] = "regression"
    df = df.drop(index=2)  # v2 has a single run
    failed = {**df.iloc[0].to_dict(), "run_id": 9, "case_name": "train-bs16-gpu", "status": "failed"}
    failed |= {"verdict": None, "median_step_ms": None, "p10_step_ms": None, "p90_step_ms": None}
    df = pd.concat([df, pd.DataFrame([failed | {"failed_stage": "env-fingerprint"}])], ignore_index=True)
    fig = trend_figure(df)
    axes = [k for k in fig.layout if k.startswith("xaxis")]
    assert len(axes) == 2 and all(fig.layout[k].showticklabels for k in axes)
    (empty,) = [a for a in fig.layout.annotations if "no successful run" in a.text]
    assert "run 9 failed at env-fingerprint" in empty.text and empty.yref == "y2 domain"
    (v2,) = [t for t in fig.data if t.name == "v2 median"]
    assert list(v2.y) == [270.0] and list(v2.error_y.array) == [pytest.approx(13.5)]
    assert list(v2.error_y.arrayminus) == [pytest.approx(13.5)]
    (base,) = [t for t in fig.data if t.name == "compared baseline's median"]
    assert base.mode == "markers" and list(base.y) == [100.0]  # one point: a marker, not an empty line
    (undecided,) = [t for t in fig.data if t.name == "inconclusive"]
    assert undecided.showlegend and list(undecided.customdata) == [2] and undecided.marker.symbol == "circle-open"
    bands = [t for t in fig.data if t.name == "p10–p90 of the run's steps"]
    assert bands == []  # one run per version here: error bars, no band of one point


def test_history_plot_marks_inconclusive_runs_with_a_legend_entry_of_their_own():
    """``history --plot`` drew an inconclusive run as a pass: it is ringed, and the legend says inconclusive."""
    df = history([("fast", "1", 1.4), ("fast", "1", 1.5), ("fast", "1", 1.6)])
    df.loc[1, "verdict"] = "inconclusive"
    df.loc[2, "verdict"] = "regression"
    fig = history_figure(df, title="t")
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert "inconclusive (undecided)" in labels and "regression" in labels
    (ax,) = [ax for ax in fig.axes if ax.get_title(loc="left")]
    (ring,) = [c for c in ax.collections if c.get_label() == "inconclusive (undecided)"]
    assert [tuple(p) for p in ring.get_offsets()] == [(mdates.date2num(df.loc[1, "started_at"]), 1.5)]


def _legend(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def test_a_sweeps_legend_lists_only_what_is_drawn():
    """The legend named a p99 line and its interval bars, drawn or not (a training sweep has no p99), and
    the knee only where the first series had one: each entry is there when, and only when, it is drawn."""
    train = sweep([8, 16]).assign(p99_step_ms=None, p99_low_ms=None, p99_high_ms=None, knee=False)
    top, bottom = sweep_figure(train, "batch_size", title="t").axes[:2]
    assert _legend(bottom) == ["median (solid)"] and _legend(top) == ["all"]
    unbounded = sweep([8, 16]).assign(p99_low_ms=None, p99_high_ms=None)
    assert _legend(sweep_figure(unbounded, "batch_size", title="t").axes[1]) == ["median (solid)", "p99 (dashed)"]
    both = pd.concat([sweep([8, 16], "a").assign(knee=False), sweep([8, 16], "b")])
    top, bottom = sweep_figure(both, "batch_size", title="t").axes[:2]
    assert _legend(top) == ["a", "b", "knee"]
    assert _legend(bottom) == ["median (solid)", "p99 (dashed)", "p99's 95% interval (bars)"]
