"""The store and the archive stage: migrations, one transaction, idempotent runs, one active baseline."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from sqlalchemy import inspect, select

from tasks.stages.archive import archive_run
from tasks.store import (
    Artifact,
    Baseline,
    OpStat,
    Run,
    StepBreakdown,
    StepSample,
    get_engine,
    redact,
    session_scope,
)
from tasks.store.writes import record_failure
from tests.helpers.builders import count, make_records


def test_migrations_create_every_table(db_url):
    names = set(inspect(get_engine(db_url)).get_table_names())
    assert {
        "models",
        "model_versions",
        "environments",
        "runs",
        "step_samples",
        "op_stats",
        "step_breakdown",
        "run_tables",
        "comparisons",
        "baselines",
        "artifacts",
        "alembic_version",
    } <= names


def test_archive_writes_everything_in_one_go(db_url, tmp_path):
    recs = make_records(tmp_path)
    out = archive_run(db_url, str(tmp_path / "archive"), *recs)
    assert out.verdict == "no-baseline"
    run_dir = Path(out.archive_uri)
    assert run_dir.parent == tmp_path / "archive" / "m"
    assert list(run_dir.glob("plugins/profile/*/*.xplane.pb"))
    assert not list((tmp_path / "archive" / "m").glob("*.partial"))
    assert count(db_url, StepSample, StepSample.phase == "measured") == 10
    assert count(db_url, StepSample) == 14
    assert count(db_url, OpStat) == 1
    assert count(db_url, StepBreakdown) == 2  # None components are not stored as zeros
    assert count(db_url, Artifact) == 1
    assert count(db_url, Baseline, Baseline.superseded_at.is_(None)) == 1  # first run becomes the baseline
    with session_scope(db_url) as s:
        r = s.scalar(select(Run))
        assert (r.status, r.median_step_ms, r.throughput_eps) == ("success", 10.0, 1600.0)


def test_rerun_replaces_never_duplicates(db_url, tmp_path):
    recs = make_records(tmp_path)
    archive_run(db_url, str(tmp_path / "archive"), *recs)
    archive_run(db_url, str(tmp_path / "archive"), *recs)
    assert count(db_url, Run) == 1
    assert count(db_url, StepSample, StepSample.phase == "measured") == 10
    assert count(db_url, Baseline) == 1


def test_failure_is_recorded_then_replaced_by_success(db_url, tmp_path):
    recs = make_records(tmp_path)
    record_failure(db_url, recs[0], "warm-up", "RunnerError: training step failed for model m")
    with session_scope(db_url) as s:
        r = s.scalar(select(Run))
        assert (r.status, r.failed_stage, r.median_step_ms) == ("failed", "warm-up", None)
        assert "training step failed" in r.error
    assert count(db_url, StepSample) == 0
    archive_run(db_url, str(tmp_path / "archive"), *recs)
    with session_scope(db_url) as s:
        assert [r.status for r in s.scalars(select(Run))] == ["success"]


def test_regression_never_moves_the_baseline(db_url, tmp_path):
    first = archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="r1"))
    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="r2", verdict="regression"))
    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="r3", verdict="inconclusive"))
    with session_scope(db_url) as s:
        active = s.scalars(select(Baseline.run_id).where(Baseline.superseded_at.is_(None))).all()
    assert active == [first.run_id]
    third = archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="r4", verdict="pass"))
    with session_scope(db_url) as s:
        active = s.scalars(select(Baseline.run_id).where(Baseline.superseded_at.is_(None))).all()
        history = s.scalars(select(Baseline.run_id).order_by(Baseline.id)).all()
    assert active == [third.run_id] and history == [first.run_id, third.run_id]


def test_failed_transaction_leaves_no_archive(db_url, tmp_path, monkeypatch):
    import tasks.store.writes as archive_mod

    def boom(*a, **k):
        raise RuntimeError("disk full while writing the store")

    monkeypatch.setattr(archive_mod, "accept_baseline", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path))
    assert count(db_url, Run) == 0
    leftovers = [p for p in (tmp_path / "archive").rglob("*") if p.is_file()] if (tmp_path / "archive").exists() else []
    assert leftovers == []


def test_concurrent_archives_keep_every_row_and_one_baseline(db_url, tmp_path):
    records = [make_records(tmp_path, dag_run_id=f"c{i}", verdict="pass") for i in range(4)]
    errors: list[BaseException] = []

    def worker(recs):
        try:
            archive_run(db_url, str(tmp_path / "archive"), *recs)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(r,)) for r in records]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert count(db_url, Run) == 4
    assert count(db_url, StepSample, StepSample.phase == "measured") == 40
    assert count(db_url, Baseline, Baseline.superseded_at.is_(None)) == 1


def test_redact_hides_password():
    assert "s3cret" not in redact("postgresql+psycopg://u:s3cret@db:5432/perfwatch")


def test_a_warm_up_is_reused_only_for_the_same_bytes_environment_and_case_within_its_age(db_url, tmp_path):
    import datetime as dt

    from tasks.store.reads import warmup_to_reuse

    ctx, pulled, env, warm, run, parse, comp = make_records(tmp_path)
    first = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id
    found = warmup_to_reuse(db_url, "m", ctx.case.name, "a" * 64, "k1", 7)
    assert found is not None and found.reused_from_run_id == first
    assert (found.warmup_steps, found.steady, found.cold_step_ms, found.wall_s) == (2, True, 500.0, 0.0)
    assert found.step_times_ms == [20.0, 15.0]  # the stored warm-up samples, for the next process's time limit
    assert warmup_to_reuse(db_url, "m", ctx.case.name, "b" * 64, "k1", 7) is None  # other model bytes
    assert warmup_to_reuse(db_url, "m", ctx.case.name, "a" * 64, "k2", 7) is None  # other environment
    assert warmup_to_reuse(db_url, "m", "train-bs32", "a" * 64, "k1", 7) is None  # other case
    assert warmup_to_reuse(db_url, "m", ctx.case.name, "a" * 64, "k1", 0) is None  # reuse switched off
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)
    assert warmup_to_reuse(db_url, "m", ctx.case.name, "a" * 64, "k1", 7, now=later) is None  # too old

    # a run that reused it stores the profiled run's own cold step, and is never reused in its turn
    ctx2, pulled2, env2, _, run2, parse2, comp2 = make_records(tmp_path, dag_run_id="r2")
    Path(run2.samples_path).write_text(
        json.dumps({**json.loads(Path(run2.samples_path).read_text()), "cold_step_ms": 321.0})
    )
    second = archive_run(db_url, str(tmp_path / "archive"), ctx2, pulled2, env2, found, run2, parse2, comp2).run_id
    with session_scope(db_url) as s:
        assert s.get(Run, second).cold_step_ms == 321.0
    assert warmup_to_reuse(db_url, "m", ctx.case.name, "a" * 64, "k1", 7).reused_from_run_id == first
    with session_scope(db_url) as s:
        s.execute(Run.__table__.update().where(Run.id == first).values(steady=False))
    assert warmup_to_reuse(db_url, "m", ctx.case.name, "a" * 64, "k1", 7) is None  # never from an unsteady one
