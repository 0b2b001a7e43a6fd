"""An infer run's latency percentiles with their intervals and n: stored with the run, in `perfwatch runs`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from tasks.analysis.percentiles import percentile_ci, with_intervals
from tasks.cli.figures import p99_cell
from tasks.stages.archive import archive_run
from tests.helpers.builders import make_records


def _infer_run(url, tmp, name, times):
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp, dag_run_id=name)
    ctx = ctx.model_copy(update={"case": ctx.case.model_copy(update={"mode": "infer"})})
    summary = {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": max(times), "throughput_eps": 100.0}
    for q in (50, 90, 99):
        summary[f"p{q}"] = float(np.percentile(times, q, method="inverted_cdf"))  # as the runner's
    samples = json.loads(Path(run.samples_path).read_text())
    samples.update(case_mode="infer", inputs={"x": {"shape": [1, 4], "dtype": "float32", "min": None, "max": None}})
    samples["latency_ms"] = summary  # the runner's record: points only
    Path(run.samples_path).write_text(json.dumps(samples))
    run = run.model_copy(update={"latency_ms": with_intervals(summary, times)})  # what the profile stage passes
    return archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id


def test_runs_json_has_the_latency_percentiles_with_intervals_and_n(cli, db_url, tmp_path):
    rng = np.random.default_rng(7)
    long, short = list(rng.lognormal(1.0, 0.3, 1000)), list(rng.lognormal(1.0, 0.3, 100))
    ids = (_infer_run(db_url, tmp_path, "long", long), _infer_run(db_url, tmp_path, "short", short))
    res = cli("runs", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = {r["run_id"]: r for r in json.loads(res.stdout)}
    got, want = rows[ids[0]], percentile_ci(long, 99)
    assert got["latency_n"] == 1000 and got["latency_confidence"] == 0.95
    assert (got["latency_p99_ms"], got["latency_p99_low_ms"], got["latency_p99_high_ms"]) == (
        pytest.approx(want.point),
        pytest.approx(want.low),
        pytest.approx(want.high),
    )
    assert got["latency_p50_low_ms"] <= got["latency_p50_ms"] <= got["latency_p50_high_ms"]
    assert [got[f"latency_p{q}_estimable"] for q in (50, 90, 99)] == [True, True, True]
    brief = rows[ids[1]]  # 100 batches cannot bound a p99 at 95%: no upper bound, never a made-up one
    assert brief["latency_n"] == 100 and brief["latency_p99_high_ms"] is None and brief["latency_p99_low_ms"] > 0
    # ... and no point either (issue 27): the text says "p99 not estimable", so do the columns
    assert brief["latency_p99_estimable"] is False and brief["latency_p99_ms"] is None
    assert brief["latency_p99_low_ms"] == pytest.approx(percentile_ci(short, 99).low)  # the bound it supports
    assert brief["latency_p90_estimable"] is True and brief["latency_p90_ms"] == pytest.approx(
        percentile_ci(short, 90).point
    )
    assert p99_cell(got) == f"{want.point:.2f} [{want.low:.2f}, {want.high:.2f}] n=1000"  # the table's cell
    assert p99_cell(brief) == f">= {brief['latency_p99_low_ms']:.2f} (n=100, no upper bound)"
    table = cli("runs")
    assert table.exit_code == 0
    from tasks.analysis.percentiles import latency_text
    from tasks.store.series import run_latencies

    stored = run_latencies(list(ids), db_url)
    for run_id in ids:  # every percentile with its interval (or what the sample supports) and n, as `run` prints
        line = f"  run {run_id} latency per batch: {latency_text(stored[run_id])}"
        assert line in table.output.splitlines(), table.output
    assert "n=1000 batches" in table.output and "p50 " in table.output and "p90 " in table.output
    csv = cli("runs", "--format", "csv")
    assert csv.exit_code == 0, csv.output
    assert "latency_p99_estimable" in csv.stdout.splitlines()[0].split(",")


def test_runs_csv_has_no_point_for_a_p99_that_is_not_estimable(cli, db_url, tmp_path):
    import pandas as pd

    times = list(np.random.default_rng(9).lognormal(1.0, 0.3, 291))  # the user's report: n=291 < 299
    run_id = _infer_run(db_url, tmp_path, "short", times)
    res = cli("runs", "--format", "csv")
    assert res.exit_code == 0, res.output
    row = pd.read_csv(io.StringIO(res.stdout)).set_index("run_id").loc[run_id]
    assert pd.isna(row["latency_p99_ms"]) and pd.isna(row["latency_p99_high_ms"])
    assert not row["latency_p99_estimable"] and row["latency_p99_low_ms"] == pytest.approx(percentile_ci(times, 99).low)
    assert row["latency_p50_estimable"] and row["latency_p50_ms"] == pytest.approx(percentile_ci(times, 50).point)


def test_metrics_export_the_latency_percentiles_with_their_bounds_and_n(db_url, tmp_path):
    pytest.importorskip("prometheus_client")
    from plugins.perfwatch.metrics import StoreCollector

    times = list(np.random.default_rng(8).lognormal(1.0, 0.3, 100))
    _infer_run(db_url, tmp_path, "short", times)
    families = {f.name: f for f in StoreCollector(db_url).collect()}
    points = {s.labels["quantile"]: s.value for s in families["perfwatch_latency_seconds"].samples}
    assert "0.99" not in points  # 100 batches support no p99: its point is not exported, its bound is
    assert points["0.9"] == pytest.approx(percentile_ci(times, 90).point / 1000)
    step = {s.labels["quantile"] for s in families["perfwatch_step_time_seconds"].samples}
    assert step == {"0.5"}  # the run's 10 measured steps: a median with its interval, no p90 (needs 29)
    bounds = {
        (s.labels["quantile"], s.labels["bound"]): s.value for s in families["perfwatch_latency_bound_seconds"].samples
    }
    want = percentile_ci(times, 50)
    assert bounds[("0.5", "low")] == pytest.approx(want.low / 1000) and ("0.99", "high") not in bounds  # 100 < 299
    ok = {s.labels["quantile"]: s.value for s in families["perfwatch_latency_estimable"].samples}
    assert ok == {"0.5": 1.0, "0.9": 1.0, "0.99": 0.0}
    assert [s.value for s in families["perfwatch_latency_samples"].samples] == [100.0]
