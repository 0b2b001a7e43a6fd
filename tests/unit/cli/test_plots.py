"""CLI plots that tell the truth (issue 25): ``history --plot`` has one panel per case on its own scale, never
joins two versions with one line and gives a single run a day-scale axis; ``sweep --plot`` ticks batch sizes at
the measured values and says when there is too little data for a sweep instead of drawing one point."""

from __future__ import annotations

import matplotlib.dates as mdates
import pandas as pd
import pytest

from tasks.cli.history import history_figure, time_window, version_segments
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


def test_a_one_run_history_plot_spans_a_day_not_years():
    fig = history_figure(history([("fast", "1", 1.4)]), title="one run")
    left, right = fig.axes[0].get_xlim()
    assert 0.4 <= right - left <= 1.0  # days (matplotlib's date unit): the 6-hour padding each side
    lo, hi = time_window(pd.Series([T0, T0 + pd.Timedelta(days=100)]))
    assert (lo, hi) == (T0 - pd.Timedelta(days=5), T0 + pd.Timedelta(days=105))


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


def test_one_batch_size_is_too_little_data_for_a_sweep():
    one = sweep([16])
    why = too_little_to_sweep(one, "batch_size")
    assert why is not None and "too little data for a sweep along batch_size" in why and "batch_size=16" in why
    with pytest.raises(ValueError, match="too little data for a sweep"):
        sweep_figure(one, "batch_size", title="t")
    assert too_little_to_sweep(pd.concat([one, sweep([8, 32], "precision=x")]), "batch_size") is None


def test_sweep_plot_command_says_too_little_data(cli, db_url, tmp_path):
    add_run(db_url, tmp_path, "r1", model="demo", batch_size=16)
    res = cli("sweep", "demo", "--plot", tmp_path / "sweep.png")
    assert res.exit_code == 1 and "too little data for a sweep along batch_size" in res.stderr
    assert not (tmp_path / "sweep.png").exists()
    res = cli("sweep", "demo")
    assert res.exit_code == 0 and "note: too little data for a sweep" in res.stderr
