"""The named queries (sql/queries/*.sql) through tasks.store.queries, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tasks.cli.history import env_changes
from tasks.cli.main import runs_frame
from tasks.store import queries
from tasks.store.engine import StoreUnreachable
from tests.helpers.builders import T0, add_failure, add_run


@pytest.fixture
def story(db_url, tmp_path) -> dict[str, int]:
    """m: v1 baseline, v1 pass, a failed run, v2 regression in a new environment; plus model 'other'."""
    ids = {"r1": add_run(db_url, tmp_path, "r1", verdict="no-baseline", median=10.0, day=0)}
    ids["r2"] = add_run(db_url, tmp_path, "r2", median=10.5, day=1, baseline=ids["r1"], ratio=1.05)
    ids["f"] = add_failure(db_url, tmp_path, "f", day=2)
    ids["r3"] = add_run(
        db_url,
        tmp_path,
        "r3",
        version="2",
        verdict="regression",
        median=13.0,
        day=3,
        fp="e",
        env_data={"tf": {"version": "2.21"}},
        baseline=ids["r2"],
        ratio=1.3,
    )
    ids["o1"] = add_run(db_url, tmp_path, "o1", model="other", verdict="no-baseline", median=99.0, day=3)
    return ids


def test_history_is_the_trend_of_one_model(db_url, story):
    df = queries.history("m", db_url=db_url)
    assert list(df["run_id"]) == [story["r1"], story["r2"], story["f"], story["r3"]]
    assert list(df["version"]) == ["1", "1", "latest", "2"]
    assert list(df["status"]) == ["success", "success", "failed", "success"]
    assert df["started_at"].dt.tz is not None and df["started_at"].iloc[0] == T0
    first = df.iloc[0]
    # nearest-rank p10/p90 of the samples 10.00, 10.01, ... 10.09
    assert (first.p10_step_ms, first.p90_step_ms, first.n_measured) == (pytest.approx(10.0), pytest.approx(10.08), 10)
    failed, last = df.iloc[2], df.iloc[3]
    assert failed.failed_stage == "warm-up" and pd_isna(failed.median_step_ms)
    assert last.baseline_run_id == story["r2"] and last.baseline_median_ms == pytest.approx(10.5)
    assert (last.ratio, last.ci_low, last.ci_high) == (pytest.approx(1.3), pytest.approx(1.2), pytest.approx(1.4))
    # the failed run (no version resolved, no fingerprint) does not hide or fake a change
    assert list(df["version_changed"]) == [0, 0, 0, 1]
    assert list(df["env_changed"]) == [0, 0, 0, 1]


def pd_isna(v) -> bool:
    import pandas as pd

    return bool(pd.isna(v))


def test_history_filters_case_and_limit(db_url, story, tmp_path):
    other_case = add_run(db_url, tmp_path, "bs32", batch_size=32, day=4)
    assert list(queries.history("m", "train-bs32", db_url)["run_id"]) == [other_case]
    assert list(queries.history("m", db_url=db_url, limit=2)["run_id"]) == [story["r3"], other_case]
    assert queries.history("nobody", db_url=db_url).empty


def test_user_input_is_bound_not_formatted(db_url, story):
    assert queries.history("m' OR '1'='1", db_url=db_url).empty
    assert queries.run_query("runs", db_url, model="x' OR 1=1 --", limit=None).empty


def test_version_compare(db_url, story):
    df = queries.version_compare("m", "1", "2", db_url=db_url)
    # versions run in different environments: one row per environment key
    assert sorted(df["env_key"]) == ["key-e", "key-f"]
    v1 = df[df["env_key"] == "key-f"].iloc[0]
    assert (v1.runs_a, v1.runs_b, v1.a_last_run_id) == (2, 0, story["r2"])
    assert v1.a_median_step_ms == pytest.approx(10.25) and pd_isna(v1.ratio_b_to_a)


def test_version_compare_ratio_in_one_environment(db_url, tmp_path):
    a = add_run(db_url, tmp_path, "a", version="1", median=10.0, verdict="no-baseline")
    b = add_run(db_url, tmp_path, "b", version="2", median=12.0, day=1)
    row = queries.version_compare("m", 1, 2, db_url=db_url).iloc[0]
    assert (row.a_last_run_id, row.b_last_run_id) == (a, b)
    assert row.ratio_b_to_a == pytest.approx(1.2)


def test_regressions_in_a_window(db_url, story):
    day3 = T0 + dt.timedelta(days=3)
    df = queries.regressions(day3, day3 + dt.timedelta(days=1), db_url=db_url)
    assert list(df["run_id"]) == [story["r3"]]
    assert df.iloc[0].baseline_median_ms == pytest.approx(10.5) and df.iloc[0].version == "2"
    assert queries.regressions("2026-03-05", db_url=db_url).empty  # naive ISO date: UTC
    assert queries.regressions("2026-03-01", db_url=db_url, model="other").empty
    with pytest.raises(queries.QueryError, match="empty time window"):
        queries.regressions("2026-03-05", "2026-03-01", db_url=db_url)


def test_env_changes_names_the_changed_fields(db_url, story):
    df = env_changes("2026-03-01", db_url=db_url)
    assert len(df) == 1
    row = df.iloc[0]
    assert (row.prev_run_id, row.run_id, row.model) == (story["r2"], story["r3"], "m")
    assert (row.from_env_key, row.to_env_key, row.affects_comparability) == ("key-f", "key-e", 1)
    assert "tf.version" in row.changed_fields
    assert env_changes("2026-03-05", db_url=db_url).empty


def test_top_op_regressions_per_profiled_step(db_url, tmp_path):
    a = add_run(db_url, tmp_path, "a", ops=[("conv", "Conv2D", 100.0), ("relu", "Relu", 50.0)])
    b = add_run(
        db_url, tmp_path, "b", day=1, ops=[("conv", "Conv2D", 300.0), ("relu", "Relu", 40.0), ("new", "MatMul", 20.0)]
    )
    df = queries.top_op_regressions(a, b, db_url=db_url)
    assert list(df["op_name"]) == ["conv", "new", "relu"]
    conv, new = df.iloc[0], df.iloc[1]
    # make_records keeps 2 profiled steps: self-time per step is half the window's total
    assert (conv.a_us_per_step, conv.b_us_per_step, conv.delta_us_per_step) == (50.0, 150.0, 100.0)
    assert (new.a_total_us, new.b_total_us, new.b_occurrences) == (0.0, 20.0, 2)
    assert conv.ratio == pytest.approx(3.0)
    assert list(queries.top_op_regressions(a, b, limit=1, db_url=db_url)["op_name"]) == ["conv"]


def test_failures_and_why(db_url, story):
    df = queries.failures("2026-03-01", db_url=db_url)
    assert list(df["run_id"]) == [story["f"]]
    row = df.iloc[0]
    assert (row.failed_stage, row.reason) == ("warm-up", "RunnerError: training step failed")
    assert "Traceback" in row.error
    assert queries.failures("2026-03-04", db_url=db_url).empty


def test_runs_frame_keeps_its_contract(db_url, story):
    df = runs_frame(db_url, "m")
    assert list(df.columns) == [
        "run_id",
        "started_at",
        "model",
        "version",
        "case",
        "case_label",
        "mode",
        "batch_size",
        "precision",
        "xla",
        "strategy",
        "quantization",
        "inputs",
        "safe_mode",
        "status",
        "trigger",
        "median_step_ms",
        "median_cpu_ms",
        "median_wait_ms",
        "median_step_low_ms",  # the median's 95% interval and n (issue 27), the CPU and wait medians' n
        "median_step_high_ms",
        "median_step_n",
        "median_step_estimable",
        "median_cpu_n",
        "median_wait_n",
        "throughput_eps",
        "latency_n",
        *(f"latency_{q}{c}" for q in ("p50", "p90", "p99") for c in ("_ms", "_low_ms", "_high_ms", "_estimable")),
        "latency_confidence",
        # the scenario's own figures: a server run's rates and per-query percentiles, a search's max QPS
        "scenario",
        "scenario_throughput_eps",
        "latency_bound_ms",
        "latency_percentile",
        "bound_outcome",
        "server_offered_qps",
        "server_issued_qps",
        "server_achieved_qps",
        "server_queries",
        "server_invalid",
        *(f"server_{q}{c}" for q in ("p50", "p90", "p99") for c in ("_ms", "_low_ms", "_high_ms", "_estimable")),
        "server_max_qps",
        "server_max_qps_target",
        "server_points",
        "server_findings",
        "throughput_def",  # what throughput_eps measures (migration 0013): two definitions are two metrics
        "peak_rss_bytes",
        "peak_device_bytes",
        "metrics",
        "verdict",
        "metric",
        "reason",
        "error",
    ]
    assert list(df["run_id"]) == [story["r1"], story["r2"], story["f"], story["r3"]]  # oldest first
    assert df.iloc[2].verdict == "failed@warm-up" and df.iloc[2].error == "RunnerError: training step failed"
    assert list(runs_frame(db_url, None, last=2)["run_id"]) == [story["r3"], story["o1"]]


def test_gate_rows_are_the_newest_run_per_case(db_url, story, tmp_path):
    newer = add_run(db_url, tmp_path, "r4", version="2", verdict="pass", day=5, fp="e", baseline=story["r3"], ratio=1.0)
    rows = queries.run_query("gate", db_url, model="m", version="2")
    assert list(rows["run_id"]) == [newer] and rows.iloc[0].verdict == "pass"
    assert queries.run_query("gate", db_url, model="m", version="9").empty


def test_bad_input_is_named(db_url):
    with pytest.raises(queries.QueryError, match="unknown query 'nope'"):
        queries.run_query("nope", db_url)
    with pytest.raises(queries.QueryError, match=r"not \['colour'\]"):
        queries.run_query("runs", db_url, colour="red")
    with pytest.raises(queries.QueryError, match="'model' \\(text\\) is required"):
        queries.run_query("history", db_url)
    with pytest.raises(queries.QueryError, match="since='last tuesday'"):
        queries.regressions("last tuesday", db_url=db_url)
    with pytest.raises(queries.QueryError, match="run_a='abc' is not integer"):
        queries.run_query("top_op_regressions", db_url, run_a="abc", run_b=1, limit=1)


def test_database_errors_never_show_the_password():
    url = "postgresql+psycopg://perf:s3cret@127.0.0.1:1/perfwatch"
    with pytest.raises(StoreUnreachable) as unreachable:  # the store, not this query: every command exits 3
        queries.run_query("runs", url, limit=1)
    assert "s3cret" not in str(unreachable.value) and "perf:***@127.0.0.1:1" in str(unreachable.value)
    with pytest.raises(queries.QueryError) as info:
        queries.sqlalchemy_url("postgresql://perf:s3cret@host:notaport/db")
    assert "s3cret" not in str(info.value)


def test_airflow_connection_uris_become_sqlalchemy_urls():
    assert (
        queries.sqlalchemy_url("postgres://perf:p%40ss@db:5432/perfwatch")
        == "postgresql+psycopg://perf:p%40ss@db:5432/perfwatch"
    )
    assert queries.sqlalchemy_url("postgresql://u@h/d?sslmode=require") == "postgresql+psycopg://u@h/d?sslmode=require"
    assert queries.sqlalchemy_url("sqlite:////var/perfwatch.db") == "sqlite:////var/perfwatch.db"


def test_each_sql_file_declares_its_parameters_and_shows_psql():
    qs = queries.named_queries()
    assert {
        "history",
        "version_compare",
        "regressions",
        "env_changes",
        "top_op_regressions",
        "failures",
        "runs",
        "gate",
    } <= set(qs)
    for q in qs.values():
        declared = [p.name for p in q.params]
        assert set(text(q.sql).compile().params) == set(declared), q.name
        psql = " ".join(line for line in q.path.read_text().splitlines() if line.startswith("--"))
        for name in declared:
            assert f"-v {name}=" in psql, f"{q.name}: the psql example does not set {name}"
        assert q.description


def _psql_value(p: queries.Param) -> str:
    if p.name == "limit":
        return "ALL"
    if p.optional:
        return "NULL"
    return {"text": "'1'", "integer": "1", "float": "1.0", "timestamp": "'2026-01-01'"}[p.type]


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed")
def test_psql_runs_every_file_as_written(db_url, story):
    if not db_url.startswith("postgresql"):
        pytest.skip("psql checks the PostgreSQL variant only; this is the SQLite one")
    url = make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
    for q in queries.named_queries().values():
        args = ["psql", url, "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        for p in q.params:
            args += ["-v", f"{p.name}={_psql_value(p)}"]
        out = subprocess.run(
            [*args, "-f", str(q.path)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PGCONNECT_TIMEOUT": "10"},
        )
        assert out.returncode == 0, f"{q.name}: {out.stderr}"
        assert "rows)" in out.stdout or "row)" in out.stdout, q.name
