"""`perfwatch history` of an infer case gives its p99 latency with its interval and n (issue 27: every percentile
perfwatch prints has its interval and sample size), per batch for single-stream and per query for a server case,
as `perfwatch runs` does; csv and json have the same latency_* (and server_*) columns as `perfwatch runs` json."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from tasks.analysis.percentiles import percentile_ci
from tests.helpers.builders import archive_scenario_run, archive_server_run, server_points


@pytest.fixture
def infer_runs(db_url, tmp_path) -> dict:
    steps = [8.0 + 0.01 * (i % 97) for i in range(320)]
    point = server_points([(300.0, 0.008)])
    return {
        "single": archive_scenario_run(db_url, tmp_path, "one", "single-stream", steps, model="m"),
        "server": archive_server_run(db_url, tmp_path, "srv", point, model="m"),
        "steps": steps,
        "queries": point[0]["latency_ms"],
    }


def test_history_table_shows_the_p99_latency_with_interval_and_n(cli, infer_runs, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # a wide terminal: each cell on one line
    res = cli("history", "m")
    assert res.exit_code == 0, res.output
    flat = " ".join(res.stdout.split())
    per_batch = percentile_ci(infer_runs["steps"], 99)
    per_query = percentile_ci(infer_runs["queries"], 99)
    assert "p99 latency ms" in flat
    assert f"{per_batch.point:.2f} [{per_batch.low:.2f}, {per_batch.high:.2f}] n=320" in flat
    assert f"{per_query.point:.2f} [{per_query.low:.2f}, {per_query.high:.2f}] n=320 per query" in flat


def test_history_json_and_csv_have_the_runs_latency_columns(cli, infer_runs):
    runs = {r["run_id"]: r for r in json.loads(cli("runs", "--format", "json").stdout)}
    history = {r["run_id"]: r for r in json.loads(cli("history", "m", "--format", "json").stdout)}
    lat = [k for k in runs[infer_runs["single"]] if k.startswith(("latency_", "server_"))]
    assert "latency_p99_low_ms" in lat and "server_p99_high_ms" in lat
    for rid in (infer_runs["single"], infer_runs["server"]):
        for k in lat:
            assert history[rid][k] == runs[rid][k], (rid, k)
    csv = pd.read_csv(io.StringIO(cli("history", "m", "--format", "csv").stdout))
    assert {"latency_n", "latency_p99_ms", "latency_p99_low_ms", "latency_p99_high_ms", "server_p99_ms"} <= set(
        csv.columns
    )
