"""Per-run step quantiles (migration 0007, ``store_run``) and the thinning of old raw samples
(``tasks.store.retention``, ``perfwatch db thin``): what the queries read for a thinned run stays the same."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
from alembic import command
from sqlalchemy import delete, func, select, update
from typer.testing import CliRunner

from tasks.cli.main import app
from tasks.settings import Settings
from tasks.stages.archive import archive_run
from tasks.store import (
    Baseline,
    Run,
    RunComparison,
    StepQuantiles,
    StepSample,
    migrate,
    queries,
    session_scope,
)
from tasks.store.reads import gather_compare_inputs, warmup_to_reuse
from tasks.store.retention import thin_samples
from tasks.store.series import step_counter_medians
from tasks.store.writes import step_quantiles
from tests.helpers.builders import make_records
from tests.unit.store.test_migrations import _config
from tests.unit.store.test_step_counters import _with_counters

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
QUANTILE_COLUMNS = ("n", "mean_ms", "min_ms", "p10_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms")


def test_step_quantiles_are_nearest_ranks_and_counter_medians():
    row = step_quantiles([float(x) for x in range(20, 0, -1)], [None, *[2.0] * 9, *[4.0] * 10], None)
    assert {k: row[k] for k in QUANTILE_COLUMNS} == {
        "n": 20, "mean_ms": 10.5, "min_ms": 1.0, "p10_ms": 2.0, "p50_ms": 10.0, "p90_ms": 18.0, "p99_ms": 20.0,
        "max_ms": 20.0,
    }  # fmt: skip
    assert row["cpu_median_ms"] == 4.0 and row["wait_median_ms"] is None  # 19 recorded: the 10th
    with pytest.raises(ValueError, match="times is empty"):
        step_quantiles([])


def _quantiles(db_url: str) -> dict[tuple[int, str], tuple]:
    cols = [getattr(StepQuantiles, c) for c in (*QUANTILE_COLUMNS, "cpu_median_ms", "wait_median_ms")]
    with session_scope(db_url) as s:
        rows = s.execute(select(StepQuantiles.run_id, StepQuantiles.phase, *cols)).all()
    return {(r[0], r[1]): tuple(pytest.approx(x) if isinstance(x, float) else x for x in r[2:]) for r in rows}


def test_migration_0007_backfills_the_same_quantiles_the_archive_writes(db_url, tmp_path):
    arch = str(tmp_path / "archive")
    archive_run(db_url, arch, *_with_counters(tmp_path, "a", verdict="pass"))
    archive_run(db_url, arch, *make_records(tmp_path, dag_run_id="b", verdict="pass"))
    written = _quantiles(db_url)
    assert len(written) == 6 and written[(1, "measured")][0] == 10  # 3 phases x 2 runs; 10 measured steps
    command.downgrade(_config(db_url), "0006")
    migrate(db_url)
    assert _quantiles(db_url) == written


def test_a_runs_p90_is_one_figure_wherever_it_is_read(db_url, tmp_path):
    """``runs.p90_step_ms`` (``/metrics``' quantile 0.9, ``perfwatch runs``) is the nearest-rank p90 that
    ``step_quantiles``, ``perfwatch history`` and the order-statistic intervals use; migration 0010 copies it into
    runs stored before (interpolated: 10.081 of make_records' 10.00, 10.01, ... 10.09, where the rank says 10.08)."""
    rid = archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="a")).run_id

    def p90s() -> tuple[float, float, float]:
        with session_scope(db_url) as s:
            stored = s.scalar(select(Run.p90_step_ms).where(Run.id == rid))
            summary = s.scalar(
                select(StepQuantiles.p90_ms).where(StepQuantiles.run_id == rid, StepQuantiles.phase == "measured")
            )
        return stored, summary, float(queries.history("m", db_url=db_url).iloc[0]["p90_step_ms"])

    assert p90s() == (pytest.approx(10.08), pytest.approx(10.08), pytest.approx(10.08))
    command.downgrade(_config(db_url), "0009")
    with session_scope(db_url) as s:  # as the archive wrote it before 0010
        s.execute(update(Run).where(Run.id == rid).values(p90_step_ms=10.081))
    migrate(db_url)
    assert p90s() == (pytest.approx(10.08), pytest.approx(10.08), pytest.approx(10.08))


def _reads(db_url: str, runs: list[int]) -> dict[str, object]:
    """What the named queries and the stages read about the runs."""
    return {
        "history": queries.history("m", db_url=db_url),
        "sweep": queries.sweep_points("m", db_url=db_url),
        "ops": queries.top_op_regressions(runs[0], runs[1], db_url=db_url),
        "version_compare": queries.run_query("version_compare", db_url, model="m", version_a="1", version_b="1"),
        "counters": step_counter_medians(runs, db_url),
    }


def test_thin_keeps_runs_verdicts_and_what_the_queries_read(db_url, tmp_path):
    arch = str(tmp_path / "archive")
    runs = [
        archive_run(db_url, arch, *_with_counters(tmp_path, name, verdict="pass")).run_id for name in ("a", "b", "c")
    ]
    with session_scope(db_url) as s:  # all three started 100 days ago; c is the active baseline
        s.execute(update(Run).values(started_at=NOW - dt.timedelta(days=100)))
    before = _reads(db_url, runs)
    assert before["history"]["p90_step_ms"].notna().all() and before["counters"]
    with session_scope(db_url) as s:  # a store whose run a has no summary: thinning writes it first
        s.execute(delete(StepQuantiles).where(StepQuantiles.run_id == runs[0]))
    report = thin_samples(db_url, 30, now=NOW, batch_runs=1)
    assert (report.runs, report.samples, report.summarised, report.kept_baselines) == (2, 28, 3, 1)
    with session_scope(db_url) as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 3
        assert s.scalar(select(func.count()).select_from(RunComparison)) == 3
        assert s.scalar(select(func.count()).select_from(Baseline)) == 3
        assert set(s.scalars(select(StepSample.run_id).distinct())) == {runs[2]}  # the active baseline: raw
        thinned = set(s.scalars(select(StepQuantiles.run_id).where(StepQuantiles.thinned_at.is_not(None))))
    assert thinned == set(runs[:2])
    after = _reads(db_url, runs)
    for name in ("history", "sweep", "ops", "version_compare"):
        pd.testing.assert_frame_equal(after[name], before[name], check_dtype=False)
    counters = after["counters"]
    assert counters.keys() == before["counters"].keys()  # type: ignore[attr-defined]
    assert all(v == pytest.approx(before["counters"][k]) for k, v in counters.items())  # type: ignore[attr-defined,index]
    inputs = gather_compare_inputs(db_url, "m", "train-bs16", "k1", lookback=5, calibration_window=50)
    assert inputs.samples[runs[2]] and inputs.samples[runs[0]] == []  # a thinned lookback baseline: skipped
    assert inputs.calibration_cpu_ms == [pytest.approx(2 * 10.045)] * 3  # from the quantiles once thinned
    assert thin_samples(db_url, 30, now=NOW).runs == 0  # idempotent
    assert thin_samples(db_url, 101, now=NOW).runs == 0  # nothing that old


def test_thin_rejects_a_retention_that_is_not_days():
    with pytest.raises(ValueError, match="older_than_days=0"):
        thin_samples("sqlite://", 0)
    with pytest.raises(ValueError, match="PERFWATCH_SAMPLES_RETENTION_DAYS='a week'"):
        Settings.from_env({"PERFWATCH_SAMPLES_RETENTION_DAYS": "a week"}).samples_retention_days()
    assert Settings.from_env({"PERFWATCH_SAMPLES_RETENTION_DAYS": "90"}).samples_retention_days() == 90.0
    assert Settings.from_env({}).samples_retention_days() is None


def test_db_thin_command_uses_the_setting_or_the_option(home, tmp_path, monkeypatch):
    url = Settings.from_env().database_url
    migrate(url)
    archive_run(url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="a", verdict="regression"))
    with session_scope(url) as s:
        s.execute(update(Run).values(started_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=10)))
    monkeypatch.delenv("PERFWATCH_SAMPLES_RETENTION_DAYS", raising=False)
    res = CliRunner().invoke(app, ["db", "thin"])
    assert res.exit_code == 2 and "PERFWATCH_SAMPLES_RETENTION_DAYS" in res.output
    monkeypatch.setenv("PERFWATCH_SAMPLES_RETENTION_DAYS", "30")
    res = CliRunner().invoke(app, ["db", "thin"])
    assert res.exit_code == 0 and "thinned 0 runs" in res.stdout
    assert warmup_to_reuse(url, "m", "train-bs16", "a" * 64, "k1", 30) is not None
    res = CliRunner().invoke(app, ["db", "thin", "--older-than", "7"])
    assert res.exit_code == 0 and "thinned 1 runs" in res.stdout and "14 step samples deleted" in res.stdout
    assert warmup_to_reuse(url, "m", "train-bs16", "a" * 64, "k1", 30) is None  # its warm-up samples are gone
