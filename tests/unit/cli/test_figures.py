"""The metrics: line orders the figures a verdict line and ``perfwatch runs`` lead with (issue 27, item 3)."""

from __future__ import annotations

import pytest

from tasks.cli.figures import figure_texts, lead_columns

LATENCY = {
    "p99": 12.3,
    "ci": {
        "p99": {
            "percentile": 99.0,
            "n": 1000,
            "point": 12.3,
            "low": 11.9,
            "high": 13.0,
            "low_rank": 983,
            "high_rank": 996,
            "confidence": 0.95,
            "coverage": 0.957,
            "estimable": True,
            "min_n": 299,
            "max_bound_confidence": 1.0,
            "supported_percentile": 99.7,
        }
    },
}


def test_figures_follow_the_metrics_line_then_the_default_lead():
    run = {"median_ms": 10.0, "throughput_eps": 1600.0, "peak_rss_bytes": 512 * 2**20, "latency": LATENCY}
    assert figure_texts(None, **run) == ["median 10.00 ms", "1600.0 examples/s at the median"]
    assert figure_texts(["throughput", "memory_usage", "step_time"], **run) == [
        "1600.0 examples/s at the median",
        "peak RSS 512.0 MiB",
        "median 10.00 ms",
    ]
    assert figure_texts(["latency"], **run) == [
        "latency p99 12.30 ms [11.90, 13.00] (95%, n=1000)",
        "median 10.00 ms",
        "1600.0 examples/s at the median",
    ]
    assert figure_texts(["latency", "memory_usage"], median_ms=10.0, throughput_eps=None) == ["median 10.00 ms"]


def test_runs_columns_lead_with_the_shared_metrics_line():
    cols = ["run_id", "case", "median_step_ms", "throughput_eps", "peak_memory", "verdict"]
    assert lead_columns(cols, None) == cols
    assert lead_columns(cols, ["throughput", "memory_usage", "step_time"]) == [
        "run_id",
        "case",
        "throughput_eps",
        "peak_memory",
        "median_step_ms",
        "verdict",
    ]


def test_the_median_carries_its_interval_and_n():
    from tasks.analysis.percentiles import percentile_ci

    ci = percentile_ci([10.0 + 0.01 * i for i in range(100)], 50)
    (text,) = figure_texts(["step_time"], median_ms=10.5, throughput_eps=None, median_ci=ci)
    assert text == f"median 10.50 ms [{ci.low:.2f}, {ci.high:.2f}] (95%, n=100 steps)"
    short = percentile_ci([10.0] * 5, 50)
    (text,) = figure_texts(["step_time"], median_ms=10.0, throughput_eps=None, median_ci=short)
    assert text == "median 10.00 ms (n=5 steps: too few for a 95% interval of the median, needs 6)"


def test_history_cells_give_the_interval_and_n_or_say_the_run_is_too_short():
    from tasks.cli.figures import ci_cell

    assert ci_cell(9.8, 9.71, 9.9, 320, 29) == "9.80 [9.71, 9.90] n=320"
    assert ci_cell(9.8, None, None, 5, 29) == "not estimable (n=5: needs 29)"  # no point the sample cannot support
    assert ci_cell(9.8, 9.71, None, 10, 29) == ">= 9.71 (n=10, too few for an interval: needs 29)"
    assert ci_cell(9.8, None, None, None) == "9.80 (no interval)" and ci_cell(None, 1, 2, 3) is None


WALL = [10.0 + i * 0.01 for i in range(10)]  # make_records' measured steps


def test_history_and_metrics_give_the_step_percentiles_intervals_and_n(db_url, tmp_path):
    """A run of 10 measured steps: its median has a 95% interval (ranks 2 and 9), its p10 and p90 do not (29
    steps needed) and say so, in ``perfwatch history``'s frame, its table cells and ``/metrics``."""
    from plugins.perfwatch.metrics import StoreCollector
    from tasks.cli.history import history_frame, spread_cells
    from tasks.stages.archive import archive_run
    from tests.helpers.builders import make_records

    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="r1"))
    df = history_frame("m", db_url=db_url)
    row = df.iloc[0]
    assert row.n_measured == 10 and row.p90_low_ms == pytest.approx(WALL[6]) and row.p90_high_ms is None
    assert row.p10_low_ms is None and row.p10_high_ms == pytest.approx(WALL[3])
    cells = spread_cells(df).iloc[0]
    assert cells.p90_step_ms == f">= {WALL[6]:.2f} (n=10, too few for an interval: needs 29)"
    assert (row.p10_estimable, row.p90_estimable) == (False, False)
    families = {f.name: f for f in StoreCollector(db_url).collect()}
    bounds = {
        (s.labels["quantile"], s.labels["bound"]): s.value
        for s in families["perfwatch_step_time_bound_seconds"].samples
    }
    assert bounds == {
        ("0.5", "low"): pytest.approx(WALL[1] / 1000),
        ("0.5", "high"): pytest.approx(WALL[8] / 1000),
        ("0.9", "low"): pytest.approx(WALL[6] / 1000),
    }
    assert [s.value for s in families["perfwatch_step_time_samples"].samples] == [10.0]


def test_a_server_run_leads_with_the_rate_it_achieved():
    # the user's report: a server run at 100 q/s offered printed "1946.6 examples/s at the median" (the batches'
    # service rate) while it achieved 86.1 q/s; the serving summary (tasks.analysis.serving.summarize) has both
    s = {"scenario": "server", "target_qps": 100.0, "achieved_qps": 86.1, "search": False, "max_qps": None}
    note = " (as `runs`, `history`, the pages and /metrics give it)"
    run = {"median_ms": 2.055, "throughput_eps": 86.1, "latency": {**LATENCY, "serving": s}}
    assert figure_texts(None, **run, throughput_note=note) == [
        "median 2.06 ms",
        "86.1 queries/s achieved (86.1 examples/s) at 100 q/s offered" + note,  # the run's one throughput
    ]
    offline = {**run, "throughput_eps": 1946.6, "latency": {"serving": {**s, "scenario": "offline"}}}
    assert figure_texts(None, **offline)[1] == "1946.6 examples/s over the run"  # offline's: over its wall time
    single = {**run, "throughput_eps": 1946.6, "latency": {"serving": {**s, "scenario": "single-stream"}}}
    assert figure_texts(None, **single)[1] == "1946.6 examples/s at the median"


def test_a_server_runs_latency_lead_is_the_per_query_p99():
    """The audit: `metrics: [latency]` led a server case with the per-batch p99 (its batches' service time)."""
    per_query = {**LATENCY["ci"]["p99"], "n": 299, "point": 268.0, "low": 164.0, "high": 282.0}
    s = {"scenario": "server", "target_qps": 50.0, "achieved_qps": 49.0, "latency": {"p99": per_query}}
    run = {"median_ms": 9.1, "throughput_eps": 440.0, "latency": {**LATENCY, "serving": s}}
    (lead, *_) = figure_texts(["latency"], **run)
    assert lead == "latency p99 per query 268.00 ms [164.00, 282.00] (95%, n=299)"
    assert figure_texts(["latency"], median_ms=9.1, throughput_eps=440.0, latency=LATENCY)[0] == (
        "latency p99 12.30 ms [11.90, 13.00] (95%, n=1000)"  # single-stream: per batch, as before
    )


def test_history_gives_the_median_its_interval_and_n_and_a_thinned_run_its_n(db_url, tmp_path, cli):
    """The median step time's cell in `perfwatch history` (and the csv/json bounds), as p10 and p90 have them: the
    ranks 2 and 9 of 10 steps; a run whose samples were thinned keeps its n and says it has no interval."""
    import json

    from tasks.cli.history import history_frame, median_cells
    from tasks.stages.archive import archive_run
    from tests.helpers.builders import make_records

    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="r1"))
    row = history_frame("m", db_url=db_url).iloc[0]
    assert (row.median_step_low_ms, row.median_step_high_ms) == (pytest.approx(WALL[1]), pytest.approx(WALL[8]))
    assert row.median_step_estimable is True
    cell = median_cells(history_frame("m", db_url=db_url)).iloc[0].median_step_ms
    assert cell == f"10.000 [{WALL[1]:.3f}, {WALL[8]:.3f}] n=10"
    (got,) = json.loads(cli("history", "m", "--format", "json").stdout)
    assert got["median_step_low_ms"] == pytest.approx(WALL[1]) and got["median_step_high_ms"] == pytest.approx(WALL[8])
    table = cli("history", "m")
    assert table.exit_code == 0 and f"[{WALL[1]:.3f}," in table.stdout
    from tasks.cli.figures import median_cell

    assert median_cell(10.0, None, None, 320) == "10.000 (n=320, no interval: samples thinned)"
    assert median_cell(10.0, None, None, 4) == "not estimable (n=4: needs 6)"
