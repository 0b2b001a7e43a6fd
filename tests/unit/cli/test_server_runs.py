"""A server-scenario run's own figures wherever a run's figures are shown (issue 27, the serving team's audit):
`perfwatch runs` (table, csv, json) gives the rates offered, issued and achieved, the per-query percentiles with
their intervals and n, and a search's max QPS; its p99 cell is the per-query p99, not the batches' service time;
every median carries its interval and n."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from tasks.analysis.percentiles import percentile_ci
from tests.helpers.builders import archive_server_run, server_points


@pytest.fixture
def served(db_url, tmp_path) -> dict[str, int]:
    fixed = server_points([(300.0, 0.008)])  # batches of up to 4 queries, 8-12 ms each: queues form
    # a search on a host that was busy at 200 q/s (batches of 30-45 ms): it missed there, met at 300 above it
    search = server_points([(100.0, 0.004), (200.0, 0.030), (400.0, 0.012), (300.0, 0.004), (300.0, 0.004)])
    return {
        "fixed": archive_server_run(db_url, tmp_path, "fixed", fixed),
        "search": archive_server_run(db_url, tmp_path, "search", search, search=True, bound_ms=20.0),
        "points": {"fixed": fixed, "search": search},
    }


def test_runs_json_has_the_servers_rates_and_per_query_percentiles(cli, served):
    res = cli("runs", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = {r["run_id"]: r for r in json.loads(res.stdout)}
    fixed, point = rows[served["fixed"]], served["points"]["fixed"][0]
    assert fixed["scenario"] == "server" and fixed["server_offered_qps"] == 300.0
    assert fixed["server_issued_qps"] == pytest.approx(300.0) and fixed["server_queries"] == 320
    assert fixed["server_achieved_qps"] == pytest.approx(point["achieved_qps"])
    per_query = percentile_ci(point["latency_ms"], 99)
    assert (fixed["server_p99_ms"], fixed["server_p99_low_ms"], fixed["server_p99_high_ms"]) == (
        pytest.approx(per_query.point),
        pytest.approx(per_query.low),
        pytest.approx(per_query.high),
    )
    # the per-batch columns stay what they say: the batches' service time, shorter than what a query waits
    assert fixed["latency_p50_ms"] < fixed["server_p50_ms"] and fixed["latency_n"] < fixed["server_queries"]
    assert fixed["server_max_qps"] is None  # no search
    search = rows[served["search"]]
    # max QPS: the highest rate below which every rate met, 100 q/s, not 300 (200 missed between them)
    assert search["server_max_qps"] == pytest.approx(100.0) and search["server_points"] == 5
    assert search["server_findings"] == "search_non_monotonic"
    assert search["bound_outcome"] == "met" and search["latency_bound_ms"] == 20.0


def test_runs_table_shows_the_per_query_p99_and_the_qps(cli, served):
    res = cli("runs")
    assert res.exit_code == 0, res.output
    flat = " ".join(res.stdout.split())
    point = served["points"]["fixed"][0]
    p99 = percentile_ci(point["latency_ms"], 99)
    assert "per query" in flat and "qps" in flat
    assert f"run {served['fixed']} server at 300 q/s offered (issued 300): achieved" in flat
    assert f"p99 per query {p99.point:.2f} ms [{p99.low:.2f}, {p99.high:.2f}] (95%, n=320)" in flat
    assert f"run {served['search']} server search: max QPS 100 q/s issued (nominal 100)" in flat
    assert "unstable search: search_non_monotonic" in flat
    assert f"run {served['fixed']} service time per batch:" in flat  # the per-batch line says what it is


def test_every_median_has_its_interval_and_n(cli, served, db_url):
    from tasks.cli.main import runs_frame
    from tasks.store.reads import load_samples

    df = runs_frame(db_url).set_index("run_id")
    for run_id in (served["fixed"], served["search"]):
        ci = percentile_ci(load_samples(db_url, [run_id])[run_id], 50)
        row = df.loc[run_id]
        assert (row.median_step_low_ms, row.median_step_high_ms, row.median_step_n) == (ci.low, ci.high, ci.n)
        assert row.median_step_estimable is True
    csv = pd.read_csv(io.StringIO(cli("runs", "--format", "csv").stdout)).set_index("run_id")
    assert {"median_step_low_ms", "median_step_high_ms", "median_step_n", "median_cpu_n", "median_wait_n"} <= set(
        csv.columns
    )


def test_the_reported_points_per_query_latencies_are_kept_for_the_next_runs_tail_gate(db_url, tmp_path, served):
    """A server run keeps its reported point's per-query latencies (a search's max) in their own run_tables row,
    and a later run with a tail gate compares its per-query p99 with them at the same rate (the compare stage)."""
    from tasks.stages.compare import baseline_compare
    from tasks.store.reads import server_point
    from tests.helpers.builders import server_run_records

    kept = server_point(db_url, served["search"])
    at_max = [p for p in served["points"]["search"] if p["target_qps"] == 100.0]
    assert kept is not None and kept["target_qps"] == 100.0
    assert kept["latency_ms"] == pytest.approx(at_max[0]["latency_ms"], abs=1e-4)
    slow = server_points([(200.0, 0.008)], n=640)  # the baseline: 640 queries at 200 q/s, 8-12 ms a batch
    base = archive_server_run(db_url, tmp_path, "base", slow, model="g", gate_percentile=99)
    # 1.5x the service time: at 0.75 of its capacity (0.5 before) queues grow longer, the tail with them; the
    # server still keeps up (a valid point)
    worse = server_points([(200.0, 0.012)], n=640)
    ctx, pulled, env, warm, run, parsed, _ = server_run_records(tmp_path, "cand", worse, model="g", gate_percentile=99)
    verdict = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "cand" / "work")
    tail = verdict.evidence["per_query_tail"]
    assert verdict.baseline_run_ids == [base] and tail["rate_qps"] == pytest.approx(200.0)
    assert tail["verdict"] == "regression" and (tail["n_a"], tail["n_b"]) == (640, 640)
    assert verdict.verdict == "regression" and "p99 per query" in (verdict.reason or "")
    # three times the baseline's service time: 200 q/s is 1.5x its capacity (4 / 30 ms), the queue grows through
    # the run (an invalid point), a regression named as the rate the server no longer keeps up with
    over = server_points([(200.0, 0.024)], n=640)
    assert over[0]["invalid"] is not None and slow[0]["invalid"] is None
    ctx, pulled, env, warm, run, parsed, _ = server_run_records(tmp_path, "over", over, model="g", gate_percentile=99)
    lost = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "over" / "work")
    assert lost.verdict == "regression" and lost.evidence["per_query_tail"]["invalid"] == over[0]["invalid"]
    assert "this run's server did not keep up at 200 q/s where the baseline run's did" in (lost.reason or "")
